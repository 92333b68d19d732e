//! `outbox publish`: one event in its own transaction, checked before anything is written by
//! the same rules the host's publish applies (`outbox_host::publish::PublishRules`: names,
//! sizes, the contracts folder).

use anyhow::Context;
use outbox_host::config::Config;
use outbox_host::publish::{publish_checked, PublishRules};
use outbox_host::{store, NewEvent};

use crate::opt::{read_payload_arg, PublishArgs};

/// `outbox publish TYPE --payload JSON ...`: prints the event's id (or, with `--json`, the id,
/// whether it was inserted and its dispatch key); an event already published under the same
/// dispatch key is said on stderr. Bad input fails before any connection is made.
pub async fn publish(config: &Config, args: PublishArgs) -> anyhow::Result<()> {
    let payload = read_payload_arg(&args.payload)?;
    let payload: serde_json::Value = serde_json::from_str(&payload)
        .with_context(|| format!("--payload is not valid JSON: {:?}", abbreviate(&payload)))?;
    let mut event = NewEvent::new(args.event_type, payload);
    if let Some(h) = args.headers {
        event = event.with_headers(
            serde_json::from_str(&h)
                .with_context(|| format!("--headers is not valid JSON: {h:?}"))?,
        );
    }
    if let Some(t) = args.tenant {
        event = event.with_tenant(t);
    }
    if let Some(k) = args.dispatch_key {
        event = event.with_dispatch_key(k);
    }
    if let Some(k) = args.ordering_key {
        event = event.with_ordering_key(k);
    }
    event = event.with_version(args.event_version);
    let delay = args
        .delay
        .map(|s| {
            chrono::Duration::try_seconds(i64::try_from(s).unwrap_or(i64::MAX))
                .and_then(|d| chrono::Utc::now().checked_add_signed(d))
                .ok_or_else(|| anyhow::anyhow!("--delay {s} is too far in the future"))
        })
        .transpose()?;
    if let Some(at) = delay.or(args.available_at) {
        event = event.with_available_at(at);
    }
    let dispatch_key = event.dispatch_key.clone();
    // Validate before touching the database so bad input never needs a connection.
    // The contracts folder beside routes.toml checks the payload here, before writing.
    let rules = PublishRules::from_config(config)?;
    rules.validate(&event)?;
    if let Some(warning) = super::no_route_warning(config, &event.event_type) {
        errln!("warning: {warning}");
    }
    let pool = store::connect(&config.settings.database_url, 1).await?;
    store::migrate(&pool).await?;
    let mut tx = pool.begin().await?;
    let published = publish_checked(&mut tx, event, &rules).await?;
    tx.commit().await?;
    if args.json {
        out!(
            "{}",
            serde_json::json!({
                "id": published.id,
                "inserted": published.inserted,
                "dispatch_key": dispatch_key,
            })
        );
    } else {
        out!("{}", published.id);
        if !published.inserted {
            errln!(
                "event {} already existed under dispatch key {}: nothing new was written",
                published.id,
                dispatch_key.as_deref().unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// The first 80 characters of `text`, with `...` when there were more.
fn abbreviate(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}
