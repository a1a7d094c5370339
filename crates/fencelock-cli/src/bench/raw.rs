//! The baseline: a minimal Redlock client written by hand over redis-rs, doing nothing a
//! minimal client would not do (issue 33). `SET key owner NX PX ttl` on every node at once over
//! one multiplexed connection per node, waiting for every answer; a compare-and-delete script on
//! every node at once to release (no wait marks, no wake-ups); a pipeline of compare-and-PEXPIRE
//! scripts per node to extend many locks. No timeouts, no votes, no tracing, no waiting line, no
//! fencing: what a lock costs on the wire and nothing else.

use std::time::Duration;

use anyhow::Context;
use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult, Value};

const RELEASE_LUA: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
const EXTEND_LUA: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// One multiplexed connection per node and the hashes of the two scripts.
#[derive(Clone)]
pub(crate) struct Raw {
    conns: Vec<MultiplexedConnection>,
    quorum: usize,
    ttl_ms: u64,
    release_sha: String,
    extend_sha: String,
    /// Put before every key: a cluster's hash tag (`{fencelock}`), so that the keys live on the
    /// shard whose primary the baseline talks to; empty on plain nodes.
    prefix: String,
}

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Raw")
            .field("nodes", &self.conns.len())
            .finish_non_exhaustive()
    }
}

impl Raw {
    /// Connects to every node and loads the scripts.
    ///
    /// # Errors
    ///
    /// When a node cannot be reached or refuses SCRIPT LOAD.
    pub(crate) async fn connect(urls: &[String], ttl: Duration) -> anyhow::Result<Raw> {
        // Large pipelines (the held workload) may take a while on a loaded box; the driver's
        // default response timeout would cut them off.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(60)));
        let mut conns = Vec::with_capacity(urls.len());
        let (mut release_sha, mut extend_sha) = (String::new(), String::new());
        for (i, url) in urls.iter().enumerate() {
            let mut conn = redis::Client::open(url.as_str())
                .with_context(|| format!("raw baseline: node {} has a bad URL", i + 1))?
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .with_context(|| format!("raw baseline: cannot connect to node {}", i + 1))?;
            release_sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RELEASE_LUA)
                .query_async(&mut conn)
                .await?;
            extend_sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(EXTEND_LUA)
                .query_async(&mut conn)
                .await?;
            conns.push(conn);
        }
        Ok(Raw {
            quorum: urls.len() / 2 + 1,
            conns,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1),
            release_sha,
            extend_sha,
            prefix: String::new(),
        })
    }

    /// Connects as [`Raw::connect`], a `redis+cluster://` URL replaced by the primary that owns
    /// its tag's slot now (a plain node, as the baseline treats it), every key then carrying
    /// the tag, and a `redis+sentinel://` URL by the primary the Sentinels name now: the
    /// figures of a cluster or a Sentinel group beside the single node that serves them.
    ///
    /// # Errors
    ///
    /// As [`Raw::connect`], or when no seed of a cluster names the slot's owner, or no Sentinel
    /// names a primary.
    pub(crate) async fn connect_through_clusters(
        urls: &[String],
        ttl: Duration,
    ) -> anyhow::Result<Raw> {
        let mut plain = Vec::with_capacity(urls.len());
        let mut tag = None;
        for (i, url) in urls.iter().enumerate() {
            let Ok(node) = crate::node::Node::parse(url, i) else {
                // Raw::connect names the bad URL.
                plain.push(url.clone());
                continue;
            };
            match node.primary_url(Duration::from_secs(5)).await {
                Ok(Some(primary)) => plain.push(primary),
                Ok(None) => plain.push(url.clone()),
                Err(e) => anyhow::bail!(
                    "raw baseline: node {} ({}): no primary found: {e}",
                    i + 1,
                    node.name
                ),
            }
            if let Some(cluster) = &node.cluster {
                tag = tag.or(Some(cluster.tag()));
            }
        }
        let mut raw = Raw::connect(&plain, ttl).await?;
        raw.prefix = tag.unwrap_or_default();
        Ok(raw)
    }

    /// `key` as it lives on the nodes: with a cluster's tag in front.
    pub(crate) fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// A random owner value (fastrand, not the OS RNG: the baseline does the least it can).
    pub(crate) fn token() -> String {
        format!("{:032x}", fastrand::u128(..))
    }

    /// SET NX PX on every node, waiting for all; true when a majority granted. On failure
    /// releases whatever was granted.
    pub(crate) async fn acquire(&self, name: &str, token: &str) -> bool {
        let key = &self.key(name);
        let sets = self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move {
                let r: RedisResult<Value> = redis::cmd("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(self.ttl_ms)
                    .query_async(&mut c)
                    .await;
                matches!(r, Ok(Value::Okay))
            }
        });
        let granted = join_all(sets).await.into_iter().filter(|g| *g).count();
        if granted >= self.quorum {
            return true;
        }
        if granted > 0 {
            self.release(name, token).await;
        }
        false
    }

    /// Compare-and-delete on every node, waiting for all; returns how many deleted.
    pub(crate) async fn release(&self, key: &str, token: &str) -> usize {
        let key = &self.key(key);
        let dels = self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move {
                let r: RedisResult<i64> = redis::cmd("EVALSHA")
                    .arg(&self.release_sha)
                    .arg(1)
                    .arg(key)
                    .arg(token)
                    .query_async(&mut c)
                    .await;
                r == Ok(1)
            }
        });
        join_all(dels).await.into_iter().filter(|d| *d).count()
    }

    /// Extends every lock: one pipeline per node, all nodes at once. Returns how many locks a
    /// majority extended.
    pub(crate) async fn extend_all(&self, locks: &[(String, String)]) -> usize {
        let mut pipe = redis::pipe();
        for (key, token) in locks {
            pipe.cmd("EVALSHA")
                .arg(&self.extend_sha)
                .arg(1)
                .arg(self.key(key))
                .arg(token)
                .arg(self.ttl_ms);
        }
        let per_node = self.conns.iter().map(|c| {
            let mut c = c.clone();
            let pipe = &pipe;
            async move {
                let r: RedisResult<Vec<i64>> = pipe.query_async(&mut c).await;
                r.unwrap_or_default()
            }
        });
        let replies = join_all(per_node).await;
        (0..locks.len())
            .filter(|i| {
                replies
                    .iter()
                    .filter(|r| r.get(*i).copied() == Some(1))
                    .count()
                    >= self.quorum
            })
            .count()
    }

    /// One PING to every node at once, waiting for all: a round trip of the node set.
    pub(crate) async fn ping_all(&self) -> Duration {
        let started = std::time::Instant::now();
        let pings = self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move {
                let _: RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
            }
        });
        join_all(pings).await;
        started.elapsed()
    }

    /// The connection to the first node (the contended workload's counter lives there).
    pub(crate) fn first(&self) -> MultiplexedConnection {
        self.conns[0].clone()
    }

    /// Every node's connection, for INFO.
    pub(crate) fn conns(&self) -> &[MultiplexedConnection] {
        &self.conns
    }
}
