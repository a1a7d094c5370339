//! A TCP proxy in front of each node: clients connect through it, so the nemesis can add
//! latency to a node's connections or cut the node off (a partition) without touching the node.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The knobs of one proxy, shared with the nemesis.
#[derive(Debug)]
pub struct ProxyControl {
    delay_us: AtomicU64,
    cut: AtomicBool,
    generation: watch::Sender<u64>,
}

impl ProxyControl {
    /// Delays every chunk sent toward the node by `delay` (zero: none).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_us
            .store(delay.as_micros() as u64, Ordering::Relaxed);
    }

    /// Cuts the node off: open connections are closed and new ones are closed at once, until
    /// [`heal`](Self::heal).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us.load(Ordering::Relaxed))
    }
}

/// A running proxy: listens on a free loopback port and forwards to the node's port.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    control: Arc<ProxyControl>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to `127.0.0.1:upstream` on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// Fails when no loopback port can be bound.
    pub async fn start(upstream: u16) -> io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let control = Arc::new(ProxyControl {
            delay_us: AtomicU64::new(0),
            cut: AtomicBool::new(false),
            generation: watch::channel(0).0,
        });
        let task = tokio::spawn(accept_loop(listener, upstream, control.clone()));
        Ok(Proxy {
            port,
            control,
            task,
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The knobs.
    pub fn control(&self) -> Arc<ProxyControl> {
        self.control.clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: u16, control: Arc<ProxyControl>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        if control.cut.load(Ordering::SeqCst) {
            drop(socket);
            continue;
        }
        tokio::spawn(forward(socket, upstream, control.clone()));
    }
}

async fn forward(client: TcpStream, upstream: u16, control: Arc<ProxyControl>) {
    let mut generation = control.generation.subscribe();
    let connect = TcpStream::connect(("127.0.0.1", upstream));
    let Ok(Ok(node)) = tokio::time::timeout(Duration::from_secs(1), connect).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = node.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (node_read, node_write) = node.into_split();
    tokio::select! {
        _ = pump(client_read, node_write, Some(control.clone())) => {}
        _ = pump(node_read, client_write, None) => {}
        _ = generation.changed() => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delayed: Option<Arc<ProxyControl>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Some(control) = &delayed {
            let delay = control.delay();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
