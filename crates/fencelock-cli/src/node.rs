//! Direct connections to single nodes, for `doctor`, `inspect`, `up` and `down`: each request is
//! bounded by a timeout so that a dead or paused node costs at most that long.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue};

use crate::exit::Failure;

/// The TLS files of the command line or config file. `Debug` never shows the key's path.
#[derive(Clone, Default)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl TlsFiles {
    /// The library's TLS settings for these files.
    pub(crate) fn config(&self) -> fencelock::TlsConfig {
        let mut tls = fencelock::TlsConfig::new();
        if let Some(ca) = &self.ca {
            tls = tls.with_ca_file(ca);
        }
        if let Some(cert) = &self.cert {
            tls = tls.with_client_cert_file(cert);
        }
        if let Some(key) = &self.key {
            tls = tls.with_client_key_file(key);
        }
        tls
    }
}

/// The TLS files read, in the driver's form; `None` when none is given.
fn tls_material(tls: &TlsFiles) -> Result<Option<redis::TlsCertificates>, Failure> {
    if tls.ca.is_none() && tls.cert.is_none() && tls.key.is_none() {
        return Ok(None);
    }
    // The key's path is never shown: `what` names the flag only.
    let read = |path: &std::path::Path, what: &str, show: bool| {
        std::fs::read(path).map_err(|e| {
            let shown = if show {
                format!(" {}", path.display())
            } else {
                String::new()
            };
            Failure::usage(format!(
                "{what}{shown}: cannot read it ({:?}); check the path and its permissions",
                e.kind()
            ))
        })
    };
    let root_cert = tls
        .ca
        .as_deref()
        .map(|p| read(p, "--tls-ca", true))
        .transpose()?;
    let client_tls = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert, "--tls-cert", true)?,
            client_key: read(key, "--tls-key", false)?,
        }),
        (None, None) => None,
        _ => {
            return Err(Failure::usage(
                "--tls-cert and --tls-key go together: give the client certificate and its key",
            ))
        }
    };
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// One node: its URL, the redacted form, and a client that has not connected yet.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) name: String,
    /// `host:port`, as the node set's record spells a node.
    pub(crate) addr: String,
    client: redis::Client,
    /// For a `redis+cluster://` URL: the cluster, whose tag's owner is looked up at each use
    /// (`client` is then the first seed's, unused).
    pub(crate) cluster: Option<ClusterNode>,
    /// For a `redis+sentinel://` URL: the group, whose primary the Sentinels name at each
    /// connection (`client` is then unused).
    sentinel: Option<SentinelNode>,
}

/// A `redis+sentinel://` node: its parsed URL, and the user, password and database it gives
/// the primary (`Debug` never shows them).
#[derive(Clone)]
struct SentinelNode {
    addr: fencelock::NodeAddr,
    /// `user:password@`, or empty.
    auth: String,
    db: i64,
}

impl std::fmt::Debug for SentinelNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelNode")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// `user:password@` of a URL with a host list, or empty.
fn userinfo(url: &str) -> String {
    let rest = url.trim().split_once("://").map_or("", |(_, r)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    rest[..end]
        .rfind('@')
        .map_or(String::new(), |at| format!("{}@", &rest[..at]))
}

/// `host:port`, IPv6 in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A `redis+cluster://` node: its parsed URL and the user and password it gives (for the
/// owner's URL; `Debug` never shows them).
#[derive(Clone)]
pub(crate) struct ClusterNode {
    pub(crate) addr: fencelock::NodeAddr,
    /// `user:password@`, or empty.
    auth: String,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ClusterNode {
    /// The primary that owns the tag's slot now, as a plain node, and the slot.
    ///
    /// # Errors
    ///
    /// Why no owner was found (the seeds' answers).
    pub(crate) async fn owner(&self, timeout: Duration) -> Result<(Node, u16), String> {
        let (slot, host, port) = fencelock::protocol::cluster_slot_owner(&self.addr, timeout)
            .await
            .map_err(|e| e.to_string())?;
        let hostport = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let client = redis::Client::open(format!("redis://{}{hostport}/0", self.auth))
            .map_err(|e| describe(&e))?;
        Ok((
            Node {
                name: format!("redis://{hostport}/0"),
                addr: hostport,
                client,
                cluster: None,
                sentinel: None,
            },
            slot,
        ))
    }

    /// The tag every key carries on the cluster (`{fencelock}`).
    pub(crate) fn tag(&self) -> String {
        self.addr.hash_tag().unwrap_or_default()
    }
}

impl Node {
    /// For a `redis+cluster://` or `redis+sentinel://` node: the URL of the server it names now
    /// (the primary that owns the tag's slot, or the one the Sentinels name), with the URL's
    /// user, password and database; `None` for a plain node.
    ///
    /// # Errors
    ///
    /// Why the primary could not be found (the seeds' or the Sentinels' answers).
    pub(crate) async fn primary_url(&self, timeout: Duration) -> Result<Option<String>, String> {
        if let Some(cluster) = &self.cluster {
            let (_, host, port) = fencelock::protocol::cluster_slot_owner(&cluster.addr, timeout)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(Some(format!(
                "redis://{}{}/0",
                cluster.auth,
                host_port(&host, port)
            )));
        }
        if let Some(s) = &self.sentinel {
            let (host, port) = fencelock::protocol::sentinel_primary(&s.addr, timeout)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(Some(format!(
                "redis://{}{}/{}",
                s.auth,
                host_port(&host, port),
                s.db
            )));
        }
        Ok(None)
    }

    /// Whether the node is a Sentinel group (its connections go to the primary the Sentinels
    /// name).
    pub(crate) fn is_sentinel(&self) -> bool {
        self.sentinel.is_some()
    }

    /// Parses a node URL without any I/O.
    ///
    /// # Errors
    ///
    /// A usage [`Failure`] naming the entry if the URL is not a valid Redis URL.
    pub(crate) fn parse(url: &str, index: usize) -> Result<Node, Failure> {
        // The library's parser gives the same messages and redaction as the lock commands.
        let addr = fencelock::NodeAddr::parse(url)
            .map_err(|e| Failure::usage(format!("node {} of the list: {e}", index + 1)))?;
        let name = addr.redacted();
        if !addr.scheme().is_redis() {
            return Err(Failure::usage(format!(
                "node {} of the list ({name}) is not a Redis node; this command needs redis:// or rediss:// URLs",
                index + 1
            )));
        }
        // The redis crate's client for a URL this function built: its error names the node.
        let open = |url: String| {
            redis::Client::open(url).map_err(|e| {
                Failure::usage(format!(
                    "node {} of the list ({name}): {}",
                    index + 1,
                    e.detail().unwrap_or(e.category())
                ))
            })
        };
        if addr.scheme() == fencelock::Scheme::RedisCluster {
            let auth = userinfo(url);
            let client = open(format!(
                "redis://{auth}{}/0",
                host_port(addr.host(), addr.port())
            ))?;
            return Ok(Node {
                name,
                addr: addr.host_port(),
                client,
                cluster: Some(ClusterNode { addr, auth }),
                sentinel: None,
            });
        }
        if addr.scheme() == fencelock::Scheme::RedisSentinel {
            // `.../<master>[/db]`: the library's parser checked the form.
            let raw = url.trim();
            let path = raw.split_once("://").map_or("", |(_, r)| r);
            let db = path
                .split_once('/')
                .and_then(|(_, p)| p.split('/').nth(1))
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            // Unused: every connection asks the Sentinels for the primary first.
            let client = open(format!("redis://{}/0", host_port(addr.host(), addr.port())))?;
            return Ok(Node {
                name,
                addr: addr.host_port(),
                client,
                cluster: None,
                sentinel: Some(SentinelNode {
                    auth: userinfo(raw),
                    addr,
                    db,
                }),
            });
        }
        let client = redis::Client::open(url.trim()).map_err(|e| {
            Failure::usage(format!(
                "node {} of the list ({name}) is not a valid Redis URL: {}; expected redis://[user:password@]host:port[/db]",
                index + 1,
                e.detail().unwrap_or(e.category())
            ))
        })?;
        Ok(Node {
            name,
            addr: addr.host_port(),
            client,
            cluster: None,
            sentinel: None,
        })
    }

    /// Parses every URL of a list, for the commands that talk to nodes directly and do not
    /// follow a cluster's slot map yet (all but `doctor`).
    ///
    /// # Errors
    ///
    /// The first entry that does not parse, or is a `redis+cluster://` URL.
    pub(crate) fn parse_all(urls: &[String], tls: &TlsFiles) -> Result<Vec<Node>, Failure> {
        let nodes = Node::parse_all_with_clusters(urls, tls)?;
        if let Some((i, node)) = nodes.iter().enumerate().find(|(_, n)| n.cluster.is_some()) {
            return Err(Failure::usage(format!(
                "node {} of the list ({}) is a Redis Cluster; this command does not follow a cluster's slot map yet (`fencelock doctor`, `inspect` and `bench` do): name the shard's primary with redis://host:port (CLUSTER SLOTS tells it)",
                i + 1,
                node.name
            )));
        }
        Ok(nodes)
    }

    /// Parses every URL of a list, `redis+cluster://` ones included.
    ///
    /// # Errors
    ///
    /// The first entry that does not parse.
    pub(crate) fn parse_all_with_clusters(
        urls: &[String],
        tls: &TlsFiles,
    ) -> Result<Vec<Node>, Failure> {
        let material = tls_material(tls)?;
        urls.iter()
            .enumerate()
            .map(|(i, url)| {
                let node = Node::parse(url, i)?;
                match (
                    &material,
                    url.trim().to_ascii_lowercase().starts_with("rediss://"),
                ) {
                    (Some(m), true) => node.with_tls(url.trim(), m.clone()),
                    _ => Ok(node),
                }
            })
            .collect()
    }

    /// The same node over TLS with a CA and client certificate of the command line's.
    fn with_tls(self, url: &str, certificates: redis::TlsCertificates) -> Result<Node, Failure> {
        let client = redis::Client::build_with_tls(url, certificates).map_err(|e| {
            Failure::usage(format!(
                "node {}: the TLS settings were refused: {}; check --tls-ca, --tls-cert and --tls-key",
                self.name,
                e.category()
            ))
        })?;
        Ok(Node { client, ..self })
    }

    /// Connects, with `timeout` bounding the connection and every later request.
    ///
    /// # Errors
    ///
    /// A one-line description of why the node could not be reached.
    pub(crate) async fn connect(&self, timeout: Duration) -> Result<Conn, String> {
        self.connect_why(timeout).await.map_err(|e| e.to_string())
    }

    /// [`Node::connect`], with the failure's cause (a refused password, a database the node
    /// lacks, a client certificate refused...).
    ///
    /// # Errors
    ///
    /// Why the node could not be reached or refused this client.
    pub(crate) async fn connect_why(
        &self,
        timeout: Duration,
    ) -> Result<Conn, fencelock::NodeError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let primary;
        let client = match &self.sentinel {
            None => &self.client,
            Some(s) => {
                let (host, port) = fencelock::protocol::sentinel_primary(&s.addr, timeout).await?;
                primary = redis::Client::open(format!(
                    "redis://{}{}/{}",
                    s.auth,
                    host_port(&host, port),
                    s.db
                ))
                .map_err(|e| fencelock::NodeError::from_driver_error(&e))?;
                &primary
            }
        };
        let fut = client.get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(con)) => Ok(Conn { con, timeout }),
            Ok(Err(e)) if e.is_timeout() => Err(describe(&e).into()),
            Ok(Err(e)) => Err(fencelock::NodeError::from_driver_error(&e)),
            Err(_) => Err(format!("no connection within {timeout:?}").into()),
        }
    }
}

/// A connection whose every request is bounded by a timeout.
#[derive(Clone)]
pub(crate) struct Conn {
    con: MultiplexedConnection,
    timeout: Duration,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Conn {
    /// Sends one command and returns its answer and round-trip time.
    ///
    /// # Errors
    ///
    /// A one-line description: a timeout, a lost connection, or the node's error reply.
    pub(crate) async fn query_timed<T: FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> Result<(T, Duration), String> {
        let start = Instant::now();
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut self.con)).await {
            Ok(Ok(value)) => Ok((value, start.elapsed())),
            Ok(Err(e)) => Err(describe(&e)),
            Err(_) => Err(format!("no answer within {:?}", self.timeout)),
        }
    }

    /// Sends one command; a failure keeps its cause (out of memory, a replica...).
    ///
    /// # Errors
    ///
    /// As [`Conn::query_timed`], as a [`fencelock::NodeError`].
    pub(crate) async fn query_why<T: FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> Result<T, fencelock::NodeError> {
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut self.con)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.is_timeout() => Err(describe(&e).into()),
            Ok(Err(e)) => Err(fencelock::NodeError::from_driver_error(&e)),
            Err(_) => Err(format!("no answer within {:?}", self.timeout).into()),
        }
    }

    /// Sends one command.
    ///
    /// # Errors
    ///
    /// As [`Conn::query_timed`].
    pub(crate) async fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, String> {
        self.query_timed(cmd).await.map(|(value, _)| value)
    }
}

/// One line for a redis error: the library's description, the one the lock commands' votes
/// use (a wrong password, an ACL refusal, a replica... named as such).
pub(crate) fn describe(err: &redis::RedisError) -> String {
    if err.is_timeout() {
        // Here a request's own timeout, not only the connection's (the library's words).
        "timed out".to_owned()
    } else {
        fencelock::NodeError::from_driver_error(err).to_string()
    }
}

/// Parses an `INFO` reply into its `key:value` lines.
pub(crate) fn parse_info(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_usage_errors() {
        let err = Node::parse("localhost:6379", 0).unwrap_err();
        assert_eq!(err.code, crate::exit::USAGE);
        assert!(err.message.contains("node 1 "), "{}", err.message);
        assert!(Node::parse("redis://127.0.0.1:6379", 0).is_ok());
        assert!(Node::parse("redis://127.0.0.1:notaport", 1).is_err());
        let sentinel = Node::parse("redis+sentinel://:hunter2@127.0.0.1:26379/main/2", 2).unwrap();
        let group = sentinel.sentinel.as_ref().unwrap();
        assert_eq!((group.auth.as_str(), group.db), (":hunter2@", 2));
        assert!(!format!("{sentinel:?}").contains("hunter2"));
        let urls = ["redis+cluster://:hunter2@127.0.0.1:7000,127.0.0.1:7001".to_string()];
        let node = &Node::parse_all_with_clusters(&urls, &TlsFiles::default()).unwrap()[0];
        assert_eq!(node.cluster.as_ref().unwrap().tag(), "{fencelock}");
        assert!(!format!("{node:?}").contains("hunter2"));
        let refused = Node::parse_all(&urls, &TlsFiles::default()).unwrap_err();
        assert!(refused.message.contains("doctor"), "{}", refused.message);
    }

    #[test]
    fn info_lines_parse() {
        let info = parse_info("# Server\r\nrun_id:abc\r\nrole:master\r\n\r\n");
        assert_eq!(info["run_id"], "abc");
        assert_eq!(info["role"], "master");
    }
}
