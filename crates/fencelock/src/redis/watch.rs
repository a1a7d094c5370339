//! Wake-up on release: waiters subscribe to the release channel of the keys they wait for; the
//! release script publishes on it, so a waiter retries about one round trip after the release
//! instead of after its retry delay. Polling with jittered delays stays as the fallback (a node
//! down, a message lost with a broken connection).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, OnceCell};

use super::scripts;

type Waiters = Arc<Mutex<HashMap<String, Vec<Arc<Notify>>>>>;

/// The pub/sub connections of one client, one per node, opened on first use.
pub(crate) struct ReleaseWatch {
    clients: Vec<redis::Client>,
    sinks: Vec<Mutex<Arc<OnceCell<PubSubSink>>>>,
    waiters: Waiters,
}

impl std::fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseWatch")
            .field("nodes", &self.clients.len())
            .finish_non_exhaustive()
    }
}

/// An interest in the release of some keys; dropping it unsubscribes.
pub(crate) struct Subscription {
    watch: Arc<ReleaseWatch>,
    channels: Vec<String>,
    notify: Arc<Notify>,
}

impl ReleaseWatch {
    pub(crate) fn new(clients: Vec<redis::Client>) -> ReleaseWatch {
        let sinks = clients
            .iter()
            .map(|_| Mutex::new(Arc::new(OnceCell::new())))
            .collect();
        ReleaseWatch {
            clients,
            sinks,
            waiters: Arc::default(),
        }
    }

    /// Subscribes to the release channels of `keys` on every node, waiting at most `timeout`
    /// for the confirmations. Nodes that fail are skipped: polling covers them.
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
                list.push(notify.clone());
            }
        }
        if !fresh.is_empty() {
            let subs = (0..self.clients.len()).map(|i| {
                let fresh = fresh.clone();
                async move {
                    let Ok(mut sink) = self.sink(i).await else {
                        return;
                    };
                    for ch in fresh {
                        if sink.subscribe(&ch).await.is_err() {
                            self.forget_sink(i);
                            return;
                        }
                    }
                }
            });
            let _ = tokio::time::timeout(timeout, futures_util::future::join_all(subs)).await;
        }
        Subscription {
            watch: self.clone(),
            channels,
            notify,
        }
    }

    async fn sink(self: &Arc<Self>, i: usize) -> redis::RedisResult<PubSubSink> {
        let cell = self.sinks[i].lock().expect("sink mutex poisoned").clone();
        let sink = cell
            .get_or_try_init(|| async {
                let (sink, mut stream) = self.clients[i].get_async_pubsub().await?.split();
                let waiters = self.waiters.clone();
                let watch = Arc::downgrade(self);
                tokio::spawn(async move {
                    while let Some(msg) = stream.next().await {
                        let map = waiters.lock().expect("waiters mutex poisoned");
                        if let Some(list) = map.get(msg.get_channel_name()) {
                            // A stored permit, not a wake-up of current waiters only: a release
                            // that lands between an attempt and the wait is not missed.
                            list.iter().for_each(|n| n.notify_one());
                        }
                    }
                    // The connection is gone: the next subscription opens a new one.
                    if let Some(watch) = watch.upgrade() {
                        watch.forget_sink(i);
                    }
                });
                Ok::<_, redis::RedisError>(sink)
            })
            .await?;
        Ok(sink.clone())
    }

    fn forget_sink(&self, i: usize) {
        *self.sinks[i].lock().expect("sink mutex poisoned") = Arc::new(OnceCell::new());
    }
}

impl Subscription {
    /// Waits until one of the keys is released, or `delay` passes.
    pub(crate) async fn wait(&self, delay: Duration) {
        let _ = tokio::time::timeout(delay, self.notify.notified()).await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut gone = Vec::new();
        {
            let mut map = self.watch.waiters.lock().expect("waiters mutex poisoned");
            for ch in &self.channels {
                if let Some(list) = map.get_mut(ch) {
                    list.retain(|n| !Arc::ptr_eq(n, &self.notify));
                    if list.is_empty() {
                        map.remove(ch);
                        gone.push(ch.clone());
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
                                let _ = sink.unsubscribe(ch).await;
                            }
                        }
                    }
                }
            });
        }
    }
}
