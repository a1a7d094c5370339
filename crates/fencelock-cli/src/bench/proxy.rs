//! `bench --delay-nodes K --delay D`: a TCP proxy on 127.0.0.1 in front of K of the nodes, which
//! holds back every reply (or request, or both) for D, so that nodes at different distances (the
//! deployment Redlock is meant for) are measured by the bench itself, the library and the
//! baselines alike.
//!
//! Each chunk read from one side is written to the other side D after it was read, in order: a
//! pure added latency, not a bandwidth limit (a reply read while an earlier one waits is not held
//! up by more than its own D).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub(crate) use crate::cli::DelayOn;

/// Proxies that run until dropped (their tasks are aborted then).
#[derive(Debug)]
pub(crate) struct Proxies {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Proxies {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Puts a delaying proxy in front of the last `count` nodes of `urls` and returns the URLs to
/// use instead (the others unchanged). The nodes farthest down the list are the distant ones,
/// so the first node (where `contended` keeps its counter) stays near.
///
/// # Errors
///
/// When `count` exceeds the nodes, a URL has no host and port the proxy can reach, or the
/// proxy cannot listen.
pub(crate) async fn delay_nodes(
    urls: &[String],
    count: usize,
    delay: Duration,
    on: DelayOn,
) -> anyhow::Result<(Vec<String>, Proxies)> {
    if count > urls.len() {
        bail!(
            "--delay-nodes {count}: there are only {} node(s); give at most {}",
            urls.len(),
            urls.len()
        );
    }
    let mut out = urls.to_vec();
    let mut proxies = Proxies { tasks: Vec::new() };
    for (i, url) in out.iter_mut().enumerate().skip(urls.len() - count) {
        let (target, rewrite) = split_url(url)
            .with_context(|| format!("--delay-nodes: node {} ({url}) cannot be proxied", i + 1))?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("--delay-nodes: cannot listen on 127.0.0.1")?;
        let local = listener.local_addr()?;
        proxies
            .tasks
            .push(tokio::spawn(serve(listener, target, delay, on)));
        *url = rewrite(local);
    }
    Ok((out, proxies))
}

/// The `host:port` a URL names, and a function that puts another address in its place.
#[allow(clippy::type_complexity)]
fn split_url(url: &str) -> anyhow::Result<(String, Box<dyn Fn(SocketAddr) -> String>)> {
    let (scheme, rest) = url
        .split_once("://")
        .context("no scheme (expected redis://host:port or etcd://host:port)")?;
    if scheme.ends_with('s') && scheme != "redis" {
        // rediss://, etcds://: the proxy would pass TLS through untouched, but the certificate
        // would not match 127.0.0.1.
        bail!("TLS nodes cannot be proxied; use plain nodes to measure distance");
    }
    let (auth, hostpath) = match rest.rsplit_once('@') {
        Some((auth, hp)) => (format!("{auth}@"), hp),
        None => (String::new(), rest),
    };
    let (hostport, path) = match hostpath.find('/') {
        Some(p) => (&hostpath[..p], &hostpath[p..]),
        None => (hostpath, ""),
    };
    let target = if hostport.contains(':') && !hostport.ends_with(']') {
        hostport.to_string()
    } else {
        let port = if scheme.starts_with("etcd") {
            2379
        } else {
            6379
        };
        format!("{hostport}:{port}")
    };
    let (scheme, path) = (scheme.to_string(), path.to_string());
    Ok((
        target,
        Box::new(move |addr| format!("{scheme}://{auth}{addr}{path}")),
    ))
}

async fn serve(listener: TcpListener, target: String, delay: Duration, on: DelayOn) {
    while let Ok((client, _)) = listener.accept().await {
        let target = target.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(&target).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let up = matches!(on, DelayOn::Requests | DelayOn::Both).then_some(delay);
            let down = matches!(on, DelayOn::Replies | DelayOn::Both).then_some(delay);
            tokio::join!(
                pipe(cr, sw, up.unwrap_or_default()),
                pipe(sr, cw, down.unwrap_or_default())
            );
        });
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        // Dropping `tx` ends the writer once it has written what was read.
    };
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_everything_but_the_address() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let (target, rewrite) = split_url("redis://:pw@10.0.0.1:6380/2").unwrap();
        assert_eq!(target, "10.0.0.1:6380");
        assert_eq!(rewrite(addr), "redis://:pw@127.0.0.1:4000/2");
        let (target, rewrite) = split_url("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(target, "127.0.0.1:2379");
        assert_eq!(rewrite(addr), "etcd://127.0.0.1:4000");
        let (target, _) = split_url("redis://localhost").unwrap();
        assert_eq!(target, "localhost:6379");
        assert!(split_url("rediss://host:6379").is_err());
        assert!(split_url("host:6379").is_err());
    }

    #[tokio::test]
    async fn a_reply_comes_back_after_the_delay() {
        let echo = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let url = format!("redis://{echo_addr}");
        let delay = Duration::from_millis(50);
        let (urls, _proxies) = delay_nodes(&[url], 1, delay, DelayOn::Replies)
            .await
            .unwrap();
        let proxied = urls[0].strip_prefix("redis://").unwrap();
        let mut c = TcpStream::connect(proxied).await.unwrap();
        let started = std::time::Instant::now();
        c.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
    }
}
