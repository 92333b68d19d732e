//! The plugin SDK and the WIT contract as the `outbox` binary carries them, embedded at build time
//! from this repository's `plugin-sdk/`: `outbox plugins sdk --out DIR` writes the standalone
//! `outbox-plugin-sdk` crate (its WIT package inside it), `outbox plugins wit --out DIR` the WIT
//! package alone, and `outbox plugins new` vendors one or the other into a new plugin. An
//! installed binary needs no checkout of the repository.
//!
//! It never writes into a folder that holds anything, except, when asked (`--force`), a folder
//! that holds what it writes (the SDK crate, or the `outbox:plugin` WIT package).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use include_dir::{include_dir, Dir};

static SDK_SRC: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../plugin-sdk/src");
static SDK_WIT: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../plugin-sdk/wit");
const SDK_MANIFEST: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../plugin-sdk/Cargo.toml"
));
const SDK_README: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../plugin-sdk/README.md"
));

/// The SDK crate's package name, by which `--force` recognises a folder holding it.
const SDK_PACKAGE_LINE: &str = "name = \"outbox-plugin-sdk\"";

/// The WIT package's declaration, by which `--force` recognises a folder holding it.
const WIT_PACKAGE_PREFIX: &str = "package outbox:plugin@";

/// One file to write: its path under the folder written, and its bytes.
pub(super) type EmbeddedFile = (PathBuf, &'static [u8]);

/// The files of `dir` (an embedded folder, or a folder in one), each at its path from the
/// embedded root joined to `prefix`.
pub(super) fn files_of(dir: &'static Dir<'static>, prefix: &Path, out: &mut Vec<EmbeddedFile>) {
    for file in dir.files() {
        out.push((prefix.join(file.path()), file.contents()));
    }
    for sub in dir.dirs() {
        files_of(sub, prefix, out);
    }
}

/// Every file of the SDK crate, relative to its root.
fn sdk_files() -> Vec<EmbeddedFile> {
    let mut files = vec![
        (PathBuf::from("Cargo.toml"), SDK_MANIFEST.as_bytes()),
        (PathBuf::from("README.md"), SDK_README.as_bytes()),
    ];
    files_of(&SDK_SRC, Path::new("src"), &mut files);
    files_of(&SDK_WIT, Path::new("wit"), &mut files);
    files.sort();
    files
}

/// Every file of the WIT package (`outbox.wit`, the current version, and `0.1/outbox.wit`,
/// the previous one still loaded), relative to the package folder.
fn wit_files() -> Vec<EmbeddedFile> {
    let mut files = Vec::new();
    files_of(&SDK_WIT, Path::new(""), &mut files);
    files.sort();
    files
}

/// The current WIT package's text (`outbox.wit`), for scaffolds in other languages.
pub(crate) fn current_wit() -> &'static [u8] {
    SDK_WIT
        .get_file("outbox.wit")
        .map(include_dir::File::contents)
        .unwrap_or_default()
}

/// Whether `dir` holds nothing (or does not exist).
fn is_empty_or_absent(dir: &Path) -> anyhow::Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e).with_context(|| format!("reading {}", dir.display())),
    }
}

/// Whether `dir` holds the SDK crate (its `Cargo.toml` names the package).
pub(super) fn holds_sdk(dir: &Path) -> bool {
    file_contains(dir, "Cargo.toml", SDK_PACKAGE_LINE)
}

/// Whether the file `dir/file` exists and contains `needle`.
fn file_contains(dir: &Path, file: &str, needle: &str) -> bool {
    std::fs::read_to_string(dir.join(file)).is_ok_and(|text| text.contains(needle))
}

/// Write `files` under `out`, creating folders as needed.
fn write_files(out: &Path, files: &[EmbeddedFile]) -> anyhow::Result<()> {
    for (path, contents) in files {
        let target = out.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&target, contents)
            .with_context(|| format!("writing {}", target.display()))?;
    }
    Ok(())
}

/// `outbox plugins sdk --out DIR [--force]`: write the SDK crate to `out`, which must be empty
/// or absent; with `force`, a folder already holding the SDK crate is refreshed (its `src/` and
/// `wit/` replaced, so no file of an older SDK is left behind). Returns what to tell the user.
pub fn write_sdk(out: &Path, force: bool) -> anyhow::Result<String> {
    if !is_empty_or_absent(out)? {
        anyhow::ensure!(
            force,
            "{} is not empty; not writing the SDK into it (give an empty or new folder, or --force to refresh an SDK written there before)",
            out.display()
        );
        anyhow::ensure!(
            holds_sdk(out),
            "{} does not hold the outbox plugin SDK (no Cargo.toml with {SDK_PACKAGE_LINE}); --force refreshes only an SDK folder",
            out.display()
        );
        for sub in ["src", "wit"] {
            let sub = out.join(sub);
            if sub.is_dir() {
                std::fs::remove_dir_all(&sub)
                    .with_context(|| format!("removing the old {}", sub.display()))?;
            }
        }
    }
    let files = sdk_files();
    write_files(out, &files)?;
    Ok(format!(
        "wrote the outbox plugin SDK ({} files, WIT package outbox:plugin@{}) to {}\n\
         depend on it with: outbox-plugin-sdk = {{ path = \"{}\" }}",
        files.len(),
        outbox_host::plugin::WIT_VERSION,
        out.display(),
        out.display()
    ))
}

/// `outbox plugins wit --out DIR [--force]`: write the WIT package to `out` (empty or absent;
/// with `force`, a folder already holding the `outbox:plugin` package is overwritten). Returns
/// what to tell the user.
pub fn write_wit(out: &Path, force: bool) -> anyhow::Result<String> {
    if !is_empty_or_absent(out)? {
        anyhow::ensure!(
            force,
            "{} is not empty; not writing the WIT package into it (give an empty or new folder, or --force to refresh a WIT package written there before)",
            out.display()
        );
        anyhow::ensure!(
            file_contains(out, "outbox.wit", WIT_PACKAGE_PREFIX),
            "{} does not hold the outbox:plugin WIT package (no outbox.wit declaring it); --force refreshes only such a folder",
            out.display()
        );
    }
    let files = wit_files();
    write_files(out, &files)?;
    Ok(format!(
        "wrote the WIT package outbox:plugin@{current} to {dir}/outbox.wit (worlds router, handler, policy) \
         and the previous version, still loaded, to {dir}/0.1/outbox.wit\n\
         bind to it with any component toolchain, e.g. componentize-py -d {dir} -w handler ..., \
         jco componentize --wit {dir} --world-name handler ...",
        current = outbox_host::plugin::WIT_VERSION,
        dir = out.display(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_sdk_is_the_whole_standalone_crate() {
        let files = sdk_files();
        let names: Vec<String> = files.iter().map(|(p, _)| p.display().to_string()).collect();
        for needed in [
            "Cargo.toml",
            "README.md",
            "src/lib.rs",
            "wit/outbox.wit",
            "wit/0.1/outbox.wit",
        ] {
            assert!(
                names.iter().any(|n| n == needed),
                "{needed} missing: {names:?}"
            );
        }
        // Standalone: nothing inherited from a workspace.
        assert!(!SDK_MANIFEST.contains(".workspace"), "{SDK_MANIFEST}");
        assert!(!SDK_MANIFEST.contains("workspace = true"), "{SDK_MANIFEST}");
        let current = String::from_utf8_lossy(current_wit());
        assert!(
            current.contains(&format!(
                "{WIT_PACKAGE_PREFIX}{};",
                outbox_host::plugin::WIT_VERSION
            )),
            "{current}"
        );
    }

    #[test]
    fn writing_refuses_a_folder_holding_something_else_even_with_force() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Cargo.toml"),
            "[package]\nname = \"mine\"\n",
        )
        .unwrap();
        let err = write_sdk(dir.path(), false).unwrap_err().to_string();
        assert!(err.contains("is not empty"), "{err}");
        let err = write_sdk(dir.path(), true).unwrap_err().to_string();
        assert!(err.contains("does not hold the outbox plugin SDK"), "{err}");
        let err = write_wit(dir.path(), true).unwrap_err().to_string();
        assert!(
            err.contains("does not hold the outbox:plugin WIT package"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("Cargo.toml")).unwrap(),
            "[package]\nname = \"mine\"\n"
        );

        // A folder holding the SDK is refreshed with --force, stale files gone.
        let sdk = dir.path().join("sdk");
        write_sdk(&sdk, false).unwrap();
        std::fs::write(sdk.join("src/stale.rs"), "// from an older SDK").unwrap();
        assert!(write_sdk(&sdk, false).is_err());
        write_sdk(&sdk, true).unwrap();
        assert!(!sdk.join("src/stale.rs").exists());
        assert!(sdk.join("src/lib.rs").is_file());

        let wit = dir.path().join("wit");
        write_wit(&wit, false).unwrap();
        assert!(write_wit(&wit, false).is_err());
        write_wit(&wit, true).unwrap();
        assert!(wit.join("0.1/outbox.wit").is_file());
    }
}
