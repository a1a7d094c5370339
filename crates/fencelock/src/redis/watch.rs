//! Wake-up on release, so that a waiter retries about one round trip after the release instead
//! of after its retry delay. Polling with jittered delays stays as the fallback (a node down, a
//! message lost with a broken connection, a waiter named in line that has died).
//!
//! Two kinds of channel, on one pub/sub connection per node and client:
//! - the *release channel* of a key: the release script publishes there on every release. Waiters
//!   that do not queue (several keys at once) subscribe to it for as long as they wait;
//! - the client's *turn channel*: a waiter in a key's line (see `queue.rs`) is named by the
//!   release script when its turn comes, on the channel of its client, with its waiter id as the
//!   message. One release wakes one waiter and reaches one connection per node, not the herd.
//!   The client subscribes to it once, with the connection, so waiting in line costs no
//!   SUBSCRIBE/UNSUBSCRIBE round trips.
//!
//! When a pub/sub connection breaks, the next wait opens a new one and subscribes again to the
//! turn channel and to every release channel still wanted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, OnceCell};

use super::scripts;

/// Who waits on which channel. On the turn channel each waiter has its id; on a release channel
/// every subscriber wakes. Ordered, so that a new connection subscribes in one order (the
/// simulation replays a seed exactly).
type Waiters = Arc<Mutex<BTreeMap<String, Vec<Waiter>>>>;

struct Waiter {
    /// The waiter id a turn message must name; `None` on a release channel.
    id: Option<Arc<str>>,
    notify: Arc<Notify>,
}

/// The pub/sub connections of one client, one per node, opened on first use.
pub(crate) struct ReleaseWatch {
    clients: Vec<super::conn::Target>,
    /// Per node, the hash tag of a cluster node (`{fencelock}`): its scripts publish a release
    /// of `key` on the release channel of `{tag}key`, the key's name there.
    tags: Vec<Option<String>>,
    sinks: Vec<Mutex<Arc<OnceCell<PubSubSink>>>>,
    waiters: Waiters,
    /// This client's name in waiter ids, and its turn channel.
    client_id: String,
    turn_channel: String,
}

impl std::fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseWatch")
            .field("nodes", &self.clients.len())
            .field("turn_channel", &self.turn_channel)
            .finish_non_exhaustive()
    }
}

/// An interest in wake-ups; dropping it ends the interest (and unsubscribes release channels
/// nobody else wants).
pub(crate) struct Subscription {
    watch: Arc<ReleaseWatch>,
    channels: Vec<String>,
    notify: Arc<Notify>,
}

impl ReleaseWatch {
    pub(crate) fn new(
        clients: Vec<super::conn::Target>,
        tags: Vec<Option<String>>,
    ) -> ReleaseWatch {
        let sinks = clients
            .iter()
            .map(|_| Mutex::new(Arc::new(OnceCell::new())))
            .collect();
        let client_id = format!("{:016x}", fastrand::u64(..));
        ReleaseWatch {
            clients,
            tags,
            sinks,
            waiters: Arc::default(),
            turn_channel: scripts::turn_channel(&client_id),
            client_id,
        }
    }

    /// The id under which a waiter of this client queues: the client's id, a dot, then `wait`
    /// (the release script finds the turn channel from the part before the dot).
    pub(crate) fn waiter_id(&self, wait: u64) -> String {
        format!("{}.{wait:016x}", self.client_id)
    }

    /// Wakes the waiter `id` (from [`ReleaseWatch::waiter_id`]) when a release names it. The
    /// turn channel is subscribed with the connection, so after the first wait this does no
    /// I/O; the first call waits at most `timeout` for the connections.
    pub(crate) async fn await_turn(self: &Arc<Self>, id: &str, timeout: Duration) -> Subscription {
        let notify = Arc::new(Notify::new());
        self.waiters
            .lock()
            .expect("waiters mutex poisoned")
            .entry(self.turn_channel.clone())
            .or_default()
            .push(Waiter {
                id: Some(Arc::from(id)),
                notify: notify.clone(),
            });
        self.connect_all(&[], timeout).await;
        Subscription {
            watch: self.clone(),
            channels: vec![self.turn_channel.clone()],
            notify,
        }
    }

    /// Wakes on every release of `keys`, waiting at most `timeout` for the subscriptions.
    /// Nodes that fail are skipped: polling covers them.
    pub(crate) async fn subscribe(
        self: &Arc<Self>,
        keys: &[String],
        timeout: Duration,
    ) -> Subscription {
        let channels: Vec<String> = keys.iter().map(|k| scripts::release_channel(k)).collect();
        let notify = Arc::new(Notify::new());
        let mut fresh = Vec::new();
        {
            let mut map = self.waiters.lock().expect("waiters mutex poisoned");
            for ch in &channels {
                let list = map.entry(ch.clone()).or_default();
                if list.is_empty() {
                    fresh.push(ch.clone());
                }
                list.push(Waiter {
                    id: None,
                    notify: notify.clone(),
                });
            }
        }
        self.connect_all(&fresh, timeout).await;
        Subscription {
            watch: self.clone(),
            channels,
            notify,
        }
    }

    /// Makes sure every node's pub/sub connection is up (a new one subscribes to the turn
    /// channel and every channel wanted) and subscribes `fresh` on the ones that were up already.
    async fn connect_all(self: &Arc<Self>, fresh: &[String], timeout: Duration) {
        let subs = (0..self.clients.len()).map(|i| async move {
            let Ok((mut sink, new)) = self.sink(i).await else {
                return;
            };
            if new {
                return;
            }
            for ch in fresh {
                if sink.subscribe(self.on_node(i, ch)).await.is_err() {
                    self.forget_sink(i);
                    return;
                }
            }
        });
        let _ = tokio::time::timeout(timeout, futures_util::future::join_all(subs)).await;
    }

    /// Node `i`'s pub/sub connection, and whether it was opened by this call.
    async fn sink(self: &Arc<Self>, i: usize) -> redis::RedisResult<(PubSubSink, bool)> {
        let cell = self.sinks[i].lock().expect("sink mutex poisoned").clone();
        if let Some(sink) = cell.get() {
            return Ok((sink.clone(), false));
        }
        let mut opened = false;
        let sink = cell
            .get_or_try_init(|| async {
                let (mut sink, mut stream) =
                    crate::sim::pubsub(&self.clients[i].get()?).await?.split();
                let waiters = self.waiters.clone();
                let watch = Arc::downgrade(self);
                let turn = self.turn_channel.clone();
                let tagged = self.tags[i]
                    .as_ref()
                    .map(|tag| scripts::release_channel(tag));
                tokio::spawn(async move {
                    while let Some(msg) = stream.next().await {
                        let map = waiters.lock().expect("waiters mutex poisoned");
                        let name = msg.get_channel_name();
                        // A cluster node's release channel, as the waiters know it.
                        let untagged = tagged
                            .as_deref()
                            .and_then(|t| Some(scripts::release_channel(name.strip_prefix(t)?)));
                        let Some(list) = map.get(untagged.as_deref().unwrap_or(name)) else {
                            continue;
                        };
                        let named =
                            (msg.get_channel_name() == turn).then(|| msg.get_payload_bytes());
                        // A stored permit, not a wake-up of current waiters only: a release
                        // that lands between an attempt and the wait is not missed.
                        list.iter()
                            .filter(|w| match (&w.id, named) {
                                (Some(id), Some(name)) => id.as_bytes() == name,
                                _ => true,
                            })
                            .for_each(|w| w.notify.notify_one());
                    }
                    // The connection is gone: the next wait opens a new one.
                    if let Some(watch) = watch.upgrade() {
                        watch.forget_sink(i);
                    }
                });
                let mut channels = vec![self.turn_channel.clone()];
                channels.extend(
                    self.waiters
                        .lock()
                        .expect("waiters mutex poisoned")
                        .keys()
                        .filter(|ch| **ch != self.turn_channel)
                        .map(|ch| self.on_node(i, ch)),
                );
                sink.subscribe(&channels).await?;
                opened = true;
                Ok::<_, redis::RedisError>(sink)
            })
            .await?;
        Ok((sink.clone(), opened))
    }

    /// `channel` as node `i` publishes it: a release channel of a cluster node names the tagged
    /// key.
    fn on_node(&self, i: usize, channel: &str) -> String {
        match (
            &self.tags[i],
            channel.strip_prefix(scripts::RELEASE_CHANNEL_PREFIX),
        ) {
            (Some(tag), Some(key)) => scripts::release_channel(&format!("{tag}{key}")),
            _ => channel.to_string(),
        }
    }

    fn forget_sink(&self, i: usize) {
        *self.sinks[i].lock().expect("sink mutex poisoned") = Arc::new(OnceCell::new());
    }
}

impl Subscription {
    /// Waits until a wake-up arrives, or `delay` passes; returns whether a wake-up came.
    pub(crate) async fn wait(&self, delay: Duration) -> bool {
        tokio::time::timeout(delay, self.notify.notified())
            .await
            .is_ok()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut gone = Vec::new();
        {
            let mut map = self.watch.waiters.lock().expect("waiters mutex poisoned");
            for ch in &self.channels {
                if let Some(list) = map.get_mut(ch) {
                    list.retain(|w| !Arc::ptr_eq(&w.notify, &self.notify));
                    if list.is_empty() {
                        map.remove(ch);
                        // The turn channel stays subscribed for the client's next wait.
                        if *ch != self.watch.turn_channel {
                            gone.push(ch.clone());
                        }
                    }
                }
            }
        }
        if gone.is_empty() {
            return;
        }
        // Drop does no I/O: a task unsubscribes.
        let watch = self.watch.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for i in 0..watch.clients.len() {
                    let cell = watch.sinks[i].lock().expect("sink mutex poisoned").clone();
                    if let Some(sink) = cell.get() {
                        let mut sink = sink.clone();
                        for ch in &gone {
                            // Someone may have subscribed again meanwhile; keep theirs.
                            let still_wanted = watch
                                .waiters
                                .lock()
                                .expect("waiters mutex poisoned")
                                .contains_key(ch);
                            if !still_wanted {
                                let _ = sink.unsubscribe(watch.on_node(i, ch)).await;
                            }
                        }
                    }
                }
            });
        }
    }
}
