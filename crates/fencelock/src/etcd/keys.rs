//! Where a lock lives in etcd's key space: pure logic, no I/O.
//!
//! Every lock of a resource is a queue of keys under one prefix,
//! `fencelock/<resource, escaped>/`. A waiter's key is the prefix followed by its lease id in
//! hex, so a key names the lease that keeps it alive and a restarted client never collides with
//! an old key of its own.

pub(crate) use crate::pure::etcd_keys::queue_prefix;

/// The record of the last write lock of `resource` (a read-write lock's writer, see
/// `rwlock.rs`): `fencelock/<escaped resource>.last-writer`, beside the queue, not in it.
pub(crate) fn writer_record_key(resource: &str) -> String {
    let mut key = queue_prefix(resource);
    key.pop();
    key.push_str(".last-writer");
    key
}

/// The key of a reader of a read-write lock: the queue prefix, `r`, the lease id as 16 hex
/// digits. Writers' keys are the mutex's: hex digits right after the prefix, so the range
/// from `<prefix>0` to `<prefix>g` holds the writers only.
pub(crate) fn reader_key(prefix: &str, lease: i64) -> String {
    format!("{prefix}r{:016x}", lease as u64)
}

/// The key of one waiter: the queue prefix and the lease id as 16 hex digits.
pub(crate) fn lock_key(prefix: &str, lease: i64) -> String {
    // Lease ids are positive; the cast only fixes the width and keeps the text unsigned.
    format!("{prefix}{:016x}", lease as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sit_under_the_resource_prefix() {
        let prefix = queue_prefix("order:42");
        assert_eq!(prefix, "fencelock/order:42/");
        assert_eq!(
            lock_key(&prefix, 0x694d_7a1b_22c4_1f05),
            "fencelock/order:42/694d7a1b22c41f05"
        );
        assert_eq!(lock_key(&prefix, 7), "fencelock/order:42/0000000000000007");
    }

    #[test]
    fn readers_sit_in_the_queue_outside_the_writers_range_and_the_record_beside_it() {
        let prefix = queue_prefix("doc/7");
        let reader = reader_key(&prefix, 7);
        assert_eq!(reader, "fencelock/doc%2F7/r0000000000000007");
        let writer = lock_key(&prefix, i64::MAX);
        let (from, to) = (format!("{prefix}0"), format!("{prefix}g"));
        assert!(writer >= from && writer < to);
        assert!(lock_key(&prefix, 0) >= from);
        assert!(reader >= to);
        let record = writer_record_key("doc/7");
        assert_eq!(record, "fencelock/doc%2F7.last-writer");
        assert!(!record.starts_with(&prefix));
        // No queue holds a record: records have no '/' after the root, queue keys have two.
        assert!(!writer_record_key("a").starts_with(&queue_prefix("a")));
    }
}
