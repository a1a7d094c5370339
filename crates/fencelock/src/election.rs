//! Leader election on Redis nodes, built on the mutex.
//!
//! Leadership is holding the lock `election:<name>` in fencing mode; the term is the lock's
//! fencing token, so a later leader's term is larger (under the mutex's conditions,
//! `docs/fencing.md`). Once it holds the lock, a candidate appends `<term> <value>` to the
//! election's log, the sorted set `fencelock:leaders:<name>` scored by term, on every node where
//! it still owns the lock key (one script: compare, then add; the log keeps the last 64
//! entries), and it is leader only if a quorum appended and its validity is left. Other Redlock
//! clients see only the lock key and ignore the log.
//!
//! Observers read the log from the nodes and report each term once, in increasing order. A
//! term is reported only once a previous read of a quorum, finished before this one began, had
//! seen it or a later one: then every successful leader up to it had finished its appends (a
//! later leader's grant on any node follows the earlier leader's appends there), and this read
//! of a quorum meets each of them on some node. So an observer reports every leader (not only
//! the latest) and never a term after a larger one, at the cost of one poll of delay. A
//! resignation or a leader's death is not an entry: it shows as the next leader's term.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;

use crate::client::Client;
use crate::context::LockContext;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keepalive::{AutoExtend, LostSignal};
use crate::lock::Lock;
use crate::pure::vote::Votes;

/// How many entries each node keeps in an election's log.
const LOG_LENGTH: i64 = 64;

/// How often an observer reads the log.
const POLL: Duration = Duration::from_millis(100);

/// The lock key of the election `name`: an ordinary lock key.
pub fn election_key(name: &str) -> String {
    format!("election:{name}")
}

/// The log of the election `name`: a sorted set, member `<term> <value>`, score the term.
pub fn leaders_key(name: &str) -> String {
    format!("fencelock:leaders:{name}")
}

/// One leader: its term (the fencing token of its lock) and the value it set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    term: u64,
    value: String,
}

impl Leader {
    /// The term: larger for every later leader.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value the leader set (its address, its host name).
    pub fn value(&self) -> &str {
        &self.value
    }

    fn parse(member: &str) -> Option<Leader> {
        let (term, value) = member.split_once(' ')?;
        Some(Leader {
            term: term.parse().ok()?,
            value: value.to_string(),
        })
    }
}

/// An election on the client's Redis nodes. Made by [`Client::election`]; cheap to clone.
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    name: String,
    key: String,
    log: String,
    conns: Arc<[Mutex<Option<MultiplexedConnection>>]>,
    nodes: Arc<[redis::Client]>,
}

impl Client {
    /// The election `name` on this client's Redis nodes. No I/O happens here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the client is not in fencing mode (the term is the fencing
    /// token), on etcd (not built there yet), or for a name a lock would refuse.
    pub fn election(&self, name: &str) -> Result<Election> {
        let key = election_key(name);
        crate::client::check_resources(&[key.as_str()])?;
        if !self.config().fencing() {
            return Err(Error::config(
                "fencing",
                "an election's term is the fencing token: build the client with Config::with_fencing(true)",
            ));
        }
        let Ok(backend) = self.backend().redis("an election") else {
            return Err(Error::config(
                "backend",
                "elections work on Redis nodes only; on etcd they are not built yet",
            ));
        };
        let nodes: Arc<[redis::Client]> = backend.node_clients().into();
        Ok(Election {
            client: self.clone(),
            name: name.to_string(),
            key,
            log: leaders_key(name),
            conns: nodes.iter().map(|_| Mutex::new(None)).collect(),
            nodes,
        })
    }
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Becomes leader with `value`, waiting per the client's retry policy, and stays leader
    /// (auto-extended) until the [`Leadership`] is resigned or dropped, or lost (its
    /// [`LostSignal`] fires).
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`]; [`Error::Unavailable`] when the log entry did not reach a
    /// quorum; [`Error::TooSlow`] when the validity ran out meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled campaign may leave a lock that expires after the TTL.
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        let lock = self.campaign_lock(value).await?;
        let term = lock.fencing_token().unwrap_or_default();
        Ok(Leadership {
            guard: lock.auto_extend(AutoExtend::new()),
            leader: Leader {
                term,
                value: value.to_string(),
            },
        })
    }

    /// [`Election::campaign`], handing back the lock itself (not extended) for a supervisor
    /// that keeps it (the `fencelock elect` command). The term is its fencing token.
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`].
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    pub async fn campaign_lock(&self, value: &str) -> Result<Lock> {
        let lock = self.client.acquire(&self.key).await?;
        let term = lock.fencing_token().unwrap_or_default();
        let member = format!("{term} {value}");
        let timeout = self.client.config().node_timeout();
        let appended = self
            .on_every_node(timeout, |mut conn| {
                let (key, log, token, member) = (
                    self.key.clone(),
                    self.log.clone(),
                    lock.token().to_string(),
                    member.clone(),
                );
                async move {
                    crate::redis::scripts::ELECTION_APPEND
                        .key(key)
                        .key(log)
                        .arg(token)
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
        if appended < self.client.quorum() {
            let _ = lock.release().await;
            return Err(Error::Unavailable {
                resource: self.name.clone(),
                votes: Votes::default(),
            });
        }
        if !lock.is_valid() {
            let _ = lock.release().await;
            return Err(Error::TooSlow {
                resource: self.name.clone(),
                votes: Votes::default(),
            });
        }
        Ok(lock)
    }

    /// The leaders elected so far, in term order, as an observer reports them: see
    /// [`Observer::next`].
    pub fn observe(&self) -> Observer {
        Observer {
            election: self.clone(),
            last: 0,
            seen: None,
            ready: Default::default(),
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
                            let c = self.nodes[i].get_multiplexed_async_connection().await?;
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
    /// `from`, or `None` when fewer than a quorum answered.
    async fn read_log(&self, from: u64) -> Option<Vec<Leader>> {
        let timeout = self.client.config().node_timeout().max(POLL);
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
        if answered < self.client.quorum() {
            return None;
        }
        let mut all: Vec<Leader> = answers
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|m| Leader::parse(&m))
            .collect();
        all.sort_by_key(|l| l.term);
        all.dedup_by_key(|l| l.term);
        Some(all)
    }
}

/// A stream of leader changes (made by [`Election::observe`]): each leader once, in term
/// order. The first one reported is the latest leader elected when the observer started.
#[derive(Debug)]
pub struct Observer {
    election: Election,
    /// The last term reported (0: none yet; terms are larger).
    last: u64,
    /// The largest term seen by the previous complete read; `None` before the first.
    seen: Option<u64>,
    ready: std::collections::VecDeque<Leader>,
}

impl Observer {
    /// The next leader: waits until one is elected (reads the nodes every 100 ms; a read that
    /// fewer than a quorum answered is done again at the next poll).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a leader read but not returned yet is kept for the next call.
    pub async fn next(&mut self) -> Leader {
        loop {
            if let Some(leader) = self.ready.pop_front() {
                self.last = leader.term;
                return leader;
            }
            let Some(entries) = self.election.read_log(self.last.saturating_add(1)).await else {
                tokio::time::sleep(POLL).await;
                continue;
            };
            match self.seen {
                None => {
                    // The first read: report from the latest leader on, once confirmed.
                    if entries.len() >= 2 {
                        self.last = entries[entries.len() - 2].term;
                    }
                }
                Some(seen) => {
                    let last = self.last;
                    self.ready = entries
                        .iter()
                        .filter(|l| l.term > last && l.term <= seen)
                        .cloned()
                        .collect();
                }
            }
            let max = entries.last().map_or(0, |l| l.term);
            self.seen = Some(self.seen.unwrap_or(0).max(max));
            if self.ready.is_empty() {
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// Leadership of an election, kept extended in the background. Made by
/// [`Election::campaign`].
#[must_use = "leadership ends when it is dropped"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    leader: Leader,
}

impl Leadership {
    /// The term (the lock's fencing token): pass it to fenced storage with every write.
    pub fn term(&self) -> u64 {
        self.leader.term
    }

    /// The value this leader set.
    pub fn value(&self) -> &str {
        &self.leader.value
    }

    /// Fires when leadership is lost (see [`LostSignal`]).
    pub fn lost(&self) -> LostSignal {
        self.guard.lost()
    }

    /// Whether leadership is lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// The validity deadline of the leadership; it moves forward with each extension.
    pub fn validity_deadline(&self) -> Instant {
        self.guard.validity_deadline()
    }

    /// What work under this leadership needs (the term as the fencing token, the lost signal).
    pub fn context(&self) -> LockContext {
        self.guard.context()
    }

    /// Gives up leadership: releases the lock, so that another candidate can win.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`Error::Lost`] when leadership had been lost already.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a cancelled resignation leaves the lock to expire by TTL.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_carry_the_term_and_any_value() {
        let l = Leader::parse("42 host-a:8080 (eu)").unwrap();
        assert_eq!(l.term(), 42);
        assert_eq!(l.value(), "host-a:8080 (eu)");
        assert_eq!(Leader::parse("7 ").unwrap().value(), "");
        assert!(Leader::parse("x y").is_none());
        assert_eq!(election_key("db"), "election:db");
        assert_eq!(leaders_key("db"), "fencelock:leaders:db");
    }
}
