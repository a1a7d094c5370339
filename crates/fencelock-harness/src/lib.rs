//! fencelock-harness: runs lock clients against real local nodes while a seeded nemesis injects
//! faults, records a history, and checks it for safety violations.
//!
//! # Layout
//!
//! - [`mode`]: the lock modes compared and the fault kinds the nemesis knows.
//! - [`history`]: what a run records (client events, storage rows, faults).
//! - [`checker`]: pure functions that judge a history (no I/O).
//! - [`nemesis`]: the seeded fault schedule (pure) and its execution on real processes.
//! - [`nodes`]: the servers of a run (Redis nodes or an etcd cluster) behind one interface.
//! - [`proxy`]: a TCP proxy per node that adds latency or cuts the node off.
//! - [`client`]: the workload one client process runs (the hidden `client` subcommand); in the
//!   semaphore and election modes it takes a permit or leadership instead of the mutex
//!   (`family.rs`).
//! - [`runcmd`]: the `run` mode's workload: `fencelock run` with commands that leave processes
//!   behind, and the worker processes that stamp their lives.
//! - [`run`]: one mode end to end: nodes, proxies, clients, nemesis, check.
//! - [`report`]: the text summary and the HTML timeline.
//! - [`mono`]: the system-wide monotonic clock all processes stamp events with.
#![warn(missing_docs)]

pub mod checker;
pub mod client;
mod family;
pub mod history;
pub mod metrics;
pub mod mode;
pub mod mono;
pub mod nemesis;
pub mod nodes;
pub mod proxy;
pub mod report;
pub mod run;
pub mod runcmd;
pub mod storage;
