//! `outbox plugins new NAME --world W`: write a plugin crate from the SDK template.

use anyhow::Context as _;
use outbox_host::config::validate_plugin_name;
use outbox_host::plugin::World;

/// The SDK templates, embedded so `outbox plugins new` works from any directory.
const PLUGIN_TEMPLATES: [(World, &str, &str); 3] = [
    (
        World::Router,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/router/Cargo.toml.tmpl"
        )),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/router/src/lib.rs.tmpl"
        )),
    ),
    (
        World::Handler,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/handler/Cargo.toml.tmpl"
        )),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/handler/src/lib.rs.tmpl"
        )),
    ),
    (
        World::Policy,
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/policy/Cargo.toml.tmpl"
        )),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../plugin-sdk/templates/policy/src/lib.rs.tmpl"
        )),
    ),
];

/// This repository's `plugin-sdk`, absolute (`OUTBOX_PLUGIN_SDK` overrides the path the binary
/// was built from).
pub fn plugin_sdk_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::var_os("OUTBOX_PLUGIN_SDK")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-sdk"));
    let dir = dir.canonicalize().with_context(|| {
        format!(
            "the plugin SDK is not at {} (set OUTBOX_PLUGIN_SDK to the outbox repository's plugin-sdk directory)",
            dir.display()
        )
    })?;
    anyhow::ensure!(
        dir.join("Cargo.toml").is_file(),
        "{} is not the plugin SDK (no Cargo.toml)",
        dir.display()
    );
    Ok(dir)
}

/// `outbox plugins new NAME --world W`: write a plugin crate from the SDK template into
/// `parent/NAME` (refusing to overwrite anything). Returns the directory and the next steps.
pub fn scaffold_plugin(
    name: &str,
    world: World,
    parent: &std::path::Path,
) -> anyhow::Result<(std::path::PathBuf, String)> {
    validate_plugin_name(name).map_err(anyhow::Error::msg)?;
    let sdk = plugin_sdk_dir()?;
    let (_, cargo_toml, lib_rs) = PLUGIN_TEMPLATES
        .iter()
        .find(|(w, _, _)| *w == world)
        .ok_or_else(|| anyhow::anyhow!("no plugin template for world {world}"))?;
    // The path goes into a TOML basic string.
    let sdk_toml = sdk
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    let cargo_toml = cargo_toml
        .replace("{{sdk_path}}", &sdk_toml)
        .replace("{{name}}", name);
    let lib_rs = lib_rs
        .replace("{{sdk_path}}", &sdk.display().to_string())
        .replace("{{name}}", name);
    let dir = parent.join(name);
    if dir.exists() {
        anyhow::bail!(
            "{} already exists; not overwriting it (choose another name or --dir)",
            dir.display()
        );
    }
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::create_dir(dir.join("src"))
        .with_context(|| format!("creating {}/src", dir.display()))?;
    std::fs::write(dir.join("Cargo.toml"), cargo_toml)
        .with_context(|| format!("writing {}/Cargo.toml", dir.display()))?;
    std::fs::write(dir.join("src/lib.rs"), lib_rs)
        .with_context(|| format!("writing {}/src/lib.rs", dir.display()))?;
    let artifact = name.replace('-', "_");
    let next = format!(
        "created {world} plugin {name} in {dir} (SDK: {sdk})\n\
         next steps:\n  \
           cd {dir}\n  \
           cargo build --release --target wasm32-wasip2\n  \
           outbox plugins check target/wasm32-wasip2/release/{artifact}.wasm\n  \
           outbox plugins call target/wasm32-wasip2/release/{artifact}.wasm {input}\n\
         then copy the .wasm into the plugin directory as {name}.wasm and declare [plugins.{name}] in routes.toml",
        dir = dir.display(),
        sdk = sdk.display(),
        input = match world {
            World::Router => r#"--events '[{"event_type": "mail.welcome"}]' --plugin-config '{"queue": "outbox.mail"}'"#,
            World::Handler => r#"--event '{"event_type": "mail.welcome", "payload": {}}'"#,
            World::Policy => r#"--event '{"plugin": "p", "capability": "kv", "target": "k"}'"#,
        }
    );
    Ok((dir, next))
}
