//! Test support for fencelock: real `redis-server`, PostgreSQL and `etcd`
//! processes on free loopback ports, plus a clock-shift shim.
//!
//! Every server is a child process of the test. A start returns only once
//! the server answers; dropping the handle kills and reaps the process (also
//! when the test panics, in which case the last 40 lines of the server's log
//! are printed to stderr) and removes its temporary directory.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use fencelock_testkit::{Persistence, RedisNode, RedisNodes, RedisOptions};
//!
//! let nodes = RedisNodes::start(5)?;
//! let urls = nodes.urls(); // "redis://127.0.0.1:<port>/0" each
//! nodes.node(0).pause()?; // SIGSTOP: a stalled node
//! nodes.node(0).resume()?;
//!
//! let durable = RedisNode::start_with(RedisOptions::default().persistence(Persistence::AofAlways))?;
//! durable.cli(&["SET", "k", "v"])?;
//! durable.kill()?;
//! durable.restart()?;
//! assert_eq!(durable.cli(&["GET", "k"])?, "v");
//! # let _ = urls; Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`RedisNode`] (`redis_node.rs`): one `redis-server`; stop, kill,
//!   restart, pause, resume, a tiny RESP [`cli`](RedisNode::cli).
//! - [`RedisOptions`] and [`Persistence`]: how a node starts.
//! - [`RedisNodes`]: N independent nodes started in parallel, for Redlock.
//! - [`SentinelGroup`]: a primary, two replicas and three Sentinels, for failovers.
//! - [`RedisCluster`]: three primaries and three replicas joined as a Redis Cluster, for
//!   failovers and slot moves.
//! - [`Postgres`]: a throw-away PostgreSQL 15 cluster (initdb in a temp dir,
//!   run as the `postgres` user when the test runs as root).
//! - [`Etcd`], [`EtcdCluster`], [`EtcdMember`]: single-member and static
//!   multi-member etcd clusters with quick elections.
//! - [`ZooKeeper`], [`ZooKeeperEnsemble`]: a standalone ZooKeeper 3.8 server (Debian's
//!   package, run with `java`) and static ensembles, with four-letter-word probes.
//! - [`DelayProxy`]: a TCP proxy that delays what clients send to a server.
//! - [`ClockOffset`] and [`clock_shim_path`]: an `LD_PRELOAD` shim that
//!   shifts a child's wall clock by an offset read from a file.
//! - Internal: `process` (spawn, signal, reap, logs), `ports` (free ports
//!   never handed out twice in one process), `resp` (RESP2 codec), `http`
//!   (tiny HTTP/1.1 client for etcd's JSON gateway).
//! - [`layout`]: the import graph of a crate's sources and its cycles, for the layout tests of
//!   the library and the CLI.
//!
//! # Requirements
//!
//! `redis-server` (7.x), `etcd` 3.4, PostgreSQL 15 under
//! `/usr/lib/postgresql/15/bin` and `psql`, ZooKeeper 3.8's jar under `/usr/share/java` and
//! `java`, and `cc` for the clock shim.
//! A missing binary is reported as an error naming the package to install.

#![warn(missing_docs)]

mod clock_offset;
mod clock_shim;
mod delay_proxy;
mod etcd;
mod etcd_cluster;
mod etcd_member;
mod etcd_tls;
mod http;
pub mod layout;
mod mariadb;
mod persistence;
mod pki;
mod ports;
mod postgres;
mod process;
mod redis_cluster;
mod redis_node;
mod redis_nodes;
mod redis_options;
mod redis_tls;
mod resp;
mod sentinel_group;
mod tls_server;
mod workspace_build;
mod zookeeper;

pub use clock_offset::ClockOffset;
pub use clock_shim::clock_shim_path;
pub use delay_proxy::DelayProxy;
pub use etcd::Etcd;
pub use etcd_cluster::EtcdCluster;
pub use etcd_member::EtcdMember;
pub use etcd_tls::TlsEtcd;
pub use mariadb::MariaDb;
pub use persistence::Persistence;
pub use pki::{CertFiles, Pki};
pub use postgres::Postgres;
pub use redis_cluster::{RedisCluster, CLUSTER_NODE_TIMEOUT};
pub use redis_node::RedisNode;
pub use redis_nodes::RedisNodes;
pub use redis_options::RedisOptions;
pub use redis_tls::TlsRedisNode;
pub use sentinel_group::{SentinelGroup, MASTER_NAME};
pub use tls_server::TlsServer;
pub use workspace_build::workspace_build;
pub use zookeeper::{ZooKeeper, ZooKeeperEnsemble};
