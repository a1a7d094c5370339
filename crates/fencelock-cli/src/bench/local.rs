//! `bench --local N`: redis-server nodes started for one bench run and stopped when it ends,
//! so that the bench is one command. Plain child processes (not daemonized, unlike the dev set
//! of `fencelock up`), on free ports of 127.0.0.1, without persistence; killed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// How long a node has to answer PING after starting.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// Nodes that live as long as this value.
#[derive(Debug)]
pub(crate) struct LocalNodes {
    children: Vec<Child>,
    ports: Vec<u16>,
    dir: PathBuf,
}

impl LocalNodes {
    /// Starts `count` nodes and waits until each answers PING.
    ///
    /// # Errors
    ///
    /// When redis-server is missing or a node does not come up; the nodes started so far are
    /// stopped again (by drop).
    pub(crate) async fn start(count: u16) -> anyhow::Result<LocalNodes> {
        let dir = std::env::temp_dir().join(format!(
            "fencelock-bench-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let mut nodes = LocalNodes {
            children: Vec::new(),
            ports: Vec::new(),
            dir,
        };
        let binary = std::env::var_os("FENCELOCK_REDIS_SERVER")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "redis-server".into());
        // Bind port 0 once per node to learn free ports, holding every listener until all are
        // chosen: a listener dropped at once lets the next bind return the same port, and two
        // nodes on one port are one node (the rest of the window, before each redis-server
        // binds its port, fails loudly below).
        let listeners = (0..count)
            .map(|_| TcpListener::bind(("127.0.0.1", 0)))
            .collect::<std::io::Result<Vec<_>>>()
            .context("cannot find a free port")?;
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<std::io::Result<Vec<u16>>>()
            .context("cannot find a free port")?;
        drop(listeners);
        for port in ports {
            let child = Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args([
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "yes",
                ])
                .arg("--dir")
                .arg(&nodes.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| {
                    format!(
                        "cannot start {} (install Redis or set FENCELOCK_REDIS_SERVER)",
                        binary.to_string_lossy()
                    )
                })?;
            nodes.children.push(child);
            nodes.ports.push(port);
        }
        for &port in &nodes.ports {
            wait_ready(port).await?;
        }
        Ok(nodes)
    }

    /// The node URLs.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }
}

async fn wait_ready(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let url = format!("redis://127.0.0.1:{port}");
    loop {
        let ping = async {
            let mut conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        if tokio::time::timeout(Duration::from_millis(500), ping)
            .await
            .is_ok_and(|r| r.is_ok())
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("redis-server on port {port} did not answer PING within {START_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Drop for LocalNodes {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
