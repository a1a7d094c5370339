//! A TCP proxy on a loopback port that delays what a client sends to a server.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A proxy in front of one server (`127.0.0.1:upstream`): every chunk a client sends reaches
/// the server [`delay`](Self::set_delay) after the proxy read it, in order, whatever else is in
/// flight (a latency, not a bandwidth limit); replies pass at once. Clients connect to
/// [`port`](Self::port) instead of the server's.
///
/// The delay can change while connections are open; it applies to chunks read after the
/// change. Dropping the proxy closes its connections and stops its threads.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// use std::time::Duration;
/// let node = fencelock_testkit::RedisNode::start()?;
/// let proxy = fencelock_testkit::DelayProxy::start(node.port())?;
/// proxy.set_delay(Duration::from_millis(300));
/// let url = format!("redis://127.0.0.1:{}/0", proxy.port());
/// # let _ = url; Ok(()) }
/// ```
#[derive(Debug)]
pub struct DelayProxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    delay_us: AtomicU64,
    closed: AtomicBool,
    /// Every socket the proxy opened, shut down when it is dropped.
    sockets: Mutex<Vec<TcpStream>>,
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`, without delay
    /// until [`set_delay`](Self::set_delay).
    ///
    /// # Errors
    ///
    /// Fails when no loopback port can be bound.
    pub fn start(upstream: u16) -> io::Result<DelayProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            delay_us: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
        });
        let accept_shared = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accept_shared.closed.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let shared = accept_shared.clone();
                thread::spawn(move || {
                    let _ = forward(client, upstream, &shared);
                });
            }
        });
        Ok(DelayProxy { port, shared })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets the delay added to every chunk sent toward the server (zero: none).
    pub fn set_delay(&self, delay: Duration) {
        self.shared
            .delay_us
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `closed`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for socket in self
            .shared
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn forward(client: TcpStream, upstream: u16, shared: &Arc<Shared>) -> io::Result<()> {
    if shared.closed.load(Ordering::SeqCst) {
        return Ok(());
    }
    let server = TcpStream::connect(("127.0.0.1", upstream))?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    {
        let mut sockets = shared.sockets.lock().unwrap_or_else(|e| e.into_inner());
        sockets.push(client.try_clone()?);
        sockets.push(server.try_clone()?);
    }
    // Replies: straight through.
    let (mut from_server, mut to_client) = (server.try_clone()?, client.try_clone()?);
    thread::spawn(move || {
        let _ = io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Write);
    });
    // Requests: read as they come, each written once its due time has come. Reading and
    // writing in separate threads keeps a chunk's delay from adding to the next one's.
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let mut to_server = server;
    thread::spawn(move || {
        for (due, chunk) in rx {
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            if to_server.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to_server.shutdown(Shutdown::Write);
    });
    let mut from_client = client;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = from_client.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        let delay = Duration::from_micros(shared.delay_us.load(Ordering::SeqCst));
        if tx
            .send((Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            return Ok(());
        }
    }
}
