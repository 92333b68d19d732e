//! Plugin files: where the plugin directory is, where a `[plugins.NAME] file` may point, and
//! how a plugin file is read.
//!
//! Owns three rules. The plugin directory ([`plugin_dir_for`]): `OUTBOX_PLUGIN_DIR` when set (a
//! relative value is taken from the working directory, like any path given on a command line),
//! otherwise `[settings] plugin_dir` or the default `plugins/dist`, a relative one taken from the
//! routes file's directory, as `contracts/` is (so a host started from another folder finds the
//! same plugins). A `file` key ([`check_file_key`]) is a relative path of plain names (no
//! leading `/`, no `..`, no `.`), checked when the routes file is parsed. And a plugin file is
//! read ([`read_plugin_file`]) only when, symlinks resolved, it is still inside the plugin
//! directory, is a regular file (a FIFO or a device such as `/dev/zero` is refused before it is
//! opened) and holds at most [`MAX_PLUGIN_FILE_BYTES`], counted while it is read too.
//!
//! It never compiles, loads or watches a plugin.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::PluginError;

/// The largest plugin file read, in bytes (64 MiB; the built plugins are a few hundred KiB).
pub const MAX_PLUGIN_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The rule a `file` key breaks, if any: it must name a file under the plugin directory by a
/// relative path of plain names.
pub fn check_file_key(file: &str) -> Result<(), String> {
    let plain = !file.is_empty()
        && Path::new(file)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err("a plugin file must be a relative path inside the plugin directory, of plain names (no leading '/', no '..', no '.')".into())
    }
}

/// The plugin directory the host reads: `setting` as resolved, taken from the directory of
/// `routes_path` when it is relative and did not come from `OUTBOX_PLUGIN_DIR` (`from_env`);
/// unchanged otherwise (absolute, from the environment, or no routes file).
pub fn plugin_dir_for(setting: &Path, from_env: bool, routes_path: Option<&Path>) -> PathBuf {
    if from_env || setting.is_absolute() {
        return setting.to_path_buf();
    }
    match routes_path.and_then(Path::parent) {
        Some(dir) => dir.join(setting),
        None => setting.to_path_buf(),
    }
}

/// The plugin directory as the logs show it: canonical when it exists.
pub fn shown_dir(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

/// Read `path`, plugin `plugin`'s file, if it is inside `dir` once symlinks are resolved, then
/// as [`read_bounded`]. Blocking: call it on a blocking thread.
pub fn read_plugin_file(plugin: &str, dir: &Path, path: &Path) -> Result<Vec<u8>, PluginError> {
    let read_error = |source| PluginError::Read {
        plugin: plugin.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let canonical_dir = std::fs::canonicalize(dir).map_err(read_error)?;
    let canonical = std::fs::canonicalize(path).map_err(read_error)?;
    if !canonical.starts_with(&canonical_dir) {
        return Err(refused(
            plugin,
            path,
            format!(
                "it leads to {}, outside the plugin directory {} (a plugin file must stay inside it, symlinks resolved)",
                canonical.display(),
                canonical_dir.display()
            ),
        ));
    }
    read_bounded(plugin, path, &canonical)
}

/// Read `canonical` (plugin `plugin`'s file `path`): refused unless it is a regular file of at
/// most [`MAX_PLUGIN_FILE_BYTES`]; opened without blocking (so a FIFO put in its place meanwhile
/// cannot hang the reader) and read no further than the cap. Blocking: call it on a blocking
/// thread.
pub fn read_bounded(plugin: &str, path: &Path, canonical: &Path) -> Result<Vec<u8>, PluginError> {
    let read_error = |source| PluginError::Read {
        plugin: plugin.to_string(),
        path: path.to_path_buf(),
        source,
    };
    let check = |metadata: &std::fs::Metadata| {
        if !metadata.is_file() {
            Err(refused(
                plugin,
                path,
                "not a regular file (a plugin is a .wasm file)".into(),
            ))
        } else if metadata.len() > MAX_PLUGIN_FILE_BYTES {
            Err(too_large(plugin, path, metadata.len()))
        } else {
            Ok(metadata.len())
        }
    };
    check(&std::fs::metadata(canonical).map_err(read_error)?)?;
    let file = open_without_blocking(canonical).map_err(read_error)?;
    let len = check(&file.metadata().map_err(read_error)?)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(MAX_PLUGIN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > MAX_PLUGIN_FILE_BYTES {
        return Err(too_large(plugin, path, read));
    }
    Ok(bytes)
}

#[cfg(unix)]
fn open_without_blocking(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_without_blocking(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

fn refused(plugin: &str, path: &Path, rule: String) -> PluginError {
    PluginError::Refused {
        plugin: plugin.to_string(),
        path: path.to_path_buf(),
        rule,
    }
}

fn too_large(plugin: &str, path: &Path, len: u64) -> PluginError {
    refused(
        plugin,
        path,
        format!("{len} bytes or more, larger than the {MAX_PLUGIN_FILE_BYTES} bytes a plugin file may have"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_keys_are_plain_relative_paths() {
        for ok in ["a.wasm", "team/a.wasm", "a..b.wasm"] {
            assert_eq!(check_file_key(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "/a.wasm",
            "../a.wasm",
            "team/../../a.wasm",
            "./a.wasm",
            "/",
        ] {
            assert!(check_file_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_relative_plugin_dir_is_beside_the_routes_file_unless_it_came_from_the_environment() {
        let routes = Path::new("/etc/outbox/routes.toml");
        let default = Path::new("plugins/dist");
        assert_eq!(
            plugin_dir_for(default, false, Some(routes)),
            Path::new("/etc/outbox/plugins/dist")
        );
        assert_eq!(plugin_dir_for(default, true, Some(routes)), default);
        assert_eq!(plugin_dir_for(default, false, None), default);
        assert_eq!(
            plugin_dir_for(default, false, Some(Path::new("routes.toml"))),
            default,
            "a routes file in the working directory: the same directory as before"
        );
        assert_eq!(
            plugin_dir_for(Path::new("/opt/wasm"), false, Some(routes)),
            Path::new("/opt/wasm")
        );
    }
}
