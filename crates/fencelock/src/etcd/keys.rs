//! Where a lock lives in etcd's key space: pure logic, no I/O.
//!
//! Every lock of a resource is a queue of keys under one prefix,
//! `fencelock/<resource, escaped>/`. A waiter's key is the prefix followed by its lease id in
//! hex, so a key names the lease that keeps it alive and a restarted client never collides with
//! an old key of its own.

pub(crate) use crate::pure::etcd_keys::queue_prefix;

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
}
