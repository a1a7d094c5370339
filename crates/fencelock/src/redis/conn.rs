//! One connection per node, established lazily in the background and replaced when it breaks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};
use tokio::sync::OnceCell;

use crate::error::Error;
use crate::node::NodeAddr;

/// A connection attempt that any number of requests may wait on.
#[derive(Debug, Default)]
struct Slot {
    conn: OnceCell<MultiplexedConnection>,
    connecting: AtomicBool,
}

/// A node and its (multiplexed, pipelining) connection.
pub(crate) struct NodeConn {
    addr: NodeAddr,
    client: redis::Client,
    connect_timeout: Duration,
    slot: Mutex<Arc<Slot>>,
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
    slot: Arc<Slot>,
}

impl NodeConn {
    /// Prepares a node; no I/O happens until the first request.
    pub(crate) fn new(addr: NodeAddr, connect_timeout: Duration) -> Result<NodeConn, Error> {
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
            addr,
            client,
            connect_timeout,
            slot: Mutex::new(Arc::new(Slot::default())),
        })
    }

    pub(crate) fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    /// A connection to this node, waiting for the one being established if need be.
    ///
    /// The attempt runs in a spawned task, so a request that gives up (its node timeout ran
    /// out) does not cancel it: the next request finds the connection ready.
    pub(crate) async fn get(&self) -> Result<Handle, RedisError> {
        let slot = self.slot.lock().expect("slot mutex poisoned").clone();
        if let Some(conn) = slot.conn.get() {
            return Ok(Handle {
                conn: conn.clone(),
                slot,
            });
        }
        if !slot.connecting.swap(true, Ordering::AcqRel) {
            let bg = slot.clone();
            let client = self.client.clone();
            let timeout = self.connect_timeout;
            tokio::spawn(async move {
                let _ = bg.conn.get_or_try_init(|| connect(client, timeout)).await;
                bg.connecting.store(false, Ordering::Release);
            });
        }
        let client = self.client.clone();
        let timeout = self.connect_timeout;
        let conn = slot
            .conn
            .get_or_try_init(|| connect(client, timeout))
            .await?
            .clone();
        Ok(Handle { conn, slot })
    }

    /// Forgets a connection that broke, so the next request connects afresh (a node that was
    /// killed and restarted answers again without any action from the caller).
    pub(crate) fn discard(&self, handle: &Handle) {
        let mut slot = self.slot.lock().expect("slot mutex poisoned");
        if Arc::ptr_eq(&slot, &handle.slot) {
            *slot = Arc::new(Slot::default());
        }
    }
}

async fn connect(
    client: redis::Client,
    timeout: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    // The response timeout is ours to enforce per request (the node timeout); the driver's own
    // 500 ms default would be both too long and redundant.
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Whether an error means the connection is gone and must be replaced.
pub(crate) fn is_broken(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error()
}
