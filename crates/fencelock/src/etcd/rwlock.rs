//! The read-write lock on etcd (see `crate::rwlock` for the design): readers and writers are
//! waiters of one queue, in creation-revision order. A writer is the mutex's waiter: it holds
//! when no key of the queue is older than its own. A reader's key has an `r` after the prefix
//! (`keys::reader_key`), outside the writers' range, and it holds when no *writer's* key is
//! older than its own: readers share, and a reader behind a waiting writer waits for it. A
//! writer, once it holds, records its revision (its fencing token) in the resource's writer
//! record, in a transaction that requires its key; a reader reads the record in the step that
//! finds it first among the writers, so it learns the last write lock's token before it.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, GetResponse, KeyValue, Txn, TxnOp};

use super::{keys, Cluster, EtcdHeld, Fail};
use crate::error::{Error, LostCause, Result};
use crate::pure::vote::VoteOutcome;

/// Which kind of waiter a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Side {
    /// A writer of a read-write lock, or a mutex: it waits for every older key.
    #[default]
    Exclusive,
    /// A reader: it waits for older writers only.
    Shared,
}

impl Side {
    /// The key of our waiter under `prefix`.
    pub(super) fn key(self, prefix: &str, lease: i64) -> String {
        match self {
            Side::Exclusive => keys::lock_key(prefix, lease),
            Side::Shared => keys::reader_key(prefix, lease),
        }
    }

    /// The keys under `prefix` that this waiter waits for, as the key and the options of a
    /// range read: every key, or the writers' range.
    pub(super) fn ahead(self, prefix: &str) -> (String, GetOptions) {
        let options = match self {
            Side::Exclusive => GetOptions::new().with_prefix(),
            // Writers' keys are hex digits after the prefix: from '0' up to, not including, 'g'.
            Side::Shared => GetOptions::new().with_range(format!("{prefix}g")),
        };
        (self.start(prefix), options)
    }

    /// Where the range of [`Side::ahead`] starts.
    fn start(self, prefix: &str) -> String {
        match self {
            Side::Exclusive => prefix.to_string(),
            Side::Shared => format!("{prefix}0"),
        }
    }

    /// Whether the oldest key this waiter waits for (`first`, if any) leaves it first: a writer
    /// must be that key itself; a reader needs it absent or younger than its own `revision`.
    pub(super) fn is_head(self, first: Option<&KeyValue>, revision: i64) -> bool {
        match self {
            Side::Exclusive => first.is_some_and(|kv| kv.create_revision() == revision),
            Side::Shared => first.is_none_or(|kv| kv.create_revision() > revision),
        }
    }

    /// A reader also reads the writer record of `resource`, in the same transaction.
    pub(super) fn record_read(self, resource: &str) -> Option<TxnOp> {
        (self == Side::Shared).then(|| TxnOp::get(keys::writer_record_key(resource), None))
    }

    /// The range reads of a transaction's branch, split into the queues' (one per resource)
    /// and the record's (a reader's).
    pub(super) fn split_record(
        self,
        gets: &[GetResponse],
        resources: usize,
    ) -> Option<(&[GetResponse], Option<&GetResponse>)> {
        let record = usize::from(self == Side::Shared);
        if gets.len() != resources + record {
            return None;
        }
        let (queues, rest) = gets.split_at(resources);
        Some((queues, rest.first()))
    }
}

/// The value of a writer record read (0 when there is none).
pub(super) fn record_value(record: Option<&GetResponse>) -> Result<u64, Fail> {
    let Some(kv) = record.and_then(|r| r.kvs().first()) else {
        return Ok(0);
    };
    let text = String::from_utf8_lossy(kv.value());
    text.parse()
        .map_err(|_| Fail::failed(format!("the writer record holds {text:?}, not a token")))
}

impl Cluster {
    /// One attempt to take a read lock on `key`.
    ///
    /// # Errors
    ///
    /// As [`Cluster::try_acquire`].
    pub(crate) async fn try_read(&self, key: &str) -> Result<EtcdHeld> {
        self.try_acquire_as(&[key.to_string()], Side::Shared).await
    }

    /// Waits up to `wait` for a read lock on `key`, in queue order.
    ///
    /// # Errors
    ///
    /// As [`Cluster::acquire`].
    pub(crate) async fn read(&self, key: &str, wait: Duration) -> Result<EtcdHeld> {
        self.acquire_as(&[key.to_string()], wait, false, Side::Shared)
            .await
    }

    /// Records a write lock's revision (its fencing token) in the writer record of its resource,
    /// only while its key still exists. Writers hold one at a time in revision order, so the
    /// record only grows.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the key is gone (the lease expired); [`Error::Unavailable`] when the
    /// cluster did not answer.
    pub(crate) async fn record_writer(&self, held: &EtcdHeld) -> Result<()> {
        let started = std::time::Instant::now();
        let client = self
            .client()
            .await
            .map_err(|f| self.error_for(&held.resource, f, started))?;
        let txn = Txn::new()
            .when([Compare::create_revision(
                held.key.clone(),
                CompareOp::Equal,
                held.revision as i64,
            )])
            .and_then([TxnOp::put(
                keys::writer_record_key(&held.resource),
                held.revision.to_string(),
                None,
            )]);
        let resp = self
            .call(&client, self.request_timeout, client.kv_client().txn(txn))
            .await
            .map_err(|f| self.error_for(&held.resource, f, started))?;
        if resp.succeeded() {
            return Ok(());
        }
        Err(Error::lost(
            held.resource.clone(),
            self.votes(VoteOutcome::NotHeld, started.elapsed()),
            LostCause::NotHeld,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_waits_for_the_writers_range_only() {
        let prefix = keys::queue_prefix("doc");
        assert_eq!(Side::Exclusive.start(&prefix), "fencelock/doc/");
        assert_eq!(Side::Shared.start(&prefix), "fencelock/doc/0");
        assert_eq!(
            Side::Shared.key(&prefix, 1),
            "fencelock/doc/r0000000000000001"
        );
        assert_eq!(
            Side::Exclusive.key(&prefix, 1),
            "fencelock/doc/0000000000000001"
        );
        assert!(Side::Shared.record_read("doc").is_some());
        assert!(Side::Exclusive.record_read("doc").is_none());
    }
}
