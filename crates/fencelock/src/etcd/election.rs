//! Elections on etcd, in the way of etcd's own `concurrency.Election`: the candidates of an
//! election are the waiters of the mutex on its lock resource (`election:<name>`), the leader
//! is the oldest live key, and its term is that key's create revision (the lock's fencing
//! token: a later leader's is larger, by consensus).
//!
//! Unlike etcd's election, a key is created empty and the leader writes its value only once
//! it holds the lock with validity left ([`Cluster::proclaim`], a put that applies only while
//! the key is still the one it created). A key whose mod revision is above its create revision
//! has been proclaimed: that is how an observer tells a leader from a candidate that reached the
//! head of the line and gave up (its wait timed out, its validity ran out) before leading.
//!
//! The observer ([`LeaderWatch`]) reads the election's keys once, then follows every change
//! with one watch on the prefix from the next revision on, keeping its own copy of the live
//! keys. After each event it looks at the oldest live key: if it is proclaimed and newer than
//! the last leader reported, it is reported. Every leader is the oldest live key, proclaimed,
//! from its proclamation until its key is deleted, and the watch delivers every revision in
//! order, so an observer reports every leader elected after it started, each once, in term
//! order; the first report is the leader of the moment it started, if there is one. A watch
//! that breaks is opened again from the last revision seen. If etcd compacted its history past
//! that revision, the observer reads the keys afresh and continues from the current leader:
//! leaders elected and gone in between are not reported (etcd keeps its history unless
//! `--auto-compaction-*` is set).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, Txn, TxnOp, WatchOptions,
    WatchStream,
};

use super::{keys, timing, Cluster, EtcdBackend, EtcdHeld, Fail};
use crate::error::{Error, LostCause, Result};
use crate::pure::vote::VoteOutcome;

/// How long an observer waits before it reads or watches again after a failure.
const RETRY: Duration = Duration::from_millis(100);

impl Cluster {
    /// Writes `value` on the leader's key while it is still the key the lock created, so that
    /// observers see the leader. Failures are retried until the lock's validity runs out.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the key is gone (the lease ended) or the validity ran out before a
    /// write was acknowledged.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a cancelled proclamation has written the value or not; either way the
    /// caller still holds the lock it had.
    pub(crate) async fn proclaim(&self, held: &EtcdHeld, value: &str) -> Result<()> {
        let started = Instant::now();
        let mut last = Fail::failed("the validity ran out before the value was written");
        loop {
            let left = held.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::lost(
                    held.resource.clone(),
                    self.votes(last.outcome, started.elapsed()),
                    LostCause::Expired,
                ));
            }
            match self.put_if_ours(held, value, left).await {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    return Err(Error::lost(
                        held.resource.clone(),
                        self.votes(VoteOutcome::NotHeld, started.elapsed()),
                        LostCause::NotHeld,
                    ))
                }
                Err(fail) => {
                    last = fail;
                    tokio::time::sleep(timing::RETRY_DELAY.min(left)).await;
                }
            }
        }
    }

    async fn put_if_ours(
        &self,
        held: &EtcdHeld,
        value: &str,
        limit: Duration,
    ) -> Result<bool, Fail> {
        let revision = i64::try_from(held.revision).unwrap_or(i64::MAX);
        let txn = Txn::new()
            .when([Compare::create_revision(
                held.key.clone(),
                CompareOp::Equal,
                revision,
            )])
            .and_then([TxnOp::put(
                held.key.clone(),
                value,
                Some(PutOptions::new().with_lease(held.lease)),
            )]);
        self.txn_within(txn, limit).await
    }
}

/// A candidate's key, as the observer last saw it.
#[derive(Debug, Clone)]
struct Candidate {
    /// Written by its leader after the key's creation.
    proclaimed: bool,
    value: String,
}

/// The leaders of one election as they change (see the module docs).
pub(crate) struct LeaderWatch {
    backend: Arc<EtcdBackend>,
    prefix: String,
    /// The live keys by create revision.
    live: BTreeMap<i64, Candidate>,
    /// Their create revisions by key (a delete event names only the key).
    by_key: HashMap<Vec<u8>, i64>,
    /// The revision our copy is current at; 0 before the first read.
    at: i64,
    /// The term of the last leader queued for report.
    last: i64,
    ready: VecDeque<(u64, String)>,
    /// The open watch and the member it runs on.
    open: Option<(WatchStream, usize)>,
    /// Whether the open watch was asked for its progress and has not answered since: a member
    /// that falls silent keeps the stream open, so a request timeout without a message asks,
    /// and a second one moves the cluster on.
    asked: bool,
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("prefix", &self.prefix)
            .field("at", &self.at)
            .field("last", &self.last)
            .field("live", &self.live.len())
            .finish_non_exhaustive()
    }
}

impl LeaderWatch {
    /// The leaders of the election whose lock resource is `resource`. No I/O until `next`.
    pub(crate) fn new(backend: Arc<EtcdBackend>, resource: &str) -> LeaderWatch {
        LeaderWatch {
            backend,
            prefix: keys::queue_prefix(resource),
            live: BTreeMap::new(),
            by_key: HashMap::new(),
            at: 0,
            last: 0,
            ready: VecDeque::new(),
            open: None,
            asked: false,
        }
    }

    /// The next leader (its term and value), waiting until there is one. Failures of the
    /// cluster are retried every 100 ms.
    ///
    /// Cancel-safe: a leader seen but not returned yet is kept for the next call.
    pub(crate) async fn next(&mut self) -> (u64, String) {
        loop {
            if let Some(leader) = self.ready.pop_front() {
                return leader;
            }
            if self.at == 0 {
                if self.read_all().await.is_err() {
                    tokio::time::sleep(RETRY).await;
                }
                continue;
            }
            let Some((open, member)) = self.open.as_mut() else {
                if self.watch().await.is_err() {
                    tokio::time::sleep(RETRY).await;
                }
                continue;
            };
            let limit = self.backend.request_timeout;
            let message = match tokio::time::timeout(limit, open.message()).await {
                Ok(message) => {
                    self.asked = false;
                    message
                }
                Err(_) if !self.asked => {
                    self.asked = true;
                    if let Err(e) = open.request_progress().await {
                        tracing::debug!(prefix = %self.prefix, error = %e, "election watch: no progress request");
                    }
                    continue;
                }
                Err(_) => {
                    let member = *member;
                    self.backend
                        .members
                        .observe(member, false, &"the election watch fell silent");
                    self.open = None;
                    self.asked = false;
                    continue;
                }
            };
            match message {
                Ok(Some(resp)) => {
                    if resp.canceled() {
                        self.open = None;
                        if resp.compact_revision() > 0 {
                            // History gone: start again from the keys as they are.
                            tracing::debug!(prefix = %self.prefix, compacted = resp.compact_revision(), "election watch compacted; reading afresh");
                            self.at = 0;
                        }
                        continue;
                    }
                    for event in resp.events() {
                        let Some(kv) = event.kv() else { continue };
                        match event.event_type() {
                            EventType::Put => self.put(kv),
                            EventType::Delete => {
                                if let Some(rev) = self.by_key.remove(kv.key()) {
                                    self.live.remove(&rev);
                                }
                            }
                        }
                        self.at = self.at.max(kv.mod_revision());
                        self.note_leader();
                    }
                }
                Ok(None) | Err(_) => {
                    // A broken watch moves the cluster on (its member may be down): the watch
                    // opens again on the next member.
                    let member = *member;
                    self.backend
                        .members
                        .observe(member, false, &"the election watch broke");
                    // Watch again from where we are: no revision is skipped.
                    self.open = None;
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// Reads every live key of the election; the current leader, if any, is reported next.
    async fn read_all(&mut self) -> Result<(), Fail> {
        let c = &self.backend;
        let client = c.client().await?;
        let resp = c
            .call(
                &client,
                c.request_timeout,
                client
                    .kv_client()
                    .get(self.prefix.clone(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        let at = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| Fail::failed("response without a header"))?;
        self.live.clear();
        self.by_key.clear();
        for kv in resp.kvs() {
            self.put(kv);
        }
        self.at = at;
        self.note_leader();
        Ok(())
    }

    /// Opens the watch from the revision after our copy's.
    async fn watch(&mut self) -> Result<(), Fail> {
        let c = &self.backend;
        let client = c.client().await?;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(self.at + 1);
        let mut watcher = client.watch_client();
        let stream = c
            .call(&client, c.request_timeout, watcher.watch(self.prefix.clone(), Some(options)))
            .await
            .inspect_err(|f| {
                tracing::debug!(prefix = %self.prefix, outcome = %f.outcome, "election watch failed");
            })?;
        self.open = Some((stream, client.index));
        Ok(())
    }

    fn put(&mut self, kv: &KeyValue) {
        let rev = kv.create_revision();
        self.by_key.insert(kv.key().to_vec(), rev);
        self.live.insert(
            rev,
            Candidate {
                proclaimed: kv.mod_revision() > rev,
                value: String::from_utf8_lossy(kv.value()).into_owned(),
            },
        );
    }

    /// Queues the oldest live key if it is a proclaimed leader not reported yet.
    fn note_leader(&mut self) {
        let Some((&rev, c)) = self.live.first_key_value() else {
            return;
        };
        if c.proclaimed && rev > self.last {
            self.last = rev;
            self.ready
                .push_back((u64::try_from(rev).unwrap_or_default(), c.value.clone()));
        }
    }
}
