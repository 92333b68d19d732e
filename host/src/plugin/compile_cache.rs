//! Compile cache: compiled plugins kept on disk between runs, so a restart (or a second process
//! on the same machine) loads a plugin it compiled before in milliseconds instead of compiling
//! it again (about half a second of CPU per process with the shipped plugins).
//!
//! Owns where the cache lives (`OUTBOX_PLUGIN_CACHE_DIR`: `auto`, `off` or a directory) and the
//! check that makes it safe to trust. The entries are wasmtime's own cache (keyed by a hash of
//! the `.wasm` bytes and of every engine and compiler setting, so a changed plugin, host or
//! wasmtime version never reuses an old entry). A cache entry is native code the host will run,
//! so it never uses a directory that another user could write to: one not owned by the host's
//! user, or writable by its group or by others, is refused with a warning and plugins are
//! compiled as if the cache were off. The cache never changes what a plugin does; it only saves
//! compiling it.

use std::path::{Path, PathBuf};

use wasmtime::{Cache, CacheConfig};

/// The value of `OUTBOX_PLUGIN_CACHE_DIR` that picks the user's cache directory.
pub const CACHE_DIR_AUTO: &str = "auto";

/// The value of `OUTBOX_PLUGIN_CACHE_DIR` that turns the cache off.
pub const CACHE_DIR_OFF: &str = "off";

/// The directory `setting` (the value of `OUTBOX_PLUGIN_CACHE_DIR`) names: none for `off` or an
/// empty value; for `auto`, `$XDG_CACHE_HOME/outbox/plugins`, else `$HOME/.cache/outbox/plugins`
/// (none when neither variable is set); otherwise the path as written.
pub fn cache_dir_of(setting: &str) -> Option<PathBuf> {
    cache_dir_with(setting, |name| std::env::var_os(name).map(PathBuf::from))
}

fn cache_dir_with(setting: &str, env: impl Fn(&str) -> Option<PathBuf>) -> Option<PathBuf> {
    match setting.trim() {
        "" | CACHE_DIR_OFF => None,
        CACHE_DIR_AUTO => {
            let base = env("XDG_CACHE_HOME")
                .filter(|p| p.is_absolute())
                .or_else(|| {
                    env("HOME")
                        .filter(|p| p.is_absolute())
                        .map(|h| h.join(".cache"))
                })?;
            Some(base.join("outbox").join("plugins"))
        }
        path => Some(PathBuf::from(path)),
    }
}

/// Why a cache directory was not used.
#[derive(Debug, thiserror::Error)]
pub enum CacheDirRefused {
    /// It could not be created or inspected.
    #[error("plugin compile cache {dir}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Someone other than the host's user could write to it.
    #[error("plugin compile cache {dir}: {why}; compiled plugins are native code the host runs, so it is not used (fix its owner and mode, e.g. chmod 700, or set OUTBOX_PLUGIN_CACHE_DIR=off)")]
    Unsafe {
        /// The directory.
        dir: PathBuf,
        /// What makes it unsafe.
        why: String,
    },
    /// wasmtime refused the cache configuration.
    #[error("plugin compile cache {dir}: {message}")]
    Wasmtime {
        /// The directory.
        dir: PathBuf,
        /// wasmtime's message.
        message: String,
    },
}

/// The cache `setting` (the value of `OUTBOX_PLUGIN_CACHE_DIR`) names, if it is on and safe to
/// use ([`cache_dir_of`], [`open_cache`]); a refused directory is a warning, and plugins are then
/// compiled without a cache. What a host and the offline plugin commands both open.
pub fn open_configured(setting: &str) -> Option<Cache> {
    let dir = cache_dir_of(setting)?;
    match open_cache(&dir) {
        Ok(cache) => {
            tracing::debug!(dir = %dir.display(), "plugin compile cache");
            Some(cache)
        }
        Err(e) => {
            tracing::warn!("{e}; plugins are compiled without a cache");
            None
        }
    }
}

/// A wasmtime cache in `dir`, created (mode 0700) when missing, after checking that only the
/// host's user can write to it.
pub fn open_cache(dir: &Path) -> Result<Cache, CacheDirRefused> {
    let io = |source| CacheDirRefused::Io {
        dir: dir.to_path_buf(),
        source,
    };
    create_private_dir(dir).map_err(io)?;
    check_private(dir)?;
    let mut config = CacheConfig::new();
    config.with_directory(dir);
    Cache::new(config).map_err(|e| CacheDirRefused::Wasmtime {
        dir: dir.to_path_buf(),
        message: format!("{e:#}"),
    })
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// Refuse `dir` unless it is a directory owned by the host's user and not writable by its
/// group or by others.
#[cfg(unix)]
fn check_private(dir: &Path) -> Result<(), CacheDirRefused> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |why: String| CacheDirRefused::Unsafe {
        dir: dir.to_path_buf(),
        why,
    };
    let meta = std::fs::symlink_metadata(dir).map_err(|source| CacheDirRefused::Io {
        dir: dir.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(refuse(
            "is not a directory (a symlink is not followed)".into(),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "is writable by its group or by others (mode {:o})",
            meta.mode() & 0o777
        )));
    }
    // `/proc/self` belongs to the process's effective user: no unsafe call to ask for it.
    if let Ok(me) = std::fs::metadata("/proc/self") {
        if meta.uid() != me.uid() {
            return Err(refuse(format!(
                "belongs to user {}, not to the host's user {}",
                meta.uid(),
                me.uid()
            )));
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_dir: &Path) -> Result<(), CacheDirRefused> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<PathBuf> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| PathBuf::from(v))
        }
    }

    #[test]
    fn the_cache_directory_follows_the_setting() {
        let env = env_of(&[("XDG_CACHE_HOME", "/xdg"), ("HOME", "/home/u")]);
        assert_eq!(cache_dir_with("off", &env), None);
        assert_eq!(cache_dir_with("", &env), None);
        assert_eq!(
            cache_dir_with("auto", &env),
            Some(PathBuf::from("/xdg/outbox/plugins"))
        );
        assert_eq!(
            cache_dir_with("auto", env_of(&[("HOME", "/home/u")])),
            Some(PathBuf::from("/home/u/.cache/outbox/plugins"))
        );
        assert_eq!(
            cache_dir_with("auto", env_of(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/outbox/plugins")),
            "a relative XDG_CACHE_HOME is ignored, as the XDG spec says"
        );
        assert_eq!(cache_dir_with("auto", env_of(&[])), None);
        assert_eq!(
            cache_dir_with("/var/cache/outbox", &env),
            Some(PathBuf::from("/var/cache/outbox"))
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_cache_directory_others_can_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cache");
        open_cache(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "created private");

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = open_cache(&dir).unwrap_err();
        assert!(
            matches!(err, CacheDirRefused::Unsafe { .. }),
            "world-writable: {err}"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(matches!(
            open_cache(&dir).unwrap_err(),
            CacheDirRefused::Unsafe { .. }
        ));

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(
            matches!(
                open_cache(&link).unwrap_err(),
                CacheDirRefused::Unsafe { .. }
            ),
            "a symlink is not followed"
        );
    }
}
