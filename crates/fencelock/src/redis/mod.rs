//! The Redis backend: one node (efficiency lock) or N independent nodes (Redlock).
//!
//! Each operation is a *round*: one request per node, all in flight at once, each bounded by the
//! node timeout. A round returns as soon as its outcome is known (a quorum granted, or too many
//! refused for one); the requests still in flight finish in a background task.

mod conn;
pub(crate) mod scripts;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{RedisError, Value};

use self::conn::NodeConn;
use crate::error::Error;
use crate::fencing;
use crate::node::NodeAddr;
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
}

impl RedisBackend {
    pub(crate) fn new(addrs: Vec<NodeAddr>, connect_timeout: Duration) -> Result<Self, Error> {
        let quorum = crate::quorum::quorum(addrs.len());
        let nodes = addrs
            .into_iter()
            .map(|a| NodeConn::new(a, connect_timeout).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedisBackend { nodes, quorum })
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    pub(crate) fn addrs(&self) -> impl Iterator<Item = &NodeAddr> {
        self.nodes.iter().map(|n| n.addr())
    }

    /// Round 1 of an acquisition: `SET resource token NX PX ttl` on every node (in fencing mode,
    /// the script that also returns the node's fence counter).
    ///
    /// On failure it waits for every request still in flight before returning, so that the
    /// caller's release reaches each node after its SET.
    pub(crate) async fn acquire(
        &self,
        resource: &str,
        token: &str,
        ttl: Duration,
        fencing: bool,
        node_timeout: Duration,
    ) -> Round<u64> {
        let ttl_ms = ttl_millis(ttl);
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let key = Arc::<str>::from(resource);
        let token = Arc::<str>::from(token);
        let counter = Arc::<str>::from(fencing::counter_key(resource));
        self.round(&all, node_timeout, true, move |mut conn| {
            let key = key.clone();
            let token = token.clone();
            let counter = counter.clone();
            async move {
                if fencing {
                    let (set, value): (i64, String) = scripts::ACQUIRE_FENCED
                        .key(&*key)
                        .key(&*counter)
                        .arg(&*token)
                        .arg(ttl_ms)
                        .invoke_async(&mut conn)
                        .await?;
                    if set == 1 {
                        let value = value.parse::<u64>().map_err(|_| {
                            RedisError::from((
                                redis::ErrorKind::Parse,
                                "the fence counter is not a u64",
                                value,
                            ))
                        })?;
                        Ok(Answer::Granted(value))
                    } else {
                        Ok(Answer::HeldByOther)
                    }
                } else {
                    let reply: Value = redis::cmd("SET")
                        .arg(&*key)
                        .arg(&*token)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl_ms)
                        .query_async(&mut conn)
                        .await?;
                    match reply {
                        Value::Nil => Ok(Answer::HeldByOther),
                        _ => Ok(Answer::Granted(0)),
                    }
                }
            }
        })
        .await
    }

    /// Round 2 of a fencing acquisition: raise the counter to `fencing_token` on `nodes`, where
    /// we still own the key.
    pub(crate) async fn write_back(
        &self,
        nodes: &[usize],
        resource: &str,
        token: &str,
        fencing_token: u64,
        node_timeout: Duration,
    ) -> Round<()> {
        let key = Arc::<str>::from(resource);
        let token = Arc::<str>::from(token);
        let counter = Arc::<str>::from(fencing::counter_key(resource));
        let value = Arc::<str>::from(fencing_token.to_string());
        self.round(nodes, node_timeout, false, move |mut conn| {
            let (key, token, counter, value) =
                (key.clone(), token.clone(), counter.clone(), value.clone());
            async move {
                let ok: i64 = scripts::WRITE_BACK
                    .key(&*key)
                    .key(&*counter)
                    .arg(&*token)
                    .arg(&*value)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(if ok == 1 {
                    Answer::Granted(())
                } else {
                    Answer::NotHeld
                })
            }
        })
        .await
    }

    /// Sets the key's TTL anew on every node where we still own it.
    pub(crate) async fn extend(
        &self,
        resource: &str,
        token: &str,
        ttl: Duration,
        node_timeout: Duration,
    ) -> Round<()> {
        let ttl_ms = ttl_millis(ttl);
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let key = Arc::<str>::from(resource);
        let token = Arc::<str>::from(token);
        self.round(&all, node_timeout, false, move |mut conn| {
            let (key, token) = (key.clone(), token.clone());
            async move {
                let ok: i64 = scripts::EXTEND
                    .key(&*key)
                    .arg(&*token)
                    .arg(ttl_ms)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(if ok == 1 {
                    Answer::Granted(())
                } else {
                    Answer::NotHeld
                })
            }
        })
        .await
    }

    /// Compare-and-delete on every node, waiting for every answer (bounded by the node timeout).
    pub(crate) async fn release(
        &self,
        resource: &str,
        token: &str,
        node_timeout: Duration,
    ) -> Round<()> {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let key = Arc::<str>::from(resource);
        let token = Arc::<str>::from(token);
        let channel = Arc::<str>::from(scripts::release_channel(resource));
        self.round_all(&all, node_timeout, move |mut conn| {
            let (key, token, channel) = (key.clone(), token.clone(), channel.clone());
            async move {
                let ok: i64 = scripts::RELEASE
                    .key(&*key)
                    .arg(&*token)
                    .arg(&*channel)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(if ok == 1 {
                    Answer::Granted(())
                } else {
                    Answer::NotHeld
                })
            }
        })
        .await
    }

    /// Runs `op` on `nodes` and returns once the quorum decision is known. Requests still in
    /// flight then finish in a background task, unless the decision is a failure and
    /// `settle_on_failure` is set: then they are awaited (each within its node timeout).
    async fn round<T, F, Fut>(
        &self,
        nodes: &[usize],
        node_timeout: Duration,
        settle_on_failure: bool,
        op: F,
    ) -> Round<T>
    where
        T: Send + 'static,
        F: Fn(redis::aio::MultiplexedConnection) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        let need = self.quorum.min(nodes.len().max(1));
        let mut tally = Tally::new(nodes.len().max(1), need);
        let mut pending = self.launch(nodes, node_timeout, op);
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
        let mut pending = self.launch(nodes, node_timeout, op);
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
                node: self.nodes[i].addr().redacted(),
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
                        let handle = node.get().await.map_err(|e| (None, e))?;
                        op(handle.conn.clone()).await.map_err(|e| (Some(handle), e))
                    };
                    let result = match tokio::time::timeout(node_timeout, attempt).await {
                        Err(_) => Err(NodeFailure::TimedOut),
                        Ok(Ok(answer)) => Ok(answer),
                        Ok(Err((handle, e))) => {
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
        };
        let node = self.nodes[i].addr().redacted();
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
