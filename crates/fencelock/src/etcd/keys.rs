//! Where a lock lives in etcd's key space: pure logic, no I/O.
//!
//! Every lock of a resource is a queue of keys under one prefix,
//! `fencelock/<resource, escaped>/`. A waiter's key is the prefix followed by its lease id in
//! hex, so a key names the lease that keeps it alive and a restarted client never collides with
//! an old key of its own. A lease carried over from one mutex to the client's next (see
//! "Leases carried over" in `mod.rs`) holds a new key each time: the lease id, a dot and the
//! number of the lease's use, so that the token of a released lock never names a later one.

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

/// The key of a lock whose lease may carry other locks before and after it: the lease id as
/// 16 hex digits, a dot and the number of the lease's use (from 0). Still a writer's key for
/// a read-write lock: it starts with a hex digit.
pub(crate) fn carried_key(prefix: &str, lease: i64, lease_use: u32) -> String {
    format!("{prefix}{:016x}.{lease_use}", lease as u64)
}

/// What a lock key of the queue at `prefix` names: its lease, and the number of the lease's
/// use when the lease may carry other locks ([`carried_key`]); `None` when `key` is neither
/// form.
pub(crate) fn parse_key(prefix: &str, key: &str) -> Option<(i64, Option<u32>)> {
    let rest = key.strip_prefix(prefix)?;
    let (hex, lease_use) = match rest.split_once('.') {
        Some((hex, n)) => {
            let plain = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
            let canonical = n == "0" || !n.starts_with('0');
            (
                hex,
                Some(n.parse::<u32>().ok().filter(|_| plain && canonical)?),
            )
        }
        None => (rest, None),
    };
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let lease = u64::from_str_radix(hex, 16).ok()?;
    Some((lease as i64, lease_use))
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
    fn a_carried_key_names_its_lease_and_its_use() {
        let prefix = queue_prefix("order:42");
        let key = carried_key(&prefix, 0x694d_7a1b_22c4_1f05, 3);
        assert_eq!(key, "fencelock/order:42/694d7a1b22c41f05.3");
        assert_eq!(
            parse_key(&prefix, &key),
            Some((0x694d_7a1b_22c4_1f05, Some(3)))
        );
        let plain = lock_key(&prefix, 7);
        assert_eq!(parse_key(&prefix, &plain), Some((7, None)));
        // A writer's key either way (the range of `rwlock.rs`).
        assert!(key >= format!("{prefix}0") && key < format!("{prefix}g"));
        for bad in [
            "fencelock/order:42/694d7a1b22c41f0",
            "fencelock/order:42/694d7a1b22c41f05.",
            "fencelock/order:42/694d7a1b22c41f05.03",
            "fencelock/order:42/694d7a1b22c41f05.+3",
            "fencelock/order:42/694d7a1b22c41f05.4294967296",
            "fencelock/order:42/694d7a1b22c41g05.1",
            "fencelock/other/694d7a1b22c41f05.1",
        ] {
            assert_eq!(parse_key(&prefix, bad), None, "{bad}");
        }
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
