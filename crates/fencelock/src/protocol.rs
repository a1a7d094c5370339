//! fencelock's protocol on Redis, for tools and for clients in other languages that share locks
//! with it: the keys it keeps beside a lock key, and the release script.
//!
//! The lock key is the resource name itself, holding the owner's random token with a TTL
//! (`SET resource token NX PX ttl`), as in every Redlock client: any client that takes and
//! releases keys that way excludes fencelock and is excluded by it. Beside it, per resource:
//!
//! - [`counter_key`]: the fence counter (fencing mode; `docs/fencing.md` holds the argument);
//! - [`queue_key`] and [`lease_key`]: the waiting line (sorted sets of waiter ids by ticket and
//!   by lease deadline);
//! - [`waiting_key`]: the mark that someone waits, renewed by waiters.
//!
//! A client that releases with a bare compare-and-delete is safe with fencelock, but does not
//! wake fencelock's waiters (they fall back to their retry delays). To wake them, release with
//! [`RELEASE_SCRIPT`] over [`release_keys`]: `EVALSHA <sha1 of the script> 4 <release_keys...>
//! <token>`. It replies the number of keys deleted (1 or 0), or `[deleted, subscribers told]`
//! when it woke someone. The CLI's benchmark baseline sends exactly this.

pub use crate::fencing::counter_key;

/// The prefix of every key and channel fencelock keeps beside the lock keys on Redis
/// (`fencelock:fence:<resource>`, `fencelock:queue:<resource>`, ...). A resource name that
/// starts with it is refused before any I/O with [`crate::Error::InvalidConfig`]: a lock on
/// `fencelock:fence:X` would overwrite the fence counter of `X`.
pub const RESERVED_PREFIX: &str = "fencelock:";
pub use crate::queue::{lease_key, queue_key, waiting_key};

/// The release script (Lua): compare-and-delete, and the wake-up of the next waiter in line
/// when the key's wait mark is set. KEYS: the lock keys, their queues, their lease sets, their
/// wait marks (n of each); ARGV: the owner token[, the holder's own waiter id].
pub const RELEASE_SCRIPT: &str = crate::redis::scripts::RELEASE_LUA;

/// The keys [`RELEASE_SCRIPT`] takes for one resource, in order.
pub fn release_keys(resource: &str) -> [String; 4] {
    [
        resource.to_string(),
        queue_key(resource),
        lease_key(resource),
        waiting_key(resource),
    ]
}
