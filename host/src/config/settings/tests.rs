//! Tests of resolving, checking and describing settings.

use std::collections::HashMap;

use super::*;

#[test]
fn clamped_values_are_shown_with_what_was_written() {
    let env = env_of(&[("OUTBOX_RECEIVER_CONCURRENCY", "0")]);
    let file = FileSettings::default();
    let settings = Settings::resolve_with(&file, &env).unwrap();
    assert_eq!(settings.receiver_concurrency, 1);
    let shown = settings.describe_with(&file, &env);
    let clamped: Vec<String> = shown
        .iter()
        .filter_map(ShownSetting::clamp_warning)
        .collect();
    assert_eq!(
        clamped,
        vec!["OUTBOX_RECEIVER_CONCURRENCY=0 (from the env) is out of range: using 1".to_string()]
    );
    let defaults = Settings::resolve_with(&file, env_of(&[])).unwrap();
    assert!(
        defaults
            .describe_with(&file, env_of(&[]))
            .iter()
            .all(|s| s.clamped_from.is_none()),
        "defaults are never clamped"
    );
}

#[test]
fn values_the_program_sets_after_resolving_are_not_warned_about_but_an_operators_are() {
    // The demo resolves the operator's settings, then chooses some values itself.
    let file = FileSettings::default();
    let mut chosen = Settings::resolve_with(&file, env_of(&[])).unwrap();
    chosen.dispatch_interval = Duration::from_millis(200);
    chosen.redis_prefix = "outbox-demo:".into();
    chosen.http_addr = String::new();
    let shown = chosen.describe_with(&file, env_of(&[]));
    let warnings: Vec<String> = shown
        .iter()
        .filter_map(ShownSetting::clamp_warning)
        .collect();
    assert_eq!(warnings, Vec::<String>::new());
    assert_eq!(
        shown
            .iter()
            .find(|s| s.env == "OUTBOX_DISPATCH_INTERVAL_MS")
            .map(|s| s.value.as_str()),
        Some("200"),
        "the value in force is shown"
    );

    // The same program on top of an operator's out-of-range value still warns about it.
    let env = env_of(&[("OUTBOX_DISPATCH_BATCH_SIZE", "0")]);
    let mut chosen = Settings::resolve_with(&file, &env).unwrap();
    chosen.dispatch_interval = Duration::from_millis(200);
    let warnings: Vec<String> = chosen
        .describe_with(&file, &env)
        .iter()
        .filter_map(ShownSetting::clamp_warning)
        .collect();
    assert_eq!(
        warnings,
        vec!["OUTBOX_DISPATCH_BATCH_SIZE=0 (from the env) is out of range: using 1".to_string()]
    );
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// A `[settings]` table with one value for every kind of setting.
fn file() -> FileSettings {
    FileSettings {
        dispatcher_enabled: Some(false),
        dispatch_batch_size: Some(50),
        dispatch_interval_ms: Some(250),
        done_retention_hours: Some(48),
        dedupe_ttl_seconds: Some(60),
        backoff_seconds: Some(vec![5, 10]),
        redis_prefix: Some("file:".into()),
        plugin_dir: Some("/file/plugins".into()),
        ..FileSettings::default()
    }
}

#[test]
fn defaults_when_neither_env_nor_file() {
    let s = Settings::resolve_with(&FileSettings::default(), no_env).unwrap();
    assert_eq!(s, Settings::default());
    assert!(s.dispatcher_enabled);
    assert_eq!(s.dispatch_batch_size, 100);
    assert_eq!(s.dispatch_interval, Duration::from_millis(1000));
    assert_eq!(s.done_retention, Duration::from_secs(720 * 3600));
    assert_eq!(s.dedupe_ttl, Duration::from_secs(7 * 24 * 3600));
    assert_eq!(s.backoff.len(), 6);
    assert_eq!(s.backoff_after(1), Duration::from_secs(60));
    assert_eq!(s.backoff_after(99), Duration::from_secs(1920));
    assert_eq!(s.handler_backoff_after(1), Duration::from_secs(1));
    assert_eq!(s.redis_prefix, "");
    assert_eq!(s.plugin_dir, PathBuf::from("plugins/dist"));
    assert_eq!(s.worker_queue_group, None);
    assert_eq!(s.max_payload_bytes, DEFAULT_MAX_PAYLOAD_BYTES);
    assert_eq!(s.receiver_concurrency, 256);
}

#[test]
fn file_overrides_defaults_for_every_kind() {
    let s = Settings::resolve_with(&file(), no_env).unwrap();
    assert!(!s.dispatcher_enabled);
    assert_eq!(s.dispatch_batch_size, 50);
    assert_eq!(s.dispatch_interval, Duration::from_millis(250));
    assert_eq!(s.done_retention, Duration::from_secs(48 * 3600));
    assert_eq!(s.dedupe_ttl, Duration::from_secs(60));
    assert_eq!(
        s.backoff,
        vec![Duration::from_secs(5), Duration::from_secs(10)]
    );
    assert_eq!(s.redis_prefix, "file:");
    assert_eq!(s.plugin_dir, PathBuf::from("/file/plugins"));
}

#[test]
fn env_overrides_file_for_every_kind() {
    let env = env_of(&[
        ("OUTBOX_DISPATCHER_ENABLED", "true"),
        ("OUTBOX_DISPATCH_BATCH_SIZE", " 7 "),
        ("OUTBOX_DISPATCH_INTERVAL_MS", "20"),
        ("OUTBOX_DONE_RETENTION_HOURS", "2"),
        ("OUTBOX_DEDUPE_TTL_SECONDS", "9"),
        ("OUTBOX_BACKOFF_SECONDS", "1, 2,3"),
        ("OUTBOX_REDIS_PREFIX", "env:"),
        ("OUTBOX_PLUGIN_DIR", "/env/plugins"),
        ("DATABASE_URL", "postgres://env/db"),
        ("WORKER_QUEUE_GROUP", "mail"),
    ]);
    let s = Settings::resolve_with(&file(), env).unwrap();
    assert!(s.dispatcher_enabled);
    assert_eq!(s.dispatch_batch_size, 7);
    assert_eq!(s.dispatch_interval, Duration::from_millis(20));
    assert_eq!(s.done_retention, Duration::from_secs(2 * 3600));
    assert_eq!(s.dedupe_ttl, Duration::from_secs(9));
    assert_eq!(s.backoff, [1, 2, 3].map(Duration::from_secs).to_vec());
    assert_eq!(s.redis_prefix, "env:");
    assert_eq!(s.plugin_dir, PathBuf::from("/env/plugins"));
    assert_eq!(s.database_url, "postgres://env/db");
    assert_eq!(s.worker_queue_group.as_deref(), Some("mail"));
}

#[test]
fn blank_env_counts_as_unset_except_for_text() {
    let env = env_of(&[
        ("OUTBOX_DISPATCH_BATCH_SIZE", "  "),
        ("OUTBOX_BACKOFF_SECONDS", ""),
        ("DATABASE_URL", ""),
        ("WORKER_QUEUE_GROUP", " "),
        ("OUTBOX_REDIS_PREFIX", ""),
        ("OUTBOX_HTTP_ADDR", ""),
    ]);
    let s = Settings::resolve_with(&file(), env).unwrap();
    assert_eq!(s.dispatch_batch_size, 50);
    assert_eq!(
        s.backoff,
        vec![Duration::from_secs(5), Duration::from_secs(10)]
    );
    assert_eq!(s.database_url, Settings::default().database_url);
    assert_eq!(s.worker_queue_group, None);
    // An empty text variable is a value: no prefix, HTTP endpoint off.
    assert_eq!(s.redis_prefix, "");
    assert_eq!(s.http_addr, "");
}

#[test]
fn out_of_range_values_are_clamped() {
    let env = env_of(&[
        ("OUTBOX_DISPATCH_BATCH_SIZE", "0"),
        ("OUTBOX_DONE_RETENTION_BATCH_SIZE", "1000000"),
        ("OUTBOX_DISPATCH_CONCURRENCY", "0"),
        ("OUTBOX_RECEIVER_CONCURRENCY", "5000"),
        ("OUTBOX_MAX_RETRIES", "-3"),
        ("OUTBOX_CLAIM_LEASE_MS", "1"),
        ("OUTBOX_RECEIVER_LEASE_MS", "0"),
    ]);
    let s = Settings::resolve_with(&FileSettings::default(), env).unwrap();
    assert_eq!(s.dispatch_batch_size, 1);
    assert_eq!(s.done_retention_batch_size, 10_000);
    assert_eq!(s.dispatch_concurrency, 1);
    assert_eq!(s.receiver_concurrency, 1024);
    assert_eq!(s.max_retries, 0);
    assert_eq!(s.claim_lease, Duration::from_millis(100));
    assert_eq!(s.receiver_lease, Duration::from_millis(100));
}

fn env_error(name: &str, value: &str) -> (String, String, String) {
    match Settings::resolve_with(&FileSettings::default(), env_of(&[(name, value)])) {
        Err(ConfigError::Env {
            name,
            value,
            message,
        }) => (name, value, message),
        other => panic!("{name}={value:?}: expected an env error, got {other:?}"),
    }
}

#[test]
fn unparsable_integer_env_names_the_variable_and_value() {
    let (name, value, _) = env_error("OUTBOX_DISPATCH_BATCH_SIZE", "lots");
    assert_eq!(
        (name.as_str(), value.as_str()),
        ("OUTBOX_DISPATCH_BATCH_SIZE", "lots")
    );
    let err = Settings::resolve_with(
        &FileSettings::default(),
        env_of(&[("OUTBOX_MAX_RETRIES", "six")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("OUTBOX_MAX_RETRIES") && err.contains("six"),
        "{err}"
    );
}

#[test]
fn negative_duration_env_is_refused() {
    let (name, value, _) = env_error("OUTBOX_CLAIM_LEASE_MS", "-5");
    assert_eq!(
        (name.as_str(), value.as_str()),
        ("OUTBOX_CLAIM_LEASE_MS", "-5")
    );
    env_error("OUTBOX_DONE_RETENTION_HOURS", "1.5");
    env_error("OUTBOX_IDEMPOTENCY_TTL_SECONDS", "1h");
}

#[test]
fn unparsable_bool_env_is_refused() {
    let (name, value, message) = env_error("OUTBOX_DISPATCHER_ENABLED", "yes");
    assert_eq!(
        (name.as_str(), value.as_str()),
        ("OUTBOX_DISPATCHER_ENABLED", "yes")
    );
    assert!(message.contains("true"), "{message}");
}

#[test]
fn unparsable_seconds_list_env_is_refused_with_a_hint() {
    let (name, value, message) = env_error("OUTBOX_BACKOFF_SECONDS", "60,,120");
    assert_eq!(
        (name.as_str(), value.as_str()),
        ("OUTBOX_BACKOFF_SECONDS", "60,,120")
    );
    assert!(message.contains("comma-separated seconds"), "{message}");
    let (name, _, _) = env_error("OUTBOX_HANDLER_BACKOFF_SECONDS", "1m");
    assert_eq!(name, "OUTBOX_HANDLER_BACKOFF_SECONDS");
}

#[test]
fn empty_backoff_list_in_file_is_refused() {
    for file in [
        FileSettings {
            backoff_seconds: Some(vec![]),
            ..FileSettings::default()
        },
        FileSettings {
            handler_backoff_seconds: Some(vec![]),
            ..FileSettings::default()
        },
    ] {
        let key = if file.backoff_seconds.is_some() {
            "backoff_seconds"
        } else {
            "handler_backoff_seconds"
        };
        assert_eq!(
            file.check(),
            Err(format!("[settings] {key} must not be empty"))
        );
        match Settings::resolve_with(&file, no_env) {
            Err(ConfigError::Setting { key: k, message }) => {
                assert_eq!(k, key);
                assert_eq!(message, "must not be empty");
            }
            other => panic!("expected a settings error, got {other:?}"),
        }
    }
}

#[test]
fn env_wins_over_an_invalid_file_value() {
    let file = FileSettings {
        backoff_seconds: Some(vec![]),
        ..FileSettings::default()
    };
    let s = Settings::resolve_with(&file, env_of(&[("OUTBOX_BACKOFF_SECONDS", "4")])).unwrap();
    assert_eq!(s.backoff, vec![Duration::from_secs(4)]);
}

#[test]
fn unknown_file_key_is_refused() {
    let err = toml::from_str::<FileSettings>("dispatch_batch = 5").unwrap_err();
    assert!(err.to_string().contains("dispatch_batch"), "{err}");
}

#[test]
fn defaults_meet_their_own_rules() {
    let defaults = FileSettings {
        backoff_seconds: Some(vec![60, 120, 240, 480, 960, 1920]),
        handler_backoff_seconds: Some(vec![1, 5, 30, 120, 600]),
        ..FileSettings::default()
    };
    assert_eq!(defaults.check(), Ok(()));
    assert!(!Settings::default().handler_backoff.is_empty());
}

#[test]
fn every_file_setting_is_named_after_its_env_var() {
    let shown = Settings::default().describe_with(&FileSettings::default(), no_env);
    for s in &shown {
        if let Some(key) = s.file_key {
            assert_eq!(s.env, format!("OUTBOX_{}", key.to_uppercase()));
        }
    }
    let keys = shown.iter().filter(|s| s.file_key.is_some()).count();
    // Env-only: DATABASE_URL, REDIS_URL, WORKER_QUEUE_GROUP, OUTBOX_NATS_URL,
    // OUTBOX_RABBITMQ_URL (URLs carry credentials: never in a file).
    assert_eq!(keys, Settings::ENV_VARS.len() - 5);
}

#[test]
fn describe_covers_every_env_var_with_source_and_no_secret() {
    let env = env_of(&[
        ("REDIS_URL", "redis://:s3cret@cache:6379/"),
        ("OUTBOX_DISPATCH_BATCH_SIZE", "20"),
    ]);
    let file = file();
    let settings = Settings::resolve_with(&file, &env).unwrap();
    let shown = settings.describe_with(&file, &env);
    let names: Vec<&str> = shown.iter().map(|s| s.env).collect();
    assert_eq!(names, Settings::ENV_VARS);
    let get = |name: &str| shown.iter().find(|s| s.env == name).unwrap();
    assert_eq!(get("REDIS_URL").value, "redis://@cache:6379/");
    assert_eq!(get("REDIS_URL").source, SettingSource::Env);
    assert_eq!(get("OUTBOX_DISPATCH_BATCH_SIZE").value, "20");
    assert_eq!(get("OUTBOX_DISPATCH_BATCH_SIZE").source, SettingSource::Env);
    assert_eq!(get("OUTBOX_BACKOFF_SECONDS").value, "5,10");
    assert_eq!(get("OUTBOX_BACKOFF_SECONDS").source, SettingSource::File);
    assert_eq!(get("OUTBOX_DONE_RETENTION_HOURS").value, "48");
    assert_eq!(get("OUTBOX_DISPATCH_INTERVAL_MS").value, "250");
    assert_eq!(get("OUTBOX_PLUGIN_DIR").value, "/file/plugins");
    assert_eq!(get("OUTBOX_HTTP_ADDR").source, SettingSource::Default);
    assert_eq!(get("WORKER_QUEUE_GROUP").value, "(all)");
    assert_eq!(get("WORKER_QUEUE_GROUP").source, SettingSource::Default);
    assert!(shown.iter().all(|s| !s.value.contains("s3cret")));
}
