//! The etcd baseline: what etcd's own `concurrency.Mutex` sends, written by hand over
//! etcd-client with nothing around it. A lease (`LeaseGrant`, the mutex's session), a
//! put-if-absent transaction of the lock key attached to it (`If(CreateRevision(key) == 0)
//! Then(Put(key, token, lease))`), and a `Delete` to release. No waiting line, no timeouts, no
//! retries: what a lock costs on the wire of one etcd cluster and nothing else.

use std::time::Duration;

use anyhow::{bail, Context};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};

/// One client of the cluster (all the URLs name its members) and the lease TTL.
#[derive(Clone)]
pub(crate) struct RawEtcd {
    client: Client,
    lease_secs: i64,
    /// A lease kept for the life of this value (a contended worker's session, as
    /// `concurrency.NewSession` makes one per client); without it every acquisition grants its
    /// own, as the library does.
    session: Option<i64>,
}

impl std::fmt::Debug for RawEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawEtcd")
            .field("lease_secs", &self.lease_secs)
            .finish_non_exhaustive()
    }
}

impl RawEtcd {
    /// Connects to the cluster named by `urls` (`etcd://[user:password@]host:port`).
    ///
    /// # Errors
    ///
    /// A URL that is not `etcd://`, or a cluster that cannot be reached.
    pub(crate) async fn connect(urls: &[String], ttl: Duration) -> anyhow::Result<RawEtcd> {
        let mut endpoints = Vec::new();
        let mut login = None;
        for (i, url) in urls.iter().enumerate() {
            let Some(rest) = url.strip_prefix("etcd://") else {
                bail!("raw etcd baseline: node {} ({url}) is not an etcd:// URL; give the same backend for every node", i + 1);
            };
            let rest = rest.trim_end_matches('/');
            let hostport = match rest.rsplit_once('@') {
                Some((auth, hp)) => {
                    let (user, pass) = auth.split_once(':').unwrap_or((auth, ""));
                    login = Some((user.to_string(), pass.to_string()));
                    hp
                }
                None => rest,
            };
            endpoints.push(format!("http://{hostport}"));
        }
        let mut options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(5));
        if let Some((user, pass)) = login {
            options = options.with_user(user, pass);
        }
        let client = Client::connect(&endpoints, Some(options))
            .await
            .context("raw etcd baseline: cannot connect to the cluster")?;
        let lease_secs = i64::try_from(ttl.as_secs().max(1) + u64::from(ttl.subsec_nanos() > 0))
            .unwrap_or(i64::MAX);
        // Fail here, once, rather than on every cycle.
        client
            .kv_client()
            .get("fencelock-bench:ping", None)
            .await
            .context("raw etcd baseline: the cluster does not answer")?;
        Ok(RawEtcd {
            client,
            lease_secs,
            session: None,
        })
    }

    /// The same client with a session lease of its own, granted now.
    ///
    /// # Errors
    ///
    /// When the grant fails.
    pub(crate) async fn with_session(&self) -> anyhow::Result<RawEtcd> {
        let lease = self
            .client
            .lease_client()
            .grant(self.lease_secs, None)
            .await
            .context("raw etcd baseline: lease grant")?;
        let mut out = self.clone();
        out.session = Some(lease.id());
        Ok(out)
    }

    /// Keeps the session lease alive until the returned task is aborted (for `held`).
    pub(crate) async fn keep_session_alive(
        &self,
        every: Duration,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let lease = self.session.context("no session lease")?;
        let (mut keeper, mut stream) = self.client.lease_client().keep_alive(lease).await?;
        Ok(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if keeper.keep_alive().await.is_err() {
                    break;
                }
                if !matches!(stream.message().await, Ok(Some(_))) {
                    break;
                }
            }
        }))
    }

    /// Lease grant (unless this value has a session) and the put-if-absent transaction; true when
    /// the key was ours to create.
    pub(crate) async fn acquire(&self, key: &str, token: &str) -> bool {
        let lease = match self.session {
            Some(lease) => lease,
            None => match self
                .client
                .lease_client()
                .grant(self.lease_secs, None)
                .await
            {
                Ok(grant) => grant.id(),
                Err(_) => return false,
            },
        };
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                token,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        matches!(self.client.kv_client().txn(txn).await, Ok(r) if r.succeeded())
    }

    /// Deletes the key (as `Mutex.Unlock` does); true when there was one to delete.
    pub(crate) async fn release(&self, key: &str) -> bool {
        matches!(self.client.kv_client().delete(key, None).await, Ok(r) if r.deleted() > 0)
    }

    /// One linearizable read: a round trip to the cluster (through its leader).
    pub(crate) async fn ping(&self) -> Duration {
        let started = std::time::Instant::now();
        let _ = self
            .client
            .kv_client()
            .get("fencelock-bench:ping", None)
            .await;
        started.elapsed()
    }

    /// The counter of `contended`: its value (0 when absent).
    pub(crate) async fn read_counter(&self, key: &str) -> anyhow::Result<i64> {
        let resp = self.client.kv_client().get(key, None).await?;
        let Some(kv) = resp.kvs().first() else {
            return Ok(0);
        };
        Ok(kv.value_str()?.parse()?)
    }

    /// Writes the counter of `contended`.
    pub(crate) async fn write_counter(&self, key: &str, value: i64) -> anyhow::Result<()> {
        self.client
            .kv_client()
            .put(key, value.to_string(), None)
            .await?;
        Ok(())
    }

    /// Deletes the counter of `contended`.
    pub(crate) async fn delete(&self, key: &str) {
        let _ = self.client.kv_client().delete(key, None).await;
    }
}
