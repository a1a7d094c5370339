//! Where a read-write lock's readers and its writer record live on Redis: pure naming, no I/O
//! (the design is in `crate::rwlock`).

/// The value of a lock key while readers hold it (written out in the readers' scripts: no
/// owner value, 32 hex digits, equals it).
pub(crate) const READERS_MARKER: &str = "fencelock:readers";

/// The sorted set of the readers of `resource` on each node (member: a reader's owner value,
/// score: the node's time in ms until which its entry lives).
pub fn readers_key(resource: &str) -> String {
    format!("fencelock:readers:{resource}")
}

/// The writer record of `resource`: the largest fencing token a write lock recorded (a decimal
/// string), for [`RECORD_LIFETIME_TTLS`] lock TTLs after the last record.
pub fn writer_key(resource: &str) -> String {
    format!("fencelock:writer:{resource}")
}

/// The node's largest writer record, over every resource (a decimal string, no TTL): what a
/// reader reads when its resource's record expired. One key per node, as the fence counter.
pub const WRITER_MAX_KEY: &str = "fencelock:writer-max";

/// How many lock TTLs a resource's writer record lives after its last record: long enough
/// that a reader soon after a writer reads that writer's token, short enough that node state
/// does not grow with the names used.
pub const RECORD_LIFETIME_TTLS: u32 = 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readers_and_the_record_sit_beside_the_lock_key() {
        assert_eq!(readers_key("doc:7"), "fencelock:readers:doc:7");
        assert_eq!(writer_key("doc:7"), "fencelock:writer:doc:7");
        for key in [
            readers_key("x"),
            writer_key("x"),
            WRITER_MAX_KEY.to_string(),
            READERS_MARKER.to_string(),
        ] {
            assert!(key.starts_with(crate::protocol::RESERVED_PREFIX), "{key}");
        }
    }
}
