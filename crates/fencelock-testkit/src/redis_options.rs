//! Start-up options of a test redis-server.

use crate::Persistence;

/// Options for [`RedisNode::start_with`](crate::RedisNode::start_with) and
/// [`RedisNodes::start_with`](crate::RedisNodes::start_with).
///
/// By default: no persistence, no maxmemory policy, not a replica, real
/// clock, no extra arguments.
///
/// ```
/// use fencelock_testkit::{Persistence, RedisOptions};
/// let opts = RedisOptions::default()
///     .persistence(Persistence::AofAlways)
///     .clock_shift(true);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    pub(crate) persistence: Persistence,
    pub(crate) maxmemory: Option<u64>,
    pub(crate) maxmemory_policy: Option<String>,
    pub(crate) replica_of: Option<u16>,
    pub(crate) clock_shift: bool,
    pub(crate) extra_args: Vec<String>,
    pub(crate) ready_while_loading: bool,
}

impl RedisOptions {
    /// Same as [`Default::default`].
    pub fn new() -> RedisOptions {
        RedisOptions::default()
    }

    /// Sets the persistence mode.
    pub fn persistence(mut self, persistence: Persistence) -> RedisOptions {
        self.persistence = persistence;
        self
    }

    /// Sets `--maxmemory <bytes>` (`None`: redis's default, unlimited).
    pub fn maxmemory(mut self, bytes: Option<u64>) -> RedisOptions {
        self.maxmemory = bytes;
        self
    }

    /// Sets `--maxmemory-policy`, e.g. `Some("allkeys-lru".into())`.
    pub fn maxmemory_policy(mut self, policy: Option<String>) -> RedisOptions {
        self.maxmemory_policy = policy;
        self
    }

    /// Starts the node as a replica of the redis-server on
    /// `127.0.0.1:<port>`.
    pub fn replica_of(mut self, port: u16) -> RedisOptions {
        self.replica_of = Some(port);
        self
    }

    /// Starts the node under the clock-shift shim so that
    /// [`RedisNode::set_clock_offset`](crate::RedisNode::set_clock_offset)
    /// can move its wall clock.
    pub fn clock_shift(mut self, enabled: bool) -> RedisOptions {
        self.clock_shift = enabled;
        self
    }

    /// Counts the node as started once it answers at all, even with `LOADING` while it loads a
    /// dataset (with `--key-load-delay`, to test how clients see a loading node). Default: it
    /// counts as started when it answers `PING` with `PONG`.
    pub fn ready_while_loading(mut self, enabled: bool) -> RedisOptions {
        self.ready_while_loading = enabled;
        self
    }

    /// Appends raw redis-server arguments, e.g.
    /// `vec!["--hz".into(), "100".into()]`.
    pub fn extra_args(mut self, args: Vec<String>) -> RedisOptions {
        self.extra_args.extend(args);
        self
    }
}
