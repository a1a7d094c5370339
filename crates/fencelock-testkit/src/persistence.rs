//! How a test redis-server keeps its data across restarts.

/// Persistence mode of a [`RedisNode`](crate::RedisNode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Persistence {
    /// No RDB and no AOF: a kill or restart loses every key.
    #[default]
    None,
    /// `appendonly yes` + `appendfsync always`: every acknowledged write
    /// survives a kill and comes back on restart.
    AofAlways,
    /// `appendonly yes` + `appendfsync everysec`: writes of about the last
    /// second may be lost on a kill.
    AofEverySec,
}

impl Persistence {
    /// The redis-server arguments for this mode.
    pub(crate) fn args(self) -> Vec<String> {
        let args: &[&str] = match self {
            Persistence::None => &["--appendonly", "no"],
            Persistence::AofAlways => &["--appendonly", "yes", "--appendfsync", "always"],
            Persistence::AofEverySec => &["--appendonly", "yes", "--appendfsync", "everysec"],
        };
        args.iter().map(|s| (*s).to_owned()).collect()
    }
}
