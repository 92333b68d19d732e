//! Plugin files stay inside the plugin directory and are bounded: a `[plugins.NAME] file` that
//! is absolute or climbs out with `..` is a config error at start and a rejected reload later
//! (the serving plugin kept); a file that leads out through a symlink, is not a regular file
//! or is larger than the cap is refused before it is read. A file pinned by `sha256` loads only
//! with that digest.

use std::time::Duration;

use outbox_host::config::{Config, RoutesFile, Settings};
use outbox_host::live_config::{LiveConfig, ReloadOutcome};
use outbox_host::plugin::MAX_PLUGIN_FILE_BYTES;
use outbox_tests::{another_build_of, plugin_file, PluginFixture};

/// Routes through the prefix-router plugin, declared with `file` (none: its default file).
fn routes_with_file(file: Option<&str>) -> String {
    let file = file.map(|f| format!("file = {f:?}\n")).unwrap_or_default();
    format!(
        "[routes]\n\"mail.\" = \"outbox.mail\"\n\
         [router]\nplugin = \"prefix-router\"\n\
         [policy]\nplugin = \"deny-all\"\n\
         [plugins.prefix-router]\n{file}"
    )
}

/// The error of `[plugins.prefix-router] file = FILE`, or `None` when the routes file parses.
fn parse_error(file: &str) -> Option<String> {
    RoutesFile::parse(
        &routes_with_file(Some(file)),
        std::path::Path::new("routes.toml"),
    )
    .err()
    .map(|e| e.to_string())
}

#[test]
fn a_plugin_file_must_be_a_plain_relative_path_inside_the_plugin_directory() {
    let outside = plugin_file("prefix-router").display().to_string();
    for file in [
        "/dev/zero",
        outside.as_str(),
        "../prefix-router.wasm",
        "team/../../prefix-router.wasm",
        "./prefix-router.wasm",
        "",
    ] {
        let err = parse_error(file).unwrap_or_else(|| panic!("{file:?} was accepted"));
        assert!(
            err.contains("[plugins.prefix-router]")
                && err.contains(&format!("{file:?}"))
                && err.contains("relative path inside the plugin directory"),
            "{file:?}: {err}"
        );
    }
    assert_eq!(parse_error("prefix-router.wasm"), None);
    assert_eq!(parse_error("team/prefix-router.wasm"), None);
}

#[test]
fn a_routes_file_naming_a_plugin_file_outside_the_plugin_directory_does_not_start() {
    let fixture = PluginFixture::new(&["prefix-router"], &routes_with_file(Some("/dev/zero")));
    let err = Config::load(&fixture.routes_path).unwrap_err().to_string();
    assert!(
        err.contains("[plugins.prefix-router]") && err.contains("\"/dev/zero\""),
        "{err}"
    );
}

/// A live config over `fixture` with the prefix-router serving from its own file.
async fn serving(fixture: &PluginFixture) -> LiveConfig {
    let live = LiveConfig::start(&fixture.config(&Settings::default()))
        .await
        .unwrap();
    assert!(live.registry.get("prefix-router").is_some());
    live
}

/// A reload of `routes` is rejected with a reason containing `expected`, remembered, and the
/// serving prefix-router is the one that served before.
async fn rejected_keeping_the_plugin(
    fixture: &PluginFixture,
    live: &LiveConfig,
    routes: &str,
    expected: &str,
) {
    let before = live.registry.get("prefix-router").unwrap();
    fixture.replace("routes.toml", routes.as_bytes());
    let outcome = tokio::time::timeout(Duration::from_secs(30), live.reload_routes())
        .await
        .expect("the reload ends");
    let ReloadOutcome::Rejected(message) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(message.contains(expected), "{message}");
    let after = live.registry.get("prefix-router").unwrap();
    assert_eq!(after.compiled.hash, before.compiled.hash);
    assert_eq!(after.compiled.path, before.compiled.path);
    let last = &live.reload_history()[0];
    assert_eq!(
        (last.result, last.detail.as_str()),
        ("rejected", message.as_str())
    );
}

#[tokio::test]
async fn a_reload_naming_a_plugin_file_outside_the_plugin_directory_is_rejected_and_the_serving_plugin_kept(
) {
    let fixture = PluginFixture::new(&["prefix-router"], &routes_with_file(None));
    let live = serving(&fixture).await;
    let outside = plugin_file("prefix-router").display().to_string();
    rejected_keeping_the_plugin(
        &fixture,
        &live,
        &routes_with_file(Some(&outside)),
        "relative path inside the plugin directory",
    )
    .await;
    rejected_keeping_the_plugin(
        &fixture,
        &live,
        &routes_with_file(Some("../prefix-router.wasm")),
        "relative path inside the plugin directory",
    )
    .await;
}

#[tokio::test]
async fn dev_zero_as_a_plugin_file_is_refused_at_reload_and_the_serving_plugin_kept() {
    let fixture = PluginFixture::new(&["prefix-router"], &routes_with_file(None));
    let live = serving(&fixture).await;
    rejected_keeping_the_plugin(
        &fixture,
        &live,
        &routes_with_file(Some("/dev/zero")),
        "\"/dev/zero\"",
    )
    .await;
    // Through a symlink in the plugin directory, and as the plugin's own file swapped for it.
    std::os::unix::fs::symlink("/dev/zero", fixture.dir.path().join("zero.wasm")).unwrap();
    rejected_keeping_the_plugin(
        &fixture,
        &live,
        &routes_with_file(Some("zero.wasm")),
        "outside the plugin directory",
    )
    .await;
    let own = fixture.dir.path().join("prefix-router.wasm");
    let swapped = fixture.dir.path().join(".swap");
    std::os::unix::fs::symlink("/dev/zero", &swapped).unwrap();
    std::fs::rename(&swapped, &own).unwrap();
    let before = live.registry.get("prefix-router").unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(30), live.reload_plugin_file(&own))
        .await
        .expect("the reload ends");
    let ReloadOutcome::Rejected(message) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        message.contains("outside the plugin directory"),
        "{message}"
    );
    assert_eq!(
        live.registry.get("prefix-router").unwrap().compiled.hash,
        before.compiled.hash
    );
}

/// The warning of what `live` left out at start-up.
fn left_out(live: &LiveConfig) -> String {
    live.pending_reload().expect("a plugin was left out")
}

#[tokio::test]
async fn a_plugin_file_symlinked_out_of_the_plugin_directory_is_refused() {
    let fixture = PluginFixture::new(&[], &routes_with_file(Some("escape.wasm")));
    std::os::unix::fs::symlink(
        plugin_file("prefix-router"),
        fixture.dir.path().join("escape.wasm"),
    )
    .unwrap();
    let live = LiveConfig::start(&fixture.config(&Settings::default()))
        .await
        .unwrap();
    assert!(live.registry.get("prefix-router").is_none());
    let warning = left_out(&live);
    assert!(
        warning.contains("plugin prefix-router")
            && warning.contains("escape.wasm")
            && warning.contains("outside the plugin directory"),
        "{warning}"
    );

    // A symlink that stays inside the directory is fine (a deploy switching versions).
    let fixture = PluginFixture::new(&["prefix-router"], &routes_with_file(Some("current.wasm")));
    std::os::unix::fs::symlink(
        "prefix-router.wasm",
        fixture.dir.path().join("current.wasm"),
    )
    .unwrap();
    let live = LiveConfig::start(&fixture.config(&Settings::default()))
        .await
        .unwrap();
    assert!(live.registry.get("prefix-router").is_some());
}

#[tokio::test]
async fn a_plugin_file_larger_than_the_cap_is_refused_before_it_is_read() {
    let fixture = PluginFixture::new(&[], &routes_with_file(None));
    // Sparse: as large as it says, nothing on disk.
    std::fs::File::create(fixture.dir.path().join("prefix-router.wasm"))
        .unwrap()
        .set_len(MAX_PLUGIN_FILE_BYTES + 1)
        .unwrap();
    let live = LiveConfig::start(&fixture.config(&Settings::default()))
        .await
        .unwrap();
    assert!(live.registry.get("prefix-router").is_none());
    let warning = left_out(&live);
    assert!(
        warning.contains("plugin prefix-router")
            && warning.contains(&format!("larger than the {MAX_PLUGIN_FILE_BYTES} bytes")),
        "{warning}"
    );
}

#[tokio::test]
async fn a_plugin_file_that_is_not_a_regular_file_is_refused_without_opening_it() {
    let fixture = PluginFixture::new(&[], &routes_with_file(None));
    let fifo = fixture.dir.path().join("prefix-router.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A FIFO nobody writes to would block its reader for ever.
    let live = tokio::time::timeout(
        Duration::from_secs(30),
        LiveConfig::start(&fixture.config(&Settings::default())),
    )
    .await
    .expect("start-up does not wait on the FIFO")
    .unwrap();
    let warning = left_out(&live);
    assert!(
        warning.contains("plugin prefix-router") && warning.contains("not a regular file"),
        "{warning}"
    );
}

/// The SHA-256 of `bytes`, as routes.toml pins it.
fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Routes through the prefix-router plugin, pinned to `digest`.
fn routes_pinned(digest: &str) -> String {
    format!("{}sha256 = \"{digest}\"\n", routes_with_file(None))
}

#[test]
fn a_pin_that_is_not_a_sha256_digest_is_a_config_error() {
    for pin in ["abc", &"g".repeat(64), &"a".repeat(65), ""] {
        let err = RoutesFile::parse(&routes_pinned(pin), std::path::Path::new("routes.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sha256") && err.contains("64 hexadecimal digits"),
            "{pin:?}: {err}"
        );
    }
    // Upper case is the same digest.
    let upper = "AB".repeat(32);
    let routes =
        RoutesFile::parse(&routes_pinned(&upper), std::path::Path::new("routes.toml")).unwrap();
    let pin = routes.plugins["prefix-router"].sha256.clone().unwrap();
    assert_eq!(pin.as_str(), "ab".repeat(32));
}

#[tokio::test]
async fn a_pinned_plugin_loads_and_hot_reloads_only_the_file_with_its_digest() {
    let first = std::fs::read(plugin_file("prefix-router")).unwrap();
    let second = another_build_of(&first, "second");
    let third = another_build_of(&first, "third");
    let (first_digest, second_digest, third_digest) =
        (digest(&first), digest(&second), digest(&third));
    let fixture = PluginFixture::new(&["prefix-router"], &routes_pinned(&first_digest));
    let live = serving(&fixture).await;
    let hash = |live: &LiveConfig| {
        live.registry
            .get("prefix-router")
            .unwrap()
            .compiled
            .hash
            .clone()
    };
    assert_eq!(hash(&live), first_digest);

    // Another build put in its place is refused, both digests named; the pinned one serves.
    fixture.replace("prefix-router.wasm", &second);
    let own = fixture.dir.path().join("prefix-router.wasm");
    let outcome = live.reload_plugin_file(&own).await;
    let ReloadOutcome::Rejected(message) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        message.contains(&second_digest)
            && message.contains(&first_digest)
            && message.contains("[plugins.prefix-router] sha256 pins"),
        "{message}"
    );
    assert_eq!(hash(&live), first_digest);

    // Pinning the file's digest applies the routes and loads it.
    fixture.replace("routes.toml", routes_pinned(&second_digest).as_bytes());
    assert_eq!(live.reload_routes().await, ReloadOutcome::Routes);
    assert_eq!(hash(&live), second_digest);

    // A pin ahead of its file holds the routes back (the pinned-before version serves) until
    // the pinned build arrives, then applies them.
    fixture.replace("routes.toml", routes_pinned(&third_digest).as_bytes());
    let outcome = live.reload_routes().await;
    let ReloadOutcome::Waiting(message) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(message.contains(&third_digest), "{message}");
    assert_eq!(hash(&live), second_digest);
    fixture.replace("prefix-router.wasm", &third);
    assert_eq!(live.retry_pending().await, ReloadOutcome::Routes);
    assert_eq!(hash(&live), third_digest);
    assert_eq!(live.pending_reload(), None);

    // At start-up, a file that does not match its pin is left out, both digests named.
    let fixture = PluginFixture::new(&["prefix-router"], &routes_pinned(&second_digest));
    let live = LiveConfig::start(&fixture.config(&Settings::default()))
        .await
        .unwrap();
    assert!(live.registry.get("prefix-router").is_none());
    let warning = left_out(&live);
    assert!(
        warning.contains(&first_digest) && warning.contains(&second_digest),
        "{warning}"
    );
}
