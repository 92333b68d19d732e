//! `outbox plugins new NAME --world W [--lang L]`: write a plugin project from the templates the
//! binary carries (`cli/templates/`), with what it builds from beside it: a Rust crate gets the
//! plugin SDK vendored inside it (or names a shared copy given with `--sdk`), a Python or
//! JavaScript handler gets the WIT package in `wit/`. The project builds as is, in any folder,
//! with no checkout of this repository. It never writes into a folder that already exists.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use include_dir::{include_dir, Dir};
use outbox_host::config::validate_plugin_name;
use outbox_host::plugin::World;

/// One folder per template: `router`, `handler` and `policy` (Rust), `python-handler`,
/// `js-handler`. A file's `.tmpl` suffix is dropped and `{{name}}` and `{{sdk_path}}` filled in.
static TEMPLATES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/templates");

/// Where a vendored SDK goes inside a new Rust plugin crate.
const VENDORED_SDK_DIR: &str = "outbox-plugin-sdk";

/// The language a plugin is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginLanguage {
    /// A Rust crate on the plugin SDK, built with cargo for `wasm32-wasip2`.
    Rust,
    /// A Python module, built into a component with componentize-py.
    Python,
    /// A JavaScript module, built into a component with jco (componentize-js).
    Js,
}

impl PluginLanguage {
    /// As `--lang` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Python => "python",
            Self::Js => "js",
        }
    }

    /// The template folder for a plugin of `world` in this language.
    fn template(self, world: World) -> anyhow::Result<&'static str> {
        Ok(match (self, world) {
            (Self::Rust, World::Router) => "router",
            (Self::Rust, World::Handler) => "handler",
            (Self::Rust, World::Policy) => "policy",
            (Self::Python, World::Handler) => "python-handler",
            (Self::Js, World::Handler) => "js-handler",
            (lang, world) => anyhow::bail!(
                "--lang {}: only handlers are scaffolded in Python and JavaScript; write a {world} plugin in Rust (--lang rust)",
                lang.as_str()
            ),
        })
    }
}

/// The files of the template folder `template`: (path inside the new project, text with the
/// placeholders filled in, whether it is a script to mark executable).
fn template_files(
    template: &str,
    fill: &dyn Fn(&str) -> String,
) -> anyhow::Result<Vec<(PathBuf, String, bool)>> {
    let root = TEMPLATES
        .get_dir(template)
        .ok_or_else(|| anyhow::anyhow!("the binary carries no {template} template"))?;
    let mut embedded = Vec::new();
    super::sdk::files_of(root, Path::new(""), &mut embedded);
    let mut files = Vec::new();
    for (path, bytes) in embedded {
        let relative = path.strip_prefix(template).unwrap_or(&path);
        let relative = relative
            .to_str()
            .map(|p| PathBuf::from(p.strip_suffix(".tmpl").unwrap_or(p)))
            .unwrap_or_else(|| relative.to_path_buf());
        let text = std::str::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("template {} is not UTF-8", path.display()))?;
        let script = relative.extension().is_some_and(|e| e == "sh");
        files.push((relative, fill(text), script));
    }
    files.sort();
    Ok(files)
}

/// Where a new Rust plugin's SDK comes from.
fn sdk_dependency(sdk: Option<&Path>) -> anyhow::Result<String> {
    let Some(sdk) = sdk else {
        return Ok(VENDORED_SDK_DIR.to_string());
    };
    let dir = sdk.canonicalize().with_context(|| {
        format!(
            "--sdk {}: no such folder (write one with `outbox plugins sdk --out DIR`)",
            sdk.display()
        )
    })?;
    anyhow::ensure!(
        super::sdk::holds_sdk(&dir),
        "--sdk {}: not the outbox plugin SDK (no Cargo.toml of outbox-plugin-sdk; write one with `outbox plugins sdk --out DIR`)",
        dir.display()
    );
    Ok(dir.display().to_string())
}

/// `outbox plugins new NAME --world W [--lang L] [--sdk DIR]`: write a plugin project into
/// `parent/NAME` (refusing to overwrite anything). Returns the directory and the next steps.
pub fn scaffold_plugin(
    name: &str,
    world: World,
    language: PluginLanguage,
    parent: &Path,
    sdk: Option<&Path>,
) -> anyhow::Result<(PathBuf, String)> {
    validate_plugin_name(name).map_err(anyhow::Error::msg)?;
    let template = language.template(world)?;
    anyhow::ensure!(
        language == PluginLanguage::Rust || sdk.is_none(),
        "--sdk is the Rust SDK; a {} plugin builds from the WIT package the scaffold writes",
        language.as_str()
    );
    let sdk_path = sdk_dependency(sdk)?;
    // The path goes into a TOML basic string.
    let sdk_toml = sdk_path.replace('\\', "\\\\").replace('"', "\\\"");
    let files = template_files(template, &|text| {
        text.replace("{{sdk_path}}", &sdk_toml)
            .replace("{{name}}", name)
    })?;
    let dir = parent.join(name);
    if dir.exists() {
        anyhow::bail!(
            "{} already exists; not overwriting it (choose another name or --dir)",
            dir.display()
        );
    }
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (path, text, script) in &files {
        let target = dir.join(path);
        if let Some(folder) = target.parent() {
            std::fs::create_dir_all(folder)
                .with_context(|| format!("creating {}", folder.display()))?;
        }
        std::fs::write(&target, text).with_context(|| format!("writing {}", target.display()))?;
        if *script {
            mark_executable(&target)?;
        }
    }
    let built_from = match (language, sdk) {
        (PluginLanguage::Rust, None) => {
            super::sdk::write_sdk(&dir.join(VENDORED_SDK_DIR), false)?;
            format!(
                "the plugin SDK vendored in {}/{VENDORED_SDK_DIR}",
                dir.display()
            )
        }
        (PluginLanguage::Rust, Some(_)) => format!("the plugin SDK at {sdk_path}"),
        (PluginLanguage::Python | PluginLanguage::Js, _) => {
            let wit = dir.join("wit");
            std::fs::create_dir(&wit).with_context(|| format!("creating {}", wit.display()))?;
            std::fs::write(wit.join("outbox.wit"), super::sdk::current_wit())
                .with_context(|| format!("writing {}/outbox.wit", wit.display()))?;
            format!("the WIT package in {}/wit", dir.display())
        }
    };
    Ok((
        dir.clone(),
        next_steps(name, world, language, &dir, &built_from),
    ))
}

/// What `outbox plugins new` prints after writing the project.
fn next_steps(
    name: &str,
    world: World,
    language: PluginLanguage,
    dir: &Path,
    built_from: &str,
) -> String {
    let (build, wasm) = match language {
        PluginLanguage::Rust => (
            "cargo build --release --target wasm32-wasip2".to_string(),
            format!(
                "target/wasm32-wasip2/release/{}.wasm",
                name.replace('-', "_")
            ),
        ),
        PluginLanguage::Python => ("./build.sh".to_string(), format!("{name}.wasm")),
        PluginLanguage::Js => (
            "npm install && npm run build".to_string(),
            format!("{name}.wasm"),
        ),
    };
    let input = match world {
        World::Router => {
            r#"--events '[{"event_type": "mail.welcome"}]' --plugin-config '{"queue": "outbox.mail"}'"#
        }
        World::Handler => r#"--event '{"event_type": "mail.welcome", "payload": {}}'"#,
        World::Policy => r#"--event '{"plugin": "p", "capability": "kv", "target": "k"}'"#,
    };
    format!(
        "created {lang} {world} plugin {name} in {dir} (built from {built_from})\n\
         next steps:\n  \
           cd {dir}\n  \
           {build}\n  \
           outbox plugins check {wasm}\n  \
           outbox plugins call {wasm} {input}\n\
         then copy the .wasm into the plugin directory as {name}.wasm and declare [plugins.{name}] in routes.toml",
        lang = language.as_str(),
        dir = dir.display(),
    )
}

/// Let the owner run a generated script (`build.sh`).
fn mark_executable(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}
