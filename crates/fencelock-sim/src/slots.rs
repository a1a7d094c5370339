//! Redis Cluster's key hashing, written from its specification (not the library's copy): 16384
//! slots, CRC16 (XMODEM) of the key, or of the part between the first `{` and the next `}` when
//! that part is not empty (a hash tag). And which arguments of a command are keys.

/// The slots of a cluster.
pub const SLOTS: u16 = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster uses it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
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

/// The slot of `key`.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// The keys among `args` (the command name first), as Redis's command table places them, for
/// the commands the simulated node serves.
pub fn command_keys(args: &[Vec<u8>]) -> Vec<&[u8]> {
    let Some(name) = args.first() else {
        return Vec::new();
    };
    let name = name.to_ascii_uppercase();
    let range = match name.as_slice() {
        b"EVAL" | b"EVALSHA" => {
            let n = args
                .get(2)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            3..(3 + n).min(args.len())
        }
        b"DEL" | b"EXISTS" | b"MGET" | b"UNLINK" | b"TOUCH" => 1..args.len(),
        b"GET" | b"SET" | b"PTTL" | b"TTL" | b"PEXPIRE" | b"PEXPIREAT" | b"EXPIRE"
        | b"EXPIREAT" | b"PERSIST" | b"TYPE" | b"INCR" | b"INCRBY" | b"ZADD" | b"ZRANGE"
        | b"ZRANGEBYSCORE" | b"ZREM" | b"ZREMRANGEBYSCORE" | b"ZREMRANGEBYRANK" | b"ZSCORE"
        | b"ZRANK" | b"ZCARD" => 1..2.min(args.len()),
        _ => 0..0,
    };
    args[range].iter().map(Vec::as_slice).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_cluster_specification() {
        // The specification's check value, and slots redis-cli's CLUSTER KEYSLOT gives.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"fencelock:holder:{t}x"), key_slot(b"t"));
    }
}
