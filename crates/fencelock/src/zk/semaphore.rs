//! A semaphore of N permits on ZooKeeper (Curator's InterProcessSemaphoreV2), and the record
//! of the write locks' tokens for read locks.
//!
//! # How a permit is taken
//!
//! 1. Join the semaphore's line: an EPHEMERAL_SEQUENTIAL node `<owner>-lock-<sequence>` in
//!    `<chroot>/fencelock/semaphores/<name>`, as a mutex waiter joins its line. The directory
//!    is made with the permit count as its data.
//! 2. Read the directory's permit count after our create: a client asking for another count
//!    is refused (every waiter in the directory checked that count against its own, so all the
//!    live waiters agree; the count can change once the directory is gone, that is when no one
//!    holds or waits).
//! 3. List the line: with fewer than N waiters ahead, the waiter is admitted. The first waiter
//!    not admitted (exactly N ahead) watches the directory (any holder's release lets it in);
//!    every later waiter watches the waiter just before it, which touches its node (a
//!    `setData`) when it is admitted: a release wakes one waiter, not the herd. Waiters are
//!    admitted in creation order (FIFO).
//! 4. An admitted waiter takes a free slot: in one transaction, it touches its node (which
//!    fails if the node is gone) and creates the ephemeral node `slot-<i>` holding its owner
//!    value. The slot node's czxid is the permit's fencing token; the permit's resource is
//!    `<name>:permit:<i>`, as on Redis and etcd.
//!
//! # Why at most N hold
//!
//! Twice over. Admission: a node is never created before an existing one (sequence numbers
//! grow within a directory), so a waiter among the first N live nodes stays among them, and at
//! most N nodes are the first N. Slots: a slot node is created only if it does not exist, and
//! there are N slot names. A holder's release deletes its slot and its node in one
//! transaction. Both rest on the ensemble's consensus, with the validity of the session as for
//! the mutex.
//!
//! # Why each slot's tokens grow
//!
//! A slot's next holder creates its node after the previous one was deleted: at a larger zxid.
//! Tokens of different slots are all zxids of one ensemble, but fence storage per slot, as on
//! the other backends.
//!
//! # A take whose answer is lost
//!
//! The call fails ([`Error::Unavailable`]) and its cleanup deletes, with the waiter's node,
//! any slot node holding its owner value.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::{line, Fail, HeldNode, Line, PendingNode, ZkBackend, ZkGrant, ZkHeld};
use crate::error::{Error, LostCause, Result};
use crate::pure::node_error::NodeError;
use crate::pure::vote::VoteOutcome;

/// The slot nodes: ephemeral, one name per slot.
const SLOT_NODE: zk::CreateMode = zk::CreateMode::Ephemeral;

/// The writer records: persistent (a record outlives its writer, for later readers).
const RECORD_NODE: zk::CreateMode = zk::CreateMode::Persistent;

impl ZkBackend {
    /// Takes a permit of the semaphore `name`, whose slots' resources are `slots` (N of them),
    /// waiting up to `wait` (`None`: one look). Returns the slot and the lock on it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the semaphore's live waiters use another permit count;
    /// [`Error::Contention`] (no wait) when N waiters were ahead; [`Error::Timeout`] when
    /// `wait` ran out; as [`ZkBackend::try_acquire`] otherwise. Whatever the error, our nodes
    /// are deleted.
    ///
    /// # Cancel safety
    ///
    /// As [`ZkBackend::try_acquire`].
    pub(crate) async fn acquire_permit(
        &self,
        name: &str,
        slots: &[String],
        wait: Option<Duration>,
    ) -> Result<(usize, ZkGrant)> {
        let line = Line {
            resource: name,
            dir: line::semaphore_dir(&self.chroot, name),
            rule: line::Rule::Permits(slots.len()),
            dir_data: slots.len().to_string().into_bytes(),
            slots: Some(slots),
        };
        self.retrying(name, wait, |left| self.take_once(&line, left))
            .await
    }

    /// Refuses a semaphore whose directory says another permit count than `n`.
    pub(super) async fn check_permits(
        &self,
        line: &Line<'_>,
        client: &zk::Client,
        n: usize,
        started: Instant,
    ) -> Result<()> {
        let (data, _) = self
            .call(self.request_timeout, client.get_data(&line.dir))
            .await
            .map_err(|f| self.unavailable(line.resource, &f, started))?;
        let theirs = String::from_utf8_lossy(&data);
        if theirs.parse::<usize>().ok() == Some(n) {
            return Ok(());
        }
        Err(Error::config(
            "permits",
            format!(
                "the semaphore {:?} is in use with {theirs:?} permits and this client asks for {n}; every client of a semaphore must use the same count (it can change once no one holds or waits for a permit)",
                line.resource
            ),
        ))
    }

    /// Takes a free slot for the admitted waiter `node` (`lease`: its grant): touches the
    /// waiter's node and creates the slot node in one transaction.
    pub(super) async fn take_slot(
        &self,
        line: &Line<'_>,
        slots: &[String],
        node: &mut PendingNode,
        lease: ZkGrant,
        wait: bool,
    ) -> Result<(usize, ZkGrant)> {
        let started = Instant::now();
        let resource = line.resource;
        let client = node.client.clone();
        let unavailable = |f: Fail| self.unavailable(resource, &f, started);
        let lease_path = lease.held.path().to_string();
        let recheck = (client.session_timeout() / 3).max(Duration::from_millis(100));
        let free = |children: &[String]| -> Vec<usize> {
            let taken: Vec<usize> = children.iter().filter_map(|c| line::slot_of(c)).collect();
            (0..slots.len()).filter(|i| !taken.contains(i)).collect()
        };
        loop {
            let children = self
                .call(self.request_timeout, client.list_children(&line.dir))
                .await
                .map_err(unavailable)?;
            for i in free(&children) {
                let slot_path = format!("{}/{}", line.dir, line::slot_name(i));
                let mut multi = client.new_multi_writer();
                multi
                    .add_set_data(&lease_path, &self.holder, None)
                    .and_then(|()| {
                        multi.add_create(
                            &slot_path,
                            node.owner.as_bytes(),
                            &self.options(SLOT_NODE),
                        )
                    })
                    .map_err(|e| unavailable(Fail::Zk(e)))?;
                let answer = tokio::time::timeout(self.request_timeout, multi.commit()).await;
                let created = match answer {
                    Err(_elapsed) => return Err(unavailable(Fail::TimedOut)),
                    Ok(Ok(results)) => results,
                    Ok(Err(zk::MultiWriteError::OperationFailed {
                        index: 1,
                        source: zk::Error::NodeExists,
                    })) => continue,
                    Ok(Err(zk::MultiWriteError::OperationFailed {
                        index: 0,
                        source: zk::Error::NoNode,
                    })) => {
                        let why = NodeError::other(
                            "our place in the semaphore's line is gone (the session expired, or it was deleted)",
                        );
                        return Err(Error::Unavailable {
                            resource: resource.to_string(),
                            votes: self.votes(VoteOutcome::Failed(why), started.elapsed()),
                        });
                    }
                    Ok(Err(e)) => return Err(unavailable(Fail::Zk(e.into()))),
                };
                let czxid = match created.into_iter().nth(1) {
                    Some(zk::MultiWriteResult::Create { stat, .. }) if stat.czxid > 0 => stat.czxid,
                    // Some servers answer a create in a transaction without its stat.
                    _ => self
                        .call(self.request_timeout, client.check_stat(&slot_path))
                        .await
                        .map_err(unavailable)?
                        .map(|stat| stat.czxid)
                        .unwrap_or_default(),
                };
                let token = u64::try_from(czxid)
                    .ok()
                    .filter(|t| *t > 0)
                    .ok_or_else(|| {
                        Error::lost(
                            slots[i].clone(),
                            self.votes(VoteOutcome::NotHeld, started.elapsed()),
                            LostCause::NotHeld,
                        )
                    })?;
                let lease_node = lease.held.nodes[0].clone();
                let held = ZkHeld {
                    resource: Arc::from(slots[i].as_str()),
                    name: lease.held.name.clone(),
                    nodes: Arc::from(vec![
                        HeldNode {
                            path: slot_path,
                            czxid: token,
                        },
                        lease_node,
                    ]),
                    token,
                    shared: false,
                    session: Some(client.clone()),
                };
                return Ok((
                    i,
                    ZkGrant {
                        held,
                        deadline: lease.deadline,
                        votes: lease.votes,
                        last_writer: None,
                    },
                ));
            }
            // Admitted but every slot taken: a holder whose release is under way, or a take
            // whose answer was lost and whose cleanup runs. Wait for a slot to go, watching
            // the directory only now (a holder leaves no watch behind), after a look that sets
            // the watch (a slot freed between the two looks is in the second).
            if !wait {
                return Err(Error::Contention {
                    resource: resource.to_string(),
                    votes: self.votes(VoteOutcome::HeldByOther, started.elapsed()),
                });
            }
            let (children, watcher) = self
                .call(
                    self.request_timeout,
                    client.list_and_watch_children(&line.dir),
                )
                .await
                .map_err(unavailable)?;
            if free(&children).is_empty() {
                let _ = tokio::time::timeout(recheck, watcher.changed()).await;
            }
        }
    }

    /// The token the last write lock of `resource` recorded for its readers (0 when none).
    pub(super) async fn read_writer_record(&self, resource: &str) -> Result<u64> {
        let started = Instant::now();
        let client = self
            .session()
            .await
            .map_err(|f| self.unavailable(resource, &f, started))?;
        let path = line::writer_record(&self.chroot, resource);
        match self
            .call(self.request_timeout, client.get_data(&path))
            .await
        {
            Ok((data, _)) => Ok(String::from_utf8_lossy(&data).parse().unwrap_or_default()),
            Err(Fail::Zk(zk::Error::NoNode)) => Ok(0),
            Err(f) => Err(self.unavailable(resource, &f, started)),
        }
    }

    /// Records a write lock's token for the readers of its resource, only while its node still
    /// exists (one transaction). Writers hold one at a time in czxid order, so the record only
    /// grows.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the node is gone; [`Error::Unavailable`] when the ensemble did not
    /// answer.
    pub(crate) async fn record_writer(&self, held: &ZkHeld) -> Result<()> {
        let started = Instant::now();
        let resource = held.resource.to_string();
        if held.shared || held.nodes.len() != 1 {
            return Err(Error::config(
                "rwlock",
                "only a write lock of one resource has a token to record",
            ));
        }
        let client = match &held.session {
            Some(client) => client.clone(),
            None => self
                .session()
                .await
                .map_err(|f| self.unavailable(&resource, &f, started))?,
        };
        let path = line::writer_record(&self.chroot, &held.resource);
        let token = held.token.to_string();
        for _ in 0..3 {
            let mut multi = client.new_multi_writer();
            multi
                .add_check_version(held.path(), -1)
                .and_then(|()| multi.add_set_data(&path, token.as_bytes(), None))
                .map_err(|e| self.unavailable(&resource, &Fail::Zk(e), started))?;
            let answer = tokio::time::timeout(self.request_timeout, multi.commit()).await;
            match answer {
                Err(_elapsed) => {
                    return Err(self.unavailable(&resource, &Fail::TimedOut, started));
                }
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(zk::MultiWriteError::OperationFailed {
                    index: 0,
                    source: zk::Error::NoNode,
                })) => {
                    return Err(Error::lost(
                        resource,
                        self.votes(VoteOutcome::NotHeld, started.elapsed()),
                        LostCause::NotHeld,
                    ));
                }
                Ok(Err(zk::MultiWriteError::OperationFailed {
                    index: 1,
                    source: zk::Error::NoNode,
                })) => {
                    // First write of this resource: make the record, then write it.
                    let parent = format!("{}{}", self.chroot, line::WRITERS_DIR);
                    match self
                        .call(
                            self.request_timeout,
                            client.mkdir(&parent, &self.options(RECORD_NODE)),
                        )
                        .await
                    {
                        Ok(()) | Err(Fail::Zk(zk::Error::NodeExists)) => {}
                        Err(f) => return Err(self.unavailable(&resource, &f, started)),
                    }
                    match self
                        .call(
                            self.request_timeout,
                            client.create(&path, b"0", &self.options(RECORD_NODE)),
                        )
                        .await
                    {
                        Ok(_) | Err(Fail::Zk(zk::Error::NodeExists)) => {}
                        Err(f) => return Err(self.unavailable(&resource, &f, started)),
                    }
                }
                Ok(Err(e)) => {
                    return Err(self.unavailable(&resource, &Fail::Zk(e.into()), started));
                }
            }
        }
        Err(self.unavailable(
            &resource,
            &Fail::Zk(zk::Error::UnexpectedError(
                "the writer record could not be made".to_string(),
            )),
            started,
        ))
    }
}

/// Deletes the slot node in `dir` that holds `owner` (a take whose answer was lost), if any:
/// whether it is done (deleted, none, or the session ended).
pub(super) async fn delete_slot_of(
    client: &zk::Client,
    dir: &str,
    owner: &str,
    timeout: Duration,
) -> bool {
    let children = match tokio::time::timeout(timeout, client.list_children(dir)).await {
        Ok(Ok(children)) => children,
        Ok(Err(zk::Error::NoNode)) => return true,
        Ok(Err(e)) => return Fail::Zk(e).session_ended(),
        Err(_elapsed) => return false,
    };
    for slot in children.iter().filter(|c| line::slot_of(c).is_some()) {
        let path = format!("{dir}/{slot}");
        match tokio::time::timeout(timeout, client.get_data(&path)).await {
            Ok(Ok((data, _))) if data == owner.as_bytes() => {}
            Ok(Ok(_) | Err(zk::Error::NoNode)) => continue,
            Ok(Err(e)) => return Fail::Zk(e).session_ended(),
            Err(_elapsed) => return false,
        }
        match tokio::time::timeout(timeout, client.delete(&path, None)).await {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => {}
            Ok(Err(e)) => return Fail::Zk(e).session_ended(),
            Err(_elapsed) => return false,
        }
    }
    true
}
