//! The simulation's seam (issue 28, `crates/fencelock-sim`): where a node connection comes from.
//! Unused, every connection is a TCP (or TLS) connection the `redis` crate opens, and the only
//! cost is one thread-local read per connection opened (none per request). The simulation
//! installs a [`Connector`] on its (single) thread and hands the client in-memory streams to
//! simulated nodes instead. Time needs no seam here: the simulation runs the client on a
//! paused tokio clock and serves `std`'s clock from it (see docs/simulation.md).
//! Not a stable interface.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::{AsyncConnectionConfig, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to a node.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A connection being opened.
pub type Connecting = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send>>;

/// Opens node connections for the client instead of the network.
pub trait Connector {
    /// A connection to the node at `addr` (`host:port` as the client's node URL names it).
    fn connect(&self, addr: &str) -> Connecting;
}

thread_local! {
    static CONNECTOR: RefCell<Option<Rc<dyn Connector>>> = const { RefCell::new(None) };
}

/// Routes this thread's node connections through `connector` until the guard is dropped.
pub fn install(connector: Rc<dyn Connector>) -> Installed {
    CONNECTOR.with(|c| *c.borrow_mut() = Some(connector));
    Installed(())
}

/// Removes the installed connector when dropped.
#[derive(Debug)]
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        CONNECTOR.with(|c| *c.borrow_mut() = None);
    }
}

fn open(client: &redis::Client) -> Option<Connecting> {
    CONNECTOR.with(|c| {
        c.borrow()
            .as_ref()
            .map(|c| c.connect(&client.get_connection_info().addr().to_string()))
    })
}

/// A multiplexed connection to the node `client` names.
pub(crate) async fn multiplexed(
    client: &redis::Client,
    config: &AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection> {
    let Some(connecting) = open(client) else {
        return client
            .get_multiplexed_async_connection_with_config(config)
            .await;
    };
    let stream = connecting.await?;
    let (conn, driver) = MultiplexedConnection::new_with_config(
        client.get_connection_info().redis_settings(),
        stream,
        config.clone(),
    )
    .await?;
    tokio::spawn(driver);
    Ok(conn)
}

/// A pub/sub connection to the node `client` names.
pub(crate) async fn pubsub(client: &redis::Client) -> RedisResult<PubSub> {
    let Some(connecting) = open(client) else {
        return client.get_async_pubsub().await;
    };
    let stream = connecting.await?;
    PubSub::new(client.get_connection_info().redis_settings(), stream).await
}
