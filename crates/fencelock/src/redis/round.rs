//! The round engine: one request per node, all in flight together, under one per-node deadline.
//!
//! Every Redis operation is a round in one of four [`Mode`]s, which say when the round returns
//! and what happens to the requests still in flight. The deadline, the votes, the early quorum
//! decision, the restart quarantine and the stragglers are handled here and nowhere else.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::RedisError;

use super::conn::{self, NodeConn, Standing};
use super::describe::describe;
use super::inflight::Inflight;
use super::{order, quarantine, scripts, RedisBackend};
use crate::pure::ahead::{self, Ahead};
use crate::pure::node_error::NodeError;
use crate::pure::quorum::{Decision, Tally};
use crate::pure::validity;
use crate::pure::vote::{NodeVote, VoteOutcome, Votes};

/// One node's answer to one request, before it becomes a vote.
#[derive(Debug)]
pub(crate) enum Answer<T> {
    Granted(T),
    HeldByOther,
    NotHeld,
    /// The node answered, but its answer must not count: why (a write-back on a node that lost
    /// its fence counter since it granted, `ops::write_back`).
    Excluded(String),
}

/// Why a node gave no answer (a timeout is the round's deadline, not a node's answer).
#[derive(Debug)]
pub(crate) enum NodeFailure {
    Failed(NodeError),
    Excluded(String),
}

/// The outcome of a round: the votes in node order and the values of the nodes that granted.
#[derive(Debug)]
pub(crate) struct Round<T> {
    pub(crate) votes: Votes,
    pub(crate) granted: Vec<(usize, T)>,
    pub(crate) decision: Decision,
}

/// When a round returns, and what it does with the requests still in flight.
#[derive(Debug, Clone)]
pub(crate) enum Mode<'a> {
    /// An acquisition of the owner value `token`. Nodes in restart quarantine are not asked and
    /// not counted. Returns at the quorum decision; on a failure it first waits for every
    /// request in flight, so that the release that follows reaches each node after its SET. A
    /// request still in flight after a success is registered, so that a release of the token
    /// waits for it on its node (see `order.rs`).
    Acquire {
        token: &'a str,
        /// A plain grant (a bare `SET NX PX`, which announces nothing): its TTL is announced
        /// ahead on each connection, and a grant counts only under that announcement.
        ahead: Option<AnnounceAhead>,
    },
    /// Returns at the quorum decision; the rest finish in the background (a write-back, an
    /// extension: each acts only where the key is ours).
    UntilQuorum,
    /// Waits for every answer (a release after a failed attempt or of a dropped lock, leaving
    /// the line, connecting). With `after` (a release's owner value), each request first waits,
    /// on its node, for that token's acquisition requests not yet handed to its connection (see
    /// `order.rs`).
    All { after: Option<Arc<str>> },
    /// A release of the owner value `after` that returns once a quorum deleted, as an
    /// acquisition returns once a quorum granted; on a failure it waits for every answer. Each
    /// request first waits, on its node, as in `All`; the requests still in flight when the
    /// round returns are already behind our earlier commands on their connections and finish in
    /// the background, counted until they do ([`RedisBackend::settle_releases`]).
    Release { after: Arc<str> },
}

/// What a plain acquisition's requests need to announce its TTL ahead of the grant and to judge
/// whether a grant is covered (`pure/ahead.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnnounceAhead {
    pub(crate) ttl: Duration,
    pub(crate) drift: Duration,
    /// The round's node timeout: a request announces first when its reply, counted until then,
    /// could arrive after the kept announcement stops covering it.
    pub(crate) limit: Duration,
}

/// Whether a round that reached its quorum waits for the answers still in flight (each within
/// the round's deadline): a fenced acquisition does while its grants hold fewer than a quorum of
/// fence counters (`guard.rs`; an unfenced one's grants carry no counter and never wait), a
/// batched extension while some lock has fewer than a quorum of extensions (`ops.rs`); every
/// other round returns at once.
pub(crate) trait WantsMore: Sized {
    fn wants_more(_granted: &[(usize, Self)], _quorum: usize) -> bool {
        false
    }
}

impl WantsMore for () {}
impl WantsMore for u64 {}

impl RedisBackend {
    /// Runs `op` on `nodes` in `mode`; `limit` bounds every request of the round (the node
    /// timeout, or for an extension the validity left). Requests still in flight when the round
    /// returns finish in a background task (the driver skips a request whose caller is gone, so
    /// dropping them could leave a straggler node without its SET or extension).
    pub(super) async fn round<T, F, Fut>(
        &self,
        mode: Mode<'_>,
        nodes: &[usize],
        limit: Duration,
        op: F,
    ) -> Round<T>
    where
        T: Send + 'static + WantsMore,
        F: Fn(super::tagged::NodeConnection, order::Slot, Option<MarkerCell>) -> Fut
            + Clone
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = Result<Answer<T>, RedisError>> + Send + 'static,
    {
        let need = self.quorum.min(nodes.len().max(1));
        let mut tally = Tally::new(nodes.len().max(1), need);
        let started = Instant::now();
        let (quarantine, after, acquiring, ahead) = match &mode {
            Mode::Acquire { token, ahead } => (Some(limit), None, Some(*token), *ahead),
            Mode::UntilQuorum => (None, None, None, None),
            Mode::All { after } => (None, after.clone(), None, None),
            Mode::Release { after } => (None, Some(after.clone()), None, None),
        };
        let every_answer = matches!(mode, Mode::All { .. });
        let releasing = matches!(mode, Mode::Release { .. });
        // A round allowed longer than the node timeout (an extension, which may take the
        // validity left): once a node has failed, a node silent past the node timeout no longer
        // holds the round, so the caller's retry reaches the failed node's new connection
        // before the validity runs out (one hung node and a brief break of another lost the
        // lock otherwise). The requests in flight still run to `limit` in the background.
        let patient = matches!(mode, Mode::UntilQuorum) && limit > self.settings.node_timeout;
        let until = tokio::time::Instant::from_std(started + limit);
        // Where each request of an acquisition stands, for a release of its token (`order.rs`).
        let sent = acquiring.map(|_| order::Sent::new(nodes.len()));
        let mut inflight = self.launch(nodes, quarantine, sent.as_ref(), after, ahead, op);
        let mut deadline = std::pin::pin!(tokio::time::sleep(limit));
        let mut votes = self.pending_votes(nodes);
        let mut granted = Vec::new();
        let mut decision = if nodes.is_empty() {
            Decision::Impossible
        } else {
            Decision::Pending
        };
        loop {
            let waiting = every_answer
                || decision == Decision::Pending
                || (decision == Decision::Impossible
                    && (acquiring.is_some() || releasing)
                    && inflight.left() > 0)
                || (decision == Decision::Reached
                    && inflight.left() > 0
                    && T::wants_more(&granted, self.quorum));
            if !waiting {
                break;
            }
            match next(&mut inflight, deadline.as_mut()).await {
                Next::Answer(pos, result) => {
                    let latency = started.elapsed();
                    let failed = matches!(result, Err(NodeFailure::Failed(_)));
                    let grant = absorb(nodes, pos, result, latency, &mut votes, &mut granted);
                    if decision == Decision::Pending {
                        decision = tally.record(grant);
                    }
                    if patient && failed && decision == Decision::Pending {
                        let cap = (started + self.settings.node_timeout).max(Instant::now());
                        deadline
                            .as_mut()
                            .reset(tokio::time::Instant::from_std(cap).min(until));
                    }
                }
                Next::AllDone => break,
                Next::Deadline => {
                    if decision == Decision::Pending {
                        for _ in 0..inflight.left() {
                            decision = tally.record(false);
                        }
                    }
                    time_out(&mut votes, started.elapsed());
                    break;
                }
            }
        }
        for (pos, vote) in votes.iter().enumerate() {
            self.health.observe_vote(nodes[pos], vote);
        }
        if inflight.left() > 0 && tokio::time::Instant::now() < until {
            let mut registered = match (acquiring, &sent) {
                (Some(token), Some(sent)) => {
                    self.register_stragglers(nodes, &inflight, token, sent)
                }
                _ => Vec::new(),
            };
            // A release's, and an acquisition's: a short-lived process (the CLI's `acquire`)
            // that closes its client before exiting lets its last nodes' grants reach them, so
            // the lock is not left on a bare majority.
            let counted =
                (releasing || acquiring.is_some()).then(|| Background::count(&self.background));
            // The late answers still tell whether their nodes answer (`telemetry.rs`).
            let (health, all, nodes) = (self.health.clone(), self.nodes.clone(), nodes.to_vec());
            tokio::spawn(async move {
                let rest = async {
                    while let Some((pos, result)) = next_answer(&mut inflight).await {
                        if let Some(registration) = registered.get_mut(pos) {
                            registration.take();
                        }
                        let answered = match &result {
                            Ok(_) => Some(true),
                            Err(NodeFailure::Failed(_)) => Some(false),
                            Err(NodeFailure::Excluded(_)) => None,
                        };
                        let node = all[nodes[pos]].name();
                        health.observe(nodes[pos], node, answered, &"failed");
                    }
                };
                let _ = tokio::time::timeout_at(until, rest).await;
                for (pos, &i) in nodes.iter().enumerate() {
                    if inflight.is_pending(pos) {
                        health.observe(i, all[i].name(), Some(false), &"timed out");
                    }
                }
                // The requests first: once dropped, none can reach its connection any more.
                drop(inflight);
                drop(registered);
                drop(counted);
            });
        }
        Round {
            votes: Votes::from(votes),
            granted,
            decision,
        }
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
    /// connection. With `after` (an owner value), each request first waits for that token's
    /// acquisition requests not yet handed to their connection on its node. With `ahead` (a plain
    /// acquisition), each request first makes sure its connection announced the TTL recently
    /// enough, and its grant counts only if the announcement covers it.
    pub(super) fn launch<T, F, Fut>(
        &self,
        nodes: &[usize],
        quarantine: Option<Duration>,
        sent: Option<&Arc<order::Sent>>,
        after: Option<Arc<str>>,
        ahead: Option<AnnounceAhead>,
        op: F,
    ) -> Inflight<impl Future<Output = Result<Answer<T>, NodeFailure>> + Send + 'static>
    where
        T: Send + 'static,
        F: Fn(super::tagged::NodeConnection, order::Slot, Option<MarkerCell>) -> Fut
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
                let covering = match ahead {
                    None => None,
                    Some(ask) => Some(
                        match handle
                            .info
                            .ahead(ask.ttl, Instant::now(), ask.limit, ask.drift)
                        {
                            Some(kept) => kept,
                            // About once per TTL and connection: boxed.
                            None => Box::pin(announce_ahead(&handle, ask)).await.map_err(|e| {
                                if conn::is_broken(&e) {
                                    node.discard(&handle);
                                }
                                NodeFailure::Failed(describe(&e))
                            })?,
                        },
                    ),
                };
                // An acquisition under the quarantine reads the node's marker right behind its
                // request, in the same pipeline (one message, one reply: no request of its own):
                // a grant counts only if the node kept its data since the connection judged it
                // (issue 27, item 4). The request leaves what it read in `cell` (`Marked`).
                let checks_marker = quarantine.is_some() && node.quarantine().enabled;
                let cell = checks_marker.then(MarkerCell::default);
                let answer = match slot {
                    None => op(handle.conn.clone(), order::Slot::default(), cell.clone()).await,
                    Some((slot, stragglers)) => {
                        let mut request =
                            std::pin::pin!(op(handle.conn.clone(), slot.clone(), cell.clone()));
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
                // A grant whose request read no marker (it cannot: every acquisition sends
                // `Marked`) is not counted rather than counted unchecked.
                let marker = cell.map(|cell| {
                    cell.get().cloned().ok_or_else(|| {
                        RedisError::from((
                            redis::ErrorKind::Client,
                            "the grant came without the node's marker read behind it",
                        ))
                    })
                });
                if let (Some(found), Ok(Answer::Granted(_))) = (marker, &answer) {
                    match found {
                        Ok(found) if handle.info.marker_holds(found.as_deref()) => {}
                        Ok(found) => {
                            // The next request connects again and judges the node afresh.
                            node.discard(&handle);
                            return Err(NodeFailure::Excluded(format!(
                                "its fencelock:node marker changed since this client connected \
                                 ({:?}, now {found:?}): it lost its data (a restart, FLUSHALL, \
                                 FLUSHDB, a DEL or a failover to an empty replica); its grant is \
                                 not counted, and the node is judged again (restart quarantine)",
                                handle.info.marker().unwrap_or("none")
                            )));
                        }
                        Err(e) => {
                            if conn::is_broken(&e) {
                                node.discard(&handle);
                            }
                            return Err(NodeFailure::Failed(describe(&e)));
                        }
                    }
                }
                if let (Some(ahead), Some(ask), Ok(Answer::Granted(_))) = (covering, ahead, &answer)
                {
                    if !ahead.covers(Instant::now(), ask.ttl, ask.drift) {
                        // Rare: the round's reply came later than the window its
                        // announcement reported (or the node reported none).
                        let why = match ahead.covered_until(ask.ttl, ask.drift) {
                            Some(until) => format!(
                                "the reply took longer than {:?} after the announcement",
                                until - ahead.sent
                            ),
                            None => "the node reported a window too short for any grant".into(),
                        };
                        return Err(NodeFailure::Failed(NodeError::other(format!(
                            "its grant is not covered by the TTL announcement sent ahead of it \
                             ({why}); not counted. The window is about the TTL less the drift: \
                             use a TTL well above the node timeout"
                        ))));
                    }
                }
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
        let (read, mut longest) = longest_ttl_in_use(nodes, i, node_timeout / 2).await;
        if nodes[i].addr().follows_primary() {
            // A promoted replica replicated the old primary's record of the TTLs in use: the
            // longest one there counts too (one Sentinel node has no other node to ask; the
            // record is no witness, as it may miss the lost writes' TTLs, so it adds to
            // `longest` and not to `read`).
            longest = longest.max(own_ttl_record(&nodes[i], handle, node_timeout / 2).await);
        }
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

/// The node's time and its record of the TTLs in use (`fencelock:ttls`, with deadlines), in one
/// round trip.
fn ttl_record_read() -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME")
        .cmd("ZRANGE")
        .arg(quarantine::TTLS_KEY)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    pipe
}

/// The longest TTL whose lock may still live by the node's own record, read on the handle's
/// connection within `timeout` (zero when it cannot be read).
async fn own_ttl_record(node: &NodeConn, handle: &conn::Handle, timeout: Duration) -> Duration {
    let mut conn = handle.conn.clone();
    let pipe = ttl_record_read();
    let read = pipe.query_async::<(Vec<String>, Vec<(String, f64)>)>(&mut conn);
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok((time, entries))) => quarantine::longest_live(&time, &entries).unwrap_or_default(),
        Ok(Err(e)) => {
            if conn::is_broken(&e) {
                node.discard(handle);
            }
            Duration::ZERO
        }
        Err(_) => Duration::ZERO,
    }
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
            let (time, entries): (Vec<String>, Vec<(String, f64)>) = ttl_record_read()
                .query_async(&mut conn)
                .await
                .inspect_err(|e| {
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

/// Counts a release's requests still in flight after its round returned, until dropped (and a
/// dropped waiter's leave from the line, `line.rs`; an acquisition cut short, `undo.rs`).
pub(super) struct Background(Arc<tokio::sync::watch::Sender<usize>>);

impl Background {
    pub(super) fn count(counter: &Arc<tokio::sync::watch::Sender<usize>>) -> Background {
        counter.send_modify(|n| *n += 1);
        Background(counter.clone())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl RedisBackend {
    /// Whether this client's acquisitions read each node's marker behind their grants (the
    /// restart quarantine is on): then they send `Marked`'s pipeline.
    pub(super) fn checks_markers(&self) -> bool {
        self.nodes.iter().any(|node| node.quarantine().enabled)
    }

    /// How many background releases are counted now.
    pub(crate) fn background_pending(&self) -> usize {
        *self.background.borrow()
    }

    /// Counts a background release (of a dropped acquisition, `undo.rs`) until dropped.
    pub(super) fn count_background(&self) -> Background {
        Background::count(&self.background)
    }

    /// Waits, at most `bound`, until the requests of the releases that returned at a quorum
    /// have finished on every node (`Client::close`). Returns whether they did.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only watches the count.
    pub(crate) async fn settle_releases(&self, bound: Duration) -> bool {
        let mut pending = self.background.subscribe();
        let settled = tokio::time::timeout(bound, pending.wait_for(|n| *n == 0))
            .await
            .is_ok();
        settled
    }
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
        Ok(Answer::Excluded(why)) => VoteOutcome::Excluded(why),
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

/// Marks the requests still in flight at the deadline as timed out, after `waited`.
fn time_out(votes: &mut [NodeVote], waited: Duration) {
    for vote in votes
        .iter_mut()
        .filter(|v| v.outcome == VoteOutcome::Pending)
    {
        vote.outcome = VoteOutcome::TimedOut;
        vote.latency = waited;
    }
}

/// Where an acquisition's request leaves the node's marker (`quarantine::MARKER_KEY`) it read
/// right behind its command (`Marked`): set once, by the request, when its pipeline answered.
pub(super) type MarkerCell = Arc<std::sync::OnceLock<Option<String>>>;

/// An acquisition's command, built once per round and sent to every node; for nodes that check
/// their marker behind each grant (the restart quarantine), the same command followed by `GET`
/// of the marker in one pipeline: one message on the connection and one reply, so the read
/// costs no request of its own (before issue 33 it was a second request, boxed and joined,
/// handed over right behind the first), and the two commands still run adjacent on the node.
#[derive(Debug)]
pub(super) struct Marked {
    pub(super) cmd: redis::Cmd,
    pub(super) pipe: Option<redis::Pipeline>,
}

impl Marked {
    /// `cmd`, and its pipeline with the marker read when `checks_markers`.
    pub(super) fn new(cmd: redis::Cmd, checks_markers: bool) -> Marked {
        let pipe = checks_markers.then(|| {
            let mut pipe = redis::pipe();
            // Both replies come back as values: the command's error (NOSCRIPT, say) is judged
            // as a lone command's would be (`ops::send_marked`).
            pipe.ignore_errors();
            pipe.add_command(cmd.clone())
                .cmd("GET")
                .arg(quarantine::MARKER_KEY);
            pipe
        });
        Marked { cmd, pipe }
    }
}

/// Announces `ask.ttl` on the handle's connection ahead of plain grants and keeps the
/// announcement with the connection (`scripts::ANNOUNCE_AHEAD`, `pure/ahead.rs`).
async fn announce_ahead(handle: &conn::Handle, ask: AnnounceAhead) -> Result<Ahead, RedisError> {
    let sent = Instant::now();
    // `invoke_async` loads the script and calls it again after NOSCRIPT (a rare call: the
    // invocation it builds is no cost here).
    let left: i64 = scripts::ANNOUNCE_AHEAD
        .arg(validity::ttl_millis(ask.ttl))
        .arg(ahead::margin_ms(ask.drift, ask.limit))
        .invoke_async(&mut handle.conn.clone())
        .await?;
    let fresh = Ahead {
        sent,
        left: Duration::from_millis(u64::try_from(left).unwrap_or(0)),
    };
    handle.info.announced(ask.ttl, ask.drift, fresh);
    Ok(fresh)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::node::NodeAddr;

    #[tokio::test]
    async fn a_round_keeps_small_futures() {
        // Printed for the performance notes; the bound guards against a cold path (connection
        // set-up, script loading) creeping back inline into every request's future.
        let addr = NodeAddr::parse("redis://127.0.0.1:1/0").unwrap();
        let config = Config::new(["redis://127.0.0.1:1/0"])
            .with_connect_timeout(Duration::from_millis(10))
            .with_quarantine(false);
        let backend = RedisBackend::new(vec![addr], &config).unwrap();
        let cmd = Arc::new(redis::cmd("PING"));
        let inflight = backend.launch(&[0], None, None, None, None, move |mut conn, _, _| {
            let cmd = cmd.clone();
            async move {
                let _: i64 = super::super::ops::eval(&scripts::EXTEND, &cmd, &mut conn).await?;
                Ok(Answer::Granted(()))
            }
        });
        let size = inflight.future_size();
        eprintln!("one request's future: {size} bytes");
        assert!(size < 2048, "{size} bytes");
    }
}
