//! `bench --workload shared`: readers and writers of one read-write lock, against the same
//! cycles through the mutex of one key, in one run.
//!
//! C tasks share one client; each cycle takes the lock of one key, waiting as long as it must,
//! and releases it at once. In the `fencelock` series nine cycles in ten are read locks and the
//! tenth a write lock (`RwLock`); in the `mutex` series every cycle is the mutex
//! (`Client::acquire`). Blocks of the two alternate, as `seq`/`par` do with their baseline. The
//! ratio of the two says what sharing buys (readers do not wait for each other) against what a
//! read lock costs more than the mutex (its scripts, and waiting in line behind writers). Every
//! holder checks who else is inside: a writer with anyone, or a reader with a writer, counts as
//! an overlap, which fails the run.
//!
//! No raw baseline: redis-rs has no read-write lock, and one written for the bench would be a
//! second implementation of the protocol, not a baseline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;

use super::{drive, series, Run, Series, BLOCKS};

/// Every how many cycles the `fencelock` series takes the write lock.
const WRITE_EVERY: usize = 10;

/// Who is inside the section of the run, for the overlap check.
#[derive(Debug, Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    overlaps: AtomicUsize,
}

impl Inside {
    fn enter(&self, write: bool) {
        let clash = if write {
            self.writers.fetch_add(1, Ordering::AcqRel) > 0
                || self.readers.load(Ordering::Acquire) > 0
        } else {
            self.readers.fetch_add(1, Ordering::AcqRel);
            self.writers.load(Ordering::Acquire) > 0
        };
        if clash {
            self.overlaps.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn leave(&self, write: bool) {
        let count = if write { &self.writers } else { &self.readers };
        count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The `fencelock` (read-write lock) and `mutex` series, `n` cycles each on `c` tasks.
pub(super) async fn run(
    client: &fencelock::Client,
    n: usize,
    c: usize,
    prefix: &str,
) -> anyhow::Result<Vec<Series>> {
    let rw = client.rwlock(&format!("{prefix}:shared"))?;
    let mutex_key: Arc<str> = Arc::from(format!("{prefix}:mutex"));
    let inside = Arc::new(Inside::default());
    let writes = Arc::new(AtomicUsize::new(0));
    let shared_cycle = {
        let (inside, writes) = (inside.clone(), writes.clone());
        move |i: usize| {
            let (rw, inside, writes) = (rw.clone(), inside.clone(), writes.clone());
            async move {
                let write = i.is_multiple_of(WRITE_EVERY);
                let taken = if write {
                    rw.write().await
                } else {
                    rw.read().await
                };
                let Ok(lock) = taken else { return false };
                inside.enter(write);
                if write {
                    writes.fetch_add(1, Ordering::Relaxed);
                }
                // Let the other tasks run while this one is inside: holders that overlap meet.
                tokio::task::yield_now().await;
                inside.leave(write);
                lock.release().await.is_ok()
            }
        }
    };
    let mutex_cycle = {
        let client = client.clone();
        move |_: usize| {
            let (client, key) = (client.clone(), mutex_key.clone());
            async move {
                match client.acquire(&key).await {
                    Ok(lock) => lock.release().await.is_ok(),
                    Err(_) => false,
                }
            }
        }
    };
    let (mut shared, mut mutex) = (Run::default(), Run::default());
    for b in 0..BLOCKS.min(n.max(1)) {
        let (from, to) = (n * b / BLOCKS, n * (b + 1) / BLOCKS);
        if b % 2 == 0 {
            shared.add(drive(from, to, c, shared_cycle.clone()).await);
            mutex.add(drive(from, to, c, mutex_cycle.clone()).await);
        } else {
            mutex.add(drive(from, to, c, mutex_cycle.clone()).await);
            shared.add(drive(from, to, c, shared_cycle.clone()).await);
        }
    }
    let mut lib = series("fencelock", shared);
    lib.extra.insert(
        "overlaps".into(),
        Value::from(inside.overlaps.load(Ordering::Acquire)),
    );
    lib.extra.insert(
        "write_cycles".into(),
        Value::from(writes.load(Ordering::Relaxed)),
    );
    Ok(vec![lib, series("mutex", mutex)])
}
