//! Elections on ZooKeeper (Curator's LeaderLatch): leadership is holding the election's lock,
//! the term is the leader's node's czxid, and the announcement is the leader's value written
//! into its own node.
//!
//! An observer lists the election's line and reads the first node (the leader's): a node whose
//! data was written after its creation (version above 0) is an announced leader, reported once
//! when its czxid is larger than the last one reported. It watches the line and the leader's
//! node (a resignation or a death deletes the node; an announcement changes its data), and
//! looks again every third of the session in case a watch was lost with a connection. A leader
//! that comes and goes between two looks is not reported: the next leader's larger term shows
//! the change, as on etcd.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::{line, Fail, ZkBackend, ZkHeld};
use crate::error::{Error, LostCause, Result};
use crate::pure::vote::VoteOutcome;

/// The pause after a failed look (the ensemble down, an election of its own).
const RETRY: Duration = Duration::from_millis(200);

impl ZkBackend {
    /// Writes `value` into the leader's node, only if it is still the node we created (its
    /// first write: version 0).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the node is gone or was written already; [`Error::Unavailable`]
    /// when the ensemble did not answer.
    pub(crate) async fn proclaim(&self, held: &ZkHeld, value: &str) -> Result<()> {
        let started = Instant::now();
        let resource = held.resource.to_string();
        let Some(client) = &held.session else {
            return Err(Error::config(
                "lock",
                "a lock named by its owner value cannot announce a leader",
            ));
        };
        match self
            .call(
                self.request_timeout,
                client.set_data(held.path(), value.as_bytes(), Some(0)),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(Fail::Zk(zk::Error::NoNode | zk::Error::BadVersion)) => Err(Error::lost(
                resource,
                self.votes(VoteOutcome::NotHeld, started.elapsed()),
                LostCause::NotHeld,
            )),
            Err(fail) if fail.session_ended() => Err(Error::lost(
                resource,
                self.votes(fail.outcome(), started.elapsed()),
                LostCause::NotHeld,
            )),
            Err(fail) => Err(self.unavailable(&resource, &fail, started)),
        }
    }
}

/// The leaders of one election as an observer sees them (see the module docs).
pub(crate) struct LeaderWatch {
    backend: Arc<ZkBackend>,
    dir: String,
    /// The last term reported.
    last: u64,
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("dir", &self.dir)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl LeaderWatch {
    /// The leaders of the election whose lock resource is `resource`. No I/O until `next`.
    pub(crate) fn new(backend: Arc<ZkBackend>, resource: &str) -> LeaderWatch {
        LeaderWatch {
            dir: line::lock_dir(&backend.chroot, resource),
            backend,
            last: 0,
        }
    }

    /// The next leader (its term and value), waiting until there is one. Failures of the
    /// ensemble are retried every 200 ms.
    ///
    /// Cancel-safe: nothing is reported before it is returned.
    pub(crate) async fn next(&mut self) -> (u64, String) {
        loop {
            match self.look().await {
                Ok(Some(leader)) => return leader,
                Ok(None) => {}
                Err(fail) => {
                    tracing::debug!(dir = %self.dir, outcome = %fail.outcome(), "election watch failed");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// One look: the leader if it is new, else waits for a change (or the recheck).
    async fn look(&mut self) -> std::result::Result<Option<(u64, String)>, Fail> {
        let b = &self.backend;
        let client = b.session().await?;
        let recheck = (client.session_timeout() / 3).max(Duration::from_millis(100));
        let (children, line_changed) = match b
            .call(b.request_timeout, client.list_and_watch_children(&self.dir))
            .await
        {
            Ok(answer) => answer,
            Err(Fail::Zk(zk::Error::NoNode)) => {
                // No line yet: wait for its directory to be made.
                let (_, made) = b
                    .call(b.request_timeout, client.check_and_watch_stat(&self.dir))
                    .await?;
                let _ = tokio::time::timeout(recheck, made.changed()).await;
                return Ok(None);
            }
            Err(f) => return Err(f),
        };
        let first = children
            .iter()
            .filter_map(|c| line::sequence(c).map(|s| (s, c)))
            .min_by_key(|(s, _)| *s);
        let Some((_, first)) = first else {
            let _ = tokio::time::timeout(recheck, line_changed.changed()).await;
            return Ok(None);
        };
        let path = format!("{}/{first}", self.dir);
        let (data, stat, node_changed) = match b
            .call(b.request_timeout, client.get_and_watch_data(&path))
            .await
        {
            Ok(answer) => answer,
            // Gone between the two looks: look again.
            Err(Fail::Zk(zk::Error::NoNode)) => return Ok(None),
            Err(f) => return Err(f),
        };
        let term = u64::try_from(stat.czxid).unwrap_or_default();
        if stat.version > 0 && term > self.last {
            self.last = term;
            return Ok(Some((term, String::from_utf8_lossy(&data).into_owned())));
        }
        tokio::select! {
            _ = line_changed.changed() => {}
            _ = node_changed.changed() => {}
            () = tokio::time::sleep(recheck) => {}
        }
        Ok(None)
    }
}
