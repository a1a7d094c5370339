//! The Redis backend: one node (efficiency lock) or N independent nodes (Redlock).
//!
//! Each operation is a *round*: one request per node, all in flight at once, each bounded by the
//! node timeout. A round returns as soon as its outcome is known (a quorum granted, or too many
//! refused for one); the requests still in flight finish in a background task.

mod conn;
pub(crate) mod extender;
pub(crate) mod scripts;
mod watch;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{RedisError, RedisResult, Value};

use self::conn::NodeConn;
pub(crate) use self::conn::Quarantine;
use self::watch::ReleaseWatch;
pub(crate) use self::watch::Subscription;
use crate::error::Error;
use crate::fencing;
use crate::node::NodeAddr;
use crate::queue::{self, Ticket};
use crate::quorum::{Decision, Tally};
use crate::vote::{NodeVote, VoteOutcome, Votes};

/// One node's answer to one request, before it becomes a vote.
#[derive(Debug)]
pub(crate) enum Answer<T> {
    Granted(T),
    HeldByOther,
    NotHeld,
}

type NodeFuture<T> =
    Pin<Box<dyn Future<Output = (usize, Result<Answer<T>, NodeFailure>, Duration)> + Send>>;

/// Why a node gave no answer.
#[derive(Debug)]
pub(crate) enum NodeFailure {
    TimedOut,
    Failed(String),
    Excluded(String),
}

/// The outcome of a round: the votes in node order and the values of the nodes that granted.
#[derive(Debug)]
pub(crate) struct Round<T> {
    pub(crate) votes: Votes,
    pub(crate) granted: Vec<(usize, T)>,
    pub(crate) decision: Decision,
}

/// The Redis nodes of one client.
#[derive(Debug)]
pub(crate) struct RedisBackend {
    nodes: Vec<Arc<NodeConn>>,
    quorum: usize,
    watch: Arc<ReleaseWatch>,
}

impl RedisBackend {
    pub(crate) fn new(
        addrs: Vec<NodeAddr>,
        connect_timeout: Duration,
        quarantine: Quarantine,
    ) -> Result<Self, Error> {
        let quorum = crate::quorum::quorum(addrs.len());
        let nodes = addrs
            .into_iter()
            .map(|a| NodeConn::new(a, connect_timeout, quarantine).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let watch = Arc::new(ReleaseWatch::new(
            nodes.iter().map(|n| n.client().clone()).collect(),
        ));
        Ok(RedisBackend {
            nodes,
            quorum,
            watch,
        })
    }

    /// Opens every node's connection, waiting at most `timeout`.
    pub(crate) async fn connect_all(&self, timeout: Duration) -> Votes {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        self.round_all(&all, timeout, |_conn| async { Ok(Answer::Granted(())) })
            .await
            .votes
    }

    /// Subscribes to the release of `keys`, so that a waiter wakes when they are released.
    /// Wakes on every release of `keys` (a waiter that does not queue).
    pub(crate) async fn watch_release(&self, keys: &[String], timeout: Duration) -> Subscription {
        self.watch.subscribe(keys, timeout).await
    }

    /// Wakes the waiter `id` when a release names it first in line.
    pub(crate) async fn await_turn(&self, id: &str, timeout: Duration) -> Subscription {
        self.watch.await_turn(id, timeout).await
    }

    /// A fresh waiter id of this client (see `queue.rs`).
    pub(crate) fn waiter_id(&self) -> String {
        self.watch.waiter_id(fastrand::u64(..))
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    pub(crate) fn addrs(&self) -> impl Iterator<Item = &NodeAddr> {
        self.nodes.iter().map(|n| n.addr())
    }

    /// Round 1 of an acquisition: `SET key token NX PX ttl` on every node for one key; for
    /// several keys or in fencing mode, the script that sets all or none (and returns the
    /// largest fence counter); with a `ticket` (a waiter of one key), the queued script that
    /// grants only the first in line. Nodes in restart quarantine are not asked and not counted.
    ///
    /// On failure it waits for every request still in flight before returning, so that the
    /// caller's release reaches each node after its SET.
    pub(crate) async fn acquire(
        &self,
        keys: &[String],
        token: &str,
        ttl: Duration,
        fencing: bool,
        ticket: Option<&Ticket>,
        node_timeout: Duration,
    ) -> Round<u64> {
        let ttl_ms = ttl_millis(ttl);
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let token = Arc::<str>::from(token);
        if let (Some(ticket), [key]) = (ticket, keys) {
            let mut queued = vec![key.clone(), queue::queue_key(key), queue::lease_key(key)];
            if fencing {
                queued.push(fencing::counter_key(key));
            }
            let keys: Arc<[String]> = queued.into();
            let args: Arc<[String]> = Arc::new([
                ticket.id.clone(),
                ticket.order.to_string(),
                ticket.lease_ms().to_string(),
            ]);
            return self
                .round(&all, node_timeout, true, true, move |mut conn| {
                    let (keys, token, args) = (keys.clone(), token.clone(), args.clone());
                    async move {
                        let reply: (i64, String) = scripts::ACQUIRE_QUEUED
                            .prepare_invoke()
                            .key(&*keys)
                            .arg(&*token)
                            .arg(ttl_ms)
                            .arg(&*args)
                            .invoke_async(&mut conn)
                            .await?;
                        counter_answer(reply)
                    }
                })
                .await;
        }
        let keys: Arc<[String]> = if fencing {
            with_counter_keys(keys)
        } else {
            keys.into()
        };
        self.round(&all, node_timeout, true, true, move |mut conn| {
            let keys = keys.clone();
            let token = token.clone();
            async move {
                if fencing {
                    let reply: (i64, String) = scripts::ACQUIRE_FENCED
                        .prepare_invoke()
                        .key(&*keys)
                        .arg(&*token)
                        .arg(ttl_ms)
                        .invoke_async(&mut conn)
                        .await?;
                    counter_answer(reply)
                } else if keys.len() == 1 {
                    let reply: Value = redis::cmd("SET")
                        .arg(&keys[0])
                        .arg(&*token)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl_ms)
                        .query_async(&mut conn)
                        .await?;
                    Ok(match reply {
                        Value::Nil => Answer::HeldByOther,
                        _ => Answer::Granted(0),
                    })
                } else {
                    let set: i64 = scripts::ACQUIRE_MANY
                        .prepare_invoke()
                        .key(&*keys)
                        .arg(&*token)
                        .arg(ttl_ms)
                        .invoke_async(&mut conn)
                        .await?;
                    Ok(if set == 1 {
                        Answer::Granted(0)
                    } else {
                        Answer::HeldByOther
                    })
                }
            }
        })
        .await
    }

    /// Takes a waiter that gave up out of the line of `key` on every node. Waits for the
    /// answers, each within the node timeout.
    pub(crate) async fn leave_queue(&self, key: &str, ticket: &Ticket, node_timeout: Duration) {
        let mut pipe = redis::pipe();
        pipe.cmd("ZREM")
            .arg(queue::queue_key(key))
            .arg(&ticket.id)
            .ignore()
            .cmd("ZREM")
            .arg(queue::lease_key(key))
            .arg(&ticket.id)
            .ignore();
        let pipe = Arc::new(pipe);
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        self.round_all(&all, node_timeout, move |mut conn| {
            let pipe = pipe.clone();
            async move {
                let () = pipe.query_async(&mut conn).await?;
                Ok(Answer::Granted(()))
            }
        })
        .await;
    }

    /// Round 2 of a fencing acquisition: raise the counters to `fencing_token` on `nodes`, where
    /// we still own the keys.
    pub(crate) async fn write_back(
        &self,
        nodes: &[usize],
        keys: &[String],
        token: &str,
        fencing_token: u64,
        node_timeout: Duration,
    ) -> Round<()> {
        let keys = with_counter_keys(keys);
        let token = Arc::<str>::from(token);
        let value = Arc::<str>::from(fencing_token.to_string());
        self.round(nodes, node_timeout, false, false, move |mut conn| {
            let (keys, token, value) = (keys.clone(), token.clone(), value.clone());
            async move { if_owned(&scripts::WRITE_BACK, &keys, &token, &*value, &mut conn).await }
        })
        .await
    }

    /// Sets the keys' TTL anew on every node where we still own them all.
    pub(crate) async fn extend(
        &self,
        keys: &[String],
        token: &str,
        ttl: Duration,
        node_timeout: Duration,
    ) -> Round<()> {
        let ttl_ms = ttl_millis(ttl);
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let keys: Arc<[String]> = keys.into();
        let token = Arc::<str>::from(token);
        self.round(&all, node_timeout, false, false, move |mut conn| {
            let (keys, token) = (keys.clone(), token.clone());
            async move { if_owned(&scripts::EXTEND, &keys, &token, ttl_ms, &mut conn).await }
        })
        .await
    }

    /// Compare-and-delete on every node, waiting for every answer (bounded by the node timeout).
    /// `line`: the holder's waiter id, if it queued for the lock: it leaves the line. Each
    /// granted vote carries how many waiters the release messages reached on that node.
    pub(crate) async fn release(
        &self,
        keys: &[String],
        token: &str,
        line: Option<&str>,
        node_timeout: Duration,
    ) -> Round<u64> {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let locks = keys.len();
        let keys: Arc<[String]> = keys
            .iter()
            .cloned()
            .chain(keys.iter().map(|k| queue::queue_key(k)))
            .chain(keys.iter().map(|k| queue::lease_key(k)))
            .collect();
        let token = Arc::<str>::from(token);
        let line = Arc::<str>::from(line.unwrap_or(""));
        self.round_all(&all, node_timeout, move |mut conn| {
            let (keys, token, line) = (keys.clone(), token.clone(), line.clone());
            async move {
                let (deleted, heard): (usize, u64) = scripts::RELEASE
                    .prepare_invoke()
                    .key(&*keys)
                    .arg(&*token)
                    .arg(scripts::RELEASE_CHANNEL_PREFIX)
                    .arg(scripts::TURN_CHANNEL_PREFIX)
                    .arg(&*line)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(if deleted == locks {
                    Answer::Granted(heard)
                } else {
                    Answer::NotHeld
                })
            }
        })
        .await
    }

    /// Extends many locks at once: one pipeline per node (EVALSHA of the extend script for each
    /// lock), all nodes in parallel. Returns, per lock, how many nodes extended it. Returns as
    /// soon as every lock has a quorum, or every node answered, or `timeout` passed.
    pub(crate) async fn extend_batch(
        &self,
        locks: &[(Arc<[String]>, Arc<str>)],
        ttl: Duration,
        timeout: Duration,
    ) -> Vec<usize> {
        let ttl_ms = ttl_millis(ttl);
        let sha = scripts::EXTEND.get_hash().to_string();
        let mut pipe = redis::pipe();
        for (keys, token) in locks {
            pipe.cmd("EVALSHA")
                .arg(&sha)
                .arg(keys.len())
                .arg(&**keys)
                .arg(&**token)
                .arg(ttl_ms);
        }
        let pipe = Arc::new(pipe);
        let mut per_node: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|node| {
                let node = node.clone();
                let pipe = pipe.clone();
                async move {
                    let mut h = node.get().await?;
                    let r: RedisResult<Vec<Value>> = pipe.query_async(&mut h.conn).await;
                    if let Err(e) = &r {
                        if conn::is_broken(e) {
                            node.discard(&h);
                        }
                        tracing::debug!(node = %node.addr(), error = %describe(e), "batch extend failed");
                    }
                    r
                }
            })
            .collect();
        let mut counts = vec![0usize; locks.len()];
        let collect = async {
            while let Some(result) = per_node.next().await {
                let Ok(replies) = result else { continue };
                for (count, reply) in counts.iter_mut().zip(replies) {
                    if matches!(reply, Value::Int(1)) {
                        *count += 1;
                    }
                }
                if counts.iter().all(|c| *c >= self.quorum) {
                    break;
                }
            }
        };
        if tokio::time::timeout(timeout, collect).await.is_err() {
            tracing::debug!(?timeout, "batch extend: some nodes did not answer in time");
        }
        counts
    }

    /// Runs `op` on `nodes` and returns once the quorum decision is known. Requests still in
    /// flight then finish in a background task, unless the decision is a failure and
    /// `settle_on_failure` is set: then they are awaited (each within its node timeout).
    async fn round<T, F, Fut>(
        &self,
        nodes: &[usize],
        node_timeout: Duration,
        settle_on_failure: bool,
        respect_quarantine: bool,
        op: F,
    ) -> Round<T>
    where
        T: Send + 'static,
        F: Fn(redis::aio::MultiplexedConnection) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        let need = self.quorum.min(nodes.len().max(1));
        let mut tally = Tally::new(nodes.len().max(1), need);
        let mut pending = self.launch(nodes, node_timeout, respect_quarantine, op);
        let mut votes = self.pending_votes(nodes);
        let mut granted = Vec::new();
        let mut decision = if nodes.is_empty() {
            Decision::Impossible
        } else {
            Decision::Pending
        };
        while decision == Decision::Pending {
            let Some((i, result, latency)) = pending.next().await else {
                break;
            };
            decision = tally.record(self.absorb(i, result, latency, &mut votes, &mut granted));
        }
        if !pending.is_empty() {
            if decision == Decision::Impossible && settle_on_failure {
                while let Some((i, result, latency)) = pending.next().await {
                    self.absorb(i, result, latency, &mut votes, &mut granted);
                }
            } else {
                tokio::spawn(async move { while pending.next().await.is_some() {} });
            }
        }
        Round {
            votes: Votes(votes.into_iter().flatten().collect()),
            granted,
            decision,
        }
    }

    /// Runs `op` on `nodes` and waits for every answer.
    async fn round_all<T, F, Fut>(&self, nodes: &[usize], node_timeout: Duration, op: F) -> Round<T>
    where
        T: Send + 'static,
        F: Fn(redis::aio::MultiplexedConnection) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        let mut pending = self.launch(nodes, node_timeout, false, op);
        let mut votes = self.pending_votes(nodes);
        let mut granted = Vec::new();
        while let Some((i, result, latency)) = pending.next().await {
            self.absorb(i, result, latency, &mut votes, &mut granted);
        }
        let decision = if granted.len() >= self.quorum {
            Decision::Reached
        } else {
            Decision::Impossible
        };
        Round {
            votes: Votes(votes.into_iter().flatten().collect()),
            granted,
            decision,
        }
    }

    /// One slot per configured node: `Pending` for the nodes in the round until they answer;
    /// nodes outside the round stay `None` and are left out of the votes.
    fn pending_votes(&self, nodes: &[usize]) -> Vec<Option<NodeVote>> {
        let mut votes = vec![None; self.nodes.len()];
        for &i in nodes {
            votes[i] = Some(NodeVote {
                node: self.nodes[i].name().to_owned(),
                outcome: VoteOutcome::Pending,
                latency: Duration::ZERO,
            });
        }
        votes
    }

    fn launch<T, F, Fut>(
        &self,
        nodes: &[usize],
        node_timeout: Duration,
        respect_quarantine: bool,
        op: F,
    ) -> FuturesUnordered<NodeFuture<T>>
    where
        T: Send + 'static,
        F: Fn(redis::aio::MultiplexedConnection) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        nodes
            .iter()
            .map(|&i| {
                let node = self.nodes[i].clone();
                let op = op.clone();
                let started = Instant::now();
                Box::pin(async move {
                    // The connection is fetched inside the timed part, so a node that is slow
                    // to connect costs no more than one node timeout.
                    let attempt = async {
                        let handle = node.get().await.map_err(|e| Err(Box::new((None, e))))?;
                        if respect_quarantine {
                            if let Some(why) = handle.info.excluded_now() {
                                return Err(Ok(why));
                            }
                        }
                        op(handle.conn.clone())
                            .await
                            .map_err(|e| Err(Box::new((Some(handle), e))))
                    };
                    let result = match tokio::time::timeout(node_timeout, attempt).await {
                        Err(_) => Err(NodeFailure::TimedOut),
                        Ok(Ok(answer)) => Ok(answer),
                        Ok(Err(Ok(why))) => Err(NodeFailure::Excluded(why)),
                        Ok(Err(Err(failure))) => {
                            let (handle, e) = *failure;
                            if let Some(h) = handle.filter(|_| conn::is_broken(&e)) {
                                node.discard(&h);
                            }
                            Err(NodeFailure::Failed(describe(&e)))
                        }
                    };
                    (i, result, started.elapsed())
                }) as NodeFuture<T>
            })
            .collect()
    }

    /// Turns one answer into a vote; returns whether it was a grant.
    fn absorb<T>(
        &self,
        i: usize,
        result: Result<Answer<T>, NodeFailure>,
        latency: Duration,
        votes: &mut [Option<NodeVote>],
        granted: &mut Vec<(usize, T)>,
    ) -> bool {
        let outcome = match result {
            Ok(Answer::Granted(v)) => {
                granted.push((i, v));
                VoteOutcome::Granted
            }
            Ok(Answer::HeldByOther) => VoteOutcome::HeldByOther,
            Ok(Answer::NotHeld) => VoteOutcome::NotHeld,
            Err(NodeFailure::TimedOut) => VoteOutcome::TimedOut,
            Err(NodeFailure::Failed(why)) => VoteOutcome::Failed(why),
            Err(NodeFailure::Excluded(why)) => VoteOutcome::Excluded(why),
        };
        // Reuse the name already in the pending vote instead of allocating it again.
        let node = match votes[i].take() {
            Some(pending) => pending.node,
            None => self.nodes[i].name().to_owned(),
        };
        tracing::debug!(node = %node, outcome = %outcome, ?latency, "node answered");
        let is_grant = outcome.is_granted();
        votes[i] = Some(NodeVote {
            node,
            outcome,
            latency,
        });
        is_grant
    }
}

/// The lock keys followed by their fence counters, as the fencing scripts take them.
fn with_counter_keys(keys: &[String]) -> Arc<[String]> {
    keys.iter()
        .cloned()
        .chain(keys.iter().map(|k| fencing::counter_key(k)))
        .collect()
}

/// The answer of an acquisition script that returns `{1, counter}` or `{0, ''}`.
fn counter_answer((set, counter): (i64, String)) -> Result<Answer<u64>, RedisError> {
    if set != 1 {
        return Ok(Answer::HeldByOther);
    }
    let value = counter.parse::<u64>().map_err(|_| {
        RedisError::from((
            redis::ErrorKind::Parse,
            "a fence counter is not a u64",
            counter,
        ))
    })?;
    Ok(Answer::Granted(value))
}

/// Runs a script that acts only if every key holds our token: its reply is 1 (done) or 0 (some
/// key is not ours, nothing done).
async fn if_owned(
    script: &redis::Script,
    keys: &[String],
    token: &str,
    arg: impl redis::ToRedisArgs,
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<Answer<()>, RedisError> {
    let done: i64 = script
        .prepare_invoke()
        .key(keys)
        .arg(token)
        .arg(arg)
        .invoke_async(conn)
        .await?;
    Ok(if done == 1 {
        Answer::Granted(())
    } else {
        Answer::NotHeld
    })
}

/// A driver error in words, without anything secret (the driver never echoes passwords in
/// command errors, but connection errors may quote the address; we print the kind and detail).
fn describe(e: &RedisError) -> String {
    if e.is_connection_refusal() {
        return "connection refused (is the node running?)".to_string();
    }
    if let Some(code) = e.code() {
        return match e.detail() {
            Some(detail) => format!("{code} {detail}"),
            None => code.to_string(),
        };
    }
    if conn::is_broken(e) {
        return "connection lost".to_string();
    }
    format!("{:?}: {}", e.kind(), e.detail().unwrap_or("no detail"))
}

fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
