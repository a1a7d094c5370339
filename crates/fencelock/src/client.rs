//! The client: a thin facade over the backend (`backend.rs`). It owns the configuration, the
//! background release of dropped locks (the reaper) and `close`; the `Client` methods that take
//! locks are in `acquire.rs`, and everything a backend does is in `redis/` or `etcd/`.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::backend::{Backend, Held};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::node::NodeAddr;
use crate::pure::vote::Votes;
use crate::telemetry::Telemetry;

/// Takes locks on one Redis node (an efficiency lock), on a majority of N independent nodes
/// (Redlock), or on an etcd cluster. Cheap to clone: clones share connections.
///
/// ```no_run
/// # async fn demo() -> fencelock::Result<()> {
/// use fencelock::{Client, Config};
///
/// let client = Client::new(Config::new([
///     "redis://127.0.0.1:7001/0",
///     "redis://127.0.0.1:7002/0",
///     "redis://127.0.0.1:7003/0",
/// ]))?;
/// let lock = client.acquire("order:42").await?;
/// // ... work that must finish before lock.validity_deadline() ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Shared by the handles the program holds (clients, locks, waiters, the family), not by
    /// the background tasks: when the last one goes, the pending releases are flushed.
    _handle: Arc<LastHandle>,
}

/// Dropped with the program's last handle of a client: waits, within a bound, for the
/// releases still in the background (locks dropped without `release`, calls cut short), so
/// that a program whose `main` returns right after an early `?` leaves no key for its TTL.
struct LastHandle(Arc<Inner>);

impl Drop for LastHandle {
    fn drop(&mut self) {
        self.0.flush();
    }
}

/// A dropped lock to release: its keys and what it holds.
type Dropped = (Arc<[String]>, Held);

struct Inner {
    config: Config,
    /// The nodes, in configured order.
    nodes: Box<[NodeAddr]>,
    backend: Backend,
    reaper: std::sync::OnceLock<mpsc::UnboundedSender<(u64, Dropped)>>,
    /// Releases handed to the background and not finished yet (see [`Client::close`]).
    pending_releases: tokio::sync::watch::Sender<usize>,
    /// The same releases by number, for the drop of the last handle on a current-thread
    /// runtime, which sends them again from a thread of its own (`Inner::flush`).
    unreleased: std::sync::Mutex<std::collections::BTreeMap<u64, Dropped>>,
    next_release: std::sync::atomic::AtomicU64,
    /// The locks held, by task, to refuse a task that asks again (see `reentry.rs`).
    holdings: Arc<crate::reentry::Holdings>,
    /// Metrics and node events (see `telemetry.rs`).
    telemetry: Telemetry,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Builds a client. No I/O happens here: connections open on first use.
    ///
    /// An even number of Redis nodes is accepted, and works, but buys nothing: 4 nodes need a
    /// quorum of 3 and tolerate one failed node, as 3 nodes do. Use 3 or 5. The `fencelock` CLI
    /// warns once per command about an even count, and `fencelock doctor` reports it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the configuration is unusable: no nodes, a URL that does not
    /// parse, the same host:port listed twice, a TTL that leaves no validity after drift.
    pub fn new(config: Config) -> Result<Client> {
        let addrs = config.validate()?;
        let nodes = addrs.clone().into_boxed_slice();
        let backend = Backend::new(addrs, &config)?;
        // Votes name every Redis node; etcd's name the one member list.
        let voters = if nodes[0].scheme().is_redis() {
            nodes.len()
        } else {
            1
        };
        let telemetry = Telemetry::new(config.metrics_resource_label(), voters);
        let inner = Arc::new(Inner {
            config,
            nodes,
            backend,
            reaper: std::sync::OnceLock::new(),
            pending_releases: tokio::sync::watch::Sender::new(0),
            unreleased: std::sync::Mutex::default(),
            next_release: std::sync::atomic::AtomicU64::new(0),
            holdings: Arc::default(),
            telemetry,
        });
        Ok(Client {
            _handle: Arc::new(LastHandle(inner.clone())),
            inner,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The nodes, in configured order (display them: passwords are redacted).
    pub fn nodes(&self) -> &[NodeAddr] {
        &self.inner.nodes
    }

    /// How many nodes must grant: N/2+1 (1 for etcd, whose cluster decides by itself).
    pub fn quorum(&self) -> usize {
        self.inner.backend.quorum()
    }

    /// Opens the connection to every node now, instead of on first use, waiting at most the
    /// connect timeout. Useful in short-lived processes (a CLI), whose first request would
    /// otherwise spend part of its node timeout connecting. The votes say which nodes answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: connections still opening keep opening in the background.
    pub async fn connect(&self) -> Votes {
        self.inner.backend.connect().await
    }

    /// As [`connect`](Client::connect), but returns once a quorum of nodes is connected: one
    /// node that does not answer (paused, or behind a dropped route) does not cost every
    /// short-lived process the whole connect timeout. The votes of the nodes still connecting
    /// are pending.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: connections still opening keep opening in the background.
    pub async fn connect_quorum(&self) -> Votes {
        self.inner.backend.connect_quorum().await
    }

    /// The backend, for the methods that take locks (`acquire.rs`).
    /// The locks this client's tasks hold (see `reentry.rs`).
    pub(crate) fn holdings(&self) -> &Arc<crate::reentry::Holdings> {
        &self.inner.holdings
    }

    pub(crate) fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    /// What this client records (see `telemetry.rs`).
    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.inner.telemetry
    }

    /// Releases `resource` if `owner` (as [`Lock::owner`](crate::Lock::owner) gives it) still owns it. For tools
    /// that hand the owner value between processes; a program holding a [`Lock`](crate::Lock) calls
    /// [`Lock::release`](crate::Lock::release) instead.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the key does not hold this owner value on a quorum of nodes (wrong value,
    /// or it expired); [`Error::Unavailable`] when too many nodes failed to answer. On etcd the
    /// owner value is the lock key (`fencelock/<resource>/<lease>[.<use>]`): the release deletes the
    /// key (a key with a use number, on a lease that carries a client's consecutive locks) or
    /// revokes its lease, once the key is seen there; [`Error::Lost`] when the key is gone,
    /// [`Error::InvalidConfig`] for an owner value that is no key of `resource`.
    pub async fn release_by_owner(&self, resource: &str, owner: &str) -> Result<Votes> {
        let keys = check_resources(&[resource])?;
        let result = self.inner.backend.release_by_owner(&keys, owner).await;
        let telemetry = self.telemetry();
        telemetry.released(&telemetry.label(resource), &result, result.as_ref().ok());
        result
    }

    /// Extends `resource` to a fresh TTL if `owner` still owns it on a quorum.
    ///
    /// # Errors
    ///
    /// As [`Client::release_by_owner`].
    pub async fn extend_by_owner(&self, resource: &str, owner: &str) -> Result<Votes> {
        let keys = check_resources(&[resource])?;
        let result = self.inner.backend.extend_by_owner(&keys, owner).await;
        let telemetry = self.telemetry();
        telemetry.extended(&telemetry.label(resource), &result, result.as_ref().ok());
        result
    }

    /// Hands a dropped lock to a background task that releases it. `Drop` must not do I/O, so
    /// it only sends; without a runtime the TTL cleans up instead. [`Client::close`] waits for
    /// these releases.
    pub(crate) fn release_in_background(&self, keys: Arc<[String]>, held: Held) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = self
            .inner
            .next_release
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner
            .unreleased
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, (keys.clone(), held.clone()));
        let tx = self.inner.reaper.get_or_init(|| {
            let (tx, mut rx) = mpsc::unbounded_channel::<(u64, Dropped)>();
            let weak: std::sync::Weak<Inner> = Arc::downgrade(&self.inner);
            runtime.spawn(async move {
                while let Some((id, (keys, held))) = rx.recv().await {
                    let Some(inner) = weak.upgrade() else { break };
                    // Side by side, so that `close` waits for the slowest release, not the sum.
                    tokio::spawn(release_and_count(inner, id, keys, held));
                }
            });
            tx
        });
        self.inner.pending_releases.send_modify(|n| *n += 1);
        if let Err(mpsc::error::SendError((id, (keys, held)))) = tx.send((id, (keys, held))) {
            // The runtime the reaper ran on is gone (this client outlived it): use this one.
            runtime.spawn(release_and_count(self.inner.clone(), id, keys, held));
        }
    }

    /// Waits until the locks dropped without [`Lock::release`](crate::Lock::release) (by a `?` or a panic between
    /// acquire and release, or a [`LockGuard`](crate::LockGuard) dropped) have been released,
    /// until the releases that returned at a quorum have reached their other nodes, and on
    /// etcd until the lease revokes of calls cut short have run, for at most twice the node
    /// timeout.
    ///
    /// Dropping the program's last handle of the client (the last `Client` clone, `Lock`,
    /// `Waiter`, semaphore, read-write lock or election made from it) waits the same way, so
    /// that a `main` that returns early through a `?` leaves no key behind without `close`: on
    /// a multi-thread runtime (`#[tokio::main]`'s default) it blocks in place while the
    /// runtime's other threads release; on a current-thread runtime, whose only thread would
    /// never run them, it sends the dropped locks' releases again from a thread of its own,
    /// on fresh connections. Call `close` to wait at a point of your choosing (and for calls
    /// cut short on a current-thread runtime, which only `close` waits for there). What
    /// remains: a process killed by `SIGKILL` (or a crash that skips destructors) leaves its
    /// keys until their TTL, by design.
    ///
    /// ```no_run
    /// # async fn work(client: &fencelock::Client) -> fencelock::Result<()> { Ok(()) }
    /// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
    /// let result = work(&client).await; // may return early with a lock dropped
    /// client.close().await;
    /// result
    /// # }
    /// ```
    ///
    /// The client stays usable; locks still held are not touched. On Redis it also waits, within
    /// the same bound, for the late requests of acquisitions that returned at a majority, so
    /// that a process that takes a lock and exits (as `fencelock acquire` does) leaves it on
    /// every node that answers, not on a bare majority.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the releases go on in the background.
    pub async fn close(&self) {
        let bound = 2 * self.inner.config.node_timeout();
        let mut pending = self.inner.pending_releases.subscribe();
        // The releases that returned at a quorum: their other nodes' requests.
        let started = Instant::now();
        if !self.inner.backend.settle_releases(bound).await {
            tracing::warn!(
                ?bound,
                "close: releases still reaching their other nodes; their keys there expire by TTL"
            );
        }
        let left = bound.saturating_sub(started.elapsed());
        if tokio::time::timeout(left, pending.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!(
                pending = *pending.borrow(),
                ?bound,
                "close: releases still pending; their keys expire by TTL"
            );
        }
    }
}

/// Releases a dropped lock, counted until done (or until its task is dropped with its runtime).
async fn release_and_count(inner: Arc<Inner>, id: u64, keys: Arc<[String]>, held: Held) {
    struct Counted(Arc<Inner>, u64);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0
                .unreleased
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&self.1);
            self.0
                .pending_releases
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }
    let _counted = Counted(inner, id);
    held.release_quietly(&keys).await;
}

impl Inner {
    /// Background releases not finished: of dropped locks, and of the backend's own (calls cut
    /// short, releases that returned at a quorum).
    fn pending(&self) -> usize {
        *self.pending_releases.borrow() + self.backend.background_pending()
    }

    /// The last handle is gone: waits at most twice the node timeout for the pending releases.
    /// Their tasks run on the runtime's other threads, or on the blocking client's: this thread
    /// may block (inside a multi-thread runtime, with `block_in_place`, which lets the others
    /// run). A current-thread runtime runs them only when this thread yields, which it will not
    /// do before it stops (the end of `main`): the dropped locks are released again from a
    /// thread of its own, on fresh connections (`resend`).
    fn flush(&self) {
        if self.pending() == 0 {
            return;
        }
        let bound = 2 * self.config.node_timeout();
        let wait = || {
            let until = Instant::now() + bound;
            while self.pending() > 0 && Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            if self.pending() > 0 {
                tracing::warn!(
                    pending = self.pending(),
                    ?bound,
                    "last client handle dropped: releases still pending; their keys expire by TTL"
                );
            }
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Err(_) => wait(),
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            Ok(_) => self.resend(bound),
        }
    }

    /// Sends the releases of the dropped locks not released yet from a thread of its own, with a
    /// runtime and connections of its own, and waits for it at most `bound` (and a second for
    /// its connections). The same compare-and-delete by owner value: sent twice, it deletes once.
    /// A call cut short (`redis/undo.rs`) is not in the list: its keys expire by TTL.
    fn resend(&self, bound: std::time::Duration) {
        let locks: Vec<(Arc<[String]>, Held)> = self
            .unreleased
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        if locks.is_empty() {
            return;
        }
        let config = self.config.clone();
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("fencelock-flush".into())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async {
                    let Ok(backend) = config
                        .validate()
                        .and_then(|addrs| Backend::new(addrs, &config))
                    else {
                        return;
                    };
                    let releases = locks.iter().filter_map(|(keys, held)| {
                        let held = held.through(&backend)?;
                        Some(async move { held.release_quietly(keys).await })
                    });
                    let _ =
                        tokio::time::timeout(bound, futures_util::future::join_all(releases)).await;
                });
                let _ = done.send(());
            });
        let waited = spawned.is_ok()
            && finished
                .recv_timeout(bound + std::time::Duration::from_secs(1))
                .is_ok();
        if !waited {
            tracing::warn!(
                locks = locks_len(&self.unreleased),
                ?bound,
                "last client handle dropped: releases not confirmed; their keys expire by TTL"
            );
        }
    }
}

fn locks_len<T>(m: &std::sync::Mutex<std::collections::BTreeMap<u64, T>>) -> usize {
    m.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .len()
}

/// Checks a list of resources before any I/O: not empty, no empty or repeated name, and no
/// name inside fencelock's own key space (see [`crate::protocol::RESERVED_PREFIX`]).
pub(crate) fn check_resources<S: AsRef<str>>(resources: &[S]) -> Result<Arc<[String]>> {
    if resources.is_empty() {
        return Err(Error::config(
            "resources",
            "the list of resources is empty; name at least one",
        ));
    }
    let keys: Vec<String> = resources.iter().map(|r| r.as_ref().to_string()).collect();
    for (i, k) in keys.iter().enumerate() {
        if k.is_empty() {
            return Err(Error::config(
                "resource",
                "the resource name is empty; name what the lock protects, e.g. \"order:42\"",
            ));
        }
        if let Some(rest) = k.strip_prefix(crate::pure::RESERVED_PREFIX) {
            return Err(Error::config(
                "resource",
                format!(
                    "{k:?} lies in fencelock's own key space (names starting with {:?} hold its fence counters and waiting lines), where a lock would break other locks; rename it, e.g. {:?}",
                    crate::pure::RESERVED_PREFIX,
                    format!("app:{rest}")
                ),
            ));
        }
        if keys[..i].contains(k) {
            return Err(Error::config(
                "resources",
                format!("{k:?} is listed twice; name each resource once"),
            ));
        }
    }
    Ok(keys.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn names_in_fencelocks_own_key_space_are_refused() {
        for name in [
            "fencelock:fence:X",
            "fencelock:queue:X",
            "fencelock:queue-lease:X",
            "fencelock:waiting:X",
            "fencelock:",
        ] {
            let err = check_resources(&[name]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{name}");
            assert!(err.to_string().contains("key space"), "{err}");
            let err = check_resources(&["ok", name]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{name}");
        }
        // What the protocol writes beside a lock is inside the reserved space.
        for key in [
            crate::protocol::counter_key("X"),
            crate::protocol::queue_key("X"),
            crate::protocol::lease_key("X"),
            crate::protocol::waiting_key("X"),
        ] {
            assert!(check_resources(&[key.as_str()]).is_err(), "{key}");
        }
        for name in [
            "fencelock",
            "order:fencelock:1",
            "Fencelock:fence:X",
            "fencelock/x",
        ] {
            assert!(check_resources(&[name]).is_ok(), "{name}");
        }
    }
}
