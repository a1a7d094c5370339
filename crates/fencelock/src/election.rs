//! Leader election, built on the mutex: on Redis nodes with a log of leaders, on etcd with
//! the lock keys themselves (`etcd/election.rs`, as etcd's `concurrency.Election`).
//!
//! Leadership is holding the lock `election:<name>` in fencing mode; the term is the lock's
//! fencing token, so a later leader's term is larger (on Redis under the mutex's conditions,
//! `docs/fencing.md`; on etcd it is the key's create revision). Once it holds the lock, a
//! candidate announces itself, and it is leader only if the announcement succeeded with
//! validity left.
//!
//! On Redis the announcement appends `<term> <value>` to the election's log, the sorted set
//! `fencelock:leaders:<name>` scored by term, on every node where it still owns the lock key
//! (one script: compare, then add; the log keeps the last 64 entries); a quorum must append.
//! Other Redlock clients see only the lock key and ignore the log. Observers read the log from
//! the nodes and report each term once, in increasing order. A term is reported only once a
//! previous read of a quorum, finished before this one began, had seen it or a later one: then
//! every successful leader up to it had finished its appends (a later leader's grant on any
//! node follows the earlier leader's appends there), and this read of a quorum meets each of
//! them on some node. So an observer reports every leader (not only the latest) and never a
//! term after a larger one, at the cost of one poll of delay.
//!
//! On etcd the announcement writes the value on the leader's own key while the key is still
//! the one its lock created; observers follow the election's keys with one watch and report
//! the oldest live key once it has its value (see `etcd/election.rs`).
//!
//! A campaign that fails after its announcement (an append that reached no quorum, no validity
//! left) withdraws it before releasing the lock: on Redis its entry is removed from every node
//! that answers. An observer's report therefore means "announced, and seen by the observer's
//! reads", not "the campaign returned `Ok`": a failed candidate is reported only if a read met
//! its entry before the withdrawal. A node that acts on a report confirms with its own
//! [`Leadership`] (the same term, not lost). docs/guarantees.md (A-elect-observe) states this.
//!
//! A node that lost its data (restarted without persistence, flushed) no longer holds the
//! entries it had: a quorum read that counted it could miss a leader. So an observer counts
//! only the nodes it knows whole above the last term it reported, and waits while too few
//! answer (`redis::election::Witnesses`).
//!
//! A resignation or a leader's death is not an entry: it shows as the next leader's term.

use std::time::Instant;

use crate::backend::{ElectionLog, LeaderStream};
use crate::client::Client;
use crate::context::LockContext;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keepalive::{AutoExtend, LostSignal};
use crate::lock::Lock;
use crate::pure::vote::Votes;

/// The lock key of the election `name`: an ordinary lock key.
pub fn election_key(name: &str) -> String {
    format!("election:{name}")
}

/// The log of the election `name`: a sorted set, member `<term> <value>`, score the term.
pub fn leaders_key(name: &str) -> String {
    format!("fencelock:leaders:{name}")
}

/// A campaign's lock while its announcement is in flight (see `Election::lead`).
struct Announcing {
    log: ElectionLog,
    term: u64,
    value: String,
    lock: Option<Lock>,
}

impl Drop for Announcing {
    fn drop(&mut self) {
        let Some(lock) = self.lock.take() else {
            return;
        };
        // Without a runtime, dropping the lock is all there is (its keys expire by TTL).
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (log, term, value) = (self.log.clone(), self.term, std::mem::take(&mut self.value));
        // The task no longer holds the lock (a dropped lock's registration goes at once); the
        // release follows the withdrawal, as the background release of a dropped lock.
        let (client, keys, held) = lock.disown();
        runtime.spawn(async move {
            log.withdraw(term, &value).await;
            client.release_in_background(keys, held);
        });
    }
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
}

/// An election on the client's nodes. Made by [`Client::election`]; cheap to clone.
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
/// // On Redis the client must be in fencing mode: the term is the fencing token.
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign("web-1").await?; // waits while another leads
/// println!("leading in term {}", leadership.term());
/// while !leadership.is_lost() {
///     // ... act as the leader, passing the term to fenced storage ...
/// #   break;
/// }
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    name: String,
    key: String,
    log: ElectionLog,
}

impl Client {
    /// The election `name` on this client's nodes (Redis, etcd or PostgreSQL). No I/O happens
    /// here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when the client is not in fencing mode on Redis (the term is
    /// the fencing token; on etcd and PostgreSQL every lock has one), for a name a lock would
    /// refuse, or on a backend without elections (`zk://`).
    pub fn election(&self, name: &str) -> Result<Election> {
        let key = election_key(name);
        crate::client::check_resources(&[key.as_str()])?;
        if self.backend().tokens_need_fencing_mode() && !self.config().fencing() {
            return Err(Error::config(
                "fencing",
                "an election's term is the fencing token: build the client with Config::with_fencing(true)",
            ));
        }
        Ok(Election {
            client: self.clone(),
            name: name.to_string(),
            log: self.backend().election_log(&key, &leaders_key(name))?,
            key,
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
    /// As [`Client::acquire`]; [`Error::Lost`] when the lock's key was gone before the log
    /// entry could reach a quorum (on Redis: from too many nodes), [`Error::Unavailable`] when
    /// the entry did not reach a quorum for other reasons (each node's answer in its votes);
    /// [`Error::TooSlow`] when the validity ran out meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a campaign dropped before it returns releases the lock in the background
    /// (as [`Client::try_acquire`]); dropped during its announcement, it first withdraws its
    /// entry from the log of leaders (on Redis), as a campaign that fails there does.
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        let lock = self.campaign_lock(value).await?;
        let term = lock.fencing_token().map(|t| t.value()).unwrap_or_default();
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
        self.lead(lock, value).await
    }

    /// A campaign's steps once it holds the lock: announce, then check the validity left. A
    /// campaign that fails here withdraws its announcement before it releases the lock (on
    /// Redis, its log entry is removed from every node that answers), so that an observer
    /// reports it only if a read of its own met the entry in between (see docs/guarantees.md,
    /// A-elect-observe).
    async fn lead(&self, lock: Lock, value: &str) -> Result<Lock> {
        let term = lock.fencing_token().map(|t| t.value()).unwrap_or_default();
        // Dropped mid-announcement (the campaign cut short), it withdraws the entry that may
        // have been appended, then releases the lock, in that order, in the background.
        let mut announcing = Announcing {
            log: self.log.clone(),
            term,
            value: value.to_string(),
            lock: Some(lock),
        };
        let lock = announcing.lock.as_ref().expect("set just above");
        let announced = self
            .log
            .announce(&self.name, lock.held(), term, value)
            .await;
        let lock = announcing.lock.take().expect("taken only here");
        let failed = match announced {
            Err(e) => Some(e),
            Ok(()) if !lock.is_valid() => Some(Error::TooSlow {
                resource: self.name.clone(),
                votes: Votes::default(),
            }),
            Ok(()) => None,
        };
        if let Some(e) = failed {
            self.log.withdraw(term, value).await;
            let _ = lock.release().await;
            return Err(e);
        }
        Ok(lock)
    }

    /// The leaders elected so far, in term order, as an observer reports them: see
    /// [`Observer::next`].
    pub fn observe(&self) -> Observer {
        Observer {
            leaders: self.log.leaders(),
        }
    }
}

/// A stream of leader changes (made by [`Election::observe`]): each leader once, in term
/// order. The first one reported is the latest leader elected when the observer started (on
/// etcd: the leader at that moment, if there is one).
///
/// # Example
///
/// ```no_run
/// # async fn demo(election: fencelock::Election) {
/// let mut leaders = election.observe();
/// loop {
///     let leader = leaders.next().await; // each leader once, in term order
///     println!("{} leads in term {}", leader.value(), leader.term());
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Observer {
    leaders: LeaderStream,
}

impl Observer {
    /// The next leader: waits until one is elected (on Redis, reads the nodes every 100 ms; a
    /// read counts only when a quorum of nodes not known to have lost their data answered, or
    /// every node did: a node restarted without persistence counts again once it holds every
    /// entry still to report; otherwise the read is done again at the next poll; on etcd, one
    /// watch, opened again if it breaks).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a leader read but not returned yet is kept for the next call.
    pub async fn next(&mut self) -> Leader {
        let (term, value) = self.leaders.next().await;
        Leader { term, value }
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
    /// Cancel-safe: a resignation dropped before it returns leaves the lock to the background
    /// release of a dropped lock.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log's kept connections outlive a node's restart: the first campaign after it
    /// replaces the broken connection instead of failing its append there (with one node, the
    /// whole quorum).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_campaign_after_a_node_restart_appends_on_a_new_connection() {
        use std::time::Duration;

        let node = fencelock_testkit::RedisNode::start().unwrap();
        let config = crate::Config::new(vec![node.url()])
            .with_fencing(true)
            .with_quarantine(false)
            .with_node_timeout(Duration::from_secs(2))
            .with_ttl(Duration::from_secs(10));
        let client = Client::new(config).unwrap();
        let election = client.election("restarted").unwrap();
        election
            .campaign("first")
            .await
            .unwrap()
            .resign()
            .await
            .unwrap();
        node.restart().unwrap();
        // The lock's own connections reconnect on their own schedule: the lock first, then its
        // announcement, which must reach the node.
        let until = std::time::Instant::now() + Duration::from_secs(20);
        let lock = loop {
            match client.acquire(&election.key).await {
                Ok(lock) => break lock,
                Err(e) => {
                    assert!(std::time::Instant::now() < until, "{e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let leader = election
            .lead(lock, "second")
            .await
            .expect("the append after the restart reaches the node");
        leader.release().await.unwrap();
    }

    /// Issue 35, item 4 (Redis): a candidate holds the lock, but by its append the key is gone
    /// on two nodes of three: the append reaches one node, and the campaign fails (`Lost`,
    /// naming each node's answer). An observer must not report it; the next leader, which
    /// holds, it must.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_campaign_whose_append_reached_a_minority_is_not_reported() {
        use std::time::Duration;

        let nodes = fencelock_testkit::RedisNodes::start(3).unwrap();
        let config = crate::Config::new(nodes.urls())
            .with_fencing(true)
            .with_quarantine(false)
            .with_node_timeout(Duration::from_millis(500))
            .with_ttl(Duration::from_secs(10));
        let client = Client::new(config).unwrap();
        let election = client.election("minority").unwrap();
        let mut observer = election.observe();
        let lock = client.acquire(&election.key).await.unwrap();
        for i in 1..3 {
            nodes.node(i).cli(&["DEL", &election.key]).unwrap();
        }
        let err = election.lead(lock, "never-led").await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Lost, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("not held by us") && text.contains("granted"),
            "the error names each node's answer: {text}"
        );
        // Several polls (100 ms each): a report would come by the second read.
        let seen = tokio::time::timeout(Duration::from_millis(1500), observer.next()).await;
        assert!(
            seen.is_err(),
            "the observer reported a candidate whose append reached one node of three: {seen:?}"
        );
        let leader = election.campaign("leads").await.unwrap();
        let reported = tokio::time::timeout(Duration::from_secs(20), observer.next())
            .await
            .expect("the leader that holds is reported");
        assert_eq!(reported.term(), leader.term());
        assert_eq!(reported.value(), "leads");
        leader.resign().await.unwrap();
    }

    /// Issue 35, item 3: nodes A, B, C (C with `appendfsync always`, A and B without
    /// persistence). C is down while L1 wins on {A, B}; B restarts empty (its quarantine runs
    /// out and it is seeded again) and A stops; L2 wins on {B, C}. No node that answers holds
    /// L1's entry: an observer that counted B's answer reported L2 and never L1. The observer
    /// is driven read by read (`LogReader::step`), so no poll timing enters the test.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_observer_does_not_skip_a_leader_whose_entries_a_restart_lost() {
        use std::time::Duration;

        use fencelock_testkit::{Persistence, RedisNode, RedisOptions};

        let nodes = [
            RedisNode::start().unwrap(),
            RedisNode::start().unwrap(),
            RedisNode::start_with(RedisOptions::new().persistence(Persistence::AofAlways)).unwrap(),
        ];
        let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
        // New nodes, marked as `fencelock up` marks them: no quarantine at the start.
        for node in &nodes {
            let run = node.run_id().unwrap();
            node.cli(&["SET", "fencelock:node", &format!("{run} clear")])
                .unwrap();
        }
        let config = crate::Config::new(nodes.iter().map(|n| n.url()).collect::<Vec<_>>())
            .with_fencing(true)
            .with_node_timeout(Duration::from_millis(300))
            .with_ttl(Duration::from_secs(1));
        let client = Client::new(config).unwrap();
        client
            .try_acquire("warm")
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let election = client.election("skip").unwrap();
        let crate::backend::ElectionLog::Redis(log) = &election.log else {
            unreachable!("a Redis client")
        };
        let mut observer = log.reader();
        // The first read: every node trusted and admitted, nothing to report yet.
        assert!(!observer.step().await);
        assert!((0..3).all(|i| observer.witness(i)));

        c.stop().unwrap();
        let l1 = election.campaign("l1").await.unwrap();
        let t1 = l1.term();
        l1.resign().await.unwrap();
        b.restart().unwrap();
        c.restart().unwrap();
        // B comes back into the quorum once its quarantine ends and a token seeds its counter.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(lock) = client.try_acquire("warm").await {
                let _ = lock.release().await;
            }
            let counter = b.cli(&["EXISTS", "fencelock:fence"]).unwrap() == "1";
            let marker = b.cli(&["GET", "fencelock:node"]).unwrap();
            if counter && marker.ends_with(" clear") {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node B was not seeded and cleared within 60 s (marker {marker:?})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        a.pause().unwrap();
        // The election's connection to B broke with the restart: the first append there fails
        // and the connection is opened again, so a candidate may have to try twice.
        let mut tries = 0;
        let l2 = loop {
            match election.campaign("l2").await {
                Ok(l2) => break l2,
                Err(e) if tries < 5 => {
                    tries += 1;
                    eprintln!("campaign l2: {e}; again");
                }
                Err(e) => panic!("campaign l2 failed {tries} times: {e}"),
            }
        };
        let t2 = l2.term();
        assert!(t2 > t1, "terms {t1} then {t2}");
        let mut reported = Vec::new();
        for _ in 0..3 {
            observer.step().await;
            reported.extend(observer.take_ready());
        }
        assert!(
            reported.is_empty(),
            "the observer skipped L1 (term {t1}) and reported {reported:?}: B, restarted empty, \
             answered for it"
        );
        // A answers again: L1, then L2, each once, in term order; B, which holds every entry
        // still to report, is a witness again.
        a.resume().unwrap();
        for _ in 0..3 {
            observer.step().await;
            reported.extend(observer.take_ready());
        }
        let terms: Vec<u64> = reported.iter().map(|l| l.0).collect();
        assert_eq!(terms, vec![t1, t2], "{reported:?}");
        assert!(
            observer.witness(1),
            "B is admitted again once it lacks nothing to report"
        );
        l2.resign().await.unwrap();
    }

    #[test]
    fn the_keys_sit_where_the_protocol_says() {
        assert_eq!(election_key("db"), "election:db");
        assert_eq!(leaders_key("db"), "fencelock:leaders:db");
    }
}
