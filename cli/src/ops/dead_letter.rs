//! `outbox dead-letter list|replay|drop`: list needs a viewer operator, replay and drop an admin
//! (and are written to the audit trail, dry runs too).

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};

use outbox_host::config::Config;
use outbox_host::store::Role;

/// What `outbox dead-letter` does with the selected entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterAction {
    /// Show them.
    List,
    /// Put them back on their queue.
    Replay,
    /// Delete them.
    Drop,
}

/// Which dead letters `outbox dead-letter` works on.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterSelection {
    /// One queue (default: every handler-bound queue).
    pub queue: Option<String>,
    /// One dead-letter entry id.
    pub id: Option<String>,
    /// One outbox event id.
    pub event_id: Option<i64>,
    /// Replay or drop with no filter: every dead letter (required then).
    pub all: bool,
    /// With `all`: do not ask first.
    pub yes: bool,
}

impl DeadLetterSelection {
    /// Whether any filter narrows the selection.
    fn filtered(&self) -> bool {
        self.queue.is_some() || self.id.is_some() || self.event_id.is_some()
    }
}

/// `outbox dead-letter list|replay|drop`: select dead letters, then show, replay or drop them
/// (`dry_run` only shows what would change).
pub async fn dead_letters(
    config: &Config,
    selection: &DeadLetterSelection,
    action: DeadLetterAction,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<()> {
    let pool = outbox_host::store::connect(&config.settings.database_url, 2).await?;
    outbox_host::store::migrate(&pool).await?;
    let (needed, command) = match action {
        DeadLetterAction::List => (Role::Viewer, "dead-letter list"),
        DeadLetterAction::Replay => (Role::Admin, "dead-letter replay"),
        DeadLetterAction::Drop => (Role::Admin, "dead-letter drop"),
    };
    let operator = super::require(&pool, needed, command).await?;
    if action != DeadLetterAction::List && !selection.filtered() && !selection.all {
        anyhow::bail!(
            "{command} without --queue, --id or --event applies to every dead letter of every queue: add --all to mean it (nothing was changed)"
        );
    }
    let store = outbox_host::receive::DeadLetters::connect(&config.settings).await?;
    let handler_queues: Vec<String> = config.routes.handlers.keys().cloned().collect();
    let queues: Vec<String> = match &selection.queue {
        Some(q) => {
            // A queue no longer bound to a handler may still hold dead letters; any other
            // unknown name is a mistake.
            // Without any routes (the routes file could not be read) nothing can be judged.
            let nothing_known = handler_queues.is_empty() && config.routes.route_table().rules().is_empty();
            let known = nothing_known
                || handler_queues.contains(q)
                || config
                    .routes
                    .route_table()
                    .rules()
                    .iter()
                    .any(|r| r.queues.contains(q))
                || !store.list(std::slice::from_ref(q)).await?.is_empty();
            if !known {
                anyhow::bail!(
                    "unknown queue {q:?}: no route or handler names it and it has no dead letters; handler-bound queues: {}",
                    handler_queues.join(", ")
                );
            }
            vec![q.clone()]
        }
        None if handler_queues.is_empty() => anyhow::bail!(
            "no handler-bound queue is known (the routes file binds none, or could not be read): give --queue"
        ),
        None => handler_queues,
    };
    let letters: Vec<outbox_host::receive::DeadLetter> = store
        .list(&queues)
        .await?
        .into_iter()
        .filter(|l| {
            selection
                .id
                .as_ref()
                .is_none_or(|id| &l.dead_letter_id == id)
        })
        .filter(|l| selection.event_id.is_none_or(|e| l.event_id == Some(e)))
        .collect();
    if action != DeadLetterAction::List && letters.is_empty() && selection.filtered() {
        anyhow::bail!(
            "no dead letter matches{}{}{} (nothing was changed)",
            selection
                .queue
                .as_deref()
                .map(|q| format!(" queue {q}"))
                .unwrap_or_default(),
            selection
                .id
                .as_deref()
                .map(|i| format!(" id {i}"))
                .unwrap_or_default(),
            selection
                .event_id
                .map(|e| format!(" event {e}"))
                .unwrap_or_default()
        );
    }
    if action != DeadLetterAction::List && !dry_run && selection.all && !selection.yes {
        let count = letters.len();
        super::confirm::confirm_or_refuse(
            command,
            &format!("{command}: {count} dead letters?"),
            &format!("{command} --all would change {count} dead letters: add --yes to go on"),
            true,
        )?;
    }
    let mut done = Vec::new();
    if !dry_run {
        for letter in &letters {
            match action {
                DeadLetterAction::List => {}
                DeadLetterAction::Replay => {
                    let id = store.replay(letter).await?;
                    eprintln!(
                        "replayed {} ({}) to {} as {id}",
                        letter.dead_letter_id, letter.event_type, letter.queue
                    );
                    if letter.attempts > 1 {
                        eprintln!("warning: event {:?} already ran {} times; make sure its handler is fixed, or it will dead-letter again", letter.event_id, letter.attempts);
                    }
                }
                DeadLetterAction::Drop => store.drop_letter(letter).await?,
            }
            done.push(letter.dead_letter_id.clone());
        }
    }
    if action != DeadLetterAction::List {
        let arguments = serde_json::json!({
            "queue": selection.queue,
            "id": selection.id,
            "event_id": selection.event_id,
        });
        let affected = if dry_run { letters.len() } else { done.len() };
        outbox_host::store::record_audit(
            &pool,
            &operator,
            command,
            &arguments,
            dry_run,
            affected as u64,
        )
        .await?;
    }
    if json {
        out!(
            "{}",
            serde_json::json!({
                "action": format!("{action:?}").to_lowercase(),
                "dry_run": dry_run && action != DeadLetterAction::List,
                "selected": letters,
                "changed": done,
            })
        );
        return Ok(());
    }
    if letters.is_empty() {
        out!("no dead letters in {}", queues.join(", "));
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "queue",
        "dead letter",
        "event",
        "type",
        "attempts",
        "dead at",
        "error",
    ]);
    for l in &letters {
        t.add_row(vec![
            Cell::new(&l.queue),
            Cell::new(&l.dead_letter_id),
            Cell::new(l.event_id.map(|e| e.to_string()).unwrap_or_default()),
            Cell::new(&l.event_type),
            Cell::new(l.attempts),
            Cell::new(&l.dead_at),
            Cell::new(&l.error),
        ]);
    }
    out!("{t}");
    match (action, dry_run) {
        (DeadLetterAction::List, _) => {}
        (_, true) => out!(
            "dry run: {} entries would be {}",
            letters.len(),
            if action == DeadLetterAction::Replay {
                "replayed"
            } else {
                "dropped"
            }
        ),
        (_, false) => out!(
            "{} entries {}",
            done.len(),
            if action == DeadLetterAction::Replay {
                "replayed"
            } else {
                "dropped"
            }
        ),
    }
    Ok(())
}
