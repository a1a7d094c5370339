//! Keeps a release behind the acquisition it undoes, on each node.
//!
//! An acquisition returns once a quorum granted; its requests to the other nodes finish in the
//! background. Commands on one node's connection run in the order they were handed to it, so a
//! release handed over after the acquisition's request cannot overtake it. But a request may
//! still be on its way to the connection when the round returns: waiting for the connection to
//! open, for the other nodes to report the TTLs in use (a node in restart quarantine), or to send
//! its script again after `NOSCRIPT`. A release of the same owner token sent meanwhile would find
//! nothing to delete there, and the late `SET` would leave our key for a whole TTL.
//!
//! So a round that returns with requests in flight registers them here, by owner token, until
//! each finishes (answered, failed, or dropped at its deadline), and a release of that token
//! waits for them on that node before it sends. Both are bounded by the node timeout, and the
//! acquisition's deadline comes first. Nothing is registered on the common path: a round whose
//! requests all answered, or one that waited for them (a failed acquisition does).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The acquisition requests of one node still in flight after their round returned.
#[derive(Debug, Default)]
pub(crate) struct Stragglers {
    /// The owner tokens, one entry per request.
    tokens: Mutex<Vec<Arc<str>>>,
    /// How many entries `tokens` has: a release reads it without the lock.
    count: AtomicUsize,
    /// Signalled when a request finishes.
    finished: Notify,
}

/// A registered request: finished when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    node: Arc<Stragglers>,
    token: Arc<str>,
}

impl Stragglers {
    /// Registers an acquisition request of `token` as in flight, until the registration drops.
    pub(crate) fn register(self: &Arc<Self>, token: &Arc<str>) -> Registration {
        let mut tokens = self.tokens.lock().expect("stragglers mutex poisoned");
        tokens.push(token.clone());
        self.count.fetch_add(1, Ordering::Release);
        Registration {
            node: self.clone(),
            token: token.clone(),
        }
    }

    /// Whether any request is registered (a release that finds none sends at once).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    fn holds(&self, token: &str) -> bool {
        let tokens = self.tokens.lock().expect("stragglers mutex poisoned");
        tokens.iter().any(|t| &**t == token)
    }

    /// Waits until no acquisition request of `token` is in flight on this node.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only waits.
    pub(crate) async fn after(&self, token: &str) {
        loop {
            let finished = self.finished.notified();
            let mut finished = std::pin::pin!(finished);
            // Listen before looking, so that a request finishing in between is not missed.
            finished.as_mut().enable();
            if !self.holds(token) {
                return;
            }
            finished.await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut tokens = self.node.tokens.lock().expect("stragglers mutex poisoned");
        if let Some(pos) = tokens.iter().position(|t| Arc::ptr_eq(t, &self.token)) {
            tokens.swap_remove(pos);
            self.node.count.fetch_sub(1, Ordering::Release);
        }
        drop(tokens);
        self.node.finished.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_release_waits_for_its_own_token_only() {
        let node = Arc::new(Stragglers::default());
        assert!(!node.any());
        let (mine, other): (Arc<str>, Arc<str>) = ("mine".into(), "other".into());
        let first = node.register(&mine);
        let second = node.register(&mine);
        let _theirs = node.register(&other);
        assert!(node.any());
        // Another token's release does not wait.
        tokio::time::timeout(Duration::from_secs(5), node.after("third"))
            .await
            .unwrap();
        let waiting = tokio::spawn({
            let node = node.clone();
            async move { node.after("mine").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "released while a request was in flight"
        );
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }
}
