//! One connection per node, established lazily in the background and replaced when it breaks.
//! Each new connection loads the scripts and reads the node's run id, uptime, persistence
//! settings and marker, which decide the restart quarantine (see `quarantine.rs`).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use redis::{AsyncConnectionConfig, RedisError};

use super::nodeset::NodeSet;
use super::quarantine::{self, Verdict};
use super::scripts;
use super::tagged::{Asking, NodeConnection, Tagging};
use super::version;
use crate::error::Error;
use crate::node::NodeAddr;
use crate::pure::ahead::{self, Ahead};
use crate::tls::TlsMaterial;

/// What a node told us when we connected, and where it stands in the restart quarantine.
#[derive(Debug)]
pub(crate) struct NodeInfo {
    run_id: String,
    verdict: Verdict,
    /// The marker's value after the connection set-up (what a clearing must find there).
    marker: Option<String>,
    /// For a suspect node: when it counts again, once the longest TTL in use was read.
    standing: Mutex<Resolution>,
    /// The latest announcement sent ahead of plain grants on this connection, per TTL (ms). Kept
    /// with the connection: a node that restarts breaks it (on a direct connection), and the next
    /// connection announces anew before its first plain grant. A loss that does not break it (a
    /// proxy in front of the node, a `FLUSHALL`) takes the marker too: the grant's marker check
    /// (`round.rs`) drops the connection (docs/fencing.md).
    ahead: Mutex<Vec<(Duration, Ahead)>>,
}

#[derive(Debug, Default)]
struct Resolution {
    /// When the node counts again, and the longest TTL in use that decided it.
    counted_from: Option<(Instant, Duration)>,
    /// A read of the other nodes taken once `counted_from` had passed confirmed it: the node
    /// counts from then on. (A read taken right after the restart can miss a lock whose other
    /// grants were still in flight; one taken a TTL later cannot: the model checker's case in
    /// `tests/fencing_model.rs`.)
    confirmed: bool,
    /// Whether this client already wrote (or tried to write) the clear marker.
    cleared: bool,
}

/// Where a node stands for a round that respects the quarantine.
#[derive(Debug)]
pub(crate) enum Standing {
    Counted,
    Excluded(String),
    /// A suspect node whose quarantine length is not known yet: the longest TTL in use must be
    /// read from the other nodes first.
    Unknown,
}

/// The driver's client for the server a node's URL names now: fixed for a `redis://` node, the
/// primary the Sentinels named at the last connection for a `redis+sentinel://` one (none before
/// the first). Shared with the pub/sub wake-ups and the election log, which open their own
/// connections.
#[derive(Debug, Clone)]
pub(crate) struct Target(Arc<Mutex<Option<redis::Client>>>);

impl Target {
    fn new(client: Option<redis::Client>) -> Target {
        Target(Arc::new(Mutex::new(client)))
    }

    /// The client for the node as last known.
    ///
    /// # Errors
    ///
    /// For a Sentinel node no connection has found yet: the next request asks the Sentinels.
    pub(crate) fn get(&self) -> Result<redis::Client, RedisError> {
        self.0
            .lock()
            .expect("target mutex poisoned")
            .clone()
            .ok_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::Client,
                    super::sentinel::SENTINEL_ERR,
                    "the primary was not looked up yet (Sentinels or slot map)".to_string(),
                ))
            })
    }

    fn set(&self, client: redis::Client) {
        *self.0.lock().expect("target mutex poisoned") = Some(client);
    }
}

/// One connection attempt, in a spawned task, that any number of requests wait on.
type Attempt = Shared<BoxFuture<'static, Result<(), RedisError>>>;

/// A node's connection, once established, and the attempt to establish it.
#[derive(Default)]
struct Slot {
    // Shared, not cloned per request: a request only reads it (two strings cloned per request
    // showed up in the profile of the hot path).
    conn: OnceLock<(NodeConnection, Arc<NodeInfo>)>,
    /// The attempt in flight (or the one that succeeded). A failed attempt clears it, so the
    /// next request starts a new one; the requests waiting meanwhile all get its error.
    attempt: Mutex<Option<Attempt>>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("connected", &self.conn.get().is_some())
            .finish_non_exhaustive()
    }
}

/// Restart-quarantine settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quarantine {
    pub(crate) enabled: bool,
    /// This client's own TTL: the quarantine lasts at least this long, whatever the other nodes
    /// report.
    pub(crate) own_ttl: Duration,
}

/// A node and its (multiplexed, pipelining) connection.
pub(crate) struct NodeConn {
    addr: NodeAddr,
    /// `addr.redacted()`, computed once: every vote names its node, and formatting the URL
    /// anew for each one was the largest single cost of a round on one node (profiled with
    /// callgrind: about 2,000 instructions per vote, a quarter of the library's own work).
    name: Arc<str>,
    target: Target,
    /// For a cluster node: the hash tag every key gets (`tagged.rs`).
    tagging: Option<Arc<Tagging>>,
    /// For a Sentinel or cluster node: the primary (address, run id) of the last connection, to
    /// say when a failover happened.
    primary: Mutex<Option<(String, String)>>,
    connect_timeout: Duration,
    quarantine: Quarantine,
    /// This node's place in the client's list, and the client's node set (`nodeset.rs`).
    index: usize,
    set: Arc<NodeSet>,
    slot: Mutex<Arc<Slot>>,
    /// A `rediss://` node that answered in plain text at the last attempt: the next attempt
    /// asks in plain text at once, so that a round shorter than the connect timeout sees why.
    plaintext: std::sync::atomic::AtomicBool,
    /// Whether the eviction policy's warning was given (once per client).
    evicting_warned: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for NodeConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConn")
            .field("addr", &self.addr)
            .finish()
    }
}

/// A connection handed to one request, with the slot it came from (to replace it if broken).
pub(crate) struct Handle {
    pub(crate) conn: NodeConnection,
    pub(crate) info: Arc<NodeInfo>,
    slot: Arc<Slot>,
}

impl NodeConn {
    /// Prepares a node; no I/O happens until the first request.
    pub(crate) fn new(
        addr: NodeAddr,
        connect_timeout: Duration,
        quarantine: Quarantine,
        tls: Option<&TlsMaterial>,
        (index, set): (usize, Arc<NodeSet>),
    ) -> Result<NodeConn, Error> {
        let client = if addr.follows_primary() {
            None
        } else {
            Some(super::tls::open(&addr, tls)?)
        };
        let tagging = addr.hash_tag().map(|tag| Tagging::of(&tag));
        Ok(NodeConn {
            name: addr.redacted().into(),
            addr,
            target: Target::new(client),
            tagging,
            primary: Mutex::new(None),
            connect_timeout,
            quarantine,
            index,
            set,
            slot: Mutex::new(Arc::new(Slot::default())),
            plaintext: std::sync::atomic::AtomicBool::new(false),
            evicting_warned: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub(crate) fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    /// The node's URL as votes and logs show it (password redacted).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The driver's client for the node as last known (see [`Target`]).
    pub(crate) fn target(&self) -> Target {
        self.target.clone()
    }

    /// For a cluster node: the hash tag its keys carry (`tagged.rs`).
    pub(crate) fn tagging(&self) -> Option<Arc<Tagging>> {
        self.tagging.clone()
    }

    /// The quarantine settings.
    pub(crate) fn quarantine(&self) -> Quarantine {
        self.quarantine
    }

    /// A connection to this node, waiting for the one being established if need be.
    ///
    /// The attempt runs in a spawned task, so a request that gives up (its node timeout ran
    /// out) does not cancel it: the next request finds the connection ready, or waits on the
    /// same attempt.
    pub(crate) async fn get(self: &Arc<Self>) -> Result<Handle, RedisError> {
        let slot = self.slot.lock().expect("slot mutex poisoned").clone();
        if let Some((conn, info)) = slot.conn.get() {
            return Ok(Handle {
                conn: conn.clone(),
                info: info.clone(),
                slot,
            });
        }
        // The connecting path holds the whole connection set-up state; boxed, it does not
        // weigh on every request's future (a round keeps one per node).
        Box::pin(self.wait_for_connection(slot)).await
    }

    /// Waits for the connection attempt in flight, starting one if there is none. One attempt
    /// serves every request that comes while it runs (a dead node sees one connection attempt,
    /// not one per request).
    async fn wait_for_connection(self: &Arc<Self>, slot: Arc<Slot>) -> Result<Handle, RedisError> {
        let attempt = {
            let mut current = slot.attempt.lock().expect("attempt mutex poisoned");
            current
                .get_or_insert_with(|| {
                    let (node, bg) = (self.clone(), slot.clone());
                    let task = tokio::spawn(async move {
                        match node.connect().await {
                            Ok(conn) => {
                                let _ = bg.conn.set(conn);
                                Ok(())
                            }
                            Err(e) => {
                                *bg.attempt.lock().expect("attempt mutex poisoned") = None;
                                Err(e)
                            }
                        }
                    });
                    async move {
                        task.await.unwrap_or_else(|_| {
                            Err(RedisError::from(std::io::Error::other(
                                "the connection attempt was cancelled (is the runtime shutting down?)",
                            )))
                        })
                    }
                    .boxed()
                    .shared()
                })
                .clone()
        };
        attempt.await?;
        let (conn, info) = slot.conn.get().ok_or_else(|| {
            RedisError::from(std::io::Error::other(
                "the connection was replaced while it was being established; try again",
            ))
        })?;
        Ok(Handle {
            conn: conn.clone(),
            info: info.clone(),
            slot,
        })
    }

    /// Forgets a connection that broke, so the next request connects afresh (a node that was
    /// killed and restarted answers again without any action from the caller).
    pub(crate) fn discard(&self, handle: &Handle) {
        let mut slot = self.slot.lock().expect("slot mutex poisoned");
        if Arc::ptr_eq(&slot, &handle.slot) {
            *slot = Arc::new(Slot::default());
        }
    }

    async fn connect(&self) -> Result<(NodeConnection, Arc<NodeInfo>), RedisError> {
        let setup = self.set_up_or_plaintext().await;
        if setup.is_err() {
            self.set.failed(self.index);
        }
        let setup = setup?;
        // Not before the other nodes' records were read too (`nodeset.rs`).
        self.set.admit().await?;
        Ok(setup)
    }

    /// The connection set-up, told apart from a `rediss://` URL naming a plain-text node: a TLS
    /// client meeting one only sees silence (the node waits for the end of a command in the
    /// handshake's bytes), which reads as a hung node. Once half the connect timeout went by
    /// without a connection, a plain-text PING is sent beside the set-up; any reply of the
    /// protocol (an error too: NOAUTH) names the mistake.
    async fn set_up_or_plaintext(&self) -> Result<(NodeConnection, Arc<NodeInfo>), RedisError> {
        if self.addr.follows_primary() {
            return self.set_up().await;
        }
        let client = self.target.get()?;
        let redis::ConnectionAddr::TcpTls { host, port, .. } = client.get_connection_info().addr()
        else {
            return self.set_up().await;
        };
        use std::sync::atomic::Ordering::Relaxed;
        let setup = self.set_up();
        tokio::pin!(setup);
        if !self.plaintext.load(Relaxed) {
            tokio::select! {
                biased;
                done = &mut setup => return done,
                () = tokio::time::sleep(self.connect_timeout / 2) => {}
            }
        }
        let probe = self.answers_plaintext(host, *port);
        tokio::pin!(probe);
        let done = tokio::select! {
            biased;
            done = &mut setup => done,
            true = &mut probe => Err(RedisError::from(std::io::Error::other(
                crate::tls::PLAINTEXT_NODE,
            ))),
        };
        let plaintext = done
            .as_ref()
            .is_err_and(|e| e.to_string().contains(crate::tls::PLAINTEXT_NODE));
        self.plaintext.store(plaintext, Relaxed);
        done
    }

    /// Whether `host:port` answers a PING in plain text within the connect timeout.
    async fn answers_plaintext(&self, host: &str, port: u16) -> bool {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let Ok(plain) = redis::Client::open(format!("redis://{host}:{port}/")) else {
            return false;
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout));
        let ping = async {
            let mut conn = crate::sim::multiplexed(&plain, &config).await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        match tokio::time::timeout(self.connect_timeout, ping).await {
            Ok(Ok(_)) => true,
            Ok(Err(reply)) => reply.code().is_some(),
            Err(_) => false,
        }
    }

    async fn set_up(&self) -> Result<(NodeConnection, Arc<NodeInfo>), RedisError> {
        // No response timeout in the driver: each request is bounded by its round's deadline
        // (the node timeout), and a driver timer per request would be a second, redundant timer
        // on the hot path. The set-up below is bounded by the connect timeout instead.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let setup = async {
            let (client, primary) = self.resolve().await?;
            let conn = crate::sim::multiplexed(&client, &config).await?;
            let asking = (self.addr.cluster().is_some())
                .then(|| Asking::new(self.addr.clone(), self.connect_timeout));
            let mut conn = NodeConnection::new(conn, self.tagging.clone()).following_ask(asking);
            if let Some((host, port)) = &primary {
                // Before anything is written: a replica is never used (`sentinel.rs`).
                let role: redis::Value = redis::cmd("ROLE").query_async(&mut conn).await?;
                let first = match &role {
                    redis::Value::Array(items) => match items.first() {
                        Some(redis::Value::BulkString(b)) => {
                            String::from_utf8_lossy(b).into_owned()
                        }
                        Some(redis::Value::SimpleString(s)) => s.clone(),
                        _ => String::new(),
                    },
                    _ => String::new(),
                };
                if self.addr.cluster().is_some() {
                    super::cluster::check_role(&first, host, *port)?;
                } else {
                    super::sentinel::check_role(&first, host, *port)?;
                }
                // Only a primary is followed by the pub/sub wake-ups and the election log.
                self.target.set(client.clone());
            }
            let mut pipe = redis::pipe();
            for code in scripts::ALL {
                pipe.cmd("SCRIPT").arg("LOAD").arg(code).ignore();
            }
            pipe.cmd("INFO")
                .arg("server")
                .cmd("INFO")
                .arg("persistence")
                .cmd("GET")
                .arg(quarantine::MARKER_KEY)
                .cmd("TIME")
                .cmd("INFO")
                .arg("memory");
            let (server, persistence, mut marker, time, memory): (
                String,
                String,
                Option<String>,
                (u64, u64),
                String,
            ) = pipe.query_async(&mut conn).await?;
            self.warn_if_evicting(&memory);
            let node_ms = time.0.saturating_mul(1000).saturating_add(time.1 / 1000);
            // A node too old for the scripts is refused before anything is written to it.
            check_version(&server, &self.name)?;
            // CONFIG may be renamed or forbidden (managed Redis): then the policy is unknown,
            // and the node is treated as not fsyncing every write.
            let appendfsync: Option<(String, String)> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendfsync")
                .query_async(&mut conn)
                .await
                .ok();
            let run_id = info_field(&server, "run_id").filter(|r| !r.is_empty());
            if let (Some(_), Some(run_id)) = (&primary, &run_id) {
                if let Some(now) =
                    failover_seen(&mut conn, marker.as_deref(), run_id, node_ms).await?
                {
                    marker = now;
                }
            }
            // The node is judged by the marker as found; the one written here is what a
            // clearing must replace.
            let found = marker.clone();
            if let (None, Some(run_id)) = (&marker, &run_id) {
                // The first client to find the marker missing writes it, with the node's time:
                // the marker lives with the data, so its absence shows the data was lost (by a
                // restart or not), and its time tells later clients when that was first seen.
                let value = quarantine::marker(run_id, node_ms);
                let _: Option<String> = redis::cmd("SET")
                    .arg(quarantine::MARKER_KEY)
                    .arg(&value)
                    .arg("NX")
                    .query_async(&mut conn)
                    .await?;
                marker = redis::cmd("GET")
                    .arg(quarantine::MARKER_KEY)
                    .query_async(&mut conn)
                    .await?;
            }
            self.set
                .read(self.index, &mut conn, marker.as_deref())
                .await?;
            if let (Some((host, port)), Some(run_id)) = (&primary, &run_id) {
                self.saw_primary(format!("{host}:{port}"), run_id);
            }
            Ok::<_, RedisError>((
                conn,
                server,
                persistence,
                appendfsync,
                found,
                marker,
                node_ms,
            ))
        };
        let (conn, server, persistence, appendfsync, found, marker, node_ms) =
            tokio::time::timeout(self.connect_timeout, setup)
                .await
                .map_err(|_| {
                    RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the node did not finish the connection set-up in time",
                    ))
                })??;
        let appendfsync = appendfsync.map(|(_, v)| v);
        let info = self.judge(&server, &persistence, appendfsync, found, marker, node_ms);
        Ok((conn, Arc::new(info)))
    }

    /// The driver's client for this connection: the URL's node, or for a Sentinel node the
    /// primary the Sentinels name now, or for a cluster node the primary that owns the tag's
    /// slot now (with its address), which the pub/sub wake-ups and the election log follow once
    /// its `ROLE` was checked.
    async fn resolve(&self) -> Result<(redis::Client, Option<(String, u16)>), RedisError> {
        // Half the connect timeout: the rest is for the primary's own set-up.
        let (host, port) = match (self.addr.sentinel(), self.addr.cluster()) {
            (Some(group), _) => super::sentinel::primary(group, self.connect_timeout / 2).await?,
            (None, Some(_)) => super::cluster::owner(&self.addr, self.connect_timeout / 2).await?,
            (None, None) => return Ok((self.target.get()?, None)),
        };
        let client = redis::Client::open(self.addr.primary_url(&host, port))?;
        Ok((client, Some((host, port))))
    }

    /// Records the primary a Sentinel node's connection reached, and says so when it is
    /// another one than the last connection's: a failover (or a restart), which the marker's
    /// judgment treats as a loss of data (`quarantine.rs`).
    fn saw_primary(&self, addr: String, run_id: &str) {
        let mut last = self.primary.lock().expect("primary mutex poisoned");
        if let Some((was, was_run)) = last.as_ref() {
            if *was != addr || was_run != run_id {
                tracing::warn!(
                    node = %self.name,
                    "node {}: the primary changed from {was} (run id {was_run}) to {addr} (run id {run_id}): a failover or a restart, which may have lost the last writes; it is judged as a node that lost its data (restart quarantine, amnesia guard)",
                    self.name
                );
            }
        }
        *last = Some((addr, run_id.to_string()));
    }

    /// Warns, once per node and client, when the node's eviction policy may drop lock keys
    /// under memory pressure: a lock whose key is evicted is free for another client while its
    /// holder goes on (`fencelock doctor` fails such a node).
    fn warn_if_evicting(&self, memory: &str) {
        let policy = info_field(memory, "maxmemory_policy").unwrap_or_default();
        if policy.is_empty() || policy == "noeviction" {
            return;
        }
        if !self
            .evicting_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                node = %self.name,
                "node {} has maxmemory-policy {policy}: under memory pressure it may evict lock keys, and another client then takes a lock that is still held; set maxmemory-policy noeviction on lock nodes (CONFIG SET maxmemory-policy noeviction, and in redis.conf)",
                self.name
            );
        }
    }

    /// Judges the node from what it reported (see `quarantine.rs`).
    fn judge(
        &self,
        server: &str,
        persistence: &str,
        appendfsync: Option<String>,
        found: Option<String>,
        marker: Option<String>,
        node_ms: u64,
    ) -> NodeInfo {
        let run_id = info_field(server, "run_id").unwrap_or_default();
        let uptime = info_field(server, "uptime_in_seconds")
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_secs);
        let aof = info_field(persistence, "aof_enabled").as_deref() == Some("1");
        let report = quarantine::Report {
            run_id: Some(run_id.as_str()),
            uptime,
            fsync_always: aof && appendfsync.as_deref() == Some("always"),
            marker: found.as_deref(),
            node_ms: Some(node_ms),
        };
        let verdict = if self.quarantine.enabled {
            quarantine::judge(&report, Instant::now())
        } else {
            Verdict::Counted("restart quarantine is off")
        };
        if let Verdict::Suspect { why, .. } = &verdict {
            tracing::warn!(
                node = %self.addr,
                run_id = %run_id,
                "node {} in restart quarantine: {why}; it does not count toward the quorum until every lock it may have forgotten has expired (at most the longest TTL in use). If it restarted, find out why; to avoid the wait, persist with appendfsync always, or mark a node that never held locks as new (`fencelock up` does)",
                self.addr
            );
        }
        NodeInfo {
            run_id,
            verdict,
            marker,
            standing: Mutex::new(Resolution::default()),
            ahead: Mutex::new(Vec::new()),
        }
    }
}

/// On a Sentinel or cluster node, a marker that names another run than the primary's (a promoted
/// replica carries the old primary's marker by replication; a slot's new owner, by migration)
/// means a failover, which may have lost the
/// last lock keys and counter raises: the marker is replaced by one of a loss seen now and the
/// node counter deleted, in one step (`scripts::FAILOVER`), so that this client and every later
/// one judge the node as restarted without persistence. Returns the marker after that (the one
/// the first client to see the failover wrote), or `None` when the marker names this run.
async fn failover_seen(
    conn: &mut NodeConnection,
    marker: Option<&str>,
    run_id: &str,
    node_ms: u64,
) -> Result<Option<Option<String>>, RedisError> {
    if marker.and_then(crate::pure::nodeset::identity) == Some(run_id) {
        return Ok(None);
    }
    let _: i64 = scripts::FAILOVER
        .key(quarantine::MARKER_KEY)
        .key(crate::pure::fencing::FENCE_COUNTER_KEY)
        .arg(marker.unwrap_or(""))
        .arg(quarantine::marker(run_id, node_ms))
        .invoke_async(conn)
        .await?;
    let now: Option<String> = redis::cmd("GET")
        .arg(quarantine::MARKER_KEY)
        .query_async(conn)
        .await?;
    Ok(Some(now))
}

/// Refuses a node too old for the scripts (see `version.rs`), judged by its `INFO server` reply
/// (the one the connection set-up reads anyway). The error names the node and the way out.
fn check_version(server: &str, node: &str) -> Result<(), RedisError> {
    let found = info_field(server, "redis_version").unwrap_or_default();
    match version::refusal(&found, node) {
        None => Ok(()),
        Some(why) => Err(RedisError::from((
            redis::ErrorKind::Client,
            version::UNSUPPORTED,
            why,
        ))),
    }
}

/// A field of an `INFO` reply.
fn info_field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

impl NodeInfo {
    /// The announcement of `ttl` on this connection that a plain grant sent now (its reply
    /// counted within `limit`) can rely on, if there is one (`pure/ahead.rs`).
    pub(crate) fn ahead(
        &self,
        ttl: Duration,
        now: Instant,
        limit: Duration,
        drift: Duration,
    ) -> Option<Ahead> {
        let kept = self.ahead.lock().expect("ahead mutex poisoned");
        kept.iter()
            .find(|(t, _)| *t == ttl)
            .map(|(_, a)| *a)
            .filter(|a| a.serves(now, limit, ttl, drift))
    }

    /// Keeps `fresh`, an announcement of `ttl` this connection just sent, when it covers longer
    /// than the one kept.
    pub(crate) fn announced(&self, ttl: Duration, drift: Duration, fresh: Ahead) {
        let mut kept = self.ahead.lock().expect("ahead mutex poisoned");
        match kept.iter_mut().find(|(t, _)| *t == ttl) {
            Some((_, a)) => *a = ahead::later(*a, fresh, ttl, drift),
            None => kept.push((ttl, fresh)),
        }
    }

    /// Whether `found`, the node's marker read right behind a grant on this connection, shows
    /// that the node kept its data since this connection judged it: the marker it had then, or
    /// the clear marker of the same run (a quarantine seen to end by some client). Anything else
    /// (gone, or written again after a loss) means the grant may be on a node that forgot the
    /// locks it granted before (issue 27, item 4).
    pub(crate) fn marker_holds(&self, found: Option<&str>) -> bool {
        match found {
            None => false,
            Some(found) => {
                self.marker.as_deref() == Some(found)
                    || (!self.run_id.is_empty() && found == quarantine::clear_marker(&self.run_id))
            }
        }
    }

    /// The marker this connection found the node with, for messages.
    pub(crate) fn marker(&self) -> Option<&str> {
        self.marker.as_deref()
    }

    /// Where the node stands now.
    pub(crate) fn standing(&self) -> Standing {
        if !matches!(self.verdict, Verdict::Suspect { .. }) {
            return Standing::Counted;
        }
        let resolution = self.standing.lock().expect("standing mutex poisoned");
        self.standing_of(&resolution, Instant::now())
    }

    fn standing_of(&self, resolution: &Resolution, now: Instant) -> Standing {
        let Verdict::Suspect { why, .. } = &self.verdict else {
            return Standing::Counted;
        };
        if resolution.confirmed {
            return Standing::Counted;
        }
        match resolution.counted_from {
            // Not read yet, or over by the first read's reckoning: read (again) to confirm.
            None => Standing::Unknown,
            Some((from, _)) if now >= from => Standing::Unknown,
            Some((from, longest)) => Standing::Excluded(format!(
                "restart quarantine: {}, and {why}; counts again in {} (longest TTL in use: {})",
                self.restarted(now),
                quarantine::secs(from - now),
                quarantine::secs(longest)
            )),
        }
    }

    /// "restarted 3.2s ago" (at most: uptime is reported in whole seconds).
    fn restarted(&self, now: Instant) -> String {
        match &self.verdict {
            Verdict::Suspect { seen, age, .. } => format!(
                "restarted {} ago",
                quarantine::secs(*age + now.saturating_duration_since(*seen))
            ),
            Verdict::Counted(_) => "counted".to_string(),
        }
    }

    /// Records the longest TTL in use, just read from the other nodes: the node counts once it
    /// has passed since the restart, and a read that finds it passed confirms the node.
    pub(crate) fn resolve(&self, longest: Duration) -> Standing {
        let Some(from) = self.verdict.counted_from(longest) else {
            return Standing::Counted;
        };
        let mut resolution = self.standing.lock().expect("standing mutex poisoned");
        // Two rounds may read at once: the later end wins.
        if resolution.counted_from.is_none_or(|(f, _)| f < from) {
            resolution.counted_from = Some((from, longest));
        }
        let now = Instant::now();
        if resolution.counted_from.is_some_and(|(f, _)| now >= f) {
            resolution.confirmed = true;
        }
        match self.standing_of(&resolution, now) {
            // Unknown means "over by the reckoning, read again to confirm", and the read just
            // recorded is that confirmation (`confirmed` was set above when it is over).
            Standing::Unknown => Standing::Counted,
            standing => standing,
        }
    }

    /// Why the node is excluded while the longest TTL in use is unknown.
    pub(crate) fn unknown_why(&self, read: usize, needed: usize) -> String {
        let why = match &self.verdict {
            Verdict::Suspect { why, .. } => why.as_str(),
            Verdict::Counted(why) => why,
        };
        format!(
            "restart quarantine: {}, and {why}; not counted until the longest TTL in use is read from {needed} other node(s) ({read} answered)",
            self.restarted(Instant::now())
        )
    }

    /// Once a suspect node's quarantine is over: the marker value to replace and the clear one
    /// (once per connection), so that later clients count the node at once.
    pub(crate) fn take_clearing(&self) -> Option<(String, String)> {
        if !matches!(self.verdict, Verdict::Suspect { .. }) || self.run_id.is_empty() {
            return None;
        }
        let old = self.marker.clone()?;
        let mut resolution = self.standing.lock().expect("standing mutex poisoned");
        if resolution.cleared || !resolution.confirmed {
            return None;
        }
        resolution.cleared = true;
        Some((old, quarantine::clear_marker(&self.run_id)))
    }
}

/// Whether an error means the connection is gone and must be replaced.
pub(crate) fn is_broken(e: &RedisError) -> bool {
    // READONLY: the node is a replica now (a primary demoted by a failover); a new connection
    // asks the Sentinels again, and is never kept on a replica (`sentinel.rs`).
    // MOVED, CLUSTERDOWN: the tag's slot is not served on this cluster node (any more, or not
    // now); a new connection reads the slot map again (`cluster.rs`). An ASK that reaches here
    // could not be followed (`tagged.rs`): the same, and a script's "non local key" once an
    // extension's or release's retries ran out (`tagged.rs`). TRYAGAIN keeps the connection.
    e.is_connection_dropped()
        || e.is_io_error()
        || e.is_unrecoverable_error()
        || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        || super::cluster::moved(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of `INFO server` as Redis 4.0.14 sends it. A mock, because no Redis 4 binary
    /// exists on this machine (the tests run redis-server 7.0.15) and a real server cannot be
    /// made to report another version; the text goes through the same function the connection
    /// set-up runs on a node's reply, and the error through the same description the votes use.
    const REDIS_4_INFO: &str = "# Server\r\nredis_version:4.0.14\r\nredis_git_sha1:00000000\r\n\
        redis_git_dirty:0\r\nredis_build_id:b5c54d4b5a1bb9c5\r\nredis_mode:standalone\r\n\
        os:Linux 5.15.0 x86_64\r\narch_bits:64\r\nrun_id:9d5f0b1c2e3a4b5c6d7e8f90a1b2c3d4e5f60718\r\n\
        tcp_port:6380\r\nuptime_in_seconds:42\r\n";

    #[test]
    fn a_node_below_redis_5_is_refused_with_the_way_out() {
        let node = "redis://127.0.0.1:6380/0";
        let e = check_version(REDIS_4_INFO, node).unwrap_err();
        assert_eq!(
            super::super::describe::describe(&e).to_string(),
            "redis 4.0.14 on redis://127.0.0.1:6380/0: fencelock's scripts need Redis 5 or newer; upgrade the node"
        );
        let newer = REDIS_4_INFO.replace("redis_version:4.0.14", "redis_version:5.0.0");
        assert!(check_version(&newer, node).is_ok());
        // A reply without the field is not judged (the scripts' own errors then say why).
        assert!(check_version("# Server\r\nrun_id:1\r\n", node).is_ok());
    }
}
