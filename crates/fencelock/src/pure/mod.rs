//! The pure logic: no I/O, no clock of its own, unit-tested beside the code. Every rule that a
//! round, a wait or an extension applies is decided here, and the backends only carry it out.
//!
//! - `quorum`: the majority and the early decision of a round (`Tally`).
//! - `validity`: drift and validity (`ttl - elapsed - drift`).
//! - `retry`: the retry policy and its jittered delays.
//! - `extension`: what happens after an attempt to extend a lock (retry, lost, next due).
//! - `fencing`: token derivation (one past the largest trusted counter) and the amnesia guard's trust rule.
//! - `queue`: the waiting line's tickets and leases.
//! - `readers`: the names of a read-write lock's readers and writer record.
//! - `token`: the owner value.
//! - `etcd_keys`: where a lock lives in etcd's key space (its queue prefix).
//! - `vote`, `node_error`: per-node votes and what a node's failure means.
//! - `hash_slot`: Redis Cluster's key-to-slot rule (the shard a cluster node's tag lives on).
//! - `ahead`: the TTL announcement sent ahead of plain grants, and the grants it covers.
//! - `split_retry`: the pauses of a request a cluster's slot move split (`TRYAGAIN`).
//!
//! `fencing` and `quorum` are re-exported at the crate root with `#[doc(hidden)]`: the benches,
//! the model checker (`tests/fencing_model.rs`) and the CLI use them; they are not part of the
//! API. The public types (`Votes`, `RetryPolicy`, ...) are re-exported by `lib.rs`.

pub(crate) mod ahead;
pub(crate) mod etcd_keys;
pub(crate) mod extension;
pub mod fencing;
pub(crate) mod hash_slot;
pub(crate) mod node_error;
pub mod nodeset;
pub(crate) mod queue;
pub mod quorum;
pub(crate) mod readers;
pub(crate) mod retry;
pub(crate) mod split_retry;
pub(crate) mod token;
pub(crate) mod validity;
pub(crate) mod vote;

/// The prefix of fencelock's own keys: [`crate::protocol::RESERVED_PREFIX`] (defined here, so
/// that the implementation never imports `protocol`).
pub(crate) const RESERVED_PREFIX: &str = "fencelock:";
