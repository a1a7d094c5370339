//! Reentrancy, decided: fencelock's locks are not reentrant, and asking again for a lock the
//! same task already holds is refused at once.
//!
//! Redisson's `RLock` and Hazelcast's `FencedLock` count reentries per thread. An async task
//! has no thread of its own (it moves between worker threads at every await), and a lock handle
//! moves between tasks freely (it is `Send`), so "the owner" of a fencelock lock is the
//! [`Lock`](crate::Lock) value, not a thread. A reentrant count would also muddle fencing: a
//! second `acquire` that silently returns the held lock hands out the same token twice, and a
//! release of the inner handle would either end the outer holder's protection or do nothing,
//! neither of which the caller can see. So fencelock gives no reentrancy; code that needs the
//! lock in a callee passes the [`Lock`](crate::Lock) (or its [`LockContext`](crate::LockContext))
//! down.
//!
//! What it does give: a client remembers which task took each lock it holds (the tokio task id,
//! or the thread outside any task, as in `#[tokio::main]`'s `block_on`). An acquisition of a
//! resource that the same task holds through the same client (or one of its clones) fails at
//! once with [`Error::AlreadyHeld`](crate::Error::AlreadyHeld), instead of waiting on itself for
//! its whole wait budget. Other tasks of the same client wait as they would for any holder.
//!
//! The limit: the task recorded is the one that acquired. A lock acquired in task A and moved to
//! task B counts as A's: A asking again is refused (release or drop the lock first), and B
//! asking again waits like any other task. Locks taken by other clients (other processes) are
//! not seen: they are ordinary holders.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Error, Result};

/// Who asks: the tokio task, or the thread outside any task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

fn current() -> Holder {
    match tokio::task::try_id() {
        Some(id) => Holder::Task(id),
        None => Holder::Thread(std::thread::current().id()),
    }
}

/// The locks a client holds, by resource: who took them (one entry per live handle).
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    held: Mutex<HashMap<String, Vec<(Holder, u64)>>>,
    next: std::sync::atomic::AtomicU64,
}

impl Holdings {
    /// Refuses `keys` when the calling task already holds one of them through this client.
    pub(crate) fn check(&self, keys: &[String]) -> Result<()> {
        let me = current();
        let held = self.held.lock().expect("holdings mutex poisoned");
        for key in keys {
            if held
                .get(key)
                .is_some_and(|v| v.iter().any(|(h, _)| *h == me))
            {
                return Err(Error::AlreadyHeld {
                    resource: key.clone(),
                });
            }
        }
        Ok(())
    }

    /// Records that the calling task now holds `keys`, until the registration is dropped.
    pub(crate) fn register(self: &Arc<Self>, keys: &Arc<[String]>) -> Registration {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let me = current();
        let mut held = self.held.lock().expect("holdings mutex poisoned");
        for key in keys.iter() {
            held.entry(key.clone()).or_default().push((me, id));
        }
        Registration {
            holdings: Arc::downgrade(self),
            keys: keys.clone(),
            id,
        }
    }
}

/// A live lock's entry in its client's [`Holdings`]; dropping it (with the lock) removes it.
#[derive(Debug)]
pub(crate) struct Registration {
    holdings: Weak<Holdings>,
    keys: Arc<[String]>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(holdings) = self.holdings.upgrade() else {
            return;
        };
        let Ok(mut held) = holdings.held.lock() else {
            return;
        };
        for key in self.keys.iter() {
            if let Some(v) = held.get_mut(key) {
                v.retain(|(_, id)| *id != self.id);
                if v.is_empty() {
                    held.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn keys(names: &[&str]) -> Arc<[String]> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn the_same_task_is_refused_until_the_registration_drops() {
        let h = Arc::new(Holdings::default());
        let a = keys(&["a", "b"]);
        assert!(h.check(&a).is_ok());
        let reg = h.register(&a);
        let err = h.check(&keys(&["c", "b"])).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyHeld);
        assert!(err.to_string().contains("\"b\""), "{err}");
        assert!(h.check(&keys(&["c"])).is_ok());
        drop(reg);
        assert!(h.check(&a).is_ok());
        assert!(h.held.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn another_task_is_not_refused() {
        let h = Arc::new(Holdings::default());
        let a = keys(&["a"]);
        let _reg = h.register(&a);
        let h2 = h.clone();
        let other = tokio::spawn(async move { h2.check(&keys(&["a"])).is_ok() });
        assert!(other.await.unwrap());
        assert!(h.check(&a).is_err());
    }
}
