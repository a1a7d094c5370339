//! The Redis backend: one node (efficiency lock) or N independent nodes (Redlock).
//!
//! Each operation is a *round*: one request per node, all in flight at once, each bounded by the
//! node timeout. A round returns as soon as its outcome is known (a quorum granted, or too many
//! refused for one); the requests still in flight finish in a background task.

mod conn;
mod describe;
pub(crate) mod extender;
mod inflight;
mod order;
pub(crate) mod quarantine;
#[cfg(test)]
mod script_checks;
pub(crate) mod scripts;
pub(crate) mod version;
mod watch;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{Cmd, RedisError, RedisResult, Script, Value};

pub(crate) use self::conn::Quarantine;
use self::conn::{NodeConn, Standing};
pub(crate) use self::describe::describe;
use self::inflight::Inflight;
use self::order::Stragglers;
use self::watch::ReleaseWatch;
pub(crate) use self::watch::Subscription;
use crate::error::Error;
use crate::fencing;
use crate::node::NodeAddr;
use crate::node_error::NodeError;
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

/// Why a node gave no answer (a timeout is the round's deadline, not a node's answer).
#[derive(Debug)]
pub(crate) enum NodeFailure {
    Failed(NodeError),
    Excluded(String),
}

/// How an acquisition attempt waits, if it does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait<'a> {
    /// A single attempt, or a waiter's first: nothing to mark.
    No,
    /// A waiter that does not queue (several keys): marks the keys as waited for, for four times
    /// this lease, so that their release wakes it.
    Marked(Duration),
    /// A waiter in the line of one key, with its ticket (which marks the key too).
    InLine(&'a Ticket),
}

/// How a round is ordered against the others of the same owner token (see `order.rs`).
#[derive(Debug, Clone, Copy)]
enum Order<'a> {
    /// A write-back, an extension: each acts only where the key is ours.
    None,
    /// An acquisition of this token: respects the restart quarantine, and a release of the
    /// token must not overtake its requests.
    Acquire(&'a str),
    /// A release of this token that returns at a quorum: each request goes behind the
    /// token's acquisition requests not yet handed to their connection.
    Release(&'a str),
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
    /// Shared with the requests of a round: judging a restarted node reads the others.
    nodes: Arc<[Arc<NodeConn>]>,
    /// Every node's index, for the rounds that go to all of them.
    all: Box<[usize]>,
    /// Per node, the acquisition requests still in flight after their round returned, which a
    /// release of the same token waits for (see `order.rs`).
    stragglers: Box<[Arc<Stragglers>]>,
    /// How many releases that returned at a quorum still have requests in flight.
    background: Arc<tokio::sync::watch::Sender<usize>>,
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
            .collect::<Result<Arc<[_]>, _>>()?;
        let watch = Arc::new(ReleaseWatch::new(
            nodes.iter().map(|n| n.client().clone()).collect(),
        ));
        Ok(RedisBackend {
            all: (0..nodes.len()).collect(),
            stragglers: nodes.iter().map(|_| Arc::default()).collect(),
            background: Arc::new(tokio::sync::watch::Sender::new(0)),
            nodes,
            quorum,
            watch,
        })
    }

    /// Opens every node's connection, waiting at most `timeout`.
    pub(crate) async fn connect_all(&self, timeout: Duration) -> Votes {
        self.round_all(&self.all, timeout, None, |_conn, _| async {
            Ok(Answer::Granted(()))
        })
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
    /// `wait`: a number naming the wait within the client (random, or derived from when a wait
    /// split over several calls began, so that every call of it takes the same place).
    pub(crate) fn waiter_id(&self, wait: u64) -> String {
        self.watch.waiter_id(wait)
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
        wait: Wait<'_>,
        node_timeout: Duration,
    ) -> Round<u64> {
        let ttl_ms = ttl_millis(ttl);
        if let (Wait::InLine(ticket), [key]) = (wait, keys) {
            let mut queued = vec![
                key.clone(),
                queue::queue_key(key),
                queue::lease_key(key),
                queue::waiting_key(key),
            ];
            if fencing {
                queued.push(fencing::counter_key(key));
            }
            let mut cmd = evalsha(&scripts::ACQUIRE_QUEUED, &queued);
            cmd.arg(token)
                .arg(ttl_ms)
                .arg(&ticket.id)
                .arg(ticket.order)
                .arg(ticket.lease_ms())
                .arg(ttl_millis(queue::keep(ticket.lease)));
            let cmd = Arc::new(cmd);
            let ours = Order::Acquire(token);
            return self
                .round(
                    &self.all,
                    node_timeout,
                    true,
                    ours,
                    move |mut conn, slot| {
                        let cmd = cmd.clone();
                        async move {
                            counter_answer(
                                eval_ordered(&scripts::ACQUIRE_QUEUED, &cmd, &mut conn, &slot)
                                    .await?,
                            )
                        }
                    },
                )
                .await;
        }
        // A waiter that does not queue (several keys) marks the keys as waited for.
        let mark = match wait {
            Wait::Marked(lease) => Some(queue::keep(lease)),
            _ => None,
        };
        let with_marks = |mut keys: Vec<String>, locks: &[String]| {
            if mark.is_some() {
                keys.extend(locks.iter().map(|k| queue::waiting_key(k)));
            }
            keys
        };
        // One command for the whole round, sent to every node.
        let cmd = if fencing {
            let all_keys = with_marks(with_counter_keys(keys), keys);
            let mut cmd = evalsha(&scripts::ACQUIRE_FENCED, &all_keys);
            cmd.arg(token).arg(ttl_ms);
            if let Some(mark) = mark {
                cmd.arg(ttl_millis(mark));
            }
            cmd
        } else if let ([key], None, 1) = (keys, mark, self.nodes.len()) {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
            cmd
        } else {
            let all_keys = with_marks(keys.to_vec(), keys);
            let mut cmd = evalsha(&scripts::ACQUIRE_MANY, &all_keys);
            cmd.arg(token).arg(ttl_ms);
            if let Some(mark) = mark {
                cmd.arg(ttl_millis(mark));
            }
            cmd
        };
        let (cmd, script) = (
            Arc::new(cmd),
            !fencing && (keys.len() > 1 || mark.is_some() || self.nodes.len() > 1),
        );
        let ours = Order::Acquire(token);
        self.round(
            &self.all,
            node_timeout,
            true,
            ours,
            move |mut conn, slot| {
                let cmd = cmd.clone();
                async move {
                    if fencing {
                        counter_answer(
                            eval_ordered(&scripts::ACQUIRE_FENCED, &cmd, &mut conn, &slot).await?,
                        )
                    } else if script {
                        let set: i64 =
                            eval_ordered(&scripts::ACQUIRE_MANY, &cmd, &mut conn, &slot).await?;
                        Ok(if set == 1 {
                            Answer::Granted(0)
                        } else {
                            Answer::HeldByOther
                        })
                    } else {
                        let reply: Value = cmd.query_async(&mut conn).await?;
                        Ok(match reply {
                            Value::Nil => Answer::HeldByOther,
                            _ => Answer::Granted(0),
                        })
                    }
                }
            },
        )
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
        self.round_all(&self.all, node_timeout, None, move |mut conn, _| {
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
        let mut cmd = evalsha(&scripts::WRITE_BACK, &with_counter_keys(keys));
        cmd.arg(token).arg(fencing_token.to_string());
        let cmd = Arc::new(cmd);
        self.round_unordered(nodes, node_timeout, move |mut conn, _| {
            let cmd = cmd.clone();
            async move { if_owned(&scripts::WRITE_BACK, &cmd, &mut conn).await }
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
        let mut cmd = evalsha(&scripts::EXTEND, keys);
        cmd.arg(token).arg(ttl_millis(ttl));
        let cmd = Arc::new(cmd);
        self.round_unordered(&self.all, node_timeout, move |mut conn, _| {
            let cmd = cmd.clone();
            async move { if_owned(&scripts::EXTEND, &cmd, &mut conn).await }
        })
        .await
    }

    /// Compare-and-delete on every node (bounded by the node timeout). With `at_quorum`, it
    /// returns once a quorum deleted (the other nodes' requests finish in the background, each
    /// behind our earlier commands on its connection; [`RedisBackend::settle`] waits for them);
    /// otherwise, and whenever no quorum deleted, it waits for every answer. `line`: the
    /// holder's waiter id, if it queued for the lock: it leaves the line. Each granted vote
    /// carries how many waiters the release messages reached on that node.
    pub(crate) async fn release(
        &self,
        keys: &[String],
        token: &str,
        line: Option<&str>,
        node_timeout: Duration,
        at_quorum: bool,
    ) -> Round<u64> {
        let locks = keys.len();
        let all_keys = release_keys(keys);
        let mut cmd = evalsha(&scripts::RELEASE, &all_keys);
        cmd.arg(token);
        if let Some(line) = line {
            cmd.arg(line);
        }
        let cmd = Arc::new(cmd);
        let op = move |mut conn, _| {
            let cmd = cmd.clone();
            async move {
                let reply: Value = eval(&scripts::RELEASE, &cmd, &mut conn).await?;
                let (deleted, heard): (usize, u64) = match reply {
                    Value::Int(deleted) => (usize::try_from(deleted).unwrap_or(0), 0),
                    other => redis::from_redis_value(other)?,
                };
                Ok(if deleted == locks {
                    Answer::Granted(heard)
                } else {
                    Answer::NotHeld
                })
            }
        };
        if at_quorum {
            let order = Order::Release(token);
            return self.round(&self.all, node_timeout, true, order, op).await;
        }
        // Behind our acquisition's requests still in flight, on each node (see `order.rs`).
        let after = Some(Arc::from(token));
        self.round_all(&self.all, node_timeout, after, op).await
    }

    /// Waits, at most `bound`, until the requests of the releases that returned at a quorum
    /// have finished on every node.
    pub(crate) async fn settle(&self, bound: Duration) -> bool {
        let mut pending = self.background.subscribe();
        let settled = tokio::time::timeout(bound, pending.wait_for(|n| *n == 0))
            .await
            .is_ok();
        settled
    }

    /// Extends many locks at once: one pipeline per node (EVALSHA of the extend script for each
    /// lock), all nodes in parallel. Returns, per lock, how many nodes extended it and how many
    /// answered that they do not hold it. Returns as soon as every lock has a quorum, or every
    /// node answered, or `timeout` passed.
    pub(crate) async fn extend_batch(
        &self,
        locks: &[(Arc<[String]>, Arc<str>)],
        ttl: Duration,
        timeout: Duration,
    ) -> Vec<extender::Count> {
        let ttl_ms = ttl_millis(ttl);
        let sha = scripts::EXTEND.get_hash().to_string();
        let mut pipe = redis::pipe();
        // The TTL is announced once, ahead of the extensions (for the restart quarantine), and
        // the extensions skip their own announcement. Its reply is not a lock's.
        pipe.cmd("EVALSHA")
            .arg(scripts::ANNOUNCE.get_hash())
            .arg(0)
            .arg(ttl_ms)
            .ignore();
        for (keys, token) in locks {
            pipe.cmd("EVALSHA")
                .arg(&sha)
                .arg(keys.len())
                .arg(&**keys)
                .arg(&**token)
                .arg(ttl_ms)
                .arg("announced");
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
        let mut counts = vec![extender::Count::default(); locks.len()];
        let collect = async {
            while let Some(result) = per_node.next().await {
                let Ok(replies) = result else { continue };
                for (count, reply) in counts.iter_mut().zip(replies) {
                    match reply {
                        Value::Int(1) => count.extended += 1,
                        Value::Int(0) => count.not_held += 1,
                        _ => {}
                    }
                }
                if counts.iter().all(|c| c.extended >= self.quorum) {
                    break;
                }
            }
        };
        if tokio::time::timeout(timeout, collect).await.is_err() {
            tracing::debug!(?timeout, "batch extend: some nodes did not answer in time");
        }
        counts
    }

    /// Runs `op` on `nodes` and returns once the quorum decision is known; requests still in
    /// flight then finish in a background task (the driver skips a request whose caller is
    /// gone, so dropping them could leave a straggler node without its SET or extension),
    /// unless the decision is a failure and `settle_on_failure` is set: then they are awaited.
    /// One deadline, the node timeout, bounds every request of the round.
    ///
    /// `order`: for an acquisition, which respects the restart quarantine and whose requests a
    /// release of the token must not overtake, those still in flight when the round returns
    /// are registered until they finish; a release goes behind them (see `order.rs`), and its
    /// own requests still in flight are counted until they finish ([`RedisBackend::settle`]).
    async fn round<T, F, Fut>(
        &self,
        nodes: &[usize],
        node_timeout: Duration,
        settle_on_failure: bool,
        order: Order<'_>,
        op: F,
    ) -> Round<T>
    where
        T: Send + 'static,
        F: Fn(redis::aio::MultiplexedConnection, order::Slot) -> Fut
            + Clone
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        let need = self.quorum.min(nodes.len().max(1));
        let mut tally = Tally::new(nodes.len().max(1), need);
        let started = Instant::now();
        let (quarantine, sent, after) = match order {
            Order::None => (None, None, None),
            Order::Acquire(_) => (
                Some(node_timeout),
                Some(order::Sent::new(nodes.len())),
                None,
            ),
            Order::Release(token) => (None, None, Some(Arc::from(token))),
        };
        let mut inflight = self.launch(nodes, quarantine, sent.as_ref(), after, op);
        let mut deadline = std::pin::pin!(tokio::time::sleep(node_timeout));
        let mut votes = self.pending_votes(nodes);
        let mut granted = Vec::new();
        let mut decision = if nodes.is_empty() {
            Decision::Impossible
        } else {
            Decision::Pending
        };
        loop {
            let waiting = decision == Decision::Pending
                || (decision == Decision::Impossible && settle_on_failure && inflight.left() > 0);
            if !waiting {
                break;
            }
            match next(&mut inflight, deadline.as_mut()).await {
                Next::Answer(pos, result) => {
                    let latency = started.elapsed();
                    let grant = absorb(nodes, pos, result, latency, &mut votes, &mut granted);
                    if decision == Decision::Pending {
                        decision = tally.record(grant);
                    }
                }
                Next::AllDone => break,
                Next::Deadline => {
                    if decision == Decision::Pending {
                        for _ in 0..inflight.left() {
                            decision = tally.record(false);
                        }
                    }
                    time_out(&mut votes, node_timeout);
                    break;
                }
            }
        }
        if inflight.left() > 0 && !deadline.is_elapsed() {
            let until = deadline.deadline();
            let mut registered = match (order, &sent) {
                (Order::Acquire(token), Some(sent)) => {
                    self.register_stragglers(nodes, &inflight, token, sent)
                }
                _ => Vec::new(),
            };
            let counted = matches!(order, Order::Release(_)).then(|| {
                self.background.send_modify(|n| *n += 1);
                Background(self.background.clone())
            });
            tokio::spawn(async move {
                let rest = async {
                    while let Some((pos, _)) = next_answer(&mut inflight).await {
                        if let Some(registration) = registered.get_mut(pos) {
                            registration.take();
                        }
                    }
                };
                let _ = tokio::time::timeout_at(until, rest).await;
                // The requests first: once dropped, none can reach its connection any more.
                drop(inflight);
                drop(registered);
                drop(counted);
            });
        }
        Round {
            votes: Votes(votes),
            granted,
            decision,
        }
    }

    /// A round that neither respects the quarantine nor orders a release behind it (a
    /// write-back, an extension: each acts only where the key is ours).
    async fn round_unordered<T, F, Fut>(
        &self,
        nodes: &[usize],
        node_timeout: Duration,
        op: F,
    ) -> Round<T>
    where
        T: Send + 'static,
        F: Fn(redis::aio::MultiplexedConnection, order::Slot) -> Fut
            + Clone
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        self.round(nodes, node_timeout, false, Order::None, op)
            .await
    }

    /// Registers the requests of an acquisition of `token` that are still in flight, by their
    /// position in the round (see `order.rs`).
    fn register_stragglers<F: Future>(
        &self,
        nodes: &[usize],
        inflight: &Inflight<F>,
        token: &str,
        sent: &Arc<order::Sent>,
    ) -> Vec<Option<order::Registration>> {
        let token: Arc<str> = Arc::from(token);
        nodes
            .iter()
            .enumerate()
            .map(|(pos, &i)| {
                inflight
                    .is_pending(pos)
                    .then(|| self.stragglers[i].register(&token, order::Slot::new(sent, pos)))
            })
            .collect()
    }

    /// Runs `op` on `nodes` and waits for every answer (each within the node timeout). With
    /// `after` (a release's owner token), each request waits, on its node, for that token's
    /// acquisition requests still in flight (see `order.rs`).
    async fn round_all<T, F, Fut>(
        &self,
        nodes: &[usize],
        node_timeout: Duration,
        after: Option<Arc<str>>,
        op: F,
    ) -> Round<T>
    where
        T: Send + 'static,
        F: Fn(redis::aio::MultiplexedConnection, order::Slot) -> Fut
            + Clone
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        let started = Instant::now();
        let mut inflight = self.launch(nodes, None, None, after, op);
        let mut deadline = std::pin::pin!(tokio::time::sleep(node_timeout));
        let mut votes = self.pending_votes(nodes);
        let mut granted = Vec::new();
        loop {
            match next(&mut inflight, deadline.as_mut()).await {
                Next::Answer(pos, result) => {
                    absorb(
                        nodes,
                        pos,
                        result,
                        started.elapsed(),
                        &mut votes,
                        &mut granted,
                    );
                }
                Next::AllDone => break,
                Next::Deadline => {
                    time_out(&mut votes, node_timeout);
                    break;
                }
            }
        }
        let decision = if granted.len() >= self.quorum {
            Decision::Reached
        } else {
            Decision::Impossible
        };
        Round {
            votes: Votes(votes),
            granted,
            decision,
        }
    }

    /// A `Pending` vote for each node of the round, in round order.
    fn pending_votes(&self, nodes: &[usize]) -> Vec<NodeVote> {
        nodes
            .iter()
            .map(|&i| NodeVote {
                node: self.nodes[i].name().clone(),
                outcome: VoteOutcome::Pending,
                latency: Duration::ZERO,
            })
            .collect()
    }

    /// The requests of a round, one per node of `nodes`, in flight together. With `quarantine`
    /// (the round's node timeout), nodes in restart quarantine are not asked and not counted.
    /// With `sent` (an acquisition), each request records when its command is handed to its
    /// connection. With `after` (an owner token), each request first waits for that token's
    /// acquisition requests not yet handed to their connection on its node.
    fn launch<T, F, Fut>(
        &self,
        nodes: &[usize],
        quarantine: Option<Duration>,
        sent: Option<&Arc<order::Sent>>,
        after: Option<Arc<str>>,
        op: F,
    ) -> Inflight<impl Future<Output = Result<Answer<T>, NodeFailure>> + Send + 'static>
    where
        T: Send + 'static,
        F: Fn(redis::aio::MultiplexedConnection, order::Slot) -> Fut
            + Clone
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        Inflight::new(nodes.iter().enumerate().map(move |(pos, &i)| {
            let node = self.nodes[i].clone();
            let all = self.nodes.clone();
            let op = op.clone();
            let after = after
                .clone()
                .map(|token| (token, self.stragglers[i].clone()));
            let slot = sent.map(|sent| (order::Slot::new(sent, pos), self.stragglers[i].clone()));
            async move {
                if let Some((token, stragglers)) = &after {
                    if stragglers.any() {
                        // Rare (a release right after its acquisition returned): boxed.
                        Box::pin(stragglers.after(token)).await;
                    }
                }
                // The connection is fetched inside the round's deadline, so a node that is slow
                // to connect costs no more than one node timeout.
                let handle = node
                    .get()
                    .await
                    .map_err(|e| NodeFailure::Failed(describe(&e)))?;
                if let Some(node_timeout) = quarantine {
                    // Rare (a restarted node): boxed, so that it does not weigh on every
                    // request's future.
                    Box::pin(check_quarantine(&all, i, &handle, node_timeout)).await?;
                }
                let answer = match slot {
                    None => op(handle.conn.clone(), order::Slot::default()).await,
                    Some((slot, stragglers)) => {
                        let mut request = std::pin::pin!(op(handle.conn.clone(), slot.clone()));
                        // Its first poll hands the command to the connection's queue (the
                        // multiplexed connection's channel, which serves senders in order): a
                        // release handed over afterwards runs after it on the node.
                        let first = std::future::poll_fn(|cx| {
                            std::task::Poll::Ready(request.as_mut().poll(cx))
                        })
                        .await;
                        if slot.handed() {
                            stragglers.handed();
                        }
                        match first {
                            std::task::Poll::Ready(answer) => answer,
                            std::task::Poll::Pending => request.await,
                        }
                    }
                };
                answer.map_err(|e| {
                    if conn::is_broken(&e) {
                        node.discard(&handle);
                    }
                    NodeFailure::Failed(describe(&e))
                })
            }
        }))
    }
}

/// Keeps a node in restart quarantine out of the round (see `quarantine.rs`). A suspect node
/// whose quarantine length is not known yet is judged here: the longest TTL in use is read from
/// the other nodes (within the round's deadline), and until enough of them answered the node is
/// not counted. The node counts on a read taken once its quarantine is over (a second read, if
/// the first came earlier), and is then marked clear for later clients.
async fn check_quarantine(
    nodes: &[Arc<NodeConn>],
    i: usize,
    handle: &conn::Handle,
    node_timeout: Duration,
) -> Result<(), NodeFailure> {
    let info = &handle.info;
    if let Standing::Unknown = info.standing() {
        let needed = quarantine::witnesses_needed(nodes.len());
        // Half the node timeout, so that a node that does not answer leaves time to say why
        // this one is not counted before the round's deadline.
        let (read, longest) = longest_ttl_in_use(nodes, i, node_timeout / 2).await;
        if read < needed {
            return Err(NodeFailure::Excluded(info.unknown_why(read, needed)));
        }
        if let Standing::Excluded(why) = info.resolve(longest.max(nodes[i].quarantine().own_ttl)) {
            return Err(NodeFailure::Excluded(why));
        }
    } else if let Standing::Excluded(why) = info.standing() {
        return Err(NodeFailure::Excluded(why));
    }
    if let Some((old, clear)) = info.take_clearing() {
        let mut conn = handle.conn.clone();
        let node = nodes[i].clone();
        tokio::spawn(async move {
            let mut cmd = scripts::MARK.prepare_invoke();
            cmd.key(quarantine::MARKER_KEY).arg(&old).arg(&clear);
            if let Err(e) = cmd.invoke_async::<i64>(&mut conn).await {
                tracing::debug!(node = %node.addr(), error = %describe(&e), "could not mark the node clear");
            }
        });
    }
    Ok(())
}

/// Reads the TTLs in use from every node but `skip`, each within `timeout`: how many answered,
/// and the longest TTL whose lock may still live on any of them.
async fn longest_ttl_in_use(
    nodes: &[Arc<NodeConn>],
    skip: usize,
    timeout: Duration,
) -> (usize, Duration) {
    let reads = nodes
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != skip)
        .map(|(_, node)| async move {
            let handle = node.get().await?;
            let mut conn = handle.conn.clone();
            let mut pipe = redis::pipe();
            pipe.cmd("TIME")
                .cmd("ZRANGE")
                .arg(quarantine::TTLS_KEY)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
            let (time, entries): (Vec<String>, Vec<(String, f64)>) =
                pipe.query_async(&mut conn).await.inspect_err(|e| {
                    if conn::is_broken(e) {
                        node.discard(&handle);
                    }
                })?;
            Ok::<_, RedisError>(quarantine::longest_live(&time, &entries))
        })
        .map(|read| async move {
            tokio::time::timeout(timeout, read)
                .await
                .map_err(|_| ())?
                .map_err(|_| ())
        });
    let answers = futures_util::future::join_all(reads).await;
    let read = answers.iter().filter(|a| a.is_ok()).count();
    let longest = answers
        .into_iter()
        .filter_map(|a| a.ok().flatten())
        .max()
        .unwrap_or(Duration::ZERO);
    (read, longest)
}

/// What happened next in a round.
enum Next<T> {
    /// The request at this position of the round answered (or failed).
    Answer(usize, T),
    /// Every request has answered.
    AllDone,
    /// The node timeout passed with requests still in flight.
    Deadline,
}

/// Waits for the next answer of a round (`None` when all have answered).
async fn next_answer<F: Future>(inflight: &mut Inflight<F>) -> Option<(usize, F::Output)> {
    std::future::poll_fn(|cx| inflight.poll_next(cx)).await
}

/// Waits for the next answer of the round, or its deadline.
async fn next<F: Future>(
    inflight: &mut Inflight<F>,
    mut deadline: Pin<&mut tokio::time::Sleep>,
) -> Next<F::Output> {
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(item) = inflight.poll_next(cx) {
            return std::task::Poll::Ready(match item {
                Some((pos, out)) => Next::Answer(pos, out),
                None => Next::AllDone,
            });
        }
        deadline.as_mut().poll(cx).map(|()| Next::Deadline)
    })
    .await
}

/// Turns the answer at position `pos` of the round into its vote; returns whether it granted.
fn absorb<T>(
    nodes: &[usize],
    pos: usize,
    result: Result<Answer<T>, NodeFailure>,
    latency: Duration,
    votes: &mut [NodeVote],
    granted: &mut Vec<(usize, T)>,
) -> bool {
    let outcome = match result {
        Ok(Answer::Granted(v)) => {
            granted.push((nodes[pos], v));
            VoteOutcome::Granted
        }
        Ok(Answer::HeldByOther) => VoteOutcome::HeldByOther,
        Ok(Answer::NotHeld) => VoteOutcome::NotHeld,
        Err(NodeFailure::Failed(why)) => VoteOutcome::Failed(why),
        Err(NodeFailure::Excluded(why)) => VoteOutcome::Excluded(why),
    };
    let vote = &mut votes[pos];
    tracing::debug!(node = %vote.node, outcome = %outcome, ?latency, "node answered");
    let is_grant = outcome.is_granted();
    vote.outcome = outcome;
    vote.latency = latency;
    is_grant
}

/// Marks the requests still in flight at the deadline as timed out.
fn time_out(votes: &mut [NodeVote], node_timeout: Duration) {
    for vote in votes
        .iter_mut()
        .filter(|v| v.outcome == VoteOutcome::Pending)
    {
        vote.outcome = VoteOutcome::TimedOut;
        vote.latency = node_timeout;
    }
}

/// The keys the release script takes: the locks, their queues, their lease sets, their wait
/// marks (for one resource: `crate::protocol::release_keys`).
fn release_keys(keys: &[String]) -> Vec<String> {
    keys.iter()
        .cloned()
        .chain(keys.iter().map(|k| queue::queue_key(k)))
        .chain(keys.iter().map(|k| queue::lease_key(k)))
        .chain(keys.iter().map(|k| queue::waiting_key(k)))
        .collect()
}

/// The lock keys followed by their fence counters, as the fencing scripts take them.
fn with_counter_keys(keys: &[String]) -> Vec<String> {
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

/// An EVALSHA of `script` over `keys`; the caller adds the arguments. Built once per round and
/// sent to every node (building it per node showed in the profile: a few allocations per key
/// and argument, times the nodes).
fn evalsha(script: &Script, keys: &[String]) -> Cmd {
    // Sized for the keys and a few arguments, so that writing them does not grow the buffer
    // step by step (the reallocations showed in the profile).
    let bytes: usize = keys.iter().map(|k| k.len() + 16).sum::<usize>() + 160;
    let mut cmd = Cmd::with_capacity(keys.len() + 8, bytes);
    cmd.arg("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    cmd
}

/// Sends `cmd`, an EVALSHA of `script`, on `conn`. A node that answers NOSCRIPT (it restarted
/// with an empty script cache since the connection loaded the scripts) gets the script loaded
/// and the call once more.
async fn eval<T: redis::FromRedisValue>(
    script: &Script,
    cmd: &Cmd,
    conn: &mut redis::aio::MultiplexedConnection,
) -> RedisResult<T> {
    eval_ordered(script, cmd, conn, &order::Slot::default()).await
}

/// As [`eval`], for a request of an acquisition (`slot`, see `order.rs`): after NOSCRIPT it
/// sends nothing more if a release of its token already followed it on the connection (its
/// first call did nothing, and a second would land after the release).
async fn eval_ordered<T: redis::FromRedisValue>(
    script: &Script,
    cmd: &Cmd,
    conn: &mut redis::aio::MultiplexedConnection,
    slot: &order::Slot,
) -> RedisResult<T> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            if slot.resend().is_err() {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "not sent again after NOSCRIPT: the lock is being released",
                )));
            }
            // Rare: boxed, so that its state does not weigh on every request's future.
            Box::pin(script.load_async(conn)).await?;
            cmd.query_async(conn).await
        }
        other => other,
    }
}

/// Counts a release's requests in flight after it returned, until dropped.
struct Background(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Background {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Runs a script that acts only if every key holds our token: its reply is 1 (done) or 0 (some
/// key is not ours, nothing done).
async fn if_owned(
    script: &Script,
    cmd: &Cmd,
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<Answer<()>, RedisError> {
    let done: i64 = eval(script, cmd, conn).await?;
    Ok(if done == 1 {
        Answer::Granted(())
    } else {
        Answer::NotHeld
    })
}

fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_release_keys_are_the_ones_the_client_sends() {
        let one = release_keys(&["order:7".to_string()]);
        assert_eq!(one, crate::protocol::release_keys("order:7"));
    }

    #[tokio::test]
    async fn a_round_keeps_small_futures() {
        // Printed for the performance notes; the bound guards against a cold path (connection
        // set-up, script loading) creeping back inline into every request's future.
        let addr = NodeAddr::parse("redis://127.0.0.1:1/0").unwrap();
        let quarantine = Quarantine {
            enabled: false,
            own_ttl: Duration::from_secs(1),
        };
        let backend = RedisBackend::new(vec![addr], Duration::from_millis(10), quarantine).unwrap();
        let cmd = Arc::new(redis::cmd("PING"));
        let inflight = backend.launch(&[0], None, None, None, move |mut conn, _| {
            let cmd = cmd.clone();
            async move {
                let _: i64 = eval(&scripts::EXTEND, &cmd, &mut conn).await?;
                Ok(Answer::Granted(()))
            }
        });
        let size = inflight.future_size();
        eprintln!("one request's future: {size} bytes");
        assert!(size < 2048, "{size} bytes");
    }
}
