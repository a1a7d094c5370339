//! The baseline of a run, by backend: the hand-written redis-rs fan-out ([`Raw`]) for Redis
//! nodes, the hand-written etcd-client mutex ([`RawEtcd`]) for an etcd cluster, an ephemeral
//! node per key ([`RawZk`]) on a ZooKeeper ensemble, the lease statements sent by hand
//! ([`RawPg`]) on PostgreSQL. Also what every workload needs of the nodes besides the lock: a
//! round trip, and the `contended` counter.

use std::time::Duration;

use anyhow::Context;
use redis::aio::MultiplexedConnection;

use super::raw::Raw;
use super::raw_etcd::RawEtcd;
use super::raw_pg::RawPg;
use super::raw_zk::RawZk;

/// The baseline client of one run.
#[derive(Debug, Clone)]
pub(crate) enum Baseline {
    Redis(Raw),
    Etcd(Box<RawEtcd>),
    ZooKeeper(Box<RawZk>),
    Postgres(Box<RawPg>),
}

/// Which backend a node list names (the first URL decides, as in the library).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Redis,
    Etcd,
    ZooKeeper,
    Postgres,
}

impl Kind {
    pub(crate) fn of(urls: &[String]) -> Kind {
        let scheme = urls
            .first()
            .and_then(|u| fencelock::NodeAddr::parse(u).ok())
            .map(|a| a.scheme());
        match scheme {
            Some(s) if s.is_zookeeper() => Kind::ZooKeeper,
            Some(s) if s.is_postgres() => Kind::Postgres,
            _ if is_etcd(urls) => Kind::Etcd,
            _ => Kind::Redis,
        }
    }

    /// How the run announces it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Redis => "",
            Kind::Etcd => " (etcd)",
            Kind::ZooKeeper => " (ZooKeeper)",
            Kind::Postgres => " (PostgreSQL)",
        }
    }
}

impl Baseline {
    /// Connects to `urls`: an etcd cluster when every URL is `etcd://`, Redis nodes otherwise.
    ///
    /// # Errors
    ///
    /// When a node cannot be reached, or the URLs mix backends.
    pub(crate) async fn connect(urls: &[String], ttl: Duration) -> anyhow::Result<Baseline> {
        Ok(match Kind::of(urls) {
            Kind::Etcd => Baseline::Etcd(Box::new(RawEtcd::connect(urls, ttl).await?)),
            Kind::ZooKeeper => Baseline::ZooKeeper(Box::new(RawZk::connect(urls, ttl).await?)),
            Kind::Postgres => Baseline::Postgres(Box::new(RawPg::connect(urls, ttl, true).await?)),
            Kind::Redis => Baseline::Redis(Raw::connect_through_clusters(urls, ttl).await?),
        })
    }

    /// A client of its own for a contended worker (each runs on a runtime of its own); on
    /// etcd with a session lease, as `concurrency.NewSession` gives each client one.
    ///
    /// # Errors
    ///
    /// As [`Baseline::connect`].
    pub(crate) async fn for_worker(urls: &[String], ttl: Duration) -> anyhow::Result<Baseline> {
        Ok(match Kind::of(urls) {
            Kind::Etcd => Baseline::Etcd(Box::new(
                RawEtcd::connect(urls, ttl).await?.with_session().await?,
            )),
            // A session of its own, as every ZooKeeper client process has.
            Kind::ZooKeeper => Baseline::ZooKeeper(Box::new(RawZk::connect(urls, ttl).await?)),
            // The run's first connection made the table.
            Kind::Postgres => Baseline::Postgres(Box::new(RawPg::connect(urls, ttl, false).await?)),
            Kind::Redis => Baseline::Redis(Raw::connect_through_clusters(urls, ttl).await?),
        })
    }

    /// Takes `key` for `token`: true when granted (by a majority of Redis nodes).
    pub(crate) async fn acquire(&self, key: &str, token: &str) -> bool {
        match self {
            Baseline::Redis(r) => r.acquire(key, token).await,
            Baseline::Etcd(e) => e.acquire(key, token).await,
            Baseline::ZooKeeper(z) => z.acquire(key, token).await,
            Baseline::Postgres(p) => p.acquire(key, token).await,
        }
    }

    /// Releases `key`: true when it was released (somewhere, on Redis).
    pub(crate) async fn release(&self, key: &str, token: &str) -> bool {
        match self {
            Baseline::Redis(r) => r.release(key, token).await > 0,
            Baseline::Etcd(e) => e.release(key).await,
            Baseline::ZooKeeper(z) => z.release(key).await,
            Baseline::Postgres(p) => p.release(key, token).await,
        }
    }

    /// One round trip of the node set (PING to every node, waiting for all), or of the cluster.
    pub(crate) async fn ping(&self) -> Duration {
        match self {
            Baseline::Redis(r) => r.ping_all().await,
            Baseline::Etcd(e) => e.ping().await,
            Baseline::ZooKeeper(z) => z.ping().await,
            Baseline::Postgres(p) => p.ping().await,
        }
    }

    /// Reads the counter `key` and deletes it.
    ///
    /// # Errors
    ///
    /// When it cannot be read.
    pub(crate) async fn take_counter(&self, key: &str) -> anyhow::Result<i64> {
        match self {
            Baseline::Redis(r) => {
                // Under a cluster's tag, as the workers wrote it (`Counter::connect`).
                let key = &r.key(key);
                let value: Option<i64> = redis::cmd("GET")
                    .arg(key)
                    .query_async(&mut r.first())
                    .await
                    .context("reading the contended counter")?;
                let _: redis::RedisResult<i64> =
                    redis::cmd("DEL").arg(key).query_async(&mut r.first()).await;
                Ok(value.unwrap_or(0))
            }
            Baseline::Etcd(e) => {
                let value = e
                    .read_counter(key)
                    .await
                    .context("reading the contended counter")?;
                e.delete(key).await;
                Ok(value)
            }
            Baseline::ZooKeeper(z) => {
                let value = z
                    .read_counter(key)
                    .await
                    .context("reading the contended counter")?;
                z.delete(key).await;
                Ok(value)
            }
            Baseline::Postgres(p) => {
                let value = p
                    .read_counter(key)
                    .await
                    .context("reading the contended counter")?;
                p.delete(key).await;
                Ok(value)
            }
        }
    }
}

/// Whether `urls` name an etcd cluster.
pub(crate) fn is_etcd(urls: &[String]) -> bool {
    !urls.is_empty() && urls.iter().all(|u| u.starts_with("etcd://"))
}

/// The `contended` counter, read and written back by each critical section.
pub(crate) enum Counter {
    /// The connection and the prefix of the key (a cluster's tag, else empty).
    Redis(MultiplexedConnection, String),
    Etcd(Box<RawEtcd>),
    ZooKeeper(Box<RawZk>),
    Postgres(Box<RawPg>),
}

impl Counter {
    /// A connection of its own (each contended worker runs on a runtime of its own): the first
    /// Redis node, or the etcd cluster.
    ///
    /// # Errors
    ///
    /// When it cannot connect.
    pub(crate) async fn connect(urls: &[String], ttl: Duration) -> anyhow::Result<Counter> {
        match Kind::of(urls) {
            Kind::Etcd => return Ok(Counter::Etcd(Box::new(RawEtcd::connect(urls, ttl).await?))),
            Kind::ZooKeeper => {
                return Ok(Counter::ZooKeeper(Box::new(
                    RawZk::connect(urls, ttl).await?,
                )))
            }
            Kind::Postgres => {
                return Ok(Counter::Postgres(Box::new(
                    RawPg::connect(urls, ttl, false).await?,
                )))
            }
            Kind::Redis => {}
        }
        let first = urls.first().context("no nodes")?;
        // A cluster's or a Sentinel group's counter lives on the primary that serves it now (a
        // cluster's under the tag, in the slot that primary owns).
        let node = crate::node::Node::parse(first, 0).map_err(|e| anyhow::anyhow!(e.message))?;
        let primary = node
            .primary_url(Duration::from_secs(5))
            .await
            .map_err(|e| anyhow::anyhow!("the contended counter: no primary of node 1: {e}"))?;
        let tag = node.cluster.as_ref().map(|c| c.tag()).unwrap_or_default();
        Ok(Counter::Redis(
            redis::Client::open(primary.as_deref().unwrap_or(first.as_str()))?
                .get_multiplexed_async_connection()
                .await
                .context("connecting the contended counter to the first node")?,
            tag,
        ))
    }

    /// A read-modify-write (GET, then SET one more), not an atomic increment: an atomic one
    /// cannot lose an update whatever the lock does, so its count would prove nothing; two
    /// holders at once here lose one, and the final counter falls short of the sections.
    pub(crate) async fn increment(&mut self, key: &str) -> bool {
        match self {
            Counter::Redis(conn, tag) => async {
                let key = format!("{tag}{key}");
                let value: Option<i64> = redis::cmd("GET").arg(&key).query_async(conn).await?;
                redis::cmd("SET")
                    .arg(&key)
                    .arg(value.unwrap_or(0) + 1)
                    .query_async::<()>(conn)
                    .await
            }
            .await
            .is_ok(),
            Counter::Etcd(e) => async {
                let value = e.read_counter(key).await?;
                e.write_counter(key, value + 1).await
            }
            .await
            .is_ok(),
            Counter::ZooKeeper(z) => async {
                let value = z.read_counter(key).await?;
                z.write_counter(key, value + 1).await
            }
            .await
            .is_ok(),
            Counter::Postgres(p) => async {
                let value = p.read_counter(key).await?;
                p.write_counter(key, value + 1).await
            }
            .await
            .is_ok(),
        }
    }
}
