//! One connection per node, established lazily in the background and replaced when it breaks.
//! Each new connection loads the scripts and reads the node's uptime and persistence settings,
//! which decide the restart quarantine.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};

use super::scripts;
use crate::error::Error;
use crate::node::NodeAddr;

/// What a node told us when we connected.
#[derive(Debug, Clone)]
pub(crate) struct NodeInfo {
    pub(crate) run_id: String,
    /// Until when the node is not counted toward a quorum (restart quarantine).
    pub(crate) quarantined_until: Option<Instant>,
    pub(crate) why: String,
}

/// One connection attempt, in a spawned task, that any number of requests wait on.
type Attempt = Shared<BoxFuture<'static, Result<(), RedisError>>>;

/// A node's connection, once established, and the attempt to establish it.
#[derive(Default)]
struct Slot {
    // Shared, not cloned per request: a request only reads it (two strings cloned per request
    // showed up in the profile of the hot path).
    conn: OnceLock<(MultiplexedConnection, Arc<NodeInfo>)>,
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
    /// The longest TTL any client uses on these nodes.
    pub(crate) max_ttl: Duration,
}

/// A node and its (multiplexed, pipelining) connection.
pub(crate) struct NodeConn {
    addr: NodeAddr,
    /// `addr.redacted()`, computed once: every vote names its node, and formatting the URL
    /// anew for each one was the largest single cost of a round on one node (profiled with
    /// callgrind: about 2,000 instructions per vote, a quarter of the library's own work).
    name: Arc<str>,
    client: redis::Client,
    connect_timeout: Duration,
    quarantine: Quarantine,
    slot: Mutex<Arc<Slot>>,
    /// The run id seen at the previous connection, to tell a restart from a reconnect.
    last_run_id: Mutex<Option<String>>,
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
    pub(crate) conn: MultiplexedConnection,
    pub(crate) info: Arc<NodeInfo>,
    slot: Arc<Slot>,
}

impl NodeConn {
    /// Prepares a node; no I/O happens until the first request.
    pub(crate) fn new(
        addr: NodeAddr,
        connect_timeout: Duration,
        quarantine: Quarantine,
    ) -> Result<NodeConn, Error> {
        let client = redis::Client::open(addr.secret_url()).map_err(|e| {
            let hint = if addr.scheme() == crate::node::Scheme::RedisTls {
                "rediss:// needs fencelock's `tls` feature"
            } else {
                "check the URL"
            };
            // The driver's message may quote the URL; keep only its kind.
            Error::config(
                format!("node URL {addr}"),
                format!("the Redis driver rejected it ({:?}); {hint}", e.kind()),
            )
        })?;
        Ok(NodeConn {
            name: addr.redacted().into(),
            addr,
            client,
            connect_timeout,
            quarantine,
            slot: Mutex::new(Arc::new(Slot::default())),
            last_run_id: Mutex::new(None),
        })
    }

    pub(crate) fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    /// The node's URL as votes and logs show it (password redacted).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
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

    async fn connect(&self) -> Result<(MultiplexedConnection, Arc<NodeInfo>), RedisError> {
        // No response timeout in the driver: each request is bounded by its round's deadline
        // (the node timeout), and a driver timer per request would be a second, redundant timer
        // on the hot path. The set-up below is bounded by the connect timeout instead.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let setup = async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let mut pipe = redis::pipe();
            for code in scripts::ALL {
                pipe.cmd("SCRIPT").arg("LOAD").arg(code).ignore();
            }
            pipe.cmd("INFO")
                .arg("server")
                .cmd("INFO")
                .arg("persistence");
            let (server, persistence): (String, String) = pipe.query_async(&mut conn).await?;
            // CONFIG may be renamed or forbidden (managed Redis): then the policy is unknown,
            // and the node is treated as not fsyncing every write.
            let appendfsync: Option<(String, String)> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendfsync")
                .query_async(&mut conn)
                .await
                .ok();
            Ok::<_, RedisError>((conn, server, persistence, appendfsync))
        };
        let (conn, server, persistence, appendfsync) =
            tokio::time::timeout(self.connect_timeout, setup)
                .await
                .map_err(|_| {
                    RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the node did not finish the connection set-up in time",
                    ))
                })??;
        let info = self.judge(&server, &persistence, appendfsync.map(|(_, v)| v));
        Ok((conn, Arc::new(info)))
    }

    /// Decides the quarantine from what the node reported.
    fn judge(&self, server: &str, persistence: &str, appendfsync: Option<String>) -> NodeInfo {
        let field = |text: &str, name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        let run_id = field(server, "run_id").unwrap_or_default();
        let uptime = field(server, "uptime_in_seconds")
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_secs);
        let aof = field(persistence, "aof_enabled").as_deref() == Some("1");
        let fsync_always = aof && appendfsync.as_deref() == Some("always");
        let restarted = {
            let mut last = self.last_run_id.lock().expect("run id mutex poisoned");
            let changed = last.as_ref().is_some_and(|r| *r != run_id);
            *last = Some(run_id.clone());
            changed
        };
        let q = self.quarantine;
        let mut info = NodeInfo {
            run_id,
            quarantined_until: None,
            why: String::new(),
        };
        let Some(uptime) = uptime else {
            return info;
        };
        if q.enabled && uptime < q.max_ttl && !fsync_always {
            let left = q.max_ttl - uptime;
            info.quarantined_until = Some(Instant::now() + left);
            info.why = format!(
                "restarted {uptime:?} ago without appendfsync always; not counted for another {left:?} (max TTL {:?})",
                q.max_ttl
            );
            tracing::warn!(
                node = %self.addr,
                run_id = %info.run_id,
                restarted_since_last_seen = restarted,
                "node in restart quarantine: {}",
                info.why
            );
        }
        info
    }
}

impl NodeInfo {
    /// Why the node must not be counted now, if it must not.
    pub(crate) fn excluded_now(&self) -> Option<String> {
        let until = self.quarantined_until?;
        let now = Instant::now();
        (now < until).then(|| format!("restart quarantine: {} ({:?} left)", self.why, until - now))
    }
}

/// Whether an error means the connection is gone and must be replaced.
pub(crate) fn is_broken(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()
}
