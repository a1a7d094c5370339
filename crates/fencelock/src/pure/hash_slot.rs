//! Redis Cluster's key-to-slot rule: CRC16 (XMODEM) of the key, or of its hash tag (the text
//! between the first `{` and the next `}`, when not empty), modulo 16384. Used to find the shard
//! that owns a `redis+cluster://` node's tag (`redis/cluster.rs`).

/// How many slots a cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The slot of `key`, as `CLUSTER KEYSLOT` computes it.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|b| *b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|b| *b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % SLOTS
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), bit by bit: called once per
/// connection, never on the hot path.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_cluster_specs_check_value() {
        // The check value the Redis Cluster specification gives for "123456789".
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_follow_the_hash_tag_rule() {
        // Values CLUSTER KEYSLOT gives (redis-server 7.0.15).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{fencelock}"), key_slot(b"fencelock"));
        assert_eq!(
            key_slot(b"{fencelock}fencelock:node"),
            key_slot(b"fencelock:holder:{fencelock}job")
        );
        // An empty tag, or no closing brace: the whole key is hashed.
        assert_eq!(key_slot(b"{}a"), crc16(b"{}a") % SLOTS);
        assert_eq!(key_slot(b"{a"), crc16(b"{a") % SLOTS);
        // Only the first tag counts.
        assert_eq!(key_slot(b"{a}{b}"), key_slot(b"a"));
    }
}
