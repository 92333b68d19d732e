//! The registry of loaded plugins: which version of each plugin serves now.
//!
//! Owns loading (read, hash, compile on a blocking thread, check the world), checking that each
//! binding of `routes.toml` (`[router]`, `[router.overrides]`, `[handlers]`, `[policy]`) names a
//! plugin of the world it needs, the atomic swap of a plugin's serving version and the listing
//! operators see. A failed load never replaces what is serving. A new plugin set is loaded first
//! ([`PluginRegistry::stage`]) and switched in around the routes that name it
//! ([`PluginRegistry::switch`]) so that no lookup ever misses a plugin mid-reload. Calls look a
//! plugin up once and keep that version to the end, so a swap never changes a call in flight.
//! Each plugin name owns its call counters and its call slots ([`CallSlots`],
//! `max_concurrency`), kept across reloads (the slots while the limit is unchanged). It never
//! decides what a plugin may do (that is the capability policy's job) and never calls a plugin
//! but to ask a router whether it accepts its config: calls are [`LoadedPlugin`]'s.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::ArcSwap;
use chrono::Utc;
use sha2::{Digest, Sha256};

use super::engine::{CallSlots, PluginEngine, PluginLimits, World};
use super::remembered_routes::RememberedRoutes;
use super::PluginError;
use crate::config::{PluginSpec, RoutesFile, Sha256Pin};
use crate::naming::{DENY_ALL, NATIVE_ROUTER};

// A compiled plugin and a plugin as it serves live in `super::loaded`; named here too, where
// operator tools import them from.
pub use super::loaded::{CompiledPlugin, LoadedPlugin};

/// What `outbox plugins list` prints for one plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginInfo {
    /// Plugin name.
    pub name: String,
    /// `router`, `handler` or `policy`.
    pub world: String,
    /// SHA-256 of the serving file (first 16 hex digits).
    pub hash: String,
    /// When the serving version was loaded (RFC 3339).
    pub loaded_at: String,
    /// The file.
    pub file: String,
    /// Calls.
    pub calls: u64,
    /// Failed calls.
    pub errors: u64,
    /// Milliseconds spent in its calls.
    #[serde(default)]
    pub busy_ms: u64,
}

/// The plugins of one routes file, loaded and checked but not serving yet: what
/// [`PluginRegistry::stage`] returns and [`PluginRegistry::switch`] makes serve.
pub struct StagedPlugins {
    next: BTreeMap<String, Arc<LoadedPlugin>>,
    /// Declared plugins left out because their file is missing or does not load and no version
    /// of them may serve (none does, or the spec pins another digest than the serving one's):
    /// (plugin name, the error naming the file).
    pub left_out: Vec<(String, PluginError)>,
    /// Router plugins that refuse their config ([`PluginError::Config`]): a reload is rejected
    /// for them; at start-up they serve and their events are retried with this error.
    pub refused: Vec<PluginError>,
}

/// All plugins of one host process.
pub struct PluginRegistry {
    engine: PluginEngine,
    dir: PathBuf,
    plugins: ArcSwap<BTreeMap<String, Arc<LoadedPlugin>>>,
}

impl PluginRegistry {
    /// An empty registry reading `.wasm` files from `dir`.
    pub fn new(engine: PluginEngine, dir: impl Into<PathBuf>) -> Self {
        Self {
            engine,
            dir: dir.into(),
            plugins: ArcSwap::from_pointee(BTreeMap::new()),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &PluginEngine {
        &self.engine
    }

    /// The plugin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Make `plugin` serve under its name, replacing any version of that name: for offline
    /// tools that load a plugin or two by hand (`outbox plugins call` loads the capability
    /// policy this way) instead of from a routes file. A host applies routes files instead
    /// ([`apply_config`](Self::apply_config)), which check every binding.
    pub fn serve_standalone(&self, plugin: LoadedPlugin) {
        let mut next = BTreeMap::clone(&self.plugins.load());
        next.insert(plugin.name.to_string(), Arc::new(plugin));
        self.plugins.store(Arc::new(next));
    }

    /// The serving version of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.plugins.load().get(name).cloned()
    }

    /// The file a spec points at.
    pub fn file_of(&self, name: &str, spec: &PluginSpec) -> PathBuf {
        self.dir
            .join(spec.file.clone().unwrap_or_else(|| format!("{name}.wasm")))
    }

    /// Read `path` (inside the plugin directory and bounded: [`super::files`]) and compile it
    /// on a blocking thread, unless its content hash equals `unchanged_from` (then `None`: the
    /// serving version is this file already). A file whose hash is not `pinned` (the spec's
    /// `sha256`) is refused before anything else. The file is read once; the hash that decides
    /// is the one the new version carries.
    async fn load_file(
        &self,
        name: &str,
        path: &Path,
        pinned: Option<&Sha256Pin>,
        unchanged_from: Option<&str>,
    ) -> Result<Option<Arc<CompiledPlugin>>, PluginError> {
        let (owned_name, dir, file) = (name.to_string(), self.dir.clone(), path.to_path_buf());
        let bytes = tokio::task::spawn_blocking(move || {
            super::files::read_plugin_file(&owned_name, &dir, &file)
        })
        .await
        .map_err(|e| PluginError::Invalid {
            plugin: name.to_string(),
            message: format!("reading the file panicked: {e}"),
        })??;
        let hash = hex::encode(Sha256::digest(&bytes));
        if let Some(pinned) = pinned.filter(|pin| pin.as_str() != hash) {
            return Err(PluginError::PinMismatch {
                plugin: name.to_string(),
                path: path.to_path_buf(),
                pinned: pinned.to_string(),
                actual: hash,
            });
        }
        if unchanged_from == Some(hash.as_str()) {
            return Ok(None);
        }
        let engine = self.engine.clone();
        let owned_name = name.to_string();
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || {
            compile_hashed(&engine, &owned_name, &bytes, hash, &path)
        })
        .await
        .map_err(|e| PluginError::Invalid {
            plugin: name.to_string(),
            message: format!("compilation panicked: {e}"),
        })?
        .map(Some)
    }

    /// Load every plugin `routes` declares and make that set serve, or change nothing and
    /// return the first error (a plugin file that does not load, or a plugin bound where its world
    /// does not fit). Unchanged files are not recompiled; a plugin whose file changed but no
    /// longer loads keeps its serving version (the file watcher reports the file).
    pub async fn apply_config(&self, routes: &RoutesFile) -> Result<(), PluginError> {
        let mut staged = self.stage(routes).await?;
        if !staged.left_out.is_empty() {
            return Err(staged.left_out.remove(0).1);
        }
        if !staged.refused.is_empty() {
            return Err(staged.refused.remove(0));
        }
        self.switch(staged, || {});
        Ok(())
    }

    /// Load the plugins `routes` declares, without making them serve: each plugin whose file
    /// is unchanged keeps its compiled version, a changed file is compiled, and a plugin whose
    /// file is missing or does not load keeps its serving version when it has one and is left
    /// out otherwise (its error in [`StagedPlugins::left_out`]). Then every binding of `routes`
    /// is checked against the worlds loaded: a [`PluginError::Misbound`] (a router plugin
    /// under `[handlers]`, say) rejects the whole set. Nothing serves until
    /// [`switch`](Self::switch).
    pub async fn stage(&self, routes: &RoutesFile) -> Result<StagedPlugins, PluginError> {
        let current = self.plugins.load_full();
        let mut next = BTreeMap::new();
        let mut left_out = Vec::new();
        // Plugins sharing one file share the version compiled from it now (each held to its
        // own pin).
        let mut compiled_now: HashMap<PathBuf, Arc<CompiledPlugin>> = HashMap::new();
        for (name, spec) in &routes.plugins {
            let path = self.file_of(name, spec);
            let old = current.get(name);
            let serving = old.filter(|o| o.compiled.path == path);
            let pinned = spec.sha256.as_ref();
            let shared = compiled_now
                .get(&path)
                .filter(|c| pinned.is_none_or(|pin| pin.as_str() == c.hash));
            let compiled = match shared {
                Some(compiled) => compiled.clone(),
                None => {
                    let unchanged_from = serving.map(|o| o.compiled.hash.as_str());
                    let loaded = self.load_file(name, &path, pinned, unchanged_from).await;
                    match (loaded, serving) {
                        (Ok(Some(compiled)), _) => {
                            compiled_now.insert(path, compiled.clone());
                            compiled
                        }
                        (Ok(None), Some(serving)) => {
                            compiled_now.insert(path, serving.compiled.clone());
                            serving.compiled.clone()
                        }
                        (Ok(None), None) => unreachable!("unchanged implies a serving version"),
                        // Pinned to another digest than the serving version's: that version
                        // may not serve under this spec either; the plugin waits for its file.
                        (Err(e @ PluginError::PinMismatch { .. }), Some(serving))
                            if pinned.is_some_and(|pin| pin.as_str() != serving.compiled.hash) =>
                        {
                            left_out.push((name.clone(), e));
                            continue;
                        }
                        (Err(e), Some(serving)) => {
                            tracing::warn!("{e}; keeping the serving version of {name}");
                            serving.compiled.clone()
                        }
                        (Err(e), None) => {
                            left_out.push((name.clone(), e));
                            continue;
                        }
                    }
                }
            };
            let limits = PluginLimits::from_spec(spec);
            // Calls in flight keep their slots across a reload unless the limit changed.
            let slots = match old {
                Some(o) if o.limits.max_concurrency == limits.max_concurrency => o.slots.clone(),
                _ => CallSlots::new(limits.max_concurrency),
            };
            let plugin = LoadedPlugin {
                name: Arc::from(name.as_str()),
                limits,
                slots,
                config_json: plugin_config_json(name, spec, routes, compiled.prepared.world()),
                spec: spec.clone(),
                calls: old.map(|o| o.calls.clone()).unwrap_or_default(),
                errors: old.map(|o| o.errors.clone()).unwrap_or_default(),
                busy_micros: old.map(|o| o.busy_micros.clone()).unwrap_or_default(),
                compiled,
                remembered_routes: RememberedRoutes::default(),
                engine: self.engine.clone(),
            };
            next.insert(name.clone(), Arc::new(plugin));
        }
        check_bindings(routes, &next)?;
        // A router plugin that refuses its (new) config must not start serving with it.
        let mut refused = Vec::new();
        for plugin in next.values() {
            let unchanged = current.get(plugin.name.as_ref()).is_some_and(|o| {
                o.compiled.hash == plugin.compiled.hash && o.config_json == plugin.config_json
            });
            if unchanged || plugin.world() != World::Router {
                continue;
            }
            let checked = plugin.clone();
            let verdict = tokio::task::spawn_blocking(move || checked.check_router_config())
                .await
                .unwrap_or(Ok(()));
            if let Err(e) = verdict {
                refused.push(e);
            }
        }
        Ok(StagedPlugins {
            next,
            left_out,
            refused,
        })
    }

    /// Make `staged` serve, with `publish` run in between (it stores the routes file and the
    /// router that name these plugins). Whoever read the previous routes and looks a plugin up
    /// now, and whoever reads the new routes, finds the plugin they name: the new set is stored
    /// together with the plugins it drops, `publish` runs, and only then are the dropped ones
    /// removed. A name both sets declare switches to its new version at once.
    pub fn switch(&self, staged: StagedPlugins, publish: impl FnOnce()) {
        let current = self.plugins.load_full();
        let next = staged.next;
        for (name, plugin) in &next {
            if current.get(name).map(|o| &o.compiled.hash) != Some(&plugin.compiled.hash) {
                tracing::info!(plugin = %name, world = %plugin.world(), hash = %short(&plugin.compiled.hash), "plugin loaded");
            }
        }
        let dropped: Vec<&String> = current.keys().filter(|n| !next.contains_key(*n)).collect();
        if dropped.is_empty() {
            self.plugins.store(Arc::new(next));
            publish();
            return;
        }
        let mut both = (*current).clone();
        both.extend(next.iter().map(|(n, p)| (n.clone(), p.clone())));
        self.plugins.store(Arc::new(both));
        publish();
        for name in dropped {
            tracing::info!(plugin = %name, "plugin unloaded (no longer declared)");
        }
        self.plugins.store(Arc::new(next));
    }

    /// Recompile the plugins whose file is `path` and swap them in; on failure the old version
    /// keeps serving and the error is returned. Returns the names reloaded.
    pub async fn reload_file(&self, path: &Path) -> Result<Vec<String>, PluginError> {
        let current = self.plugins.load_full();
        let users: Vec<Arc<LoadedPlugin>> = current
            .values()
            .filter(|p| same_file(&p.compiled.path, path))
            .cloned()
            .collect();
        let Some(first) = users.first() else {
            return Ok(vec![]);
        };
        let pinned = first.spec.sha256.as_ref();
        let Some(compiled) = self
            .load_file(&first.name, path, pinned, Some(&first.compiled.hash))
            .await?
        else {
            return Ok(vec![]);
        };
        // Plugins sharing the file hold it to their own pins.
        if let Some((user, pin)) = users.iter().find_map(|u| {
            u.spec
                .sha256
                .as_ref()
                .filter(|pin| pin.as_str() != compiled.hash)
                .map(|pin| (u, pin))
        }) {
            return Err(PluginError::PinMismatch {
                plugin: user.name.to_string(),
                path: path.to_path_buf(),
                pinned: pin.to_string(),
                actual: compiled.hash.clone(),
            });
        }
        let mut next = (*self.plugins.load_full()).clone();
        let mut names = Vec::new();
        for user in users {
            if compiled.prepared.world() != user.world() {
                return Err(PluginError::Invalid {
                    plugin: user.name.to_string(),
                    message: format!(
                        "the new file implements the {} world, but this plugin is a {}; keeping the old version",
                        compiled.prepared.world(),
                        user.world()
                    ),
                });
            }
            next.insert(
                user.name.to_string(),
                Arc::new(LoadedPlugin {
                    name: user.name.clone(),
                    compiled: compiled.clone(),
                    limits: user.limits,
                    config_json: user.config_json.clone(),
                    spec: user.spec.clone(),
                    calls: user.calls.clone(),
                    errors: user.errors.clone(),
                    busy_micros: user.busy_micros.clone(),
                    slots: user.slots.clone(),
                    remembered_routes: RememberedRoutes::default(),
                    engine: self.engine.clone(),
                }),
            );
            names.push(user.name.to_string());
        }
        self.plugins.store(Arc::new(next));
        for name in &names {
            tracing::info!(plugin = %name, hash = %short(&compiled.hash), "plugin reloaded");
        }
        Ok(names)
    }

    /// Every loaded plugin, for listings and the heartbeat.
    pub fn list(&self) -> Vec<PluginInfo> {
        self.plugins
            .load()
            .values()
            .map(|p| PluginInfo {
                name: p.name.to_string(),
                world: p.world().to_string(),
                hash: short(&p.compiled.hash).to_string(),
                loaded_at: p
                    .compiled
                    .loaded_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                file: p.compiled.path.display().to_string(),
                calls: p.calls.load(Ordering::Relaxed),
                errors: p.errors.load(Ordering::Relaxed),
                busy_ms: p.busy_micros.load(Ordering::Relaxed) / 1000,
            })
            .collect()
    }
}

/// Check that every plugin `routes` binds implements the world the binding needs: `[router]`
/// and `[router.overrides]` need routers, `[handlers]` handlers, `[policy]` a policy. A plugin
/// that is not loaded (left out) is checked when it loads.
fn check_bindings(
    routes: &RoutesFile,
    plugins: &BTreeMap<String, Arc<LoadedPlugin>>,
) -> Result<(), PluginError> {
    let mut bindings: Vec<(String, &str, World)> = Vec::new();
    if routes.router.plugin != NATIVE_ROUTER {
        bindings.push((
            "[router] plugin".into(),
            &routes.router.plugin,
            World::Router,
        ));
    }
    for (prefix, plugin) in &routes.router.overrides {
        if plugin != NATIVE_ROUTER {
            bindings.push((
                format!("[router.overrides] \"{prefix}\""),
                plugin,
                World::Router,
            ));
        }
    }
    for (queue, plugin) in &routes.handlers {
        bindings.push((format!("[handlers] '{queue}'"), plugin, World::Handler));
    }
    if routes.policy.plugin != DENY_ALL {
        bindings.push((
            "[policy] plugin".into(),
            &routes.policy.plugin,
            World::Policy,
        ));
    }
    for (binding, name, expected) in bindings {
        if let Some(plugin) = plugins.get(name) {
            if plugin.world() != expected {
                return Err(PluginError::Misbound {
                    binding,
                    plugin: name.to_string(),
                    expected,
                    found: plugin.world(),
                });
            }
        }
    }
    Ok(())
}

/// Compile bytes into a plugin version (no registry needed: `outbox plugins check`).
pub fn compile_bytes(
    engine: &PluginEngine,
    name: &str,
    bytes: &[u8],
    path: &Path,
) -> Result<Arc<CompiledPlugin>, PluginError> {
    compile_hashed(
        engine,
        name,
        bytes,
        hex::encode(Sha256::digest(bytes)),
        path,
    )
}

fn compile_hashed(
    engine: &PluginEngine,
    name: &str,
    bytes: &[u8],
    hash: String,
    path: &Path,
) -> Result<Arc<CompiledPlugin>, PluginError> {
    let prepared = engine.prepare(name, bytes)?;
    Ok(Arc::new(CompiledPlugin {
        prepared,
        hash,
        loaded_at: Utc::now(),
        path: path.to_path_buf(),
    }))
}

/// The JSON config a plugin receives: `[plugins.NAME].config`, plus `routes` (the routing
/// table, prefix -> queues) for router plugins.
pub fn plugin_config_json(
    name: &str,
    spec: &PluginSpec,
    routes: &RoutesFile,
    world: World,
) -> String {
    let mut config = spec
        .config
        .as_ref()
        .and_then(|c| serde_json::to_value(c).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    if world == World::Router {
        if let Some(obj) = config.as_object_mut() {
            obj.entry("routes").or_insert_with(|| {
                serde_json::Value::Object(
                    routes
                        .routes
                        .iter()
                        .map(|(prefix, queues)| {
                            (prefix.clone(), serde_json::json!(queues.to_vec()))
                        })
                        .collect(),
                )
            });
        }
    }
    let _ = name;
    config.to_string()
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || a.file_name() == b.file_name()
            && std::fs::canonicalize(a)
                .ok()
                .zip(std::fs::canonicalize(b).ok())
                .is_some_and(|(x, y)| x == y)
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(16)]
}
