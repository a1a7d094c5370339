//! fencelock: distributed locks that are fast and honest about their safety.
//!
//! (Crate docs are being written; see the README.)
#![warn(missing_docs)]

mod client;
mod config;
mod error;
#[cfg(feature = "etcd")]
mod etcd;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod fence;
pub mod fencing;
mod keepalive;
mod lock;
mod node;
mod quorum;
mod redis;
mod retry;
mod token;
mod validity;
mod vote;

pub use crate::client::Client;
pub use crate::config::Config;
pub use crate::error::{Error, ErrorKind, Result};
pub use crate::keepalive::{AutoExtend, LockGuard, LostSignal};
pub use crate::lock::Lock;
pub use crate::node::{NodeAddr, Scheme};
pub use crate::retry::RetryPolicy;
pub use crate::vote::{NodeVote, VoteOutcome, Votes};
