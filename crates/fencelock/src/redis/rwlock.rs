//! The read-write lock on Redis: the shared side (readers) and the writer's record. The write
//! side is the mutex itself (`redlock.rs`, `line.rs`); `crate::rwlock` holds the design and
//! its argument, `tests/rwlock_model.rs` its model check.
//!
//! A reader's round runs [`scripts::READ_ACQUIRE`] on every node (restart quarantine as for
//! any acquisition): a node grants while its lock key is free or holds the readers' marker and
//! no writer waits ahead in line, and reports the writer record. A waiting reader takes a place
//! in the mutex's line (its waiter id has an `r` after the dot, so the scripts tell it from a
//! writer), and wakes on the key's release channel (any release may let it in) and on its turn.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use redis::{Cmd, Script, Value};

use super::extender::ExtendedLock;
use super::ops::{eval, evalsha, ttl_millis};
use super::redlock::classify;
use super::round::{Answer, Mode, Round};
use super::undo::{Side, Undo};
use super::{scripts, Grant, RedisBackend, RedisHeld};
use crate::error::{Error, Result};
use crate::keepalive::{GuardState, Stop};
use crate::pure::extension::Schedule;
use crate::pure::queue::{self, Ticket};
use crate::pure::quorum::Decision;
use crate::pure::readers::{readers_key, writer_key, RECORD_LIFETIME_TTLS, WRITER_MAX_KEY};
use crate::pure::retry::RetryPolicy;
use crate::pure::token::OwnerToken;
use crate::pure::validity;
use crate::pure::vote::Votes;

/// A reader's waiter id: a writer's (the client's id, a dot, a random part) with an `r` after
/// the dot, which the scripts look for.
fn reader_id(waiter_id: &str) -> String {
    waiter_id.replacen('.', ".r", 1)
}

/// A read lock just taken: the grant, and the largest writer record its granting nodes
/// reported (in fencing mode).
#[derive(Debug)]
pub(crate) struct ReadGrant {
    pub(crate) grant: Grant,
    pub(crate) last_writer: Option<u64>,
}

impl RedisBackend {
    /// One attempt to take a read lock on `key`; `ticket`: its place in line, if it waits.
    ///
    /// # Errors
    ///
    /// As `Client::try_acquire`; whatever the error, the reader's entries have been released
    /// on every node.
    pub(crate) async fn read_attempt(
        self: &Arc<Self>,
        key: &str,
        ticket: Option<&Ticket>,
    ) -> Result<ReadGrant> {
        let token = OwnerToken::generate().map_err(|e| {
            Error::config(
                "random source",
                format!("the OS random number generator failed: {e}"),
            )
        })?;
        // Armed before the first write, disarmed on every return below (`undo.rs`).
        let undo = Undo::arm(self, &[key.to_string()], token.as_str(), Side::Reader);
        let started = Instant::now();
        let round = self.read_round(key, token.as_str(), ticket).await;
        let line = ticket.map(|t| reader_id(&t.id));
        if round.decision != Decision::Reached {
            self.release_reader_quietly(key, token.as_str(), None).await;
            undo.disarm();
            return Err(classify(key, round.votes, self.quorum));
        }
        let elapsed = started.elapsed();
        let Some(valid_for) = validity::validity(self.settings.ttl, elapsed, self.settings.drift)
        else {
            self.release_reader_quietly(key, token.as_str(), None).await;
            undo.disarm();
            return Err(Error::TooSlow {
                resource: key.to_string(),
                votes: round.votes,
            });
        };
        let last_writer = self
            .settings
            .fencing
            .then(|| round.granted.iter().map(|(_, r)| *r).max().unwrap_or(0));
        tracing::debug!(resource = key, ?elapsed, validity = ?valid_for, last_writer, "read lock acquired");
        undo.disarm();
        Ok(ReadGrant {
            grant: Grant {
                held: RedisHeld {
                    token,
                    line: line.map(Arc::from),
                },
                fencing_token: None,
                deadline: started + (elapsed + valid_for),
                votes: round.votes,
            },
            last_writer,
        })
    }

    /// The acquisition round of a reader: each granting node's writer record.
    async fn read_round(&self, key: &str, token: &str, ticket: Option<&Ticket>) -> Round<u64> {
        let keys = [
            key.to_string(),
            readers_key(key),
            writer_key(key),
            queue::queue_key(key),
            queue::lease_key(key),
            queue::waiting_key(key),
            WRITER_MAX_KEY.to_string(),
        ];
        let mut cmd = evalsha(&scripts::READ_ACQUIRE, &keys);
        cmd.arg(token).arg(ttl_millis(self.settings.ttl));
        if let Some(t) = ticket {
            cmd.arg(reader_id(&t.id))
                .arg(t.order)
                .arg(t.lease_ms())
                .arg(ttl_millis(queue::keep(t.lease)));
        }
        let mode = Mode::Acquire { token, ahead: None };
        let script = Some(&*scripts::READ_ACQUIRE);
        let limit = self.settings.node_timeout;
        self.marked_round(
            script,
            cmd,
            mode,
            limit,
            |(granted, record): (i64, String)| {
                let record = record.parse::<u64>().map_err(|_| {
                    redis::RedisError::from((
                        redis::ErrorKind::Parse,
                        "a writer record is not a u64",
                        record,
                    ))
                })?;
                Ok(if granted == 1 {
                    Answer::Granted(record)
                } else {
                    Answer::HeldByOther
                })
            },
        )
        .await
    }

    /// Takes a read lock on `key`, waiting as `policy` allows: after the first refusal the
    /// reader takes a place in line (a writer waiting ahead of it keeps it out) and wakes on
    /// every release of the key and on its turn.
    ///
    /// # Errors
    ///
    /// As `Client::acquire`.
    pub(crate) async fn read_waiting(
        self: &Arc<Self>,
        key: &str,
        policy: &RetryPolicy,
    ) -> Result<ReadGrant> {
        let started = Instant::now();
        let wall_start = SystemTime::now();
        let lease = queue::lease(policy.max_delay(), self.settings.node_timeout);
        let mut attempts = 0u32;
        let mut ticket: Option<Ticket> = None;
        let mut line = LeaveLine {
            backend: self,
            key,
            ticket: None,
        };
        let mut wakes = None;
        loop {
            attempts += 1;
            let err = match self.read_attempt(key, ticket.as_ref()).await {
                Ok(grant) => {
                    line.ticket = None;
                    return Ok(grant);
                }
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            let elapsed = started.elapsed();
            if !policy.may_retry(attempts, elapsed) {
                return Err(Error::Timeout {
                    resource: key.to_string(),
                    attempts,
                    last: Box::new(err),
                });
            }
            if err.kind() == crate::ErrorKind::Contention && ticket.is_none() {
                // From now on the releases of the key, and our turn, wake us. Subscribing took
                // a round trip, during which the holder may have released: again at once, in
                // line.
                let t = Ticket::new(wall_start, self.watch.waiter_id(fastrand::u64(..)), lease);
                let timeout = self.settings.node_timeout;
                let turn = self.watch.await_turn(&reader_id(&t.id), timeout).await;
                let released = self.watch.subscribe(&[key.to_string()], timeout).await;
                wakes = Some((turn, released));
                line.ticket = Some(t.clone());
                ticket = Some(t);
                continue;
            }
            let delay = policy
                .delay(attempts, fastrand::f64())
                .min(policy.wait().saturating_sub(elapsed));
            tracing::debug!(resource = key, attempts, ?delay, error = %err, "waiting to read");
            match &wakes {
                Some((turn, released)) if !super::line::sets_off_its_own_wake(&err) => {
                    tokio::select! {
                        biased;
                        _ = turn.wait(delay) => {}
                        _ = released.wait(delay) => {}
                    }
                }
                _ => tokio::time::sleep(delay).await,
            }
        }
    }

    /// Extends a reader by hand (`Lock::extend`) under the extension engine's rule: retried
    /// after failures within the validity left, until `deadline`. Returns the new deadline.
    ///
    /// # Errors
    ///
    /// As `Lock::extend`.
    pub(crate) async fn extend_reader(
        &self,
        key: &str,
        held: &RedisHeld,
        deadline: Instant,
    ) -> Result<(Instant, Votes)> {
        let retry = crate::pure::extension::retry_delay(self.settings.ttl);
        crate::keepalive::extend_within(deadline, retry, |budget| async move {
            let started = Instant::now();
            let round = self.read_extend_round(key, held.owner(), budget).await;
            self.extension_outcome(round, started, budget)
        })
        .await
        .map_err(|(cause, votes)| Error::lost(key, votes, cause))
    }

    /// One extension round of a reader, each request within `budget`.
    async fn read_extend_round(&self, key: &str, token: &str, budget: Duration) -> Round<()> {
        let mut cmd = evalsha(&scripts::READ_EXTEND, &[key.to_string(), readers_key(key)]);
        cmd.arg(token).arg(ttl_millis(self.settings.ttl));
        let limit = budget.max(Duration::from_millis(1));
        self.held_round(&scripts::READ_EXTEND, cmd, limit).await
    }

    /// A round of `script`'s call `cmd` until a quorum: a node that answers 1 still holds the
    /// lock (and did what the script does), any other answer means it does not.
    async fn held_round(&self, script: &'static Script, cmd: Cmd, limit: Duration) -> Round<()> {
        let cmd = Arc::new(cmd);
        self.round(
            Mode::UntilQuorum,
            &self.all,
            limit,
            move |mut conn, _, _| {
                let cmd = cmd.clone();
                async move {
                    let done: i64 = eval(script, &cmd, &mut conn).await?;
                    Ok(if done == 1 {
                        Answer::Granted(())
                    } else {
                        Answer::NotHeld
                    })
                }
            },
        )
        .await
    }

    /// Registers a reader with the client's extension engine (batched with the client's other
    /// locks; its extension is the readers' script); the returned [`Stop`] takes it out.
    pub(crate) fn keep_alive_reader(
        self: &Arc<Self>,
        keys: Arc<[String]>,
        held: &RedisHeld,
        state: Arc<GuardState>,
        schedule: Schedule,
    ) -> Stop {
        let lock = ExtendedLock {
            token: Arc::from(held.owner()),
            keys: keys.clone(),
            shared: true,
        };
        self.engine.register(self, &keys[0], lock, state, schedule)
    }

    /// Releases a reader on every node; with `at_quorum`, returns once a quorum removed its
    /// entry (as `Lock::release` does for the mutex).
    ///
    /// # Errors
    ///
    /// As `Lock::release`.
    pub(crate) async fn release_reader(
        &self,
        key: &str,
        held: &RedisHeld,
        at_quorum: bool,
    ) -> Result<Votes> {
        let round = self
            .reader_release_round(key, held.owner(), held.line.as_deref(), at_quorum)
            .await;
        self.settle(key, round.decision, round.votes, false)
    }

    /// Releases a reader, ignoring the outcome (after a failed attempt, or a dropped lock).
    pub(crate) async fn release_reader_quietly(&self, key: &str, token: &str, line: Option<&str>) {
        let round = self.reader_release_round(key, token, line, false).await;
        tracing::debug!(resource = key, votes = %round.votes, "reader released");
    }

    async fn reader_release_round(
        &self,
        key: &str,
        token: &str,
        line: Option<&str>,
        at_quorum: bool,
    ) -> Round<u64> {
        let keys = [
            key.to_string(),
            readers_key(key),
            queue::queue_key(key),
            queue::lease_key(key),
            queue::waiting_key(key),
        ];
        let mut cmd = evalsha(&scripts::READ_RELEASE, &keys);
        cmd.arg(token);
        if let Some(line) = line {
            cmd.arg(line);
        }
        let cmd = Arc::new(cmd);
        let after: Arc<str> = Arc::from(token);
        let mode = if at_quorum {
            Mode::Release { after }
        } else {
            Mode::All { after: Some(after) }
        };
        self.round(
            mode,
            &self.all,
            self.settings.node_timeout,
            move |mut conn, _, _| {
                let cmd = cmd.clone();
                async move {
                    let reply: Value = eval(&scripts::READ_RELEASE, &cmd, &mut conn).await?;
                    let (held, heard): (i64, u64) = match reply {
                        Value::Int(held) => (held, 0),
                        other => redis::from_redis_value(other)?,
                    };
                    Ok(if held == 1 {
                        Answer::Granted(heard)
                    } else {
                        Answer::NotHeld
                    })
                }
            },
        )
        .await
    }

    /// Records a write lock's fencing token for the readers of `key`, on the nodes where the
    /// lock key still holds `owner`. A quorum must take it before `deadline` (the write lock's
    /// validity): a reader granted later meets it on some node.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when too few nodes answered; [`Error::TooSlow`] when the lock key
    /// was no longer ours on a quorum or the validity ran out first.
    pub(crate) async fn record_writer(
        &self,
        key: &str,
        owner: &str,
        token: u64,
        deadline: Instant,
    ) -> Result<()> {
        let keys = [key.to_string(), writer_key(key), WRITER_MAX_KEY.to_string()];
        let mut cmd = evalsha(&scripts::WRITE_RECORD, &keys);
        let lifetime = self.settings.ttl.saturating_mul(RECORD_LIFETIME_TTLS);
        cmd.arg(owner)
            .arg(token.to_string())
            .arg(ttl_millis(lifetime));
        let round = self
            .held_round(&scripts::WRITE_RECORD, cmd, self.settings.node_timeout)
            .await;
        if round.decision == Decision::Reached && Instant::now() < deadline {
            return Ok(());
        }
        let resource = key.to_string();
        Err(if round.votes.failed() > 0 {
            Error::Unavailable {
                resource,
                votes: round.votes,
            }
        } else {
            Error::TooSlow {
                resource,
                votes: round.votes,
            }
        })
    }
}

/// Takes a reader that did not get the lock out of the line when dropped (in the background;
/// a registration left behind only lasts its lease).
struct LeaveLine<'a> {
    backend: &'a Arc<RedisBackend>,
    key: &'a str,
    ticket: Option<Ticket>,
}

impl Drop for LeaveLine<'_> {
    fn drop(&mut self) {
        let Some(mut ticket) = self.ticket.take() else {
            return;
        };
        ticket.id = reader_id(&ticket.id);
        self.backend.leave_in_background(self.key, ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readers_waiter_id_keeps_its_client_and_gains_the_r() {
        assert_eq!(reader_id("00ab.0000000000000007"), "00ab.r0000000000000007");
    }
}
