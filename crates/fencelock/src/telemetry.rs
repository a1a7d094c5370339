//! Metrics and the events an operator acts on.
//!
//! With the `metrics` feature, fencelock records through the [`metrics`](https://docs.rs/metrics)
//! facade: it installs no exporter and no recorder, so the application picks one
//! (`metrics-exporter-prometheus`, StatsD, ...) and installs it before it takes locks; without a
//! recorder every call is a no-op. The names below are the ones recorded; the operating guide
//! (`docs/guide/operating.md`, "Metrics") holds the table of their kinds, units, labels and meaning
//! (`tests/metrics.rs` checks that the table lists every one of them, and reads the values a
//! real client records against real nodes).
//!
//! Labels are few and bounded by default: an outcome or a cause (a handful of fixed words), the
//! operation, and for per-node metrics the node's redacted address. A `resource` label is added
//! only when asked with [`Config::with_metrics_resource_label`](crate::Config::with_metrics_resource_label):
//! resource names can be unbounded (one per order, per user), and each distinct value is a new
//! series in the monitoring system.
//!
//! Without the feature nothing is recorded and nothing is linked. The warnings are emitted in
//! every build, through `tracing` at `warn`: a lock lost (with its cause and what to do), a node
//! (or an etcd cluster) that stops answering and the one that answers again (at `info`), a node
//! in restart quarantine.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind, LostCause};
use crate::pure::node_error::FailureCause;
use crate::pure::vote::{VoteOutcome, Votes};

/// Histogram, seconds: one per acquisition call (`try_acquire*`, `acquire*`, a waiter's call, a
/// semaphore's or an election's attempt), from the call to its result. Labels `outcome`
/// (`granted`, `contention`, `unavailable`, `too_slow`, `timeout`, `error`) and `mode` (`try`
/// or `wait`).
pub const ACQUIRE_SECONDS: &str = "fencelock_acquire_seconds";
/// Histogram, seconds: the acquisitions that waited (their first attempt was refused), from the
/// call to the grant or to giving up. Label `outcome` (`granted`, `timeout`, `error`).
pub const WAIT_SECONDS: &str = "fencelock_wait_seconds";
/// Histogram, seconds: a hand-over in the waiting line, from the wake-up (the release message,
/// the turn message, etcd's delete event of the key ahead) to the grant that followed it.
pub const HANDOVER_SECONDS: &str = "fencelock_handover_seconds";
/// Counter: extensions, label `outcome` (`extended`, `failed`) and `how` (`auto`, `manual`).
pub const EXTENSIONS_TOTAL: &str = "fencelock_extensions_total";
/// Counter: auto-extended locks whose lost signal fired, label `cause` (`expired`, `not_held`,
/// `unreachable`).
pub const LOCKS_LOST_TOTAL: &str = "fencelock_locks_lost_total";
/// Counter: releases, label `outcome` (`released`, `lost`, `unavailable`, `error`, and
/// `dropped` for a lock dropped without release, which a background task releases).
pub const RELEASES_TOTAL: &str = "fencelock_releases_total";
/// Counter: per-node votes, labels `node`, `op` (`acquire`, `extend`, `release`) and `outcome`
/// (`granted`, `held_by_other`, `not_held`, `timed_out`, `failed`, `excluded`: a node in restart
/// quarantine, not counted). A node whose answer was not awaited is not counted.
pub const NODE_VOTES_TOTAL: &str = "fencelock_node_votes_total";
/// Histogram, seconds: per-node answer latency (votes that answered: not timed out, excluded or
/// not awaited), labels `node`, `op`.
pub const NODE_VOTE_SECONDS: &str = "fencelock_node_vote_seconds";
/// Counter: fenced writes judged by a storage fence, label `outcome` (`accepted`, `stale`,
/// `reset`, `refused`: a token of another lock or out of range) and `storage` (`sqlite`,
/// `postgres`, `sqlx-postgres`, `sqlx-sqlite`, `sqlx-mysql`).
pub const FENCED_WRITES_TOTAL: &str = "fencelock_fenced_writes_total";
/// Counter: fencing tokens issued on Redis nodes, label `path`: `one-round` (a quorum took the
/// proposal with the grant), `derived` (the largest trusted counter + 1, written back in a second
/// round: the proposal missed, or a granting node had no counter) or `epoch` (no node had a
/// counter: a new epoch from the clock).
pub const FENCING_TOKENS_TOTAL: &str = "fencelock_fencing_tokens_total";

/// Every metric name fencelock records.
pub const ALL: [&str; 10] = [
    ACQUIRE_SECONDS,
    WAIT_SECONDS,
    HANDOVER_SECONDS,
    EXTENSIONS_TOTAL,
    LOCKS_LOST_TOTAL,
    RELEASES_TOTAL,
    NODE_VOTES_TOTAL,
    NODE_VOTE_SECONDS,
    FENCED_WRITES_TOTAL,
    FENCING_TOKENS_TOTAL,
];

/// Each metric's help text, as Prometheus's `# HELP` line shows it: one line per name of
/// [`ALL`], in its order.
pub const HELP: [(&str, &str); 10] = [
    (
        ACQUIRE_SECONDS,
        "Acquisition calls, from the call to its result, by outcome and mode.",
    ),
    (
        WAIT_SECONDS,
        "Acquisitions that waited (their first attempt was refused), until the grant or giving up.",
    ),
    (
        HANDOVER_SECONDS,
        "Hand-overs in the waiting line, from the wake-up to the grant that followed it.",
    ),
    (
        EXTENSIONS_TOTAL,
        "Extensions, by outcome and how (auto or manual).",
    ),
    (
        LOCKS_LOST_TOTAL,
        "Auto-extended locks whose lost signal fired, by cause.",
    ),
    (
        RELEASES_TOTAL,
        "Releases, by outcome (dropped: released in the background).",
    ),
    (
        NODE_VOTES_TOTAL,
        "Per-node votes, by node, operation and outcome.",
    ),
    (
        NODE_VOTE_SECONDS,
        "Per-node answer latency, by node and operation.",
    ),
    (
        FENCED_WRITES_TOTAL,
        "Fenced writes judged by a storage fence, by outcome and storage.",
    ),
    (
        FENCING_TOKENS_TOTAL,
        "Fencing tokens issued on Redis nodes, by path.",
    ),
];

/// Gives the installed recorder each metric's help text ([`HELP`]), so that an exporter prints
/// it (`# HELP` in Prometheus's text format). Call it once after installing the recorder.
#[cfg(feature = "metrics")]
pub fn describe() {
    for (name, help) in HELP {
        if name.ends_with("_seconds") {
            metrics::describe_histogram!(name, metrics::Unit::Seconds, help);
        } else {
            metrics::describe_counter!(name, help);
        }
    }
}

/// What one client records: whether metrics carry the resource, and its per-node handles.
#[derive(Debug)]
pub(crate) struct Telemetry {
    resource_label: bool,
    nodes: record::NodeHandles,
}

/// Which nodes answer, so that a node that stops answering is reported once, not on every
/// round, and its return too. "Stops": it answered before, since the client started; a node
/// that never answered is named by the errors of the calls that needed it (and counted as
/// `failed` in the metrics), which keeps a one-shot command to one error line. The Redis round
/// engine feeds it every answer, also those that arrive after the round returned
/// (`round.rs`).
#[derive(Debug)]
pub(crate) struct NodeHealth {
    /// Per node in configured order: [`UNKNOWN`], [`UP`] or [`DOWN`] (after it was up).
    state: Box<[AtomicU8]>,
    quorum: usize,
    /// Redis nodes, each voting, or one etcd cluster answering as one: what to tell the
    /// operator differs.
    etcd: bool,
}

const UNKNOWN: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

impl NodeHealth {
    /// `nodes` Redis nodes of which `quorum` must answer, or (`etcd`) one etcd cluster,
    /// which answers as one (its members agree through raft; the client sends requests to one
    /// member, and to the next when it fails, `etcd/members.rs`): then observed as node 0,
    /// named by its member list, judged down once every member failed in a row. A plain flag,
    /// not a cfg: only `backend.rs`, `etcd/` and `lib.rs` name the etcd feature
    /// (`tests/layout.rs`).
    pub(crate) fn new(nodes: usize, quorum: usize, etcd: bool) -> NodeHealth {
        NodeHealth {
            state: (0..nodes).map(|_| AtomicU8::new(UNKNOWN)).collect(),
            quorum,
            etcd,
        }
    }

    /// Node `i` voted `vote` (a vote that is pending or excluded judges nothing).
    pub(crate) fn observe_vote(&self, i: usize, vote: &crate::pure::vote::NodeVote) {
        let answered = match vote.outcome {
            VoteOutcome::Pending | VoteOutcome::Excluded(_) => None,
            VoteOutcome::TimedOut | VoteOutcome::Failed(_) => Some(false),
            _ => Some(true),
        };
        // A node that answered with a refusal of a known cause (out of memory, a replica...)
        // runs: its warning gives the cure of that cause.
        let refusal = match &vote.outcome {
            VoteOutcome::Failed(e)
                if !matches!(e.cause(), FailureCause::Refused | FailureCause::Other) =>
            {
                Some(e.hint())
            }
            _ => None,
        };
        let why: &dyn std::fmt::Display = match &vote.outcome {
            VoteOutcome::Failed(e) if refusal.is_some() => e,
            outcome => outcome,
        };
        self.observe_with(i, &vote.node, answered, why, refusal);
    }

    /// Node `i` (named `node`) answered (`Some(true)`), failed or timed out (`Some(false)`
    /// with `why`), or was not judged (`None`: excluded, not awaited).
    pub(crate) fn observe(
        &self,
        i: usize,
        node: &str,
        answered: Option<bool>,
        why: &dyn std::fmt::Display,
    ) {
        self.observe_with(i, node, answered, why, None);
    }

    /// [`observe`](Self::observe), with the cure of a refusal whose cause is known.
    fn observe_with(
        &self,
        i: usize,
        node: &str,
        answered: Option<bool>,
        why: &dyn std::fmt::Display,
        refusal: Option<&str>,
    ) {
        let (Some(answered), Some(state)) = (answered, self.state.get(i)) else {
            return;
        };
        let was = state.load(Ordering::Relaxed);
        let now = match (answered, was) {
            (true, _) => UP,
            (false, UP | DOWN) => DOWN,
            (false, _) => UNKNOWN,
        };
        if was == now || state.swap(now, Ordering::Relaxed) == now {
            return;
        }
        match (was, now) {
            (UP, DOWN) if self.etcd => tracing::warn!(
                node,
                "etcd cluster {node} did not answer ({why}); locks on it cannot be taken, extended or released while its requests fail: check that a majority of its members run and have a leader, and which member does not answer (`fencelock doctor` on these URLs; the client tried each member in turn), then restart or replace the members that are down"
            ),
            (DOWN, UP) if self.etcd => tracing::info!(node, "etcd cluster {node} answers again"),
            (UP, DOWN) => {
                let up = self
                    .state
                    .iter()
                    .filter(|s| s.load(Ordering::Relaxed) == UP)
                    .count();
                if let Some(cure) = refusal {
                    return tracing::warn!(
                        node,
                        "node {node} refused the request ({why}); {up} of {} node(s) answer, a lock needs {}: {cure}",
                        self.state.len(),
                        self.quorum,
                    );
                }
                tracing::warn!(
                    node,
                    "node {node} did not answer ({why}); {up} of {} node(s) answer, a lock needs {}: check that the node runs and that its address is right (`fencelock doctor`), or replace it in the node list",
                    self.state.len(),
                    self.quorum,
                );
            }
            (DOWN, UP) => tracing::info!(node, "node {node} answers again"),
            _ => {}
        }
    }
}

/// The resource label of one lock, when the client was asked for it.
#[derive(Debug, Clone, Default)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct ResourceLabel(Option<Arc<str>>);

impl ResourceLabel {
    /// `resource` as a label if `on`, else no label.
    pub(crate) fn of(on: bool, resource: &str) -> ResourceLabel {
        ResourceLabel(on.then(|| Arc::from(resource)))
    }
}

impl Telemetry {
    /// `voters`: how many votes a round has (every Redis node; etcd's one).
    pub(crate) fn new(resource_label: bool, voters: usize) -> Telemetry {
        Telemetry {
            resource_label,
            nodes: record::NodeHandles::new(voters),
        }
    }

    /// The label to record `resource` under (none unless asked).
    pub(crate) fn label(&self, resource: &str) -> ResourceLabel {
        ResourceLabel::of(self.resource_label, resource)
    }

    /// An acquisition call ended after `elapsed`; `waited` when it was a waiting call whose
    /// first attempt was refused. Also records the votes of the grant or error.
    pub(crate) fn acquired<T>(
        &self,
        resource: &ResourceLabel,
        wait: bool,
        elapsed: Duration,
        result: &Result<T, Error>,
        votes: Option<&Votes>,
    ) {
        if let Some(votes) = votes.or_else(|| result.as_ref().err().and_then(Error::votes)) {
            self.votes("acquire", votes);
        }
        let outcome = match result {
            Ok(_) => "granted",
            Err(e) => acquire_outcome(e),
        };
        record::histogram(
            ACQUIRE_SECONDS,
            &[
                ("outcome", outcome),
                ("mode", if wait { "wait" } else { "try" }),
            ],
            resource,
            elapsed,
        );
    }

    /// A release (`Lock::release`, or a release by token) ended.
    pub(crate) fn released<T>(
        &self,
        resource: &ResourceLabel,
        result: &Result<T, Error>,
        votes: Option<&Votes>,
    ) {
        if let Some(votes) = votes.or_else(|| result.as_ref().err().and_then(Error::votes)) {
            self.votes("release", votes);
        }
        let outcome = match result {
            Ok(_) => "released",
            Err(e) => match e.kind() {
                ErrorKind::Lost => "lost",
                ErrorKind::Unavailable => "unavailable",
                _ => "error",
            },
        };
        record::counter(RELEASES_TOTAL, &[("outcome", outcome)], resource);
    }

    /// A manual extension (`Lock::extend`, or by token) ended.
    pub(crate) fn extended<T>(
        &self,
        resource: &ResourceLabel,
        result: &Result<T, Error>,
        votes: Option<&Votes>,
    ) {
        if let Some(votes) = votes.or_else(|| result.as_ref().err().and_then(Error::votes)) {
            self.votes("extend", votes);
        }
        extension(resource, result.is_ok(), "manual");
    }

    /// The per-node votes of one round of `op`.
    pub(crate) fn votes(&self, op: &'static str, votes: &Votes) {
        let op = match op {
            "acquire" => 0,
            "extend" => 1,
            _ => 2,
        };
        // Votes of every node in configured order: the cached handles of node i.
        let cached = votes.len() == self.nodes.len();
        for (i, vote) in votes.iter().enumerate() {
            let outcome = match &vote.outcome {
                VoteOutcome::Pending => continue,
                VoteOutcome::Granted => 0,
                VoteOutcome::HeldByOther => 1,
                VoteOutcome::NotHeld => 2,
                VoteOutcome::TimedOut => 3,
                VoteOutcome::Failed(_) => 4,
                VoteOutcome::Excluded(_) => 5,
            };
            self.nodes.record(cached.then_some(i), op, outcome, vote);
        }
    }
}

/// The outcome label of a failed acquisition.
fn acquire_outcome(e: &Error) -> &'static str {
    match e.kind() {
        ErrorKind::Contention => "contention",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::TooSlow => "too_slow",
        ErrorKind::Timeout => "timeout",
        _ => "error",
    }
}

/// An extension of an auto-extended lock (`how` = `auto`) or a manual one.
pub(crate) fn extension(resource: &ResourceLabel, ok: bool, how: &'static str) {
    let outcome = if ok { "extended" } else { "failed" };
    record::counter(
        EXTENSIONS_TOTAL,
        &[("outcome", outcome), ("how", how)],
        resource,
    );
}

/// An auto-extended lock was lost: the metric, and the warning with what to do.
pub(crate) fn lost(resource_name: &str, resource: &ResourceLabel, cause: LostCause) {
    let label = match cause {
        LostCause::Expired => "expired",
        LostCause::NotHeld => "not_held",
        LostCause::Unreachable => "unreachable",
    };
    record::counter(LOCKS_LOST_TOTAL, &[("cause", label)], resource);
    let todo = match cause {
        LostCause::Expired => "the extensions came too late: raise the TTL, or keep the work from blocking the runtime's threads",
        LostCause::NotHeld => "the key is gone or held by another owner on a majority (expired, deleted, or lost in a node restart)",
        LostCause::Unreachable => "too many nodes did not answer the extension: check the nodes (`fencelock doctor`)",
    };
    tracing::warn!(
        resource = resource_name,
        %cause,
        "lock {resource_name:?} lost ({cause}): stop the work it protects now, another client may take it; {todo}. Writes through a fenced storage are refused from now on"
    );
}

/// A lock dropped without release (a background task releases it).
pub(crate) fn dropped(resource: &ResourceLabel) {
    record::counter(RELEASES_TOTAL, &[("outcome", "dropped")], resource);
}

/// The end of a wait in line (a waiting acquisition whose first attempt was refused).
pub(crate) fn waited(resource: &ResourceLabel, elapsed: Duration, outcome: &'static str) {
    record::histogram(WAIT_SECONDS, &[("outcome", outcome)], resource, elapsed);
}

/// A grant that followed a wake-up `since` ago.
pub(crate) fn handed_over(resource: &ResourceLabel, since: Duration) {
    record::histogram(HANDOVER_SECONDS, &[], resource, since);
}

/// A fence's verdict on a write; `result` is the check's.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "sqlx-postgres",
        feature = "sqlx-mysql",
        feature = "sqlx-sqlite"
    )),
    allow(dead_code)
)]
pub(crate) fn fenced_write<T>(storage: &'static str, result: &Result<T, Error>) {
    let outcome = match result {
        Ok(_) => "accepted",
        Err(e) => match e.kind() {
            ErrorKind::StaleToken => "stale",
            ErrorKind::CounterReset => "reset",
            ErrorKind::InvalidConfig => "refused",
            // The storage failed before judging: not a verdict.
            _ => return,
        },
    };
    record::counter(
        FENCED_WRITES_TOTAL,
        &[("outcome", outcome), ("storage", storage)],
        &ResourceLabel::default(),
    );
}

/// A fencing token issued on Redis nodes, by the path that made it (see
/// [`FENCING_TOKENS_TOTAL`]).
pub(crate) fn token_issued(path: &'static str) {
    record::counter(
        FENCING_TOKENS_TOTAL,
        &[("path", path)],
        &ResourceLabel::default(),
    );
}

/// Where the `metrics` calls are, or are not. A handle is registered once and kept (per
/// series without a resource label: a process-wide table; per node: the client's own), so a
/// lock's hot path costs an increment, not a registration: install the recorder before the
/// first lock is taken.
#[cfg(feature = "metrics")]
mod record {
    use std::collections::HashMap;
    use std::sync::{Arc, OnceLock, RwLock};
    use std::time::Duration;

    use metrics::{Counter, Histogram, Label};

    use super::ResourceLabel;
    use crate::pure::vote::NodeVote;

    const OPS: [&str; 3] = ["acquire", "extend", "release"];
    const OUTCOMES: [&str; 6] = [
        "granted",
        "held_by_other",
        "not_held",
        "timed_out",
        "failed",
        "excluded",
    ];

    type Fixed = (&'static str, [(&'static str, &'static str); 2]);

    fn labels(fixed: &[(&'static str, &'static str)], resource: &ResourceLabel) -> Vec<Label> {
        let mut labels: Vec<Label> = fixed
            .iter()
            .map(|(k, v)| Label::from_static_parts(k, v))
            .collect();
        if let Some(r) = &resource.0 {
            labels.push(Label::new("resource", r.to_string()));
        }
        labels
    }

    /// The key of a series without a resource label in the process-wide tables.
    fn fixed(name: &'static str, labels: &[(&'static str, &'static str)]) -> Fixed {
        let mut key = [("", ""); 2];
        for (slot, label) in key.iter_mut().zip(labels) {
            *slot = *label;
        }
        (name, key)
    }

    /// The handle of `key` in `table`, registered with `make` on first use.
    fn cached<H: Clone>(
        table: &RwLock<HashMap<Fixed, H>>,
        key: Fixed,
        make: impl FnOnce() -> H,
    ) -> H {
        if let Some(h) = table.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return h.clone();
        }
        let mut table = table.write().unwrap_or_else(|e| e.into_inner());
        table.entry(key).or_insert_with(make).clone()
    }

    pub(super) fn counter(
        name: &'static str,
        fixed_labels: &[(&'static str, &'static str)],
        resource: &ResourceLabel,
    ) {
        static COUNTERS: OnceLock<RwLock<HashMap<Fixed, Counter>>> = OnceLock::new();
        if resource.0.is_some() {
            metrics::counter!(name, labels(fixed_labels, resource)).increment(1);
            return;
        }
        let table = COUNTERS.get_or_init(RwLock::default);
        cached(table, fixed(name, fixed_labels), || {
            metrics::counter!(name, labels(fixed_labels, resource))
        })
        .increment(1);
    }

    pub(super) fn histogram(
        name: &'static str,
        fixed_labels: &[(&'static str, &'static str)],
        resource: &ResourceLabel,
        value: Duration,
    ) {
        static HISTOGRAMS: OnceLock<RwLock<HashMap<Fixed, Histogram>>> = OnceLock::new();
        if resource.0.is_some() {
            metrics::histogram!(name, labels(fixed_labels, resource)).record(value.as_secs_f64());
            return;
        }
        let table = HISTOGRAMS.get_or_init(RwLock::default);
        cached(table, fixed(name, fixed_labels), || {
            metrics::histogram!(name, labels(fixed_labels, resource))
        })
        .record(value.as_secs_f64());
    }

    /// One client's per-node handles: node, op, outcome.
    pub(super) struct NodeHandles {
        votes: Box<[[[OnceLock<Counter>; 6]; 3]]>,
        latency: Box<[[OnceLock<Histogram>; 3]]>,
    }

    impl std::fmt::Debug for NodeHandles {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("NodeHandles")
                .field("nodes", &self.votes.len())
                .finish()
        }
    }

    impl NodeHandles {
        pub(super) fn new(nodes: usize) -> NodeHandles {
            NodeHandles {
                votes: (0..nodes).map(|_| Default::default()).collect(),
                latency: (0..nodes).map(|_| Default::default()).collect(),
            }
        }

        pub(super) fn len(&self) -> usize {
            self.votes.len()
        }

        /// Records `vote` of node `i` (`None`: not a cached node) for `op` and `outcome`
        /// (indices into [`OPS`] and [`OUTCOMES`]).
        pub(super) fn record(&self, i: Option<usize>, op: usize, outcome: usize, vote: &NodeVote) {
            let node = || metrics::SharedString::from(Arc::clone(&vote.node));
            let make_counter = || {
                metrics::counter!(
                    super::NODE_VOTES_TOTAL,
                    "node" => node(),
                    "op" => OPS[op],
                    "outcome" => OUTCOMES[outcome]
                )
            };
            let make_histogram =
                || metrics::histogram!(super::NODE_VOTE_SECONDS, "node" => node(), "op" => OPS[op]);
            let answered = !vote.outcome.is_failure();
            let latency = vote.latency.as_secs_f64();
            match i {
                Some(i) => {
                    self.votes[i][op][outcome]
                        .get_or_init(make_counter)
                        .increment(1);
                    if answered {
                        self.latency[i][op]
                            .get_or_init(make_histogram)
                            .record(latency);
                    }
                }
                None => {
                    make_counter().increment(1);
                    if answered {
                        make_histogram().record(latency);
                    }
                }
            }
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod record {
    use std::time::Duration;

    use super::ResourceLabel;
    use crate::pure::vote::NodeVote;

    pub(super) fn counter(_: &'static str, _: &[(&'static str, &'static str)], _: &ResourceLabel) {}

    pub(super) fn histogram(
        _: &'static str,
        _: &[(&'static str, &'static str)],
        _: &ResourceLabel,
        _: Duration,
    ) {
    }

    /// Nothing to keep without the feature.
    #[derive(Debug)]
    pub(super) struct NodeHandles(usize);

    impl NodeHandles {
        pub(super) fn new(nodes: usize) -> NodeHandles {
            NodeHandles(nodes)
        }

        pub(super) fn len(&self) -> usize {
            self.0
        }

        pub(super) fn record(&self, _: Option<usize>, _: usize, _: usize, _: &NodeVote) {}
    }
}
