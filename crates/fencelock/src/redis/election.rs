//! An election's log on Redis nodes (see `election.rs` for the protocol and the observer's
//! argument): the leader's append and the observer's reads, on connections of their own.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::tagged::{Asking, NodeConnection, Tagging};
use super::RedisBackend;
use crate::pure::node_error::NodeError;
use crate::pure::vote::{NodeVote, VoteOutcome, Votes};

/// How many entries each node keeps in an election's log.
const LOG_LENGTH: i64 = 64;

/// How often an observer reads the log.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// The log of one election on the client's nodes.
#[derive(Debug, Clone)]
pub(crate) struct ElectionLog {
    key: String,
    log: String,
    quorum: usize,
    node_timeout: Duration,
    /// The client's restart quarantine is on: an observer then counts a node only once its
    /// marker says its quarantine ended (see [`Witnesses`]).
    quarantine: bool,
    conns: Arc<[Mutex<Option<NodeConnection>>]>,
    nodes: Arc<[super::conn::Target]>,
    /// Per node, the hash tag of a cluster node's keys (`tagged.rs`).
    taggings: Arc<[Option<Arc<Tagging>>]>,
    /// Per cluster node, where its connection follows `-ASK` while the tag's slot moves (the
    /// log's key may move before or after the lock's).
    askings: Arc<[Option<Arc<Asking>>]>,
    /// The nodes' redacted addresses, for the votes of an append that failed.
    names: Arc<[Arc<str>]>,
}

impl RedisBackend {
    /// The log `log` of the election whose lock key is `key`. No I/O.
    pub(crate) fn election_log(&self, key: &str, log: &str) -> ElectionLog {
        let nodes: Arc<[super::conn::Target]> = self.nodes.iter().map(|n| n.target()).collect();
        ElectionLog {
            key: key.to_string(),
            log: log.to_string(),
            quorum: self.quorum,
            node_timeout: self.settings.node_timeout,
            quarantine: self.nodes.first().is_some_and(|n| n.quarantine().enabled),
            conns: nodes.iter().map(|_| Mutex::new(None)).collect(),
            nodes,
            taggings: self.nodes.iter().map(|n| n.tagging()).collect(),
            askings: self
                .nodes
                .iter()
                .map(|n| {
                    (n.addr().cluster().is_some())
                        .then(|| Asking::new(n.addr().clone(), self.settings.connect_timeout))
                })
                .collect(),
            names: self.nodes.iter().map(|n| n.name().clone()).collect(),
        }
    }
}

impl ElectionLog {
    /// Appends `<term> <value>` on every node where `owner` still owns the lock key.
    ///
    /// # Errors
    ///
    /// The nodes' votes when fewer than a quorum appended: each node's own answer (appended,
    /// the key no longer ours, timed out, failed and why).
    pub(crate) async fn append(&self, owner: &str, term: u64, value: &str) -> Result<(), Votes> {
        let member = format!("{term} {value}");
        let answers = self
            .on_every_node_with_errors(self.node_timeout, |mut conn| {
                let (key, log, owner, member) = (
                    self.key.clone(),
                    self.log.clone(),
                    owner.to_string(),
                    member.clone(),
                );
                async move {
                    super::scripts::ELECTION_APPEND
                        .key(key)
                        .key(log)
                        .arg(owner)
                        .arg(term)
                        .arg(member)
                        .arg(LOG_LENGTH)
                        .invoke_async::<i64>(&mut conn)
                        .await
                }
            })
            .await;
        let votes: Votes = answers
            .into_iter()
            .zip(self.names.iter())
            .map(|((answer, took), name)| {
                let outcome = match answer {
                    Ok(1) => VoteOutcome::Granted,
                    Ok(_) => VoteOutcome::NotHeld,
                    Err(None) => VoteOutcome::TimedOut,
                    Err(Some(e)) => VoteOutcome::Failed(e),
                };
                NodeVote::new(name.clone(), outcome, took)
            })
            .collect();
        if votes.granted() >= self.quorum {
            Ok(())
        } else {
            Err(votes)
        }
    }

    /// Removes the entry `<term> <value>` from every node that answers within the node
    /// timeout: a campaign that failed takes back its announcement (see `election.rs`).
    pub(crate) async fn withdraw(&self, term: u64, value: &str) {
        let member = format!("{term} {value}");
        self.on_every_node(self.node_timeout, |mut conn| {
            let (log, member) = (self.log.clone(), member.clone());
            async move {
                redis::cmd("ZREM")
                    .arg(log)
                    .arg(member)
                    .query_async::<i64>(&mut conn)
                    .await
            }
        })
        .await;
    }

    /// How many nodes make a quorum.
    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    /// A reader of the log, from the latest leader on.
    pub(crate) fn reader(&self) -> LogReader {
        LogReader {
            log: self.clone(),
            last: 0,
            seen: None,
            ready: VecDeque::new(),
            witnesses: Witnesses::new(self.nodes.len(), self.quorum, self.quarantine),
            met: BTreeMap::new(),
        }
    }

    /// Runs `f` on a connection to every node at once, each bounded by `timeout`; `None` where
    /// the node failed or timed out.
    async fn on_every_node<T, F, Fut>(&self, timeout: Duration, f: F) -> Vec<Option<T>>
    where
        F: Fn(NodeConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.on_every_node_with_errors(timeout, f)
            .await
            .into_iter()
            .map(|(answer, _)| answer.ok())
            .collect()
    }

    /// As [`Self::on_every_node`], keeping why a node gave no value (`None`: it timed out) and
    /// how long each answer took. A kept connection found broken (the node restarted, or an
    /// idle connection was cut) is replaced and the call made once more within the timeout:
    /// every call here is idempotent (an append, a removal, a read).
    async fn on_every_node_with_errors<T, F, Fut>(
        &self,
        timeout: Duration,
        f: F,
    ) -> Vec<(Result<T, Option<NodeError>>, Duration)>
    where
        F: Fn(NodeConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let calls = (0..self.nodes.len()).map(|i| {
            let f = &f;
            async move {
                let started = Instant::now();
                let bounded = tokio::time::timeout(timeout, async {
                    loop {
                        let mut slot = self.conns[i].lock().await;
                        let (conn, kept) = match slot.as_ref() {
                            Some(c) => (c.clone(), true),
                            None => {
                                let c = NodeConnection::new(
                                    crate::sim::multiplexed(
                                        &self.nodes[i].get()?,
                                        &redis::AsyncConnectionConfig::new(),
                                    )
                                    .await?,
                                    self.taggings[i].clone(),
                                )
                                .following_ask(self.askings[i].clone());
                                *slot = Some(c.clone());
                                (c, false)
                            }
                        };
                        drop(slot);
                        match f(conn).await {
                            Err(e) if kept && super::conn::is_broken(&e) => {
                                *self.conns[i].lock().await = None;
                            }
                            answer => return answer,
                        }
                    }
                })
                .await;
                let took = started.elapsed();
                match bounded {
                    Ok(Ok(v)) => (Ok(v), took),
                    Ok(Err(e)) => {
                        // A broken connection is opened again next time.
                        *self.conns[i].lock().await = None;
                        (Err(Some(super::describe::describe(&e))), took)
                    }
                    Err(_) => (Err(None), took),
                }
            }
        });
        futures_util::future::join_all(calls).await
    }

    /// One read of the log on every node: each node's entries with a term of at least `from`,
    /// with its restart marker and whether it has its fence counter (read after the entries, on
    /// the same connection, so that a loss of data before the entries were read shows in them);
    /// `None` where the node did not answer. The score bound is `from` rounded to a double, as
    /// Redis rounds the terms it scores: rounding keeps order, so no term at or above `from` is
    /// left out; the terms themselves are read exactly from the members' text (above 2^53 the
    /// bound may let in a few smaller ones, dropped later).
    async fn read(&self, from: u64) -> Vec<Option<NodeRead>> {
        let timeout = self.node_timeout.max(POLL);
        let legacy = crate::pure::fencing::counter_key(&self.key);
        self.on_every_node(timeout, |mut conn| {
            let mut pipe = redis::pipe();
            pipe.cmd("ZRANGEBYSCORE")
                .arg(&self.log)
                .arg(from as f64)
                .arg("+inf")
                .cmd("GET")
                .arg(super::quarantine::MARKER_KEY)
                // One key per command: while a cluster's slot moves, a command of two keys,
                // one moved and one not (or one that exists nowhere), is refused (TRYAGAIN);
                // a command of one key is served where its key is (ASK followed).
                .cmd("EXISTS")
                .arg(crate::pure::fencing::FENCE_COUNTER_KEY)
                .cmd("EXISTS")
                .arg(&legacy);
            async move {
                let (members, marker, counter, legacy): (Vec<String>, Option<String>, u64, u64) =
                    pipe.query_async(&mut conn).await?;
                let counters = counter + legacy;
                let mut entries: Vec<(u64, String)> =
                    members.iter().filter_map(|m| parse_member(m)).collect();
                entries.sort_by_key(|l| l.0);
                Ok(NodeRead {
                    entries,
                    marker,
                    counter: counters > 0,
                })
            }
        })
        .await
    }
}

/// What one node answered to an observer's read.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeRead {
    /// Its log entries from the read's lower bound on, in term order.
    pub(crate) entries: Vec<(u64, String)>,
    /// Its restart marker (`quarantine::MARKER_KEY`), if any.
    pub(crate) marker: Option<String>,
    /// It has its fence counter (the amnesia guard trusts its reads).
    pub(crate) counter: bool,
}

/// Which nodes an observer counts as witnesses (issue 35 item 3). A read of a quorum shows
/// every leader up to a term an earlier read saw only if no node of that quorum lost entries:
/// with one node restarted empty and another stopped, a quorum could answer without a single
/// copy of a leader's entry, and a later leader would be reported in its place. So a node is a
/// witness only while the observer knows its log is whole above the last term reported:
///
/// * it has its fence counter and its restart marker, and (with the quarantine on) the marker
///   says its quarantine ended: the nodes the amnesia guard and the quarantine trust;
/// * and its marker is still the one it had when the observer admitted it (a changed or
///   missing marker is a loss of data, by a restart or a flush).
///
/// A node is admitted if trusted at the observer's first read (which only sets where the
/// reports begin: any quorum of answers counts for it, nothing earlier is promised), or later once a read that counts shows it holds every entry
/// the read found above the last term reported: it then lacks nothing an observer still has to
/// report. A read counts when a quorum of witnesses answered (their union), or when every node
/// answered, each trusted (the union of all: an entry is missed only if every node that took
/// it lost it). Otherwise the read counts for nothing and the observer waits (it reports
/// nothing, late rather than wrong), keeping the entries it met for the next read that counts
/// (`LogReader::met`).
#[derive(Debug, Clone)]
pub(crate) struct Witnesses {
    /// Per node, the marker it had when it was admitted; `None`: not a witness.
    admitted: Vec<Option<String>>,
    quorum: usize,
    quarantine: bool,
    /// A first read has counted (the first admissions are done).
    started: bool,
}

impl Witnesses {
    pub(crate) fn new(nodes: usize, quorum: usize, quarantine: bool) -> Witnesses {
        Witnesses {
            admitted: vec![None; nodes],
            quorum,
            quarantine,
            started: false,
        }
    }

    /// Whether the quarantine and the amnesia guard trust a node that answered `read`.
    fn trusted(&self, read: &NodeRead) -> bool {
        let Some(marker) = read.marker.as_deref() else {
            return false;
        };
        read.counter && (!self.quarantine || marker.ends_with(" clear"))
    }

    /// Judges one read (`answers`, one per node): the union of the witnesses' entries, in term
    /// order, or `None` when fewer than a quorum of witnesses answered. Pure, for the tests.
    pub(crate) fn judge(&mut self, answers: &[Option<NodeRead>]) -> Option<Vec<(u64, String)>> {
        for (slot, answer) in self.admitted.iter_mut().zip(answers) {
            let Some(read) = answer else { continue };
            let still = slot.is_some() && *slot == read.marker;
            if !still {
                *slot = None;
            }
        }
        for (i, answer) in answers.iter().enumerate() {
            if let Some(read) = answer {
                if self.admitted[i].is_some() && !self.trusted(read) {
                    self.admitted[i] = None;
                }
            }
        }
        if !self.started {
            // The first read only sets where reports begin (nothing before the first report is
            // promised), so any quorum of answers will do: new nodes, with no counter yet, are
            // read at once. Only the trusted ones are admitted.
            if answers.iter().flatten().count() < self.quorum {
                return None;
            }
            for (i, answer) in answers.iter().enumerate() {
                if let Some(read) = answer.as_ref().filter(|r| self.trusted(r)) {
                    self.admitted[i] = read.marker.clone();
                }
            }
            self.started = true;
            let mut all: Vec<(u64, String)> = answers
                .iter()
                .flatten()
                .flat_map(|r| r.entries.iter().cloned())
                .collect();
            all.sort_by_key(|l| l.0);
            all.dedup_by_key(|l| l.0);
            return Some(all);
        }
        let mut witnesses: Vec<&NodeRead> = answers
            .iter()
            .zip(&self.admitted)
            .filter(|(_, admitted)| admitted.is_some())
            .filter_map(|(answer, _)| answer.as_ref())
            .collect();
        if witnesses.len() < self.quorum {
            // Every node answered, each trusted: an entry that survives anywhere is read, so
            // the read counts. Otherwise an entry may be on a node that did not answer only.
            let every: Vec<&NodeRead> = answers.iter().flatten().collect();
            if every.len() < answers.len() || !every.iter().all(|r| self.trusted(r)) {
                return None;
            }
            witnesses = every;
        }
        let mut all: Vec<(u64, String)> = witnesses
            .iter()
            .flat_map(|r| r.entries.iter().cloned())
            .collect();
        all.sort_by_key(|l| l.0);
        all.dedup_by_key(|l| l.0);
        // A node that lost data (or was never admitted) holds every entry this read found:
        // whatever it lost is below the last term reported, so it is a witness again.
        let whole: Vec<bool> = answers
            .iter()
            .map(|answer| {
                answer.as_ref().is_some_and(|read| {
                    self.trusted(read)
                        && all
                            .iter()
                            .all(|(t, _)| read.entries.binary_search_by_key(t, |l| l.0).is_ok())
                })
            })
            .collect();
        for ((slot, answer), whole) in self.admitted.iter_mut().zip(answers).zip(whole) {
            if slot.is_none() && whole {
                *slot = answer.as_ref().and_then(|r| r.marker.clone());
            }
        }
        Some(all)
    }
}

/// A log entry's member, `<term> <value>`.
pub(crate) fn parse_member(member: &str) -> Option<(u64, String)> {
    let (term, value) = member.split_once(' ')?;
    Some((term.parse().ok()?, value.to_string()))
}

/// An observer's reads of the log: each leader once, in term order (see `election.rs`).
#[derive(Debug)]
pub(crate) struct LogReader {
    log: ElectionLog,
    /// The last term reported (0: none yet; terms are larger).
    last: u64,
    /// The largest term seen by the previous complete read; `None` before the first.
    seen: Option<u64>,
    ready: VecDeque<(u64, String)>,
    /// The nodes whose answers count.
    witnesses: Witnesses,
    /// Entries above `last` that any answer held since the first read, counted or not: a read
    /// that waits for witnesses still meets entries, which a later loss may take from every
    /// node (added to the next read that counts; more entries never hide a leader).
    met: BTreeMap<u64, String>,
}

impl LogReader {
    /// The next leader; cancel-safe (a leader read but not returned is kept).
    pub(crate) async fn next(&mut self) -> (u64, String) {
        loop {
            if let Some(leader) = self.ready.pop_front() {
                self.last = leader.0;
                return leader;
            }
            if !self.step().await {
                tokio::time::sleep(POLL).await;
            }
        }
    }

    /// One read of the log; whether it left leaders to report. Cancel-safe: the state changes
    /// only once the read is complete. Tests drive an observer read by read through it (one
    /// read is the step a skip needs, so no poll timing enters them).
    pub(crate) async fn step(&mut self) -> bool {
        let answers = self.log.read(self.last.saturating_add(1)).await;
        let judged = self.witnesses.judge(&answers);
        if self.seen.is_some() {
            for (term, value) in answers.iter().flatten().flat_map(|r| r.entries.iter()) {
                if *term > self.last {
                    self.met.insert(*term, value.clone());
                }
            }
        }
        let Some(mut entries) = judged else {
            return false;
        };
        if self.seen.is_some() {
            entries.extend(self.met.iter().map(|(t, v)| (*t, v.clone())));
            entries.sort_by_key(|l| l.0);
            entries.dedup_by_key(|l| l.0);
        }
        let (last, ready, seen) = after_read(self.last, self.seen, &entries);
        self.last = last;
        self.ready = ready.into();
        self.seen = Some(seen);
        if let Some(reported) = self.ready.back() {
            let upto = reported.0;
            self.met.retain(|t, _| *t > upto);
        }
        !self.ready.is_empty()
    }
}

#[cfg(test)]
impl LogReader {
    /// The leaders ready to report, taken as [`LogReader::next`] would return them.
    pub(crate) fn take_ready(&mut self) -> Vec<(u64, String)> {
        let ready: Vec<(u64, String)> = self.ready.drain(..).collect();
        if let Some(l) = ready.last() {
            self.last = l.0;
        }
        ready
    }

    /// Whether node `i` is a witness now.
    pub(crate) fn witness(&self, i: usize) -> bool {
        self.witnesses.admitted[i].is_some()
    }
}

/// What an observer makes of one read that a quorum answered (`entries`: the union of the
/// entries above `last`, in term order), given the last term reported (`last`) and the largest
/// term an earlier complete read saw (`seen`, `None` before the first): the last term reported
/// once the leaders returned are (on the first read, the one before the latest, so that the
/// latest is reported once a later read confirms it), the leaders to report now, in term
/// order, and the largest term seen so far. Pure, for the simulator.
///
/// A term is reported only once an earlier complete read saw it or a later one (the argument
/// is in `election.rs`), from the answers of witnesses only ([`Witnesses`]). What a report
/// means (an append that reached a minority) is in docs/guarantees.md (A-elect-observe).
pub(crate) fn after_read(
    last: u64,
    seen: Option<u64>,
    entries: &[(u64, String)],
) -> (u64, Vec<(u64, String)>, u64) {
    let max = entries.last().map_or(0, |l| l.0);
    match seen {
        None => {
            let last = match entries.len() {
                n if n >= 2 => entries[n - 2].0,
                _ => last,
            };
            (last, Vec::new(), max)
        }
        Some(seen) => {
            let ready: Vec<(u64, String)> = entries
                .iter()
                .filter(|l| l.0 > last && l.0 <= seen)
                .cloned()
                .collect();
            (last, ready, seen.max(max))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(list: &[u64]) -> Vec<(u64, String)> {
        list.iter().map(|&t| (t, format!("n{t}"))).collect()
    }

    #[test]
    fn a_term_is_reported_once_an_earlier_read_saw_it_and_each_once_in_order() {
        // First read: 3, 5, 7 are in the log; report from the latest (7) on, once confirmed.
        let (last, ready, seen) = after_read(0, None, &terms(&[3, 5, 7]));
        assert_eq!((last, ready.len(), seen), (5, 0, 7));
        // Second read: 7 (seen before) is reported; 9, seen for the first time, waits.
        let (last, ready, seen) = after_read(last, Some(seen), &terms(&[7, 9]));
        assert_eq!(ready, terms(&[7]));
        assert_eq!(seen, 9);
        let last = ready.last().map_or(last, |l| l.0);
        let (_, ready, seen) = after_read(last, Some(seen), &terms(&[9, 11]));
        assert_eq!(ready, terms(&[9]));
        assert_eq!(seen, 11);
        // Terms above 2^53 are compared exactly.
        let big = (1u64 << 53) + 1;
        let (_, ready, _) = after_read(big - 1, Some(big + 1), &terms(&[big, big + 1, big + 2]));
        assert_eq!(ready, terms(&[big, big + 1]));
    }

    fn node(terms_: &[u64], marker: &str) -> Option<NodeRead> {
        Some(NodeRead {
            entries: terms(terms_),
            marker: Some(marker.to_string()),
            counter: true,
        })
    }

    #[test]
    fn a_node_that_lost_its_entries_is_no_witness_until_it_lacks_nothing_to_report() {
        let mut w = Witnesses::new(3, 2, true);
        // The first read admits the trusted nodes: A and C (B is in quarantine).
        let first = [
            node(&[], "a clear"),
            node(&[], "b 17"),
            node(&[], "c clear"),
        ];
        assert_eq!(w.judge(&first), Some(vec![]));
        assert_eq!(w.admitted.iter().filter(|a| a.is_some()).count(), 3 - 1);
        // B's quarantine ended: it holds every entry the witnesses hold, so it is admitted.
        let read = [
            node(&[4], "a clear"),
            node(&[4], "b clear"),
            node(&[4], "c clear"),
        ];
        assert_eq!(w.judge(&read), Some(terms(&[4])));
        assert!(w.admitted[1].is_some());
        // A is down; B restarted empty (a new marker) and lost term 5, which only A holds:
        // C alone is no quorum, so the observer waits.
        let read = [None, node(&[6], "b2 clear"), node(&[6], "c clear")];
        assert_eq!(w.judge(&read), None);
        assert!(w.admitted[1].is_none());
        // A is back: 5 and 6 are read; B lacks 5, so it stays out.
        let read = [
            node(&[5, 6], "a clear"),
            node(&[6], "b2 clear"),
            node(&[6], "c clear"),
        ];
        assert_eq!(w.judge(&read), Some(terms(&[5, 6])));
        assert!(w.admitted[1].is_none());
        // Once the reads start above 6 (both reported), B lacks nothing and counts again.
        let read = [
            node(&[], "a clear"),
            node(&[], "b2 clear"),
            node(&[], "c clear"),
        ];
        assert_eq!(w.judge(&read), Some(vec![]));
        assert!(w.admitted[1].is_some());
        // A node without its fence counter (the amnesia guard's untrusted read) is no witness.
        let mut lost = node(&[], "a clear");
        lost.as_mut().unwrap().counter = false;
        assert_eq!(w.judge(&[lost, None, node(&[], "c clear")]), None);
    }

    #[test]
    fn without_the_quarantine_a_marker_of_a_loss_is_trusted_at_first() {
        let mut w = Witnesses::new(3, 2, false);
        let first = [node(&[3], "a 5"), node(&[3], "b 9"), None];
        assert_eq!(w.judge(&first), Some(terms(&[3])));
        // Still, a changed marker shows a loss: that node is out until it lacks nothing, and C,
        // not seen at the first read, is no witness yet: A alone is no quorum.
        let read = [node(&[4], "a 5"), node(&[], "b2 40"), None];
        assert_eq!(w.judge(&read), None);
        assert!(w.admitted[1].is_none());
        // A node with no marker at all (none written since its data went) is never trusted.
        let none = Some(NodeRead {
            entries: vec![],
            marker: None,
            counter: true,
        });
        assert_eq!(w.judge(&[None, none, node(&[], "c clear")]), None);
        // Every node answers, each trusted: the read counts (C, never seen before, holds all).
        let read = [
            node(&[4, 5], "a 5"),
            node(&[5], "b2 40"),
            node(&[4, 5], "c 7"),
        ];
        assert_eq!(w.judge(&read), Some(terms(&[4, 5])));
        assert!(w.admitted[2].is_some() && w.admitted[1].is_none());
    }

    #[test]
    fn new_nodes_are_read_at_once_and_admitted_once_each_is_trusted() {
        // Seed 438 of `--faults all` (before this): the first read waited for trusted nodes,
        // began after two leaders and reported the second only.
        let mut w = Witnesses::new(3, 2, true);
        let bare = || {
            Some(NodeRead {
                entries: vec![],
                marker: None,
                counter: false,
            })
        };
        assert_eq!(w.judge(&[bare(), bare(), None]), Some(vec![]));
        assert!(w.admitted.iter().all(|a| a.is_none()));
        // No witness yet, and one node does not answer: nothing counts.
        assert_eq!(
            w.judge(&[node(&[3], "a clear"), node(&[3], "b clear"), None]),
            None
        );
        // Every node answers, each trusted: the read counts and admits those holding it all.
        let read = [
            node(&[3], "a clear"),
            node(&[3], "b clear"),
            node(&[], "c clear"),
        ];
        assert_eq!(w.judge(&read), Some(terms(&[3])));
        assert!(w.admitted[0].is_some() && w.admitted[1].is_some() && w.admitted[2].is_none());
    }

    #[test]
    fn members_carry_the_term_and_any_value() {
        assert_eq!(
            parse_member("42 host-a:8080 (eu)"),
            Some((42, "host-a:8080 (eu)".to_string()))
        );
        assert_eq!(parse_member("7 "), Some((7, String::new())));
        assert!(parse_member("x y").is_none());
    }
}
