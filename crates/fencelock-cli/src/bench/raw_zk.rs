//! The ZooKeeper baseline: the plainest lock ZooKeeper offers, written by hand over
//! zookeeper-client with nothing around it. One ephemeral node at the key (`create`, which fails
//! with `NodeExists` while another holds it) and a `delete` to release, on one session per
//! client. Curator's recipe, which the library follows, adds a sequence, a list of the line and
//! a watch: the ratio shows what that costs over the least a ZooKeeper lock needs.

use std::time::{Duration, Instant};

use anyhow::Context;
use zookeeper_client as zk;

/// The lock nodes: they go with the session, as the library's do.
const LOCK: zk::CreateOptions<'static> =
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
/// The directory and the counters.
const PLAIN: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());

/// One session on the ensemble and the directory of the baseline's nodes.
#[derive(Clone)]
pub(crate) struct RawZk {
    client: zk::Client,
    dir: String,
}

impl std::fmt::Debug for RawZk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawZk")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl RawZk {
    /// Opens a session (timeout: the TTL, as the library's) on the ensemble of `urls` (one
    /// `zk://` URL) and makes the directory `<chroot>/fencelock-bench`.
    ///
    /// # Errors
    ///
    /// A URL that is not one `zk://` URL, or an ensemble that cannot be reached.
    pub(crate) async fn connect(urls: &[String], ttl: Duration) -> anyhow::Result<RawZk> {
        let [url] = urls else {
            anyhow::bail!(
                "raw ZooKeeper baseline: give one zk:// URL listing the ensemble's servers"
            );
        };
        let addr = fencelock::NodeAddr::parse(url)?;
        let (servers, chroot) = fencelock::protocol::zk_ensemble(&addr)
            .context("raw ZooKeeper baseline: not a zk:// URL")?;
        let client = zk::Client::connector()
            .with_session_timeout(ttl)
            .connect(&servers.join(","))
            .await
            .context("raw ZooKeeper baseline: cannot open a session")?;
        let dir = format!("{chroot}/fencelock-bench");
        client
            .mkdir(&dir, &PLAIN)
            .await
            .context("raw ZooKeeper baseline: cannot make its directory")?;
        Ok(RawZk { client, dir })
    }

    fn path(&self, key: &str) -> String {
        // A key is one path segment: `/` would nest.
        format!("{}/{}", self.dir, key.replace('/', "%2F"))
    }

    /// Creates the key's ephemeral node; true when it was ours to create.
    pub(crate) async fn acquire(&self, key: &str, token: &str) -> bool {
        self.client
            .create(&self.path(key), token.as_bytes(), &LOCK)
            .await
            .is_ok()
    }

    /// Deletes the key's node; true when there was one.
    pub(crate) async fn release(&self, key: &str) -> bool {
        self.client.delete(&self.path(key), None).await.is_ok()
    }

    /// One round trip: a `sync` (through the leader) of the directory.
    pub(crate) async fn ping(&self) -> Duration {
        let started = Instant::now();
        let _ = self.client.sync(&self.dir).await;
        started.elapsed()
    }

    /// The counter of `contended`: its value (0 when absent).
    pub(crate) async fn read_counter(&self, key: &str) -> anyhow::Result<i64> {
        match self.client.get_data(&self.path(key)).await {
            Ok((data, _)) => Ok(String::from_utf8(data)?.parse()?),
            Err(zk::Error::NoNode) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the counter of `contended`.
    pub(crate) async fn write_counter(&self, key: &str, value: i64) -> anyhow::Result<()> {
        let path = self.path(key);
        let data = value.to_string();
        match self.client.set_data(&path, data.as_bytes(), None).await {
            Err(zk::Error::NoNode) => {
                self.client.create(&path, data.as_bytes(), &PLAIN).await?;
                Ok(())
            }
            other => other.map(|_| ()).map_err(Into::into),
        }
    }

    /// Deletes the counter of `contended`.
    pub(crate) async fn delete(&self, key: &str) {
        let _ = self.client.delete(&self.path(key), None).await;
    }
}
