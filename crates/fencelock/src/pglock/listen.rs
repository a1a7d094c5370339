//! The wake-ups of waiters: one connection per backend that `LISTEN`s on the channel of every
//! resource someone waits for, and wakes the waiters of a channel when a release (or a waiter
//! leaving the line) `NOTIFY`s it.
//!
//! A waiter subscribes before its first attempt, so a release after that attempt wakes it (the
//! wake-up is a stored permit: one that arrives while the waiter is busy is not lost). When the
//! connection ends (a server restart, `pg_terminate_backend`), every waiter is woken: it
//! re-checks, and its next wait subscribes through a new connection. Notifications sent while
//! no connection listened are lost; the re-check on the connection's end and each waiter's
//! heartbeat (it refreshes its place in line at a third of the TTL, and re-checks then) cover
//! them.
//!
//! `Drop` of a [`Subscription`] does no I/O: it hands its channels to a task that sends the
//! `UNLISTEN` once no waiter is left on them. `LISTEN` and `UNLISTEN` are sent under one
//! mutex, so they reach the server in the order the subscriber counts changed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, Notify};
use tokio_postgres::{AsyncMessage, NoTls};

/// The subscriptions of one channel: each subscription's id and wake-up.
type Subscribers = Vec<(u64, Arc<Notify>)>;

/// The waiters of each channel, shared with the task that reads the connection.
#[derive(Default)]
struct Waiters {
    by_channel: Mutex<HashMap<String, Subscribers>>,
    closed: AtomicBool,
    next_id: AtomicU64,
}

impl Waiters {
    fn wake(&self, channel: &str) {
        let map = self.by_channel.lock().unwrap_or_else(|e| e.into_inner());
        for (_, notify) in map.get(channel).into_iter().flatten() {
            notify.notify_one();
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let map = self.by_channel.lock().unwrap_or_else(|e| e.into_inner());
        for (_, notify) in map.values().flatten() {
            notify.notify_one();
        }
    }
}

/// One listening connection.
pub(super) struct Listener {
    client: tokio_postgres::Client,
    waiters: Arc<Waiters>,
    /// Serializes `LISTEN` and `UNLISTEN` with the changes of the subscriber counts.
    commands: tokio::sync::Mutex<()>,
    leaving: mpsc::UnboundedSender<(u64, Vec<String>)>,
    timeout: Duration,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

/// A waiter's wake-ups on the channels of its resources; dropping it unsubscribes.
pub(super) struct Subscription {
    listener: Arc<Listener>,
    id: u64,
    channels: Vec<String>,
    notify: Arc<Notify>,
}

impl Listener {
    /// Opens a listening connection with `config`; `timeout` bounds each command.
    pub(super) async fn open(
        config: &tokio_postgres::Config,
        timeout: Duration,
        label: Arc<str>,
    ) -> Result<Arc<Listener>, tokio_postgres::Error> {
        let (client, mut connection) = config.connect(NoTls).await?;
        let waiters = Arc::new(Waiters::default());
        let reader = waiters.clone();
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => reader.wake(n.channel()),
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(database = %label, %error, "PostgreSQL listening connection ended");
                        break;
                    }
                }
            }
            reader.close();
        });
        let (leaving, mut left) = mpsc::unbounded_channel::<(u64, Vec<String>)>();
        let listener = Arc::new(Listener {
            client,
            waiters,
            commands: tokio::sync::Mutex::new(()),
            leaving,
            timeout,
        });
        let weak: Weak<Listener> = Arc::downgrade(&listener);
        tokio::spawn(async move {
            while let Some((id, channels)) = left.recv().await {
                let Some(listener) = weak.upgrade() else {
                    break;
                };
                listener.unsubscribe(id, &channels).await;
            }
        });
        Ok(listener)
    }

    /// Whether the connection ended: a new one is needed.
    pub(super) fn is_closed(&self) -> bool {
        self.waiters.closed.load(Ordering::SeqCst) || self.client.is_closed()
    }

    /// The channel names of `resources` (the server computes them: `fencelock_channel_v1`).
    async fn channels(&self, resources: &[String]) -> Result<Vec<String>, String> {
        let rows = tokio::time::timeout(
            self.timeout,
            self.client.query(super::sql::CHANNELS, &[&resources]),
        )
        .await
        .map_err(|_| "the channel names were not read in time".to_string())?
        .map_err(|e| e.to_string())?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    /// Subscribes to the releases of `resources`.
    ///
    /// # Errors
    ///
    /// The reason, when the `LISTEN` failed or timed out.
    pub(super) async fn subscribe(
        self: &Arc<Self>,
        resources: &[String],
    ) -> Result<Subscription, String> {
        let mut channels = self.channels(resources).await?;
        channels.sort();
        channels.dedup();
        let id = self.waiters.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        let _serial = self.commands.lock().await;
        let mut fresh = Vec::new();
        {
            let mut map = self
                .waiters
                .by_channel
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for channel in &channels {
                let entry = map.entry(channel.clone()).or_default();
                if entry.is_empty() {
                    fresh.push(channel.clone());
                }
                entry.push((id, notify.clone()));
            }
        }
        let subscription = Subscription {
            listener: self.clone(),
            id,
            channels,
            notify,
        };
        if !fresh.is_empty() {
            // The names are `fencelock_` and 32 hex digits: nothing to quote.
            let listen: String = fresh.iter().map(|c| format!("LISTEN {c};")).collect();
            let sent = tokio::time::timeout(self.timeout, self.client.batch_execute(&listen)).await;
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err("LISTEN was not answered in time".to_string()),
            }
        }
        Ok(subscription)
    }

    async fn unsubscribe(&self, id: u64, channels: &[String]) {
        let _serial = self.commands.lock().await;
        let mut idle = Vec::new();
        {
            let mut map = self
                .waiters
                .by_channel
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for channel in channels {
                if let Some(entry) = map.get_mut(channel) {
                    entry.retain(|(i, _)| *i != id);
                    if entry.is_empty() {
                        map.remove(channel);
                        idle.push(channel.clone());
                    }
                }
            }
        }
        if !idle.is_empty() && !self.is_closed() {
            let unlisten: String = idle.iter().map(|c| format!("UNLISTEN {c};")).collect();
            let _ = tokio::time::timeout(self.timeout, self.client.batch_execute(&unlisten)).await;
        }
    }
}

impl Subscription {
    /// Waits for a wake-up (or one that came since the last wait), at most `limit`. Returns
    /// whether the listening connection is still open.
    pub(super) async fn wait(&self, limit: Duration) -> bool {
        let _ = tokio::time::timeout(limit, self.notify.notified()).await;
        !self.listener.is_closed()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let channels = std::mem::take(&mut self.channels);
        let _ = self.listener.leaving.send((self.id, channels));
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}
