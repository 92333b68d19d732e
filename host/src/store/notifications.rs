//! The process's one `LISTEN` session: every channel the host follows (new events for the
//! dispatcher, queue pauses for the receivers) on one PostgreSQL connection.
//!
//! Why one: PostgreSQL (up to 16 at least) signals every session of a database that listens on
//! any channel whenever a transaction that notified commits, whatever the channel, and each
//! signalled session wakes up to read the notification queue. A host with a listening session
//! per follower paid a wake-up of each for every published event: the pause follower's session
//! alone used about 27 µs of PostgreSQL CPU per event at 1,000 events/s, for notifications it
//! then ignored.
//!
//! Owns the listening connection, its reconnection with backoff, and the fan-out of each
//! notification to the subscribers of its channel. A [`Subscription`] is woken once the session
//! listens on its channel, on each notification of it, and once each time the session listens
//! again after it was lost (a notification may have been lost with the connection), so its
//! follower looks again and never sleeps through a change. Followers keep their own bounded
//! re-read (poll) for the time the session is away. This module never reads or writes a table.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::fault;
use crate::reconnect::{retry_delay, sleep_or_shutdown, Backoff};

/// The process's listening session, shared by its followers; the session ends when the last
/// clone and the last [`Subscription`] are dropped.
#[derive(Clone)]
pub struct Notifications {
    subscribe: mpsc::UnboundedSender<(&'static str, Arc<Notify>)>,
    _session: Arc<DropGuard>,
}

impl Notifications {
    /// Start the listening session on `pool`'s database (connected on the first subscription,
    /// so a process that follows nothing holds no connection).
    pub fn start(pool: PgPool) -> Self {
        let (subscribe, subscriptions) = mpsc::unbounded_channel();
        let gone = CancellationToken::new();
        tokio::spawn(listen(pool, subscriptions, gone.clone()));
        Self {
            subscribe,
            _session: Arc::new(gone.drop_guard()),
        }
    }

    /// Follow `channel`: the returned [`Subscription`] is woken once the session listens on it
    /// (from then on nothing committed is missed: read what it guards then), on each of its
    /// notifications, and once each time the session listens again after it was lost.
    /// Subscribing again to the same channel adds another subscriber. The subscription keeps
    /// the session alive as a handle does.
    pub fn subscribe(&self, channel: &'static str) -> Subscription {
        let notify = Arc::new(Notify::new());
        // The session task lives as long as this handle, so the send cannot fail.
        let _ = self.subscribe.send((channel, notify.clone()));
        Subscription {
            notify,
            _session: self.clone(),
        }
    }
}

/// One follower of one channel (see [`Notifications::subscribe`]); the session lives at least
/// as long as it does.
pub struct Subscription {
    notify: Arc<Notify>,
    _session: Notifications,
}

impl Subscription {
    /// Wait until notified (at once when a notification came since the last wait).
    pub async fn notified(&self) {
        self.notify.notified().await
    }
}

/// Who follows which channel; a subscriber whose [`Notify`] was dropped is forgotten.
#[derive(Default)]
struct Subscribers(HashMap<&'static str, Vec<Weak<Notify>>>);

impl Subscribers {
    /// Add a subscriber of `channel`; true when the channel is new (not yet listened on).
    fn add(&mut self, channel: &'static str, notify: &Arc<Notify>) -> bool {
        let new = !self.0.contains_key(channel);
        self.0
            .entry(channel)
            .or_default()
            .push(Arc::downgrade(notify));
        new
    }

    /// Notify `channel`'s subscribers (all channels' when `None`), forgetting dropped ones.
    fn notify(&mut self, channel: Option<&str>) {
        for (name, subscribers) in &mut self.0 {
            if channel.is_some_and(|c| c != *name) {
                continue;
            }
            subscribers.retain(|s| match s.upgrade() {
                Some(notify) => {
                    notify.notify_one();
                    true
                }
                None => false,
            });
        }
    }

    fn channels(&self) -> Vec<&'static str> {
        self.0.keys().copied().collect()
    }
}

/// The session: connect, `LISTEN` on every subscribed channel, fan notifications out; on a
/// lost connection wake every subscriber and reconnect with backoff. Returns when `gone` fires
/// (every [`Notifications`] handle was dropped).
async fn listen(
    pool: PgPool,
    mut subscriptions: mpsc::UnboundedReceiver<(&'static str, Arc<Notify>)>,
    gone: CancellationToken,
) {
    let mut subscribers = Subscribers::default();
    // Connect once something is followed.
    tokio::select! {
        _ = gone.cancelled() => return,
        first = subscriptions.recv() => match first {
            Some((channel, notify)) => {
                subscribers.add(channel, &notify);
            }
            None => return,
        },
    }
    let mut backoff = Backoff::new();
    loop {
        while let Ok((channel, notify)) = subscriptions.try_recv() {
            subscribers.add(channel, &notify);
        }
        let mut listener = match connect(&pool, &subscribers.channels()).await {
            Ok(listener) => listener,
            Err(e) => {
                let stop = backoff
                    .failed_with(fault::postgres_blip(&e), &gone, |delay| {
                        tracing::warn!(error = %e, retry_in = ?delay, "cannot LISTEN for notifications (new events, queue pauses); polling meanwhile")
                    })
                    .await;
                if stop {
                    return;
                }
                continue;
            }
        };
        if backoff.succeeded() {
            tracing::info!("listening for notifications again");
        }
        // Anything may have happened while no session listened.
        subscribers.notify(None);
        loop {
            tokio::select! {
                _ = gone.cancelled() => return,
                added = subscriptions.recv() => match added {
                    Some((channel, notify)) => {
                        if subscribers.add(channel, &notify) {
                            if let Err(e) = listener.listen(channel).await {
                                tracing::warn!(error = %e, channel, "LISTEN failed; reconnecting");
                                break;
                            }
                        }
                        notify.notify_one();
                    }
                    None => return,
                },
                // `try_recv`, not `recv`: `recv` reconnects by itself and says nothing of the
                // notifications lost meanwhile; here a lost session is re-established below,
                // and every subscriber is woken once it listens again.
                received = listener.try_recv() => match received {
                    Ok(Some(notification)) => subscribers.notify(Some(notification.channel())),
                    Ok(None) => {
                        tracing::warn!("lost the LISTEN connection; reconnecting");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "lost the LISTEN connection; reconnecting");
                        break;
                    }
                },
            }
        }
        drop(listener);
        if sleep_or_shutdown(retry_delay(1), &gone).await {
            return;
        }
    }
}

/// A listening connection on every one of `channels`.
async fn connect(pool: &PgPool, channels: &[&'static str]) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen_all(channels.iter().copied()).await?;
    Ok(listener)
}
