//! What each round sends, and how a node's reply becomes an [`Answer`]: acquire (round 1),
//! the fencing write-back, extend, release, leaving the line, and the batched extension.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, RedisError, RedisResult, Script, Value};

use super::extender::{Count, ExtendedLock};
use super::guard::{FenceRead, WriteBack, LOST_COUNTER};
use super::order::Slot;
use super::round::{AnnounceAhead, Answer, Marked, MarkerCell, Mode, Round, WantsMore};
use super::{scripts, RedisBackend};
use crate::pure::fencing;
use crate::pure::queue::{self, Ticket};
use crate::pure::vote::Votes;

/// What a slot's request carries besides the slot: the semaphore's line and slots, and the
/// waiter's ticket once it queues (`permit.rs` builds it).
#[derive(Debug)]
pub(crate) struct PermitAsk {
    /// The resource whose line orders the waiters.
    pub(crate) line: String,
    /// Every slot's lock key.
    pub(crate) slots: Vec<String>,
    /// The waiter's place in line; `None` for a request that does not queue.
    pub(crate) ticket: Option<Ticket>,
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
    /// A semaphore's permit: the slot's grant consults the semaphore's line (`permit.rs`).
    Permit(&'a PermitAsk),
}

impl RedisBackend {
    /// Opens every node's connection, returning once a quorum is connected (at most the connect
    /// timeout); the others go on connecting in the background.
    pub(crate) async fn connect_quorum(&self) -> Votes {
        self.round(
            Mode::UntilQuorum,
            &self.all,
            self.settings.connect_timeout,
            |_conn, _, _| async { Ok(Answer::Granted(())) },
        )
        .await
        .votes
    }

    /// Opens every node's connection, waiting at most the connect timeout.
    pub(crate) async fn connect_all(&self) -> Votes {
        let all = Mode::All { after: None };
        self.round(
            all,
            &self.all,
            self.settings.connect_timeout,
            |_conn, _, _| async { Ok(Answer::Granted(())) },
        )
        .await
        .votes
    }

    /// Round 1 of an acquisition: `SET key token NX PX ttl` on every node for one key; for
    /// several keys or in fencing mode, the script that sets all or none (and returns the
    /// largest fence counter); with a `ticket` (a waiter of one key), the queued script that
    /// grants only the first in line. Nodes in restart quarantine are not asked and not counted.
    ///
    /// In fencing mode the scripts also judge `proposal`, the token proposed for the one-round
    /// path (`guard.rs`).
    ///
    /// On failure it waits for every request still in flight before returning, so that the
    /// caller's release reaches each node after its SET.
    pub(crate) async fn acquire(
        &self,
        keys: &[String],
        token: &str,
        wait: Wait<'_>,
        proposal: u64,
    ) -> Round<FenceRead> {
        let (fencing, node_timeout) = (self.settings.fencing, self.settings.node_timeout);
        let ttl_ms = ttl_millis(self.settings.ttl);
        if let (Wait::Permit(ask), [slot]) = (wait, keys) {
            let mut all_keys = vec![
                slot.clone(),
                queue::queue_key(&ask.line),
                queue::lease_key(&ask.line),
            ];
            all_keys.extend(ask.slots.iter().cloned());
            all_keys.extend(ask.slots.iter().map(|k| queue::waiting_key(k)));
            if fencing {
                all_keys.push(fencing::FENCE_COUNTER_KEY.to_string());
                all_keys.push(fencing::counter_key(slot));
            }
            let mut cmd = evalsha(&scripts::ACQUIRE_PERMIT, &all_keys);
            cmd.arg(token).arg(ttl_ms).arg(ask.slots.len());
            // The holder label rides in the owner value (`holder.rs`): the script's label
            // argument (older clients') is never sent.
            if let Some(t) = &ask.ticket {
                cmd.arg(&t.id)
                    .arg(t.order)
                    .arg(t.lease_ms())
                    .arg(ttl_millis(queue::keep(t.lease)));
            }
            let mode = Mode::Acquire { token, ahead: None };
            // The permit script judges no proposal: three fields, never accepted.
            return self
                .marked_round(
                    Some(&scripts::ACQUIRE_PERMIT),
                    cmd,
                    mode,
                    node_timeout,
                    move |(set, counter, exists): (i64, String, i64)| {
                        counter_answer((set, counter, exists, 0), fencing)
                    },
                )
                .await;
        }
        if let (Wait::InLine(ticket), [key]) = (wait, keys) {
            let mut queued = vec![
                key.clone(),
                queue::queue_key(key),
                queue::lease_key(key),
                queue::waiting_key(key),
            ];
            if fencing {
                queued.push(fencing::FENCE_COUNTER_KEY.to_string());
                queued.push(fencing::counter_key(key));
            }
            let mut cmd = evalsha(&scripts::ACQUIRE_QUEUED, &queued);
            cmd.arg(token)
                .arg(ttl_ms)
                .arg(&ticket.id)
                .arg(ticket.order)
                .arg(ticket.lease_ms())
                .arg(ttl_millis(queue::keep(ticket.lease)));
            // ARGV[7] the proposal; ARGV[8], the holder label of older clients, never sent: the
            // label rides in the owner value (`holder.rs`).
            if fencing {
                cmd.arg(proposal);
            }
            let mode = Mode::Acquire { token, ahead: None };
            return self
                .marked_round(
                    Some(&scripts::ACQUIRE_QUEUED),
                    cmd,
                    mode,
                    node_timeout,
                    move |reply| counter_answer(reply, fencing),
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
            cmd.arg(token).arg(ttl_ms).arg(proposal);
            mark_arg(&mut cmd, mark);
            cmd
        } else if let ([key], None) = (keys, mark) {
            // One key, nothing beside it: a bare SET NX PX, as other Redlock clients send. On
            // several nodes the TTL is announced ahead on each connection, about once per TTL
            // (`Mode::Acquire`'s `ahead`): a script call costs a node several times a SET.
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
            cmd
        } else {
            let all_keys = with_marks(keys.to_vec(), keys);
            let mut cmd = evalsha(&scripts::ACQUIRE_MANY, &all_keys);
            cmd.arg(token).arg(ttl_ms);
            mark_arg(&mut cmd, mark);
            cmd
        };
        let plain_set = !fencing && keys.len() == 1 && mark.is_none();
        // A single node has no other node to learn from: it announces nothing, and its restart
        // quarantine is its client's own TTL. A Sentinel node announces: its replicas keep the
        // record, which the quarantine after a failover reads (`round.rs`).
        let announces = self.nodes.len() > 1 || self.nodes[0].addr().follows_primary();
        let ahead = (plain_set && announces).then_some(AnnounceAhead {
            ttl: self.settings.ttl,
            drift: self.settings.drift,
            limit: node_timeout,
        });
        let mode = Mode::Acquire { token, ahead };
        if fencing {
            let script = Some(&*scripts::ACQUIRE_FENCED);
            return self
                .marked_round(script, cmd, mode, node_timeout, |reply| {
                    counter_answer(reply, true)
                })
                .await;
        }
        if !plain_set {
            let script = Some(&*scripts::ACQUIRE_MANY);
            return self
                .marked_round(script, cmd, mode, node_timeout, |set: i64| {
                    Ok(if set == 1 {
                        Answer::Granted(FenceRead::default())
                    } else {
                        Answer::HeldByOther
                    })
                })
                .await;
        }
        self.marked_round(None, cmd, mode, node_timeout, |reply: Value| {
            Ok(match reply {
                Value::Nil => Answer::HeldByOther,
                _ => Answer::Granted(FenceRead::default()),
            })
        })
        .await
    }

    /// An acquisition's round of `cmd` (`script`'s call, loaded again after `NOSCRIPT`, or a
    /// plain command) on every node, with the marker read behind it in one pipeline when the
    /// quarantine checks markers (`round::Marked`); `judge` reads a node's reply.
    pub(super) async fn marked_round<R, A, J>(
        &self,
        script: Option<&'static Script>,
        cmd: Cmd,
        mode: Mode<'_>,
        limit: Duration,
        judge: J,
    ) -> Round<A>
    where
        R: redis::FromRedisValue + Send + 'static,
        A: Send + 'static + WantsMore,
        J: Fn(R) -> Result<Answer<A>, RedisError> + Copy + Send + Sync + 'static,
    {
        let cmd = Arc::new(Marked::new(cmd, self.checks_markers()));
        self.round(mode, &self.all, limit, move |mut conn, slot, marker| {
            let cmd = cmd.clone();
            async move {
                let reply: R = send_marked(script, &cmd, &mut conn, &slot, marker).await?;
                judge(reply)
            }
        })
        .await
    }

    /// Takes a waiter that gave up out of the line of `key` on every node. Waits for the
    /// answers, each within the node timeout.
    pub(crate) async fn leave_queue(&self, key: &str, ticket: &Ticket) {
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
        let all = Mode::All { after: None };
        self.round(
            all,
            &self.all,
            self.settings.node_timeout,
            move |mut conn, _, _| {
                let pipe = pipe.clone();
                async move {
                    let () = pipe.query_async(&mut conn).await?;
                    Ok(Answer::Granted(()))
                }
            },
        )
        .await;
    }

    /// Round 2 of a fencing acquisition: raise the counters to `fencing_token` on `nodes`, where
    /// we still own the keys. A node without a counter takes a plain write-back nowhere (it
    /// answers 3, an excluded vote: it lost its counter since its read was trusted, and may have
    /// recorded more than `fencing_token`); an epoch start's or a seed creates it.
    pub(crate) async fn write_back(
        &self,
        nodes: &[usize],
        keys: &[String],
        token: &str,
        fencing_token: u64,
        kind: WriteBack,
    ) -> Round<()> {
        let mut cmd = evalsha(&scripts::WRITE_BACK, &with_counter_keys(keys));
        cmd.arg(token).arg(fencing_token.to_string());
        match kind {
            WriteBack::Plain => {}
            WriteBack::Epoch => {
                cmd.arg("epoch");
            }
            WriteBack::Seed(seed) => {
                cmd.arg(ttl_millis(seed.wait))
                    .arg(ttl_millis(self.settings.ttl));
            }
        }
        let cmd = Arc::new(cmd);
        let limit = self.settings.node_timeout;
        self.round(Mode::UntilQuorum, nodes, limit, move |mut conn, _, _| {
            let cmd = cmd.clone();
            async move {
                let done: i64 = eval(&scripts::WRITE_BACK, &cmd, &mut conn).await?;
                Ok(match done {
                    1 => Answer::Granted(()),
                    3 => Answer::Excluded(format!(
                        "{LOST_COUNTER} any more (evicted or deleted since it granted), so it took no write-back and is not counted; a later grant seeds it"
                    )),
                    _ => Answer::NotHeld,
                })
            }
        })
        .await
    }

    /// Sets the keys' TTL anew on every node where we still own them all, each request within
    /// `limit`.
    pub(crate) async fn extend(&self, keys: &[String], token: &str, limit: Duration) -> Round<()> {
        let mut cmd = evalsha(&scripts::EXTEND, keys);
        cmd.arg(token).arg(ttl_millis(self.settings.ttl));
        let cmd = Arc::new(cmd);
        self.round(Mode::UntilQuorum, &self.all, limit, move |conn, _, _| {
            let cmd = cmd.clone();
            let mut conn = conn.retrying_splits_until(split_deadline(limit));
            async move { if_owned(&scripts::EXTEND, &cmd, &mut conn).await }
        })
        .await
    }

    /// Compare-and-delete on every node (bounded by the node timeout), each request behind our
    /// acquisition's requests on its node (see `order.rs`). With `at_quorum`, it returns once a
    /// quorum deleted (`Mode::Release`: the other nodes' requests finish in the background and
    /// [`RedisBackend::settle_releases`] waits for them); otherwise, and whenever no quorum
    /// deleted, it waits for every answer. `line`: the holder's waiter id, if it queued for the
    /// lock: it leaves the line. Each granted vote carries how many waiters the release messages
    /// reached on that node.
    pub(crate) async fn release(
        &self,
        keys: &[String],
        token: &str,
        line: Option<&str>,
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
        // Behind our acquisition's requests not yet handed to their connection, on each node
        // (see `order.rs`).
        let after = Arc::from(token);
        let limit = self.settings.node_timeout;
        let mode = if at_quorum {
            Mode::Release { after }
        } else {
            Mode::All { after: Some(after) }
        };
        self.round(mode, &self.all, limit, move |conn, _, _| {
            let cmd = cmd.clone();
            let mut conn = conn.retrying_splits_until(split_deadline(limit));
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
        })
        .await
    }

    /// Extends many locks at once: one pipeline per node (the extend script for each lock, which
    /// announces its TTL), a round of all nodes in [`Mode::UntilQuorum`]: it
    /// returns once every lock has a quorum of extensions, or no more can come (every node
    /// answered, too many failed, or `timeout` passed); requests still in flight then reach
    /// their node in the background. Returns, per lock, how many nodes extended it and how many
    /// answered that they do not hold it, and the nodes' votes (granted: the node answered).
    pub(crate) async fn extend_batch_round(
        &self,
        locks: &[Arc<ExtendedLock>],
        timeout: Duration,
    ) -> (Vec<Count>, Votes) {
        let ttl_ms = ttl_millis(self.settings.ttl);
        let sha = scripts::EXTEND.get_hash().to_string();
        let mut pipe = redis::pipe();
        // Each extension announces its TTL in its own script, atomically with the new expiry
        // (issue 27, item 2): an announcement at the head of the pipeline, with no margin and
        // its reply unread, did not cover extensions that ran later (a pipeline is not atomic).
        // After the first, an announcement stops at its mark: one PTTL per lock.
        for lock in locks {
            if lock.shared {
                // A read lock (`rwlock.rs`): the readers' script, on the key and its readers.
                pipe.cmd("EVALSHA")
                    .arg(scripts::READ_EXTEND.get_hash())
                    .arg(2)
                    .arg(&lock.keys[0])
                    .arg(crate::pure::readers::readers_key(&lock.keys[0]));
            } else {
                pipe.cmd("EVALSHA")
                    .arg(&sha)
                    .arg(lock.keys.len())
                    .arg(&*lock.keys);
            }
            pipe.arg(&*lock.token).arg(ttl_ms);
        }
        let pipe = Arc::new(pipe);
        let round = self
            .round(Mode::UntilQuorum, &self.all, timeout, move |conn, _, _| {
                let pipe = pipe.clone();
                let mut conn = conn.retrying_splits_until(split_deadline(timeout));
                async move {
                    let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
                        Err(e) if is_noscript(&e) => {
                            // The node lost its script cache (SCRIPT FLUSH, a restart): load the
                            // scripts a batch sends and send it again. An extension may run
                            // twice: it only sets the expiry of a key that is still ours.
                            Box::pin(load_extend_scripts(&mut conn)).await?;
                            pipe.query_async(&mut conn).await?
                        }
                        other => other?,
                    };
                    Ok(Answer::Granted(BatchReplies(
                        replies
                            .into_iter()
                            .map(|reply| match reply {
                                Value::Int(1) => Some(true),
                                Value::Int(0) => Some(false),
                                _ => None,
                            })
                            .collect(),
                    )))
                }
            })
            .await;
        let mut counts = vec![Count::default(); locks.len()];
        for (_, replies) in &round.granted {
            for (count, reply) in counts.iter_mut().zip(&replies.0) {
                match reply {
                    Some(true) => count.extended += 1,
                    Some(false) => count.not_held += 1,
                    None => {}
                }
            }
        }
        (counts, round.votes)
    }
}

/// Until when a request of a round bounded by `limit`, launched now, sends again what a
/// cluster's slot move split (`tagged.rs`): most of the round, so that the last refusal, not
/// the round's deadline, is the node's answer.
fn split_deadline(limit: Duration) -> std::time::Instant {
    std::time::Instant::now() + limit - limit / 8
}

/// Whether a pipeline's failure is a `NOSCRIPT`: the kind of its first error, which is the
/// kind of every EVALSHA's after a node lost its scripts.
fn is_noscript(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Loads the scripts a batched extension sends (`extend_batch_round`).
async fn load_extend_scripts(conn: &mut super::tagged::NodeConnection) -> RedisResult<()> {
    scripts::EXTEND.load_async(conn).await?;
    scripts::READ_EXTEND.load_async(conn).await?;
    Ok(())
}

/// One node's replies to a batched extension, per lock: extended, not held there, or an error.
#[derive(Debug)]
pub(crate) struct BatchReplies(Vec<Option<bool>>);

impl WantsMore for BatchReplies {
    /// More answers are wanted while some lock has fewer than a quorum of extensions.
    fn wants_more(granted: &[(usize, Self)], quorum: usize) -> bool {
        let locks = granted.first().map_or(0, |(_, r)| r.0.len());
        (0..locks).any(|i| {
            granted
                .iter()
                .filter(|(_, r)| r.0.get(i) == Some(&Some(true)))
                .count()
                < quorum
        })
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

/// The lock keys, the node's fence counter and the keys' legacy counters, as the fencing
/// scripts take them.
fn with_counter_keys(keys: &[String]) -> Vec<String> {
    keys.iter()
        .cloned()
        .chain(std::iter::once(fencing::FENCE_COUNTER_KEY.to_string()))
        .chain(keys.iter().map(|k| fencing::counter_key(k)))
        .collect()
}

/// The answer of an acquisition script that returns `{granted, largest counter, exists,
/// accepted}`.
fn counter_answer(
    (set, counter, exists, accepted): (i64, String, i64, i64),
    fenced: bool,
) -> Result<Answer<FenceRead>, RedisError> {
    let value = counter.parse::<u64>().map_err(|_| {
        RedisError::from((
            redis::ErrorKind::Parse,
            "a fence counter is not a u64",
            counter,
        ))
    })?;
    let read = FenceRead {
        value,
        exists: exists == 1,
        accepted: accepted == 1,
        fenced,
    };
    // A refusal reports the counter too (for other clients and tools); this client's epoch
    // rule needs every node to grant, so it does not use it (`guard.rs`).
    Ok(if set == 1 {
        Answer::Granted(read)
    } else {
        Answer::HeldByOther
    })
}

/// An EVALSHA of `script` over `keys`; the caller adds the arguments. Built once per round and
/// sent to every node (building it per node showed in the profile: a few allocations per key
/// and argument, times the nodes).
pub(super) fn evalsha(script: &Script, keys: &[String]) -> Cmd {
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
pub(super) async fn eval<T: redis::FromRedisValue>(
    script: &Script,
    cmd: &Cmd,
    conn: &mut super::tagged::NodeConnection,
) -> RedisResult<T> {
    eval_ordered(script, cmd, conn, &Slot::default()).await
}

/// As [`eval`], for a request of an acquisition (`slot`, see `order.rs`): after NOSCRIPT it
/// sends nothing more if a release of its token already followed it on the connection (its
/// first call did nothing, and a second would land after the release).
pub(super) async fn eval_ordered<T: redis::FromRedisValue>(
    script: &Script,
    cmd: &Cmd,
    conn: &mut super::tagged::NodeConnection,
    slot: &Slot,
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

/// Sends an acquisition's command (an `EVALSHA` of `script`, or with `None` a plain command) as
/// [`eval_ordered`] does; with `marker` (the node checks its marker behind each grant), as the
/// pipeline of `cmd` and `GET` of the marker, and leaves what that `GET` read in `marker`. After
/// `NOSCRIPT` the pipeline is sent again whole, so the marker read is the one right behind the
/// command that ran.
async fn send_marked<T: redis::FromRedisValue>(
    script: Option<&Script>,
    cmd: &Marked,
    conn: &mut super::tagged::NodeConnection,
    slot: &Slot,
    marker: Option<MarkerCell>,
) -> RedisResult<T> {
    let (Some(cell), Some(pipe)) = (marker, &cmd.pipe) else {
        return match script {
            Some(script) => eval_ordered(script, &cmd.cmd, conn, slot).await,
            None => cmd.cmd.query_async(conn).await,
        };
    };
    let (mut reply, mut found) = query_marked(pipe, conn).await?;
    if let (Some(script), Value::ServerError(e)) = (script, &reply) {
        if e.kind() == Some(redis::ServerErrorKind::NoScript) {
            if slot.resend().is_err() {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "not sent again after NOSCRIPT: the lock is being released",
                )));
            }
            // Rare: boxed, so that its state does not weigh on every request's future.
            Box::pin(script.load_async(conn)).await?;
            (reply, found) = Box::pin(query_marked(pipe, conn)).await?;
        }
    }
    let reply = redis::from_redis_value(reply.extract_error()?)?;
    let _ = cell.set(found);
    Ok(reply)
}

/// One request of `Marked`'s pipeline: the command's reply (an error stays a value, for the
/// caller to judge) and the marker read behind it.
async fn query_marked(
    pipe: &Pipeline,
    conn: &mut super::tagged::NodeConnection,
) -> RedisResult<(Value, Option<String>)> {
    let mut replies: Vec<Value> = pipe.query_async(conn).await?;
    let (Some(found), Some(reply), true) = (replies.pop(), replies.pop(), replies.is_empty())
    else {
        return Err(RedisError::from((
            redis::ErrorKind::Client,
            "the node's pipeline of a command and its marker read came back with another count",
        )));
    };
    let found = redis::from_redis_value(found.extract_error()?)?;
    Ok((reply, found))
}

/// Runs a script that acts only if every key holds our token: its reply is 1 (done) or 0 (some
/// key is not ours, nothing done).
async fn if_owned(
    script: &Script,
    cmd: &Cmd,
    conn: &mut super::tagged::NodeConnection,
) -> Result<Answer<()>, RedisError> {
    let done: i64 = eval(script, cmd, conn).await?;
    Ok(if done == 1 {
        Answer::Granted(())
    } else {
        Answer::NotHeld
    })
}

/// The optional argument of the acquisition scripts: the wait mark, when there is one. Their
/// argument after it, the holder label, is older clients': this version's label rides in the
/// owner value (`holder.rs`), so that a labelled grant costs what an unlabelled one does.
fn mark_arg(cmd: &mut Cmd, mark: Option<Duration>) {
    if let Some(mark) = mark {
        cmd.arg(ttl_millis(mark));
    }
}

pub(super) use crate::pure::validity::ttl_millis;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_release_keys_are_the_ones_the_client_sends() {
        let one = release_keys(&["order:7".to_string()]);
        assert_eq!(one, crate::protocol::release_keys("order:7"));
    }
}
