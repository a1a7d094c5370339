//! An election's log on Redis nodes (see `election.rs` for the protocol and the observer's
//! argument): the leader's append and the observer's reads, on connections of their own.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;

use super::RedisBackend;

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
    conns: Arc<[Mutex<Option<MultiplexedConnection>>]>,
    nodes: Arc<[redis::Client]>,
}

impl RedisBackend {
    /// The log `log` of the election whose lock key is `key`. No I/O.
    pub(crate) fn election_log(&self, key: &str, log: &str) -> ElectionLog {
        let nodes: Arc<[redis::Client]> = self.nodes.iter().map(|n| n.client().clone()).collect();
        ElectionLog {
            key: key.to_string(),
            log: log.to_string(),
            quorum: self.quorum,
            node_timeout: self.settings.node_timeout,
            conns: nodes.iter().map(|_| Mutex::new(None)).collect(),
            nodes,
        }
    }
}

impl ElectionLog {
    /// Appends `<term> <value>` on every node where `owner` still owns the lock key; whether a
    /// quorum appended.
    pub(crate) async fn append(&self, owner: &str, term: u64, value: &str) -> bool {
        let member = format!("{term} {value}");
        let appended = self
            .on_every_node(self.node_timeout, |mut conn| {
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
            .await
            .into_iter()
            .filter(|r| matches!(r, Some(1)))
            .count();
        appended >= self.quorum
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

    /// A reader of the log, from the latest leader on.
    pub(crate) fn reader(&self) -> LogReader {
        LogReader {
            log: self.clone(),
            last: 0,
            seen: None,
            ready: VecDeque::new(),
        }
    }

    /// Runs `f` on a connection to every node at once, each bounded by `timeout`; `None` where
    /// the node failed or timed out.
    async fn on_every_node<T, F, Fut>(&self, timeout: Duration, f: F) -> Vec<Option<T>>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let calls = (0..self.nodes.len()).map(|i| {
            let f = &f;
            async move {
                let bounded = tokio::time::timeout(timeout, async {
                    let mut slot = self.conns[i].lock().await;
                    let conn = match slot.as_ref() {
                        Some(c) => c.clone(),
                        None => {
                            let c = crate::sim::multiplexed(
                                &self.nodes[i],
                                &redis::AsyncConnectionConfig::new(),
                            )
                            .await?;
                            *slot = Some(c.clone());
                            c
                        }
                    };
                    drop(slot);
                    f(conn).await
                })
                .await;
                match bounded {
                    Ok(Ok(v)) => Some(v),
                    Ok(Err(_)) => {
                        // A broken connection is opened again next time.
                        *self.conns[i].lock().await = None;
                        None
                    }
                    Err(_) => None,
                }
            }
        });
        futures_util::future::join_all(calls).await
    }

    /// One read of the log on every node: the union of entries with a term of at least
    /// `from`, in term order, or `None` when fewer than a quorum answered. The score bound is
    /// `from` rounded to a double, as Redis rounds the terms it scores: rounding keeps order,
    /// so no term at or above `from` is left out; the terms themselves are read exactly from
    /// the members' text (above 2^53 the bound may let in a few smaller ones, dropped later).
    async fn read(&self, from: u64) -> Option<Vec<(u64, String)>> {
        let timeout = self.node_timeout.max(POLL);
        let answers = self
            .on_every_node(timeout, |mut conn| {
                let log = self.log.clone();
                async move {
                    redis::cmd("ZRANGEBYSCORE")
                        .arg(log)
                        .arg(from as f64)
                        .arg("+inf")
                        .query_async::<Vec<String>>(&mut conn)
                        .await
                }
            })
            .await;
        let answered = answers.iter().filter(|a| a.is_some()).count();
        if answered < self.quorum {
            return None;
        }
        let mut all: Vec<(u64, String)> = answers
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|m| parse_member(&m))
            .collect();
        all.sort_by_key(|l| l.0);
        all.dedup_by_key(|l| l.0);
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
}

impl LogReader {
    /// The next leader; cancel-safe (a leader read but not returned is kept).
    pub(crate) async fn next(&mut self) -> (u64, String) {
        loop {
            if let Some(leader) = self.ready.pop_front() {
                self.last = leader.0;
                return leader;
            }
            let Some(entries) = self.log.read(self.last.saturating_add(1)).await else {
                tokio::time::sleep(POLL).await;
                continue;
            };
            let (last, ready, seen) = after_read(self.last, self.seen, &entries);
            self.last = last;
            self.ready = ready.into();
            self.seen = Some(seen);
            if self.ready.is_empty() {
                tokio::time::sleep(POLL).await;
            }
        }
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
/// is in `election.rs`). What a report means, and the limits (an append that reached a
/// minority, a node restarted empty), are in docs/guarantees.md (A-elect-observe).
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
