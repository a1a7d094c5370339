//! Elections on PostgreSQL: leadership is the mutex of the election's key, the term its
//! token; the leaders are announced in `fencelock_leaders` (`sql::ANNOUNCE`) and observed by
//! reading that table, woken by the announcement's `NOTIFY` on the key's channel.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::{listen, PgBackend, PgHeld, Stmt};
use crate::error::{Error, LostCause, Result};
use crate::pure::vote::VoteOutcome;

/// An observer re-reads at least this often (a notification lost while its listening
/// connection was down), and after a failure waits this long.
const REREAD: Duration = Duration::from_secs(5);
const RETRY: Duration = Duration::from_millis(200);

impl PgBackend {
    /// Announces the holder of `held` (the lock of `key`) as the leader of term `term`.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock's row is no longer the holder's or has expired;
    /// [`Error::Unavailable`] (naming `name`) when the database did not answer.
    pub(crate) async fn announce(
        &self,
        name: &str,
        key: &str,
        held: &PgHeld,
        term: u64,
        value: &str,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        let owner: &str = held.owner();
        let term = i64::try_from(term).unwrap_or(i64::MAX);
        let rows = self
            .request(
                Stmt::Announce,
                &[&key, &owner, &term, &value],
                self.request_timeout,
            )
            .await;
        let elapsed = started.elapsed();
        match rows {
            Ok(rows) if rows.first().and_then(|r| r.get::<_, Option<bool>>(0)) == Some(true) => {
                Ok(())
            }
            Ok(_) => Err(Error::lost(
                name.to_string(),
                self.votes(VoteOutcome::NotHeld, elapsed),
                LostCause::NotHeld,
            )),
            Err(outcome) => Err(Error::Unavailable {
                resource: name.to_string(),
                votes: self.votes(outcome, elapsed),
            }),
        }
    }

    /// Takes back the announcement of term `term` with `value` (best effort).
    pub(crate) async fn withdraw(&self, key: &str, term: u64, value: &str) {
        let term = i64::try_from(term).unwrap_or(i64::MAX);
        let _ = self
            .request(Stmt::Withdraw, &[&key, &term, &value], self.request_timeout)
            .await;
    }

    /// The leaders after `after` (all of them, oldest first), or the latest one when `after` is
    /// `None`.
    async fn read_leaders(
        &self,
        key: &str,
        after: Option<i64>,
    ) -> std::result::Result<Vec<(i64, String)>, VoteOutcome> {
        let rows = self
            .request(Stmt::Leaders, &[&key, &after], self.request_timeout)
            .await?;
        let mut leaders: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        leaders.reverse();
        Ok(leaders)
    }
}

/// The leaders of one election as they change, in term order (see `Observer`).
pub(crate) struct PgLeaders {
    backend: Arc<PgBackend>,
    key: String,
    /// The last term read; `None` before the first read.
    last: Option<i64>,
    ready: VecDeque<(u64, String)>,
    subscription: Option<listen::Subscription>,
}

impl std::fmt::Debug for PgLeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaders")
            .field("key", &self.key)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl PgLeaders {
    /// The leaders of the election whose lock is `key`. No I/O.
    pub(crate) fn new(backend: Arc<PgBackend>, key: &str) -> PgLeaders {
        PgLeaders {
            backend,
            key: key.to_string(),
            last: None,
            ready: VecDeque::new(),
            subscription: None,
        }
    }

    /// The next leader: from the latest one when the stream started, then each later term once,
    /// in order. Listens before each read, so an announcement after the read wakes it.
    ///
    /// Cancel-safe: a leader read but not returned yet is kept for the next call.
    pub(crate) async fn next(&mut self) -> (u64, String) {
        loop {
            if let Some(leader) = self.ready.pop_front() {
                return leader;
            }
            if self.subscription.is_none() {
                self.subscription = self
                    .backend
                    .subscribe(std::slice::from_ref(&self.key))
                    .await;
            }
            match self.backend.read_leaders(&self.key, self.last).await {
                Ok(leaders) => {
                    for (term, value) in leaders {
                        if self.last.is_none_or(|last| term > last) {
                            self.last = Some(term);
                            if let Ok(term) = u64::try_from(term) {
                                self.ready.push_back((term, value));
                            }
                        }
                    }
                    if !self.ready.is_empty() {
                        continue;
                    }
                    if self.last.is_none() {
                        // No leader yet: the next read reports the first one, in order.
                        self.last = Some(0);
                    }
                }
                Err(_) => {
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            }
            match &self.subscription {
                Some(s) => {
                    if !s.wait(REREAD).await {
                        self.subscription = None;
                    }
                }
                None => tokio::time::sleep(RETRY).await,
            }
        }
    }
}
