//! Node addresses: parsing, validation and redaction of secrets. No I/O.

use std::fmt;

use crate::error::Error;

/// The kind of server a node URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// `redis://`: a Redis node over plain TCP.
    Redis,
    /// `rediss://`: a Redis node over TLS (needs the `tls` feature).
    RedisTls,
    /// `etcd://`: an etcd cluster member over plain HTTP/2.
    Etcd,
    /// `etcds://`: an etcd member over TLS.
    EtcdTls,
    /// `postgres://` or `postgresql://`: one PostgreSQL database (needs the `postgres-lock`
    /// feature).
    Postgres,
    /// `redis+sentinel://`: the primary a group of Redis Sentinels names, found anew at each
    /// connection (one logical node).
    RedisSentinel,
    /// `zk://host:2181,host:2181/chroot`: a ZooKeeper ensemble (one logical node; needs the
    /// `zookeeper` feature).
    ZooKeeper,
    /// `redis+cluster://`: a Redis Cluster as one logical node. Every key fencelock writes there
    /// carries one hash tag (`{fencelock}` unless the URL's `tag` says otherwise), so they all
    /// live on the shard that owns the tag's slot, found anew at each connection.
    RedisCluster,
}

impl Scheme {
    /// Whether the scheme names a Redis node.
    pub fn is_redis(self) -> bool {
        matches!(
            self,
            Scheme::Redis | Scheme::RedisTls | Scheme::RedisSentinel | Scheme::RedisCluster
        )
    }

    /// Whether the scheme names a PostgreSQL database.
    pub fn is_postgres(self) -> bool {
        self == Scheme::Postgres
    }

    /// Whether the scheme names a ZooKeeper ensemble.
    pub fn is_zookeeper(self) -> bool {
        self == Scheme::ZooKeeper
    }

    /// The backend the scheme selects, in words: `"Redis"`, `"etcd"`, `"PostgreSQL"` or
    /// `"ZooKeeper"`.
    pub fn backend(self) -> &'static str {
        match self {
            Scheme::Redis | Scheme::RedisTls | Scheme::RedisSentinel | Scheme::RedisCluster => {
                "Redis"
            }
            Scheme::Etcd | Scheme::EtcdTls => "etcd",
            Scheme::Postgres => "PostgreSQL",
            Scheme::ZooKeeper => "ZooKeeper",
        }
    }
}

/// One node's address, parsed from a URL such as `redis://user:secret@10.0.0.5:6379/0`.
///
/// `Display` and `Debug` print the URL with the password replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeAddr {
    url: String,
    scheme: Scheme,
    host: String,
    port: u16,
    user: Option<String>,
    has_password: bool,
    path: String,
    /// For `redis+sentinel://`: the Sentinels and the primary's name.
    sentinel: Option<SentinelGroup>,
    /// For `redis+cluster://`: the seed nodes and the hash tag.
    cluster: Option<ClusterSeeds>,
    /// For `zk://`: the servers and the chroot.
    zookeeper: Option<ZkEnsemble>,
}

/// The servers and the chroot of a `zk://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ZkEnsemble {
    /// Each server's host (IPv6 without brackets) and port, in the URL's order.
    pub(crate) servers: Vec<(String, u16)>,
    /// The chroot: empty, or a path such as `/apps/billing` (no trailing slash).
    pub(crate) chroot: String,
}

impl ZkEnsemble {
    /// The connect string ZooKeeper clients take (Curator's, kazoo's, the Java client's):
    /// `host:port,host:port/chroot`.
    pub(crate) fn connect_string(&self) -> String {
        let hosts: Vec<String> = self
            .servers
            .iter()
            .map(|(h, p)| join_host_port(h, *p))
            .collect();
        format!("{}{}", hosts.join(","), self.chroot)
    }
}

/// The port of a ZooKeeper server when the URL gives none.
const ZOOKEEPER_PORT: u16 = 2181;

/// How a ZooKeeper URL is written, for the errors.
const ZOOKEEPER_FORM: &str = "write it as zk://host:2181,host:2181/chroot (the chroot is optional)";

/// The seed nodes of a `redis+cluster://` URL and the hash tag of fencelock's keys there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterSeeds {
    /// Each seed's host (IPv6 without brackets) and port, in the URL's order: any node of the
    /// cluster, asked for the slot map.
    pub(crate) seeds: Vec<(String, u16)>,
    /// The hash tag without its braces (`fencelock` by default).
    pub(crate) tag: String,
}

/// The hash tag of fencelock's keys on a cluster when the URL names none.
pub(crate) const DEFAULT_TAG: &str = "fencelock";

/// How a cluster URL is written, for the errors.
const CLUSTER_FORM: &str =
    "write it as redis+cluster://host:6379,host:6379[/?tag=NAME] (any nodes of the cluster)";

/// The Sentinels of a `redis+sentinel://` URL and the name of the primary they watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelGroup {
    /// Each Sentinel's host (IPv6 without brackets) and port, in the URL's order.
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The name the Sentinels know the primary by (`sentinel monitor <name> ...`).
    pub(crate) master: String,
    /// The database on the primary.
    pub(crate) db: i64,
}

/// The port of a Sentinel when the URL gives none.
const SENTINEL_PORT: u16 = 26379;

/// How a Sentinel URL is written, for the errors.
const SENTINEL_FORM: &str = "write it as redis+sentinel://host:26379,host:26379/<master-name>[/db]";

impl NodeAddr {
    /// Parses a node URL.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the URL (redacted) when the scheme is unknown, the host is
    /// missing, or the port or database is not a number.
    pub fn parse(url: &str) -> Result<NodeAddr, Error> {
        let url = url.trim();
        let what = || format!("node URL {}", redact(url));
        let (scheme_str, rest) = url.split_once("://").ok_or_else(|| {
            Error::config(
                what(),
                "it has no scheme; write it as redis://host:port/db (or rediss://, etcd://)",
            )
        })?;
        let scheme = match scheme_str.to_ascii_lowercase().as_str() {
            "redis" => Scheme::Redis,
            "rediss" => Scheme::RedisTls,
            "etcd" => Scheme::Etcd,
            "etcds" => Scheme::EtcdTls,
            "postgres" | "postgresql" => Scheme::Postgres,
            "redis+sentinel" => return parse_sentinel(url, rest),
            "redis+cluster" => return parse_cluster(url, rest),
            "zk" | "zookeeper" => return parse_zookeeper(url, rest),
            "rediss+cluster" => {
                return Err(Error::config(
                    what(),
                    "TLS to a Redis Cluster is not supported yet; use redis+cluster:// on a \
                     trusted network",
                ))
            }
            "rediss+sentinel" => {
                return Err(Error::config(
                    what(),
                    "TLS to a Sentinel group is not supported yet; use redis+sentinel:// on a \
                     trusted network, or name the primary directly with rediss://host:port",
                ))
            }
            // Taken as etcd once, which sent a Redis or web server's address to the etcd
            // client: the scheme must name the backend.
            "http" | "https" => {
                let tls = if scheme_str.eq_ignore_ascii_case("https") {
                    "s"
                } else {
                    ""
                };
                return Err(Error::config(
                    what(),
                    format!(
                        "{scheme_str}:// does not say which server it is; for an etcd member write etcd{tls}://host:port, for a Redis node redis{tls}://host:port"
                    ),
                ));
            }
            other => {
                return Err(Error::config(
                    what(),
                    format!(
                        "unknown scheme {other:?}; use redis://, rediss://, redis+sentinel://, redis+cluster://, etcd://, etcds://, postgres:// or zk://"
                    ),
                ))
            }
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (user, has_password, hostport) = split_userinfo(authority);
        let (host, port_str) = split_host_port(hostport);
        if host.is_empty() {
            return Err(Error::config(
                what(),
                "the host is missing; write it as redis://host:port/db",
            ));
        }
        let default_port = match scheme {
            Scheme::Redis | Scheme::RedisTls | Scheme::RedisSentinel | Scheme::RedisCluster => 6379,
            Scheme::Etcd | Scheme::EtcdTls => 2379,
            Scheme::Postgres => 5432,
            Scheme::ZooKeeper => ZOOKEEPER_PORT,
        };
        let port = match port_str {
            None | Some("") => default_port,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                Error::config(
                    what(),
                    format!("port {p:?} is not a number from 1 to 65535"),
                )
            })?,
        };
        if scheme.is_redis() {
            let db = path.trim_start_matches('/');
            let db = db.split('?').next().unwrap_or("");
            if !db.is_empty() && db.parse::<i64>().is_err() {
                return Err(Error::config(
                    what(),
                    format!("database {db:?} is not a number; write redis://host:port/0"),
                ));
            }
        }
        Ok(NodeAddr {
            url: url.to_string(),
            scheme,
            host: host.to_string(),
            port,
            user,
            has_password,
            path: path.to_string(),
            sentinel: None,
            zookeeper: None,
            cluster: None,
        })
    }

    /// Splits a comma-separated list of node URLs (`FENCELOCK_NODES`, `--nodes`). A piece
    /// without `://` continues the URL before it: a `redis+sentinel://` URL lists its Sentinels
    /// with commas. Pieces are trimmed; empty ones are dropped.
    ///
    /// ```
    /// use fencelock::NodeAddr;
    /// let list = "redis+sentinel://s1:26379,s2:26379/main, redis://cache:6379";
    /// assert_eq!(
    ///     NodeAddr::split_list(list),
    ///     ["redis+sentinel://s1:26379,s2:26379/main", "redis://cache:6379"]
    /// );
    /// ```
    pub fn split_list(list: &str) -> Vec<String> {
        let mut urls: Vec<String> = Vec::new();
        for piece in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match urls.last_mut() {
                Some(last) if !piece.contains("://") => {
                    last.push(',');
                    last.push_str(piece);
                }
                _ => urls.push(piece.to_string()),
            }
        }
        urls
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host name or address (IPv6 without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port (6379 for Redis, 2379 for etcd and 5432 for PostgreSQL when the URL gives
    /// none).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, the identity used to check that nodes are distinct. For a Sentinel URL:
    /// every Sentinel's `host:port`, then `/` and the primary's name (one group, one node). For
    /// a cluster URL: every seed's `host:port`, then `/` and the tag in braces.
    pub fn host_port(&self) -> String {
        if let Some(zk) = self.zookeeper() {
            return zk.connect_string();
        }
        if let Some(group) = &self.sentinel {
            let list: Vec<String> = group
                .sentinels
                .iter()
                .map(|(h, p)| join_host_port(h, *p))
                .collect();
            return format!("{}/{}", list.join(","), group.master);
        }
        if let Some(cluster) = &self.cluster {
            let list: Vec<String> = cluster
                .seeds
                .iter()
                .map(|(h, p)| join_host_port(h, *p))
                .collect();
            return format!("{}/{{{}}}", list.join(","), cluster.tag);
        }
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The Sentinels and the primary's name of a `redis+sentinel://` URL.
    pub(crate) fn sentinel(&self) -> Option<&SentinelGroup> {
        self.sentinel.as_ref()
    }

    /// The seed nodes and the hash tag of a `redis+cluster://` URL.
    pub(crate) fn cluster(&self) -> Option<&ClusterSeeds> {
        self.cluster.as_ref()
    }

    /// The `host:port` this URL and `other` both name when one of them is a cluster URL (its
    /// seeds), so that two tags of one cluster are not taken for two nodes.
    pub(crate) fn same_cluster(&self, other: &NodeAddr) -> Option<String> {
        if self.cluster.is_none() && other.cluster.is_none() {
            return None;
        }
        let servers = |n: &NodeAddr| match &n.cluster {
            Some(c) => c.seeds.iter().map(|(h, p)| join_host_port(h, *p)).collect(),
            None if n.sentinel.is_some() => Vec::new(),
            None => vec![n.host_port()],
        };
        let theirs = servers(other);
        servers(self).into_iter().find(|s| theirs.contains(s))
    }

    /// The `{tag}` every key of fencelock's carries on this node: `Some` for a cluster only
    /// (single nodes and Sentinel primaries keep their key names).
    pub fn hash_tag(&self) -> Option<String> {
        self.cluster.as_ref().map(|c| format!("{{{}}}", c.tag))
    }

    /// Whether the node is a primary found anew at each connection (a Sentinel group or a
    /// cluster's shard), which a failover can replace with a replica that missed the last
    /// writes.
    pub(crate) fn follows_primary(&self) -> bool {
        self.sentinel.is_some() || self.cluster.is_some()
    }

    /// The servers and the chroot of a `zk://` URL.
    pub(crate) fn zookeeper(&self) -> Option<&ZkEnsemble> {
        self.zookeeper.as_ref()
    }

    /// The `redis://` URL of the primary at `host:port` that this Sentinel URL names, with the
    /// URL's user and password and database (the secret is in it: for the driver only).
    pub(crate) fn primary_url(&self, host: &str, port: u16) -> String {
        let db = self.sentinel.as_ref().map_or(0, |g| g.db);
        let rest = self.url.split_once("://").map_or("", |(_, r)| r);
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let auth = rest[..end]
            .rfind('@')
            .map_or(String::new(), |at| format!("{}@", &rest[..at]));
        format!("redis://{auth}{}/{db}", join_host_port(host, port))
    }

    /// The `user:password` of a `zk://` URL, for ZooKeeper's digest authentication (the secret
    /// is in it: for the driver only); `None` without one.
    pub(crate) fn zk_digest(&self) -> Option<String> {
        self.zookeeper.as_ref()?;
        let rest = self.url.split_once("://").map_or("", |(_, r)| r);
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        let at = authority.rfind('@')?;
        Some(authority[..at].to_string())
    }

    /// The URL with its secret, for the driver only.
    pub(crate) fn secret_url(&self) -> &str {
        &self.url
    }

    /// The URL with the password replaced by `***`.
    pub fn redacted(&self) -> String {
        let scheme = match self.scheme {
            Scheme::Redis => "redis",
            Scheme::RedisTls => "rediss",
            Scheme::Etcd => "etcd",
            Scheme::EtcdTls => "etcds",
            Scheme::Postgres => "postgres",
            Scheme::RedisSentinel => "redis+sentinel",
            Scheme::ZooKeeper => "zk",
            Scheme::RedisCluster => "redis+cluster",
        };
        let auth = match (&self.user, self.has_password) {
            (Some(u), true) => format!("{u}:***@"),
            (None, true) => ":***@".to_string(),
            (Some(u), false) => format!("{u}@"),
            (None, false) => String::new(),
        };
        if let Some(zk) = self.zookeeper() {
            return format!("{scheme}://{auth}{}", zk.connect_string());
        }
        let list = |hosts: &[(String, u16)]| {
            hosts
                .iter()
                .map(|(h, p)| join_host_port(h, *p))
                .collect::<Vec<_>>()
                .join(",")
        };
        let hosts = match (&self.sentinel, &self.cluster) {
            (Some(group), _) => list(&group.sentinels),
            (None, Some(cluster)) => list(&cluster.seeds),
            (None, None) => self.host_port(),
        };
        format!("{scheme}://{auth}{hosts}{}", self.path)
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeAddr({})", self.redacted())
    }
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Splits a URL's authority at its last `@`: the user (none when empty), whether a password was
/// given (its text is not kept), and what follows (the host and port, or the hosts).
fn split_userinfo(authority: &str) -> (Option<String>, bool, &str) {
    let Some(at) = authority.rfind('@') else {
        return (None, false, authority);
    };
    let (info, rest) = (&authority[..at], &authority[at + 1..]);
    let (user, has_password) = match info.split_once(':') {
        Some((u, _)) => (u, true),
        None => (info, false),
    };
    (
        (!user.is_empty()).then(|| user.to_string()),
        has_password,
        rest,
    )
}

/// Parses the part after `redis+sentinel://`: `[user:password@]host[:port][,host[:port]...]
/// /<master-name>[/db]`. The user and password are the primary's (the Sentinels are asked
/// without them).
fn parse_sentinel(url: &str, rest: &str) -> Result<NodeAddr, Error> {
    let what = || format!("node URL {}", redact(url));
    if rest.contains('?') {
        return Err(Error::config(
            what(),
            format!("it has options (after ?), which Sentinel URLs do not take; {SENTINEL_FORM}"),
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (user, has_password, hosts) = split_userinfo(authority);
    let sentinels = parse_host_list(&what(), hosts, &SENTINELS)?;
    let mut segments = path.trim_start_matches('/').split('/');
    let master = segments.next().unwrap_or("").trim();
    if master.is_empty() {
        return Err(Error::config(
            what(),
            format!(
                "the primary's name is missing (the name in the Sentinels' `sentinel monitor \
                 <name> ...`, which SENTINEL MASTERS lists); {SENTINEL_FORM}"
            ),
        ));
    }
    let db = match segments.next() {
        None | Some("") => 0,
        Some(db) => db.parse::<i64>().ok().filter(|d| *d >= 0).ok_or_else(|| {
            Error::config(
                what(),
                format!("database {db:?} is not a number; {SENTINEL_FORM}"),
            )
        })?,
    };
    if let Some(extra) = segments.find(|s| !s.is_empty()) {
        return Err(Error::config(
            what(),
            format!("{extra:?} after the database is not understood; {SENTINEL_FORM}"),
        ));
    }
    let (host, port) = sentinels[0].clone();
    Ok(NodeAddr {
        url: url.to_string(),
        scheme: Scheme::RedisSentinel,
        host,
        port,
        user,
        has_password,
        path: path.to_string(),
        sentinel: Some(SentinelGroup {
            sentinels,
            master: master.to_string(),
            db,
        }),
        zookeeper: None,
        cluster: None,
    })
}

/// Parses the part after `zk://`: `host[:port][,host[:port]...][/chroot]`, the connect string
/// of ZooKeeper's own clients (Curator, kazoo, the Java client) behind a scheme, so that a
/// string copied from their configuration works as it is.
fn parse_zookeeper(url: &str, rest: &str) -> Result<NodeAddr, Error> {
    let what = || format!("node URL {}", redact(url));
    if rest.contains('?') {
        return Err(Error::config(
            what(),
            format!("it has options (after ?), which ZooKeeper URLs do not take; {ZOOKEEPER_FORM}"),
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (user, has_password, authority) = split_userinfo(authority);
    if user.is_some() != has_password {
        return Err(Error::config(
            what(),
            format!(
                "it has a user or a password alone; ZooKeeper digest authentication needs both, \
                 as zk://user:password@host:2181/chroot (or neither), {ZOOKEEPER_FORM}"
            ),
        ));
    }
    let servers = parse_host_list(&what(), authority, &ZOOKEEPER_SERVERS)?;
    let chroot = path.strip_suffix('/').unwrap_or(path);
    if !chroot.is_empty() {
        // ZooKeeper's own path rules: no empty segment, no `.` or `..`.
        if let Some(bad) = chroot[1..]
            .split('/')
            .find(|s| s.is_empty() || *s == "." || *s == "..")
        {
            return Err(Error::config(
                what(),
                format!(
                    "the chroot {chroot:?} has the segment {bad:?}, which ZooKeeper paths cannot \
                     hold; {ZOOKEEPER_FORM}"
                ),
            ));
        }
    }
    let (host, port) = servers[0].clone();
    Ok(NodeAddr {
        url: url.to_string(),
        scheme: Scheme::ZooKeeper,
        host,
        port,
        user,
        has_password,
        path: chroot.to_string(),
        sentinel: None,
        zookeeper: Some(ZkEnsemble {
            servers,
            chroot: chroot.to_string(),
        }),
        cluster: None,
    })
}

/// Parses the part after `redis+cluster://`: `[user:password@]host[:port][,host[:port]...]
/// [/][?tag=NAME]`. The seeds are any nodes of the cluster (the slot map is asked of them); the
/// user and password are the cluster's. A cluster has database 0 only.
fn parse_cluster(url: &str, rest: &str) -> Result<NodeAddr, Error> {
    let what = || format!("node URL {}", redact(url));
    let (before, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before.find('/') {
        Some(i) => (&before[..i], &before[i..]),
        None => (before, ""),
    };
    match path.trim_start_matches('/') {
        "" | "0" => {}
        other => {
            return Err(Error::config(
                what(),
                format!(
                    "{other:?} after the hosts is not understood: a cluster has database 0 \
                     only, and the tag is an option (?tag=NAME); {CLUSTER_FORM}"
                ),
            ))
        }
    }
    let mut tag = DEFAULT_TAG.to_string();
    for option in query.unwrap_or("").split('&').filter(|o| !o.is_empty()) {
        match option.split_once('=') {
            Some(("tag", value)) => {
                if value.is_empty() || value.contains(['{', '}', '/', '?', '&', ' ']) {
                    return Err(Error::config(
                        what(),
                        format!(
                            "the tag {value:?} is empty or holds a brace, slash, space or \
                             option sign; write the name alone (tag=orders, not \
                             tag={{orders}}); {CLUSTER_FORM}"
                        ),
                    ));
                }
                tag = value.to_string();
            }
            _ => {
                return Err(Error::config(
                    what(),
                    format!(
                        "option {option:?} is not understood (the only one is tag=NAME); \
                         {CLUSTER_FORM}"
                    ),
                ))
            }
        }
    }
    let (user, has_password, hosts) = split_userinfo(authority);
    let seeds = parse_host_list(&what(), hosts, &CLUSTER_SEEDS)?;
    let (host, port) = seeds[0].clone();
    Ok(NodeAddr {
        url: url.to_string(),
        scheme: Scheme::RedisCluster,
        host,
        port,
        user,
        has_password,
        path: before[authority.len()..].to_string()
            + &query.map_or(String::new(), |q| format!("?{q}")),
        sentinel: None,
        zookeeper: None,
        cluster: Some(ClusterSeeds { seeds, tag }),
    })
}

/// What one kind of host list (a URL's Sentinels, ZooKeeper servers, cluster seeds) is called in
/// the errors, and its default port.
struct HostList {
    /// One entry, in the errors: "Sentinel", "server", "seed".
    noun: &'static str,
    default_port: u16,
    /// Said after a bad port (with its leading space), or nothing.
    port_hint: &'static str,
    /// What to do about an entry listed twice.
    once: &'static str,
    /// How the URL is written.
    form: &'static str,
}

const SENTINELS: HostList = HostList {
    noun: "Sentinel",
    default_port: SENTINEL_PORT,
    port_hint: " (Sentinels listen on 26379 by default)",
    once: "list each Sentinel once",
    form: SENTINEL_FORM,
};

const ZOOKEEPER_SERVERS: HostList = HostList {
    noun: "server",
    default_port: ZOOKEEPER_PORT,
    port_hint: " (ZooKeeper listens on 2181 by default)",
    once: "list each server of the ensemble once",
    form: ZOOKEEPER_FORM,
};

const CLUSTER_SEEDS: HostList = HostList {
    noun: "seed",
    default_port: 6379,
    port_hint: "",
    once: "list each node once",
    form: CLUSTER_FORM,
};

/// Parses `host[:port][,host[:port]...]` (IPv6 in brackets): every entry has a host, a port
/// from 1 to 65535 (`kind.default_port` when none) and appears once. `what` names the URL.
fn parse_host_list(what: &str, list: &str, kind: &HostList) -> Result<Vec<(String, u16)>, Error> {
    let HostList {
        noun,
        default_port,
        port_hint,
        once,
        form,
    } = kind;
    let mut hosts: Vec<(String, u16)> = Vec::new();
    for (i, one) in list.split(',').enumerate() {
        let (host, port) = split_host_port(one.trim());
        if host.is_empty() {
            return Err(Error::config(
                what,
                format!(
                    "{noun} {} of the list has no host (an empty entry between commas?); {form}",
                    i + 1
                ),
            ));
        }
        let port = match port {
            None | Some("") => *default_port,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                Error::config(
                    what,
                    format!(
                        "the port {p:?} of {noun} {host} is not a number from 1 to 65535{port_hint}; {form}"
                    ),
                )
            })?,
        };
        if hosts.iter().any(|(h, p)| h == host && *p == port) {
            return Err(Error::config(
                what,
                format!(
                    "{noun} {} is listed twice; {once}",
                    join_host_port(host, port)
                ),
            ));
        }
        hosts.push((host.to_string(), port));
    }
    Ok(hosts)
}

fn split_host_port(hostport: &str) -> (&str, Option<&str>) {
    if let Some(rest) = hostport.strip_prefix('[') {
        // [v6]:port
        return match rest.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => ("", None),
        };
    }
    match hostport.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (hostport, None),
    }
}

/// Redacts the password of a URL that may not even parse, for error messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => {
            let info = &rest[..at];
            let user = info.split_once(':').map_or(info, |(u, _)| u);
            let shown = if info.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{scheme}://{shown}@{}", &rest[at + 1..])
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_redis_urls() {
        let n = NodeAddr::parse("redis://127.0.0.1:7001/0").unwrap();
        assert_eq!(n.scheme(), Scheme::Redis);
        assert_eq!(n.host_port(), "127.0.0.1:7001");
        assert_eq!(n.to_string(), "redis://127.0.0.1:7001/0");
        let n = NodeAddr::parse("redis://localhost").unwrap();
        assert_eq!(n.port(), 6379);
    }

    #[test]
    fn redacts_passwords_everywhere() {
        let n = NodeAddr::parse("rediss://app:hunter2@cache.internal:6380/2").unwrap();
        assert_eq!(n.scheme(), Scheme::RedisTls);
        assert_eq!(n.to_string(), "rediss://app:***@cache.internal:6380/2");
        assert!(!format!("{n:?}").contains("hunter2"));
        let n = NodeAddr::parse("redis://:hunter2@h:1/0").unwrap();
        assert_eq!(n.to_string(), "redis://:***@h:1/0");
        assert!(!redact("redis://u:hunter2@h:x/0").contains("hunter2"));
    }

    #[test]
    fn rejects_bad_urls_with_the_reason() {
        for (url, why) in [
            ("127.0.0.1:6379", "no scheme"),
            ("http2://h:1", "unknown scheme"),
            ("http://h:2379", "for an etcd member write etcd://host:port"),
            ("https://h:2379", "etcds://host:port"),
            ("redis://:6379", "host is missing"),
            ("redis://h:99999/0", "port"),
            ("redis://h:abc/0", "port"),
            ("redis://h:1/zero", "database"),
        ] {
            let err = NodeAddr::parse(url).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
        }
        let err = NodeAddr::parse("redis://u:hunter2@h:abc/0")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn parses_sentinel_urls() {
        let n = NodeAddr::parse("redis+sentinel://:pw@10.0.0.1,10.0.0.2:26380/mymaster/2").unwrap();
        assert_eq!(n.scheme(), Scheme::RedisSentinel);
        assert!(n.scheme().is_redis());
        let g = n.sentinel().unwrap();
        assert_eq!(
            g.sentinels,
            [
                ("10.0.0.1".to_string(), 26379),
                ("10.0.0.2".to_string(), 26380)
            ]
        );
        assert_eq!((g.master.as_str(), g.db), ("mymaster", 2));
        assert_eq!(
            n.to_string(),
            "redis+sentinel://:***@10.0.0.1:26379,10.0.0.2:26380/mymaster/2"
        );
        assert_eq!(n.host_port(), "10.0.0.1:26379,10.0.0.2:26380/mymaster");
        assert_eq!(
            n.primary_url("10.0.0.9", 6379),
            "redis://:pw@10.0.0.9:6379/2"
        );
        let n = NodeAddr::parse("redis+sentinel://[::1]:5000/m").unwrap();
        assert_eq!(n.primary_url("::1", 7), "redis://[::1]:7/0");
    }

    #[test]
    fn rejects_bad_sentinel_urls_with_the_reason() {
        for (url, why) in [
            ("redis+sentinel://h:26379", "the primary's name is missing"),
            ("redis+sentinel://h:26379/", "the primary's name is missing"),
            (
                "redis+sentinel://h:1,,h:2/m",
                "Sentinel 2 of the list has no host",
            ),
            ("redis+sentinel://h:x/m", "port \"x\" of Sentinel h"),
            ("redis+sentinel://h:1,h:1/m", "listed twice"),
            ("redis+sentinel://h/m/zero", "database \"zero\""),
            ("redis+sentinel://h/m/0/x", "after the database"),
            ("redis+sentinel://h/m?db=1", "options"),
            ("rediss+sentinel://h/m", "not supported yet"),
        ] {
            let err = NodeAddr::parse(url).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
            assert!(
                err.contains("redis+sentinel://") || url.starts_with("rediss"),
                "{err}"
            );
        }
        let err = NodeAddr::parse("redis+sentinel://u:hunter2@h:x/m")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn parses_cluster_urls() {
        let n = NodeAddr::parse("redis+cluster://:pw@10.0.0.1,10.0.0.2:7001").unwrap();
        assert_eq!(n.scheme(), Scheme::RedisCluster);
        assert!(n.scheme().is_redis());
        let c = n.cluster().unwrap();
        assert_eq!(
            c.seeds,
            [
                ("10.0.0.1".to_string(), 6379),
                ("10.0.0.2".to_string(), 7001)
            ]
        );
        assert_eq!(c.tag, "fencelock");
        assert_eq!(n.hash_tag().as_deref(), Some("{fencelock}"));
        assert_eq!(
            n.to_string(),
            "redis+cluster://:***@10.0.0.1:6379,10.0.0.2:7001"
        );
        assert_eq!(n.host_port(), "10.0.0.1:6379,10.0.0.2:7001/{fencelock}");
        assert_eq!(
            n.primary_url("10.0.0.9", 6379),
            "redis://:pw@10.0.0.9:6379/0"
        );
        let n = NodeAddr::parse("redis+cluster://h:1/?tag=orders").unwrap();
        assert_eq!(n.hash_tag().as_deref(), Some("{orders}"));
        assert_eq!(n.to_string(), "redis+cluster://h:1/?tag=orders");
        let n = NodeAddr::parse("redis+cluster://h:1?tag=o").unwrap();
        assert_eq!(n.cluster().unwrap().tag, "o");
        assert_eq!(NodeAddr::parse("redis://h:1").unwrap().hash_tag(), None);
        assert_eq!(
            NodeAddr::split_list("redis+cluster://a:1,b:2/?tag=x, redis://c:3"),
            ["redis+cluster://a:1,b:2/?tag=x", "redis://c:3"]
        );
    }

    #[test]
    fn rejects_bad_cluster_urls_with_the_reason() {
        for (url, why) in [
            ("redis+cluster://h:1,,h:2", "seed 2 of the list has no host"),
            ("redis+cluster://h:x", "port \"x\" of seed h"),
            ("redis+cluster://h:1,h:1", "listed twice"),
            ("redis+cluster://h:1/2", "database 0 only"),
            ("redis+cluster://h:1/?tag=", "empty"),
            ("redis+cluster://h:1/?tag={x}", "brace"),
            ("redis+cluster://h:1/?db=1", "option \"db=1\""),
            ("rediss+cluster://h:1", "not supported yet"),
        ] {
            let err = NodeAddr::parse(url).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
        }
        let err = NodeAddr::parse("redis+cluster://u:hunter2@h:x")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn ipv6_hosts() {
        let n = NodeAddr::parse("redis://[::1]:7000/0").unwrap();
        assert_eq!(n.host(), "::1");
        assert_eq!(n.host_port(), "[::1]:7000");
    }

    #[test]
    fn postgres_urls_keep_their_database_and_hide_the_password() {
        for url in [
            "postgres://app:hunter2@db.internal/shop",
            "postgresql://app:hunter2@db.internal:5432/shop",
        ] {
            let n = NodeAddr::parse(url).unwrap();
            assert_eq!(n.scheme(), Scheme::Postgres);
            assert_eq!(n.port(), 5432);
            assert_eq!(n.to_string(), "postgres://app:***@db.internal:5432/shop");
            assert_eq!(n.secret_url(), url);
        }
    }

    #[test]
    fn etcd_urls_default_to_2379() {
        let n = NodeAddr::parse("etcd://127.0.0.1").unwrap();
        assert_eq!(n.scheme(), Scheme::Etcd);
        assert_eq!(n.port(), 2379);
    }

    #[test]
    fn zookeeper_urls_are_connect_strings_behind_a_scheme() {
        let n = NodeAddr::parse("zk://a:2181,b,[::1]:2182/apps/billing/").unwrap();
        assert_eq!(n.scheme(), Scheme::ZooKeeper);
        assert!(n.scheme().is_zookeeper());
        assert_eq!(n.scheme().backend(), "ZooKeeper");
        let zk = n.zookeeper().unwrap();
        assert_eq!(
            zk.servers,
            [
                ("a".to_string(), 2181),
                ("b".to_string(), 2181),
                ("::1".to_string(), 2182)
            ]
        );
        assert_eq!(zk.chroot, "/apps/billing");
        assert_eq!(zk.connect_string(), "a:2181,b:2181,[::1]:2182/apps/billing");
        assert_eq!(n.redacted(), "zk://a:2181,b:2181,[::1]:2182/apps/billing");
        let bare = NodeAddr::parse("zookeeper://h").unwrap();
        assert_eq!(bare.zookeeper().unwrap().connect_string(), "h:2181");
        assert_eq!(bare.zk_digest(), None);
        // A digest identity: kept for the driver, redacted everywhere else.
        let authed = NodeAddr::parse("zk://app:s3cr@t@a:2181,b/x").unwrap();
        assert_eq!(authed.zk_digest().as_deref(), Some("app:s3cr@t"));
        assert_eq!(authed.redacted(), "zk://app:***@a:2181,b:2181/x");
        assert!(!format!("{authed} {authed:?}").contains("s3cr"));
        assert_eq!(
            NodeAddr::split_list("zk://app:pw@a:1,b:2/x"),
            ["zk://app:pw@a:1,b:2/x"]
        );
        // The list splitter keeps the ensemble's hosts in one URL.
        assert_eq!(NodeAddr::split_list("zk://a:1,b:2/x"), ["zk://a:1,b:2/x"]);
    }

    #[test]
    fn rejects_bad_zookeeper_urls_with_the_reason() {
        for (url, why) in [
            ("zk://", "server 1 of the list has no host"),
            ("zk://a,,b/x", "server 2 of the list has no host"),
            ("zk://a:99999", "is not a number from 1 to 65535"),
            ("zk://a:2181,a:2181", "listed twice"),
            ("zk://a/x//y", "segment \"\""),
            ("zk://a/x/../y", "segment \"..\""),
            ("zk://a?timeout=3", "options"),
            ("zk://u@a", "needs both"),
            ("zk://:hunter2@a", "needs both"),
        ] {
            let err = NodeAddr::parse(url).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(why), "{url}: {text}");
            assert!(
                text.contains("zk://host:2181") || text.contains("listed twice"),
                "{text}"
            );
            assert!(!text.contains("hunter2"), "{text}");
        }
    }
}
