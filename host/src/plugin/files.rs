//! Plugin files: how a plugin file is read.
//!
//! Where the plugin directory is comes from the config ([`crate::config::plugin_dir_for`]), and
//! where a `[plugins.NAME] file` may point is a naming rule checked when the routes file is
//! parsed ([`crate::naming::check_file_key`]). This module owns the rule of reading: a plugin
//! file is read ([`read_plugin_file`]) only when, symlinks resolved, it is still inside the plugin
//! directory, is a regular file (a FIFO or a device such as `/dev/zero` is refused before it is
//! opened) and holds at most [`MAX_PLUGIN_FILE_BYTES`], counted while it is read too.
//!
//! It never compiles, loads or watches a plugin.

use std::io::Read;
use std::path::Path;

use super::PluginError;

/// The largest plugin file read, in bytes (64 MiB; the built plugins are a few hundred KiB).
pub const MAX_PLUGIN_FILE_BYTES: u64 = 64 * 1024 * 1024;

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
