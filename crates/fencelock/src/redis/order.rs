//! Keeps a release behind the acquisition it undoes, on each node.
//!
//! An acquisition returns once a quorum granted; its requests to the other nodes finish in the
//! background. Commands on one node's connection run in the order they were handed to it, so a
//! release handed over after the acquisition's request cannot overtake it: it needs no wait.
//! But a request may still be on its way to the connection when the round returns: waiting for
//! the connection to open, for the other nodes to report the TTLs in use (a node in restart
//! quarantine), or for the TTL announcement a plain grant sends ahead (`pure/ahead.rs`: about
//! once per TTL and connection, a round trip before its `SET`); and after `NOSCRIPT` it sends
//! its script again, a second command that a release handed over meanwhile would precede. A release of the same owner value sent before such a
//! command would find nothing to delete there, and the late `SET` would leave our key for a
//! whole TTL.
//!
//! So each request of an acquisition round says where it stands ([`Sent`]): not yet handed to
//! its connection, handed (the release may follow it on the connection at once), passed (a
//! release followed it: it must send nothing more, and after `NOSCRIPT` it gives up instead of
//! sending again), or sending again. A round that returns with requests in flight registers
//! them here, by owner value, until each finishes (answered, failed, or dropped at its
//! deadline), and a release of that token, on that node, waits only for those not handed yet
//! (or sending again), and marks the handed ones passed. Both are bounded by the node timeout,
//! and the acquisition's deadline comes first. Nothing is registered on the common path: a
//! round whose requests all answered, or one that waited for them (a failed acquisition does).

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Not yet handed to its connection (connecting, or waiting for the quarantine's verdict).
const WAITING: u8 = 0;
/// Its command is in its connection's queue: a later command on the connection runs after it.
const HANDED: u8 = 1;
/// A release of its token was handed after it: it must not send another command.
const PASSED: u8 = 2;
/// Sending again (after `NOSCRIPT`): a release must wait until it is done.
const RESENDING: u8 = 3;

/// Where each request of one acquisition round stands, by its position in the round.
#[derive(Debug)]
pub(crate) struct Sent(Box<[AtomicU8]>);

impl Sent {
    /// A round of `n` requests, none handed yet.
    pub(crate) fn new(n: usize) -> Arc<Sent> {
        Arc::new(Sent((0..n).map(|_| AtomicU8::new(WAITING)).collect()))
    }
}

/// One request's place in its round's [`Sent`]; none for the rounds that are not ordered.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slot(Option<(Arc<Sent>, usize)>);

/// A request sent its command again after a release passed it.
#[derive(Debug)]
pub(crate) struct Passed;

impl Slot {
    pub(crate) fn new(sent: &Arc<Sent>, pos: usize) -> Slot {
        Slot(Some((sent.clone(), pos)))
    }

    /// Whether both name the same request (or both none).
    fn same(&self, other: &Slot) -> bool {
        match (&self.0, &other.0) {
            (Some((a, i)), Some((b, j))) => Arc::ptr_eq(a, b) && i == j,
            (None, None) => true,
            _ => false,
        }
    }

    fn state(&self) -> Option<&AtomicU8> {
        self.0.as_ref().map(|(sent, pos)| &sent.0[*pos])
    }

    /// The request's command is in its connection's queue (called after its first poll).
    /// Returns whether it changed (a release waiting for it can go).
    pub(crate) fn handed(&self) -> bool {
        self.state().is_some_and(|s| {
            s.compare_exchange(WAITING, HANDED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    /// The request is about to send another command (its script again, after `NOSCRIPT`).
    ///
    /// # Errors
    ///
    /// [`Passed`] when a release of its token already followed it on the connection: the
    /// request must give up (its first command did nothing, and the lock is being released).
    pub(crate) fn resend(&self) -> Result<(), Passed> {
        let Some(state) = self.state() else {
            return Ok(());
        };
        let mut current = state.load(Ordering::Acquire);
        loop {
            if current == PASSED {
                return Err(Passed);
            }
            match state.compare_exchange(current, RESENDING, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => current = now,
            }
        }
    }
}

/// A registered request: its token and its place in its round.
#[derive(Debug)]
struct Entry {
    token: Arc<str>,
    slot: Slot,
}

impl Entry {
    /// Whether a release of its token may go now: the request is in the connection's queue
    /// (then it is marked passed, so that it sends nothing more) or done.
    fn let_pass(&self) -> bool {
        let Some(state) = self.slot.state() else {
            // Not an ordered round: wait until it finishes, as before.
            return false;
        };
        let mut current = state.load(Ordering::Acquire);
        loop {
            match current {
                PASSED => return true,
                WAITING | RESENDING => return false,
                _ => {}
            }
            match state.compare_exchange(current, PASSED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => current = now,
            }
        }
    }
}

/// The acquisition requests of one node still in flight after their round returned.
#[derive(Debug, Default)]
pub(crate) struct Stragglers {
    /// One entry per request.
    entries: Mutex<Vec<Entry>>,
    /// How many entries there are: a release reads it without the lock.
    count: AtomicUsize,
    /// Signalled when a request finishes or is handed to its connection.
    finished: Notify,
}

/// A registered request: finished when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    node: Arc<Stragglers>,
    token: Arc<str>,
    slot: Slot,
}

impl Stragglers {
    /// Registers an acquisition request of `token` as in flight, until the registration drops.
    /// `slot`: where the request stands (see [`Sent`]).
    pub(crate) fn register(self: &Arc<Self>, token: &Arc<str>, slot: Slot) -> Registration {
        let mut entries = self.entries.lock().expect("stragglers mutex poisoned");
        entries.push(Entry {
            token: token.clone(),
            slot: slot.clone(),
        });
        self.count.fetch_add(1, Ordering::Release);
        Registration {
            node: self.clone(),
            token: token.clone(),
            slot,
        }
    }

    /// Wakes the releases waiting here: a request was handed to its connection.
    pub(crate) fn handed(&self) {
        if self.any() {
            self.finished.notify_waiters();
        }
    }

    /// Whether any request is registered (a release that finds none sends at once).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Whether a request of `token` must still be waited for; marks those a release may follow
    /// as passed.
    fn holds(&self, token: &str) -> bool {
        let entries = self.entries.lock().expect("stragglers mutex poisoned");
        let mut wait = false;
        for e in entries.iter().filter(|e| &*e.token == token) {
            // Every entry is looked at (and marked), not only up to the first to wait for.
            wait |= !e.let_pass();
        }
        wait
    }

    /// Waits until every acquisition request of `token` on this node is in the connection's
    /// queue or done, and marks the queued ones passed: a release sent after this cannot be
    /// overtaken by them.
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
        let mut entries = self.node.entries.lock().expect("stragglers mutex poisoned");
        if let Some(pos) = entries
            .iter()
            .position(|e| Arc::ptr_eq(&e.token, &self.token) && e.slot.same(&self.slot))
        {
            entries.swap_remove(pos);
            self.node.count.fetch_sub(1, Ordering::Release);
        }
        drop(entries);
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
        let first = node.register(&mine, Slot::default());
        let second = node.register(&mine, Slot::default());
        let _theirs = node.register(&other, Slot::default());
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

    #[tokio::test]
    async fn a_release_follows_a_request_in_its_connections_queue_and_stops_its_resend() {
        let node = Arc::new(Stragglers::default());
        let token: Arc<str> = "mine".into();
        let sent = Sent::new(2);
        let (queued, connecting) = (Slot::new(&sent, 0), Slot::new(&sent, 1));
        assert!(queued.handed());
        let a = node.register(&token, queued.clone());
        let b = node.register(&token, connecting.clone());
        let waiting = tokio::spawn({
            let node = node.clone();
            async move { node.after("mine").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "released before a request reached its connection"
        );
        // The request still connecting is handed over: the release may go, without waiting for
        // either answer.
        assert!(connecting.handed());
        node.handed();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        // Both were passed by the release: neither may send its script again.
        assert!(queued.resend().is_err());
        assert!(connecting.resend().is_err());
        drop(b);
        // A request that sends again before a release comes holds the release until it is done.
        let sent = Sent::new(1);
        let again = Slot::new(&sent, 0);
        assert!(again.handed());
        assert!(again.resend().is_ok());
        let c = node.register(&token, again.clone());
        let waiting = tokio::spawn({
            let node = node.clone();
            async move { node.after("mine").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "released while a resend was on its way"
        );
        drop(c);
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }
}
