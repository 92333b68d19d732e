//! `outbox plugins list|check|call|new|sdk|wit`: the commands over the plugin tools of [`super::plugins`]
//! (which compile, call and scaffold). This module only reads the command's arguments, moves
//! the CPU-heavy work off the async executor and prints the result; it never checks a
//! capability or runs a plugin itself.

use std::path::PathBuf;

use anyhow::Context;
use outbox_host::config::Config;
use outbox_host::plugin::World;

use crate::config_source::{load_config, load_config_or_environment};
use crate::exit_status::ExitStatus;
use crate::opt::{read_payload_arg, CallArgs};

/// `outbox plugins list [--json]`.
pub async fn list_plugins(config: &Config, json: bool) -> anyhow::Result<()> {
    super::print_plugins(config, json).await
}

/// `outbox plugins check FILE`: compile one file and check it against the world it exports.
pub async fn check_plugin(file: PathBuf, config_path: &Option<PathBuf>) -> anyhow::Result<()> {
    let settings = load_config_or_environment(config_path)?.settings;
    out!(
        "{}",
        blocking(move || super::check_plugin_file(&file, &settings)).await?
    );
    Ok(())
}

/// `outbox plugins call FILE ...`: run a plugin once, offline; exits 1 when the call did not
/// end as `--expect` (or, without it, `ok`) asks.
pub async fn call_plugin(config_path: &Option<PathBuf>, args: CallArgs) -> anyhow::Result<()> {
    if let Some(p) = config_path.as_ref().and_then(|p| p.to_str()) {
        if p.trim_start().starts_with(['{', '[']) {
            anyhow::bail!(
                "--config is the routes file; give the plugin's JSON config with --plugin-config"
            );
        }
    }
    let config = load_config(config_path)?;
    let input = super::PluginCallInput {
        events: args.events.as_deref().map(read_payload_arg).transpose()?,
        event: args.event.as_deref().map(read_payload_arg).transpose()?,
        config: args
            .plugin_config
            .as_deref()
            .map(read_payload_arg)
            .transpose()?,
        queue: args.queue,
        attempt: args.attempt,
        kv_seed: args.kv,
        http_fixtures: args.http_fixtures,
        grants: args.grants.as_deref().map(read_payload_arg).transpose()?,
        expect: args.expect.into_iter().map(Into::into).collect(),
    };
    let file = args.file;
    let report = blocking(move || super::call_plugin_file(&config, &file, &input)).await?;
    out!("{}", report.text);
    if !report.unmet.is_empty() {
        for line in &report.unmet {
            errln!("plugins call: {line}");
        }
        return Err(ExitStatus(1).into());
    }
    Ok(())
}

/// `outbox plugins new NAME --world W [--lang L] [--dir DIR] [--sdk DIR]`: scaffold a plugin
/// project and print what to do next.
pub fn new_plugin(
    name: &str,
    world: World,
    language: super::PluginLanguage,
    dir: Option<PathBuf>,
    sdk: Option<PathBuf>,
) -> anyhow::Result<()> {
    let parent = dir.unwrap_or_else(|| PathBuf::from("."));
    let (_, next) = super::scaffold_plugin(name, world, language, &parent, sdk.as_deref())?;
    out!("{next}");
    Ok(())
}

/// `outbox plugins sdk --out DIR [--force]`: write the plugin SDK crate.
pub fn write_plugin_sdk(out: &std::path::Path, force: bool) -> anyhow::Result<()> {
    out!("{}", super::write_sdk(out, force)?);
    Ok(())
}

/// `outbox plugins wit --out DIR [--force]`: write the WIT package.
pub fn write_plugin_wit(out: &std::path::Path, force: bool) -> anyhow::Result<()> {
    out!("{}", super::write_wit(out, force)?);
    Ok(())
}

/// Run CPU-heavy, blocking plugin work (compiling, calling) off the async executor.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .context("plugin work panicked")?
}
