//! Lock configuration: a plain value, validated when a [`Client`](crate::Client) is built.

use std::time::Duration;

use crate::error::Error;
use crate::holder::Holder;
use crate::node::NodeAddr;
use crate::pure::retry::RetryPolicy;
use crate::pure::validity;
use crate::tls::TlsConfig;

/// How a [`Client`](crate::Client) takes locks.
///
/// One node gives an efficiency lock; N nodes give Redlock with quorum N/2+1. Settings are
/// checked by [`Client::new`](crate::Client::new), before any I/O.
///
/// ```
/// use std::time::Duration;
/// use fencelock::Config;
///
/// let config = Config::new(["redis://127.0.0.1:7001/0", "redis://127.0.0.1:7002/0", "redis://127.0.0.1:7003/0"])
///     .with_ttl(Duration::from_secs(10))
///     .with_node_timeout(Duration::from_millis(50))
///     .with_fencing(true);
/// assert_eq!(config.ttl(), Duration::from_secs(10));
/// ```
#[derive(Clone, PartialEq)]
pub struct Config {
    nodes: Vec<String>,
    ttl: Duration,
    node_timeout: Duration,
    connect_timeout: Duration,
    drift_factor: f64,
    drift_fixed: Duration,
    retry: RetryPolicy,
    fencing: bool,
    quarantine: Option<bool>,
    node_set_check: bool,
    long_ttl: bool,
    tls: TlsConfig,
    metrics_resource_label: bool,
    holder: Option<Holder>,
}

impl Config {
    /// Default lock time-to-live.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
    /// Default time one node gets to answer one request. Short, so that a dead or hung node
    /// costs little of the TTL (the article's 50 ms advice).
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// Default time to establish a connection to a node (in the background: a request waits at
    /// most its own node timeout for it).
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// Default clock-drift factor: the TTL times this is subtracted from the validity.
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
    /// Default fixed drift allowance, added to `ttl * drift_factor`.
    pub const DEFAULT_DRIFT_FIXED: Duration = Duration::from_millis(2);
    /// The longest TTL accepted without [`with_long_ttl`](Config::with_long_ttl): a day. A lock
    /// whose holder dies stays taken for its TTL, so a TTL no lease needs is a stuck lock that
    /// only a DEL clears; long work keeps a short TTL and extends it.
    pub const LONG_TTL: Duration = Duration::from_secs(24 * 60 * 60);
    /// The longest TTL accepted at all: etcd's largest lease (9,000,000,000 s, about 285
    /// years). Redis accepts more, but no lock needs it.
    pub const MAX_TTL: Duration = Duration::from_secs(9_000_000_000);

    /// A configuration for the given node URLs, with default settings.
    pub fn new<I, S>(nodes: I) -> Config
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Config {
            nodes: nodes.into_iter().map(|s| s.as_ref().to_string()).collect(),
            ttl: Self::DEFAULT_TTL,
            node_timeout: Self::DEFAULT_NODE_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            drift_factor: Self::DEFAULT_DRIFT_FACTOR,
            drift_fixed: Self::DEFAULT_DRIFT_FIXED,
            retry: RetryPolicy::new(),
            fencing: false,
            quarantine: None,
            node_set_check: true,
            long_ttl: false,
            tls: TlsConfig::new(),
            metrics_resource_label: false,
            holder: None,
        }
    }

    /// The lock's time-to-live on each node. Redis keeps it to the millisecond; etcd leases
    /// count whole seconds, so the etcd backend rounds it up to the next second (at least 1 s)
    /// and gives each of its requests at least 1 s.
    pub fn with_ttl(mut self, ttl: Duration) -> Config {
        self.ttl = ttl;
        self
    }

    /// How long one node gets to answer one request before it counts as failed.
    pub fn with_node_timeout(mut self, timeout: Duration) -> Config {
        self.node_timeout = timeout;
        self
    }

    /// How long establishing a connection may take.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Config {
        self.connect_timeout = timeout;
        self
    }

    /// The clock-drift factor (default 0.01).
    pub fn with_drift_factor(mut self, factor: f64) -> Config {
        self.drift_factor = factor;
        self
    }

    /// The fixed drift allowance (default 2 ms).
    pub fn with_drift_fixed(mut self, fixed: Duration) -> Config {
        self.drift_fixed = fixed;
        self
    }

    /// How [`Client::acquire`](crate::Client::acquire) retries.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Config {
        self.retry = retry;
        self
    }

    /// Fencing mode: every lock carries a `u64` fencing token that strictly increases from one
    /// holder to the next, under the conditions [`crate::Lock::fencing_token`] states (one extra
    /// round trip per acquisition).
    pub fn with_fencing(mut self, fencing: bool) -> Config {
        self.fencing = fencing;
        self
    }

    /// Restart quarantine: a node that restarted within the last TTL and does not persist with
    /// `appendfsync always` is not counted toward the quorum until a TTL has passed. Default: on
    /// for Redlock (several nodes), off for a single node.
    pub fn with_quarantine(mut self, on: bool) -> Config {
        self.quarantine = Some(on);
        self
    }

    /// The node set check (Redis): each node records the node set its clients use, and a client
    /// whose list differs (nodes 1-5 here, 4-8 there, as a rolling replacement leaves them)
    /// refuses every node with a configuration error naming both sets, instead of holding a
    /// lock that the other list's clients can hold too. The first connections wait for each
    /// other (at most the connect timeout) so that the check sees every node that answers.
    /// Default: on. Off only for tools and tests that reach nodes of one set on purpose through
    /// another list; such a client must not take locks that clients of the full list take.
    pub fn with_node_set_check(mut self, on: bool) -> Config {
        self.node_set_check = on;
        self
    }

    /// Accepts a TTL above [`Config::LONG_TTL`] (a day), up to [`Config::MAX_TTL`]. Default: off,
    /// so that a typo such as `1000y` for `1000s` is refused rather than leaving a lock that
    /// nobody can take for a thousand years if its holder dies.
    pub fn with_long_ttl(mut self, allow: bool) -> Config {
        self.long_ttl = allow;
        self
    }

    /// TLS for `rediss://` and `etcds://` nodes: the CA to trust and the client certificate to
    /// present (see [`TlsConfig`]). Default: the public roots, no client certificate.
    pub fn with_tls(mut self, tls: TlsConfig) -> Config {
        self.tls = tls;
        self
    }

    /// Adds a `resource` label (the resource name) to the lock metrics (feature `metrics`; see
    /// [`crate::telemetry`]). Default: off, since resource names can be unbounded and each one
    /// makes new series; turn it on when the client locks a small fixed set of resources.
    pub fn with_metrics_resource_label(mut self, on: bool) -> Config {
        self.metrics_resource_label = on;
        self
    }

    /// Stores `holder` (host, process id, your label) beside every lock this client takes, so
    /// that an operator can tell who holds it (`fencelock inspect` shows it; see
    /// [`Holder`]): on Redis a side key with the lock's TTL, written by the script that grants
    /// the lock (no extra round trip), extended and deleted with it; the lock key keeps the
    /// bare owner value, as other Redlock clients expect. On etcd, the value of the lock's key.
    /// Default: none.
    pub fn with_holder(mut self, holder: Holder) -> Config {
        self.holder = Some(holder);
        self
    }

    /// The holder label stored beside each lock, if any.
    pub fn holder(&self) -> Option<&Holder> {
        self.holder.as_ref()
    }

    /// Whether the lock metrics carry the resource name.
    pub fn metrics_resource_label(&self) -> bool {
        self.metrics_resource_label
    }

    /// The TLS settings.
    pub fn tls(&self) -> &TlsConfig {
        &self.tls
    }

    /// The node URLs as given (with secrets: do not log them; use [`NodeAddr`] to display).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The per-node timeout.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The drift allowance for the configured TTL: `ttl * factor + fixed`.
    pub fn drift(&self) -> Duration {
        validity::drift(self.ttl, self.drift_factor, self.drift_fixed)
    }

    /// The retry policy.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Whether fencing mode is on.
    pub fn fencing(&self) -> bool {
        self.fencing
    }

    /// Whether the node set check is on ([`Config::with_node_set_check`]).
    pub fn node_set_check(&self) -> bool {
        self.node_set_check
    }

    /// Whether restart quarantine is on (its default depends on the node count: on for
    /// several nodes, and for a Sentinel-managed primary or a cluster, whose failover may lose
    /// data).
    pub fn quarantine(&self) -> bool {
        self.quarantine.unwrap_or_else(|| {
            self.nodes.len() > 1
                || self.nodes.iter().any(|u| {
                    let u = u.trim_start();
                    ["redis+sentinel://", "redis+cluster://"]
                        .iter()
                        .any(|scheme| {
                            u.get(..scheme.len())
                                .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
                        })
                })
        })
    }

    /// Checks the settings and parses the node URLs.
    pub(crate) fn validate(&self) -> Result<Vec<NodeAddr>, Error> {
        if let Some(holder) = &self.holder {
            holder.check().map_err(|why| Error::config("holder", why))?;
        }
        if self.nodes.is_empty() {
            return Err(Error::config(
                "nodes",
                "no nodes were given; pass one URL for an efficiency lock or an odd number (3, 5) of independent nodes for Redlock",
            ));
        }
        let nodes = self
            .nodes
            .iter()
            .map(|u| NodeAddr::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        let redis = nodes.iter().filter(|n| n.scheme().is_redis()).count();
        if let Some(other) = nodes
            .iter()
            .find(|n| n.scheme().backend() != nodes[0].scheme().backend())
        {
            return Err(Error::config(
                "nodes",
                format!(
                    "{} and {} URLs are mixed ({} and {other}); a lock uses one kind of backend",
                    nodes[0].scheme().backend(),
                    other.scheme().backend(),
                    nodes[0],
                ),
            ));
        }
        // One database is the whole lock: a second URL would be a second, independent lock
        // table, and PostgreSQL has no quorum of databases to make of them.
        if nodes[0].scheme().is_postgres() && nodes.len() > 1 {
            return Err(Error::config(
                "nodes",
                format!(
                    "{} PostgreSQL URLs are given; a postgres:// lock lives in one database, so give exactly one URL (the lock is as available as that database)",
                    nodes.len()
                ),
            ));
        }
        // The servers of one ensemble are one URL (`zk://a,b,c/chroot`): two URLs would be two
        // independent ensembles, and a lock needs one consensus.
        if nodes[0].scheme().is_zookeeper() && nodes.len() > 1 {
            return Err(Error::config(
                "nodes",
                format!(
                    "{} ZooKeeper URLs are given; list the servers of the ensemble in one URL, zk://host:2181,host:2181/chroot",
                    nodes.len()
                ),
            ));
        }
        if redis != 0 {
            for (i, a) in nodes.iter().enumerate() {
                if let Some(b) = nodes[..i].iter().find(|b| b.host_port() == a.host_port()) {
                    return Err(Error::config(
                        "nodes",
                        format!(
                            "{a} and {b} are the same server ({}); Redlock needs independent nodes, list each host:port once",
                            a.host_port()
                        ),
                    ));
                }
                if let Some((b, shared)) = nodes[..i]
                    .iter()
                    .find_map(|b| Some((b, a.same_cluster(b)?)))
                {
                    return Err(Error::config(
                        "nodes",
                        format!(
                            "{a} and {b} name the same cluster (both list {shared}); a cluster is one node of the quorum whatever its tag: its tags fail together (one cluster's failover, resharding or outage), so they are not the independent nodes Redlock needs; list each cluster once"
                        ),
                    ));
                }
            }
        }
        self.tls.check(&nodes)?;
        if !(0.0..1.0).contains(&self.drift_factor) || self.drift_factor.is_nan() {
            return Err(Error::config(
                "drift factor",
                format!(
                    "{} is not in [0, 1); the usual value is 0.01",
                    self.drift_factor
                ),
            ));
        }
        if self.node_timeout.is_zero() {
            return Err(Error::config(
                "node timeout",
                "it is zero; use tens of milliseconds, e.g. 50ms",
            ));
        }
        if self.ttl.as_millis() < 1 {
            return Err(Error::config(
                "ttl",
                "it is below 1 ms (Redis PX has millisecond resolution)",
            ));
        }
        self.check_ttl_bound()?;
        let drift = self.drift();
        if validity::validity(self.ttl, self.node_timeout, drift).is_none() {
            return Err(Error::config(
                "ttl",
                format!(
                    "{:?} leaves no validity after the drift allowance ({drift:?}) and one node timeout ({:?}); use a TTL of at least a few seconds",
                    self.ttl, self.node_timeout
                ),
            ));
        }
        Ok(nodes)
    }
}

impl Config {
    /// Refuses a TTL no lease needs, unless it was asked for explicitly.
    fn check_ttl_bound(&self) -> Result<(), Error> {
        if self.ttl > Self::MAX_TTL {
            return Err(Error::config(
                "ttl",
                format!(
                    "{:?} is longer than any backend keeps a key ({:?}, etcd's largest lease); use seconds to minutes and extend the lock while working",
                    self.ttl,
                    Self::MAX_TTL
                ),
            ));
        }
        if self.ttl > Self::LONG_TTL && !self.long_ttl {
            return Err(Error::config(
                "ttl",
                format!(
                    "{:?} is longer than a day: if the holder dies, nobody can take the lock for that long (only a DEL of its keys clears it); use seconds to minutes and extend the lock while working, or allow it explicitly with Config::with_long_ttl(true)",
                    self.ttl
                ),
            ));
        }
        Ok(())
    }
}

impl Default for Config {
    /// A configuration with no nodes: [`Client::new`](crate::Client::new) rejects it until
    /// nodes are given.
    fn default() -> Self {
        Config::new(Vec::<String>::new())
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(|n| crate::node::redact(n)).collect();
        f.debug_struct("Config")
            .field("nodes", &nodes)
            .field("ttl", &self.ttl)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("drift_factor", &self.drift_factor)
            .field("drift_fixed", &self.drift_fixed)
            .field("retry", &self.retry)
            .field("fencing", &self.fencing)
            .field("quarantine", &self.quarantine())
            .field("node_set_check", &self.node_set_check)
            .field("long_ttl", &self.long_ttl)
            .field("tls", &self.tls)
            .field("metrics_resource_label", &self.metrics_resource_label)
            .field("holder", &self.holder)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(c: Config) -> String {
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn catches_mistakes_up_front() {
        assert!(err(Config::new(Vec::<String>::new())).contains("no nodes"));
        assert!(err(Config::new(["redis://h:1/0", "redis://h:1/1"])).contains("same server"));
        assert!(
            err(Config::new(["redis://h:1/0"]).with_ttl(Duration::from_millis(30)))
                .contains("no validity")
        );
        assert!(err(Config::new(["nope"])).contains("no scheme"));
        assert!(err(Config::new(["redis://h:1", "etcd://h:2"])).contains("mixed"));
        assert!(err(Config::new(["redis://h:1"]).with_drift_factor(2.0)).contains("drift"));
    }

    #[test]
    fn a_ttl_no_lease_needs_is_refused_unless_asked_for() {
        let one = || Config::new(["redis://h:1"]);
        let year = Duration::from_secs(365 * 24 * 3600);
        let e = err(one().with_ttl(year));
        assert!(
            e.starts_with("invalid ttl: ") && e.contains("with_long_ttl"),
            "{e}"
        );
        assert!(one().with_ttl(Config::LONG_TTL).validate().is_ok());
        let a_day_and_a_second = Config::LONG_TTL + Duration::from_secs(1);
        assert!(err(one().with_ttl(a_day_and_a_second)).contains("longer than a day"));
        // Past etcd's largest lease, not even on request.
        let e = err(one().with_ttl(year * 1000).with_long_ttl(true));
        assert!(e.contains("etcd's largest lease"), "{e}");
        assert!(err(one().with_ttl(year * 1000)).contains("etcd's largest lease"));
        let week = Duration::from_secs(7 * 24 * 3600);
        assert!(one().with_ttl(week).with_long_ttl(true).validate().is_ok());
        assert!(one()
            .with_ttl(Config::MAX_TTL)
            .with_long_ttl(true)
            .validate()
            .is_ok());
    }

    #[test]
    fn debug_never_prints_passwords() {
        let c = Config::new(["redis://u:hunter2@h:1/0"]);
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn quarantine_defaults_on_for_redlock_only() {
        assert!(!Config::new(["redis://a:1"]).quarantine());
        assert!(Config::new(["redis://a:1", "redis://b:1", "redis://c:1"]).quarantine());
        // One logical node whose failover may lose data: on.
        assert!(Config::new(["redis+sentinel://s:1/m"]).quarantine());
        assert!(Config::new(["REDIS+CLUSTER://a:1,b:2"]).quarantine());
        assert!(!Config::new(["redis://a:1", "redis://b:1", "redis://c:1"])
            .with_quarantine(false)
            .quarantine());
    }
}
