//! Run the outbox dispatcher inside your own tokio application.
//!
//! `cargo run -p outbox-host --example embedded` with PostgreSQL and Redis running: it shares the
//! application's pool, publishes one event in an application transaction, waits until it is
//! dispatched, and shuts the host down.

use std::time::Duration;

use outbox_host::config::Config;
use outbox_host::{publish, Host, NewEvent};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::from_env()?;
    let pool = sqlx::PgPool::connect(&config.settings.database_url).await?;
    let host = Host::builder()
        .config(config)
        .pool(pool.clone())
        .start()
        .await?;

    // The application's own transaction: the business change and the event commit together.
    let mut tx = pool.begin().await?;
    let id = publish(
        &mut tx,
        NewEvent::new("mail.welcome", serde_json::json!({"user": 42})),
    )
    .await?;
    tx.commit().await?;

    for _ in 0..100 {
        let event = outbox_host::store::traced_event(&pool, id).await?;
        if event.is_some_and(|e| e.status == "done") {
            println!("event {id} handed to outbox.mail");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host.shutdown().await;
    Ok(())
}
