//! The connection every request to a node goes through. On a single node or a Sentinel primary
//! it is the driver's multiplexed connection as it is. On a cluster node (`redis+cluster://`) it
//! puts the node's hash tag in front of every key fencelock sends, so that all of them hash to
//! the tag's slot and live on the one shard that owns it: for the protocol, that shard is the
//! node (docs/guide/managed-redis.md).
//!
//! The keys are tagged here, in one place, rather than where each is named: the rounds build
//! one command per round and send it to every node (`ops.rs`), and the nodes of one client may
//! mix clusters and single nodes, whose key names must not change (their existing data).
//!
//! - A script's declared keys (`EVALSHA`/`EVAL`'s KEYS) and the key of each plain command the
//!   library sends (`GET`, `SET`, `ZRANGE`, ...) become `{tag}key`.
//! - Keys a script derives from a declared key (`'fencelock:holder:' .. KEYS[i]`) hold the
//!   tag's braces, which are the first in the name: same slot.
//! - The three node-wide keys the scripts name themselves (`fencelock:ttls`, the marks
//!   `fencelock:ttls:<ttl>`, `fencelock:lost`) are named with the tag in the node's own copy of
//!   each script ([`tag_script`]): the connection loads the copies and sends an `EVALSHA` of a
//!   script as one of its copy. The copies differ from the scripts in those names only.
//!
//! A command the table below does not know is sent as it is; on a cluster its keys then reach
//! another slot, and the node answers `MOVED` or a script error (no silent misplacement: the
//! cluster refuses a key it does not own).
//!
//! While the tag's slot migrates, the owner answers `-ASK slot host:port` for a command whose
//! keys it no longer holds (moved already, or never written). The connection follows it within
//! the request: `ASKING` and the same command, in one write, on a connection to the importing
//! node ([`Asking`]), and the request gets that node's answer. Redis runs it there only when
//! every declared key of a command of several keys is there (else `TRYAGAIN`), so a lock is
//! judged where its key is: a held lock whose key moved is extended and released on the
//! importing node, a free one is taken there, and a taker meets the holder's key there. The
//! node is not counted as failed for a slot half moved.
//!
//! A request whose keys the move split (a lock's key moved and its label, line, counter or TTL
//! record not yet, or a key that exists nowhere, which counts as not moved until the move
//! ends) is refused without running: `TRYAGAIN`, or inside a script "a non local key". An
//! extension or a release is sent again, with pauses (`pure/split_retry.rs`), until a deadline
//! its round sets (`ops.rs`): the keys come together as the move goes on, and a request that
//! then meets `-MOVED` (the move ended) is sent to the new owner within the same call.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    Arg, AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};

use crate::node::NodeAddr;
use crate::pure::split_retry::SplitRetry;

use super::scripts;

/// A node's connection, tagging keys when the node is a cluster.
#[derive(Clone)]
pub(crate) struct NodeConnection {
    inner: MultiplexedConnection,
    tagging: Option<Arc<Tagging>>,
    /// For a cluster node: where `-ASK` is followed.
    asking: Option<Arc<Asking>>,
    /// Until when a request whose keys a slot move split is sent again (set by the requests
    /// that must not fail for a move of a few keys: extensions and releases, `ops.rs`).
    split_retry_until: Option<Instant>,
}

/// A cluster node's connections to the nodes importing its tag's slot, opened at the first
/// `-ASK` naming each and kept while they work (a migration sends many).
pub(crate) struct Asking {
    /// The node's address: the importing node is reached with its user and password.
    addr: NodeAddr,
    timeout: Duration,
    conns: Mutex<HashMap<String, MultiplexedConnection>>,
}

impl std::fmt::Debug for Asking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asking")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Asking {
    /// Follows `-ASK` for the node `addr`, opening each importing node's connection within
    /// `timeout`.
    pub(crate) fn new(addr: NodeAddr, timeout: Duration) -> Arc<Asking> {
        Arc::new(Asking {
            addr,
            timeout,
            conns: Mutex::default(),
        })
    }

    /// The connection to `target` (`host:port`, as `-ASK` names it), with the tag's script
    /// copies loaded (an `EVALSHA` it receives must not meet `NOSCRIPT`: the driver's reload
    /// would go to the owner, which sends it back here).
    async fn connection(
        &self,
        target: &str,
        tagging: &Tagging,
    ) -> RedisResult<MultiplexedConnection> {
        if let Some(conn) = self
            .conns
            .lock()
            .expect("asking mutex poisoned")
            .get(target)
        {
            return Ok(conn.clone());
        }
        let (host, port) = target
            .rsplit_once(':')
            .and_then(|(h, p)| {
                Some((
                    h.trim_start_matches('[').trim_end_matches(']'),
                    p.parse::<u16>().ok()?,
                ))
            })
            .ok_or_else(|| {
                RedisError::from((
                    ErrorKind::Client,
                    super::cluster::CLUSTER_ERR,
                    format!(
                        "the owner of the tag's slot sent ASK to {target:?}, which is no host:port"
                    ),
                ))
            })?;
        let client = redis::Client::open(self.addr.primary_url(host, port))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None);
        let open = async {
            let mut conn = crate::sim::multiplexed(&client, &config).await?;
            let mut pipe = redis::pipe();
            for code in scripts::ALL {
                pipe.cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(tag_script(code, &tagging.tag))
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
            Ok::<_, RedisError>(conn)
        };
        let conn = tokio::time::timeout(self.timeout, open).await.map_err(|_| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the node importing the tag's slot ({target}, named by ASK) did not answer in time"),
            ))
        })??;
        self.conns
            .lock()
            .expect("asking mutex poisoned")
            .insert(target.to_string(), conn.clone());
        Ok(conn)
    }

    /// `cmd` (tagged already) on the node `redirect` names, after `ASKING`, in one write.
    async fn ask(&self, redirect: &RedisError, cmd: &Cmd, tagging: &Tagging) -> RedisResult<Value> {
        self.redirect(redirect, cmd, tagging, true).await
    }

    /// `cmd` (tagged already) on the node `redirect` names: after `ASKING` (`-ASK`), or alone
    /// (`-MOVED`: the node owns the slot now).
    async fn redirect(
        &self,
        redirect: &RedisError,
        cmd: &Cmd,
        tagging: &Tagging,
        asking: bool,
    ) -> RedisResult<Value> {
        let Some((target, _slot)) = redirect.redirect_node() else {
            return Err(redirect.clone());
        };
        let target = target.to_string();
        let mut conn = self.connection(&target, tagging).await?;
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        } else {
            // The same shape of reply: the command's answer second.
            pipe.cmd("PING");
        }
        pipe.add_command(cmd.clone());
        let replies = match conn.req_packed_commands(&pipe, 0, 2).await {
            Ok(replies) => replies,
            Err(e) => {
                self.conns
                    .lock()
                    .expect("asking mutex poisoned")
                    .remove(&target);
                return Err(e);
            }
        };
        match replies.into_iter().nth(1) {
            Some(Value::ServerError(e)) => Err(e.into()),
            Some(value) => Ok(value),
            None => Err(RedisError::from((
                ErrorKind::Client,
                super::cluster::CLUSTER_ERR,
                format!("the node {target}, named by a redirect, sent no reply"),
            ))),
        }
    }
}

/// Whether `e` is a `-ASK` redirection (the slot migrates, and the command's keys are not on
/// the owner).
fn is_ask(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::Ask)
}

/// The `-MOVED` redirection an answer holds, if it holds one.
fn moved(answer: &RedisResult<Value>) -> Option<RedisError> {
    match answer {
        Ok(Value::ServerError(e)) if e.kind() == Some(ServerErrorKind::Moved) => {
            Some(RedisError::from(e.clone()))
        }
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::Moved) => Some(e.clone()),
        _ => None,
    }
}

/// Whether an answer says the command's keys are split between the two nodes of a slot move,
/// and it did not run: `TRYAGAIN` for its declared keys, or a script stopped at a command on a
/// key the node does not hold while the slot migrates ("a non local key": Redis says nothing
/// more precise inside a script; the scripts sent with a retry deadline may run twice).
fn is_split(answer: &RedisResult<Value>) -> bool {
    match answer {
        Ok(Value::ServerError(e)) => {
            e.code() == "TRYAGAIN" || e.details().is_some_and(|d| d.contains("non local key"))
        }
        Ok(_) => false,
        Err(e) => e.code() == Some("TRYAGAIN") || e.to_string().contains("non local key"),
    }
}

impl std::fmt::Debug for NodeConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConnection")
            .field("tag", &self.tagging.as_ref().map(|t| &t.tag))
            .finish_non_exhaustive()
    }
}

/// One tag's key prefix and its script copies.
#[derive(Debug)]
pub(crate) struct Tagging {
    /// `{tag}`, braces included.
    tag: Box<str>,
    /// The SHA1 of each script whose copy differs, and the copy's.
    shas: HashMap<String, String>,
}

impl Tagging {
    /// The tagging of `tag` (`{name}`, braces included), shared by every connection to nodes
    /// with that tag (the script hashes are computed once per tag and process).
    pub(crate) fn of(tag: &str) -> Arc<Tagging> {
        static MADE: LazyLock<Mutex<HashMap<String, Arc<Tagging>>>> = LazyLock::new(Mutex::default);
        let mut made = MADE.lock().expect("tagging mutex poisoned");
        made.entry(tag.to_string())
            .or_insert_with(|| {
                let shas = scripts::ALL
                    .iter()
                    .filter_map(|code| {
                        let copy = tag_script(code, tag);
                        (copy != *code).then(|| {
                            (
                                redis::Script::new(code).get_hash().to_string(),
                                redis::Script::new(&copy).get_hash().to_string(),
                            )
                        })
                    })
                    .collect();
                Arc::new(Tagging {
                    tag: tag.into(),
                    shas,
                })
            })
            .clone()
    }

    /// `key` with the tag in front.
    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut tagged = Vec::with_capacity(self.tag.len() + key.len());
        tagged.extend_from_slice(self.tag.as_bytes());
        tagged.extend_from_slice(key);
        tagged
    }

    /// `cmd` with its keys tagged (see the module's docs).
    pub(crate) fn command(&self, cmd: &Cmd) -> Cmd {
        let args: Vec<&[u8]> = cmd
            .args_iter()
            .map(|a| match a {
                Arg::Simple(bytes) => bytes,
                // Cursors belong to SCAN-like iteration, which the library never sends on a
                // node connection.
                _ => b"0".as_slice(),
            })
            .collect();
        let name = args
            .first()
            .map(|n| n.to_ascii_uppercase())
            .unwrap_or_default();
        let sub = args.get(1).map(|n| n.to_ascii_uppercase());
        let mut out = Cmd::with_capacity(args.len(), 0);
        let keys = match (name.as_slice(), sub.as_deref()) {
            (b"EVALSHA" | b"EVAL", _) => {
                let n = args
                    .get(2)
                    .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                    .unwrap_or(0);
                3..3 + n
            }
            (b"SCRIPT", Some(b"LOAD")) => 0..0,
            (b"DEL" | b"EXISTS" | b"MGET" | b"UNLINK" | b"TOUCH", _) => 1..args.len(),
            (
                b"GET" | b"SET" | b"PTTL" | b"PEXPIRE" | b"PEXPIREAT" | b"TYPE" | b"ZRANGE"
                | b"ZRANGEBYSCORE" | b"ZREM" | b"ZADD" | b"ZSCORE" | b"ZCARD" | b"INCR" | b"INCRBY"
                | b"HGET" | b"HSET" | b"HDEL" | b"HGETALL",
                _,
            ) => 1..2.min(args.len()),
            _ => 0..0,
        };
        for (i, arg) in args.iter().enumerate() {
            if keys.contains(&i) {
                out.arg(self.key(arg));
            } else if i == 1 && name == b"EVALSHA" {
                let sha = std::str::from_utf8(arg).unwrap_or("");
                match self.shas.get(sha) {
                    Some(copy) => out.arg(copy.as_str()),
                    None => out.arg(*arg),
                };
            } else if (i == 1 && name == b"EVAL") || (i == 2 && sub.as_deref() == Some(b"LOAD")) {
                let code = String::from_utf8_lossy(arg);
                out.arg(tag_script(&code, &self.tag));
            } else {
                out.arg(*arg);
            }
        }
        out
    }
}

/// The copy of a script for the node tag `tag` (`{name}`): the node-wide keys it names itself
/// carry the tag. Only quoted names are replaced (`'fencelock:ttls'`, `'fencelock:ttls:' ..`,
/// `'fencelock:lost'`); a copy of a copy is the copy.
pub(crate) fn tag_script(code: &str, tag: &str) -> String {
    code.replace("'fencelock:ttls", &format!("'{tag}fencelock:ttls"))
        .replace("'fencelock:lost'", &format!("'{tag}fencelock:lost'"))
}

impl NodeConnection {
    /// `inner` as it is (`None`), or tagging keys with `tagging`.
    pub(crate) fn new(inner: MultiplexedConnection, tagging: Option<Arc<Tagging>>) -> Self {
        NodeConnection {
            inner,
            tagging,
            asking: None,
            split_retry_until: None,
        }
    }

    /// The same, sending a request that a slot move split (`TRYAGAIN`) again, with pauses,
    /// until `until` (`pure/split_retry.rs`). On a node that is no cluster nothing is split.
    pub(crate) fn retrying_splits_until(mut self, until: Instant) -> Self {
        self.split_retry_until = Some(until);
        self
    }

    /// `tagged` (its keys tagged already) on the node, following `-ASK`.
    async fn send(&mut self, tagged: &Cmd, tagging: &Tagging) -> RedisResult<Value> {
        let answer = self.inner.req_packed_command(tagged).await;
        let Some(asking) = &self.asking else {
            return answer;
        };
        // The driver hands a server's error back as a value; the caller's conversion makes it
        // an error.
        let redirect = match &answer {
            Ok(Value::ServerError(e)) if e.kind() == Some(ServerErrorKind::Ask) => {
                RedisError::from(e.clone())
            }
            Err(e) if is_ask(e) => e.clone(),
            _ => return answer,
        };
        asking.ask(&redirect, tagged, tagging).await
    }

    /// [`Self::send`], again while the answer says a slot move split its keys and the retry
    /// deadline allows.
    ///
    /// A request that met a split and then `-MOVED` saw the move end: it is sent to the new
    /// owner named by the redirect, within the same call. Only extensions and releases retry
    /// splits, and each acts only where the key is still ours (the new owner holds the keys
    /// `MIGRATE` moved whole); the connection meets `-MOVED` again at its next request and is
    /// replaced then, and the new owner is judged as every new owner is (`cluster.rs`).
    async fn send_retrying_splits(
        &mut self,
        tagged: &Cmd,
        tagging: &Tagging,
    ) -> RedisResult<Value> {
        let mut retry = self.split_retry_until.map(SplitRetry::until);
        let mut split = false;
        loop {
            let answer = self.send(tagged, tagging).await;
            if split && retry.is_some() {
                if let (Some(asking), Some(moved)) = (&self.asking, moved(&answer)) {
                    return asking.redirect(&moved, tagged, tagging, false).await;
                }
            }
            if !is_split(&answer) {
                return answer;
            }
            split = true;
            match retry.as_mut().and_then(|r| r.pause(Instant::now())) {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return answer,
            }
        }
    }

    /// The same, following `-ASK` with `asking` (a cluster node's request connection).
    pub(crate) fn following_ask(mut self, asking: Option<Arc<Asking>>) -> Self {
        self.asking = asking;
        self
    }
}

impl ConnectionLike for NodeConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &self.tagging {
            None => self.inner.req_packed_command(cmd),
            Some(tagging) => {
                let tagged = tagging.command(cmd);
                let tagging = tagging.clone();
                Box::pin(async move { self.send_retrying_splits(&tagged, &tagging).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &self.tagging {
            None => self.inner.req_packed_commands(pipeline, offset, count),
            Some(tagging) => {
                let tagging = tagging.clone();
                let mut tagged = Pipeline::with_capacity(pipeline.len());
                if pipeline.is_transaction() {
                    tagged.atomic();
                }
                for cmd in pipeline.cmd_iter() {
                    tagged.add_command(tagging.command(cmd));
                }
                Box::pin(async move {
                    let mut replies = self
                        .inner
                        .req_packed_commands(&tagged, offset, count)
                        .await?;
                    // A transaction is not split: its ASK aborts it whole (EXECABORT).
                    let Some(asking) = self.asking.as_ref().filter(|_| !tagged.is_transaction())
                    else {
                        return Ok(replies);
                    };
                    let asking = asking.clone();
                    for (reply, cmd) in replies.iter_mut().zip(tagged.cmd_iter().skip(offset)) {
                        let answer = match reply {
                            Value::ServerError(e) if e.kind() == Some(ServerErrorKind::Ask) => {
                                asking
                                    .ask(&RedisError::from(e.clone()), cmd, &tagging)
                                    .await
                            }
                            _ => continue,
                        };
                        // A server's error stays a value, as the pipeline's own answers are,
                        // for the caller's conversion to report; a broken connection fails
                        // the whole request.
                        *reply = match answer {
                            Ok(value) => value,
                            Err(e) => Value::ServerError(redis::ServerError::try_from(e)?),
                        };
                    }
                    // A command the slot move split (each of a batch stands alone: one lock's
                    // extension) is sent again alone, while the retry deadline allows.
                    if self.split_retry_until.is_some() {
                        for (reply, cmd) in replies.iter_mut().zip(tagged.cmd_iter().skip(offset)) {
                            if !is_split(&Ok(reply.clone())) {
                                continue;
                            }
                            *reply = match self.send_retrying_splits(cmd, &tagging).await {
                                Ok(value) => value,
                                Err(e) => Value::ServerError(redis::ServerError::try_from(e)?),
                            };
                        }
                    }
                    Ok(replies)
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect()
    }

    #[test]
    fn declared_keys_and_plain_keys_get_the_tag_and_nothing_else_does() {
        let t = Tagging::of("{fencelock}");
        let mut set = redis::cmd("SET");
        set.arg("job").arg("owner").arg("NX").arg("PX").arg(5000);
        assert_eq!(
            rendered(&t.command(&set)),
            ["SET", "{fencelock}job", "owner", "NX", "PX", "5000"]
        );
        let script = &scripts::EXTEND;
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash())
            .arg(2)
            .arg("a")
            .arg("b")
            .arg("tok");
        let out = rendered(&t.command(&eval));
        assert_eq!(out[2..], ["2", "{fencelock}a", "{fencelock}b", "tok"]);
        // The extension script announces its TTL: the tagged copy's hash is sent.
        let copy = tag_script(scripts::ALL[5], "{fencelock}");
        assert_eq!(out[1], redis::Script::new(&copy).get_hash());
        assert_ne!(out[1], script.get_hash());
        let mut info = redis::cmd("INFO");
        info.arg("server");
        assert_eq!(rendered(&t.command(&info)), ["INFO", "server"]);
    }

    #[test]
    fn a_script_copy_names_the_node_wide_keys_with_the_tag() {
        let copy = tag_script(super::scripts::ANNOUNCE_AHEAD_LUA, "{x}");
        assert!(copy.contains("local k = '{x}fencelock:ttls'"));
        assert!(copy.contains("'{x}fencelock:ttls:' .. ARGV[1]"));
        assert!(!copy.contains("'fencelock:ttls"));
        let copy = tag_script(super::scripts::WRITE_BACK_LUA, "{x}");
        assert!(copy.contains("'{x}fencelock:lost'"));
        assert!(!copy.contains("'fencelock:lost'"));
        assert_eq!(tag_script(&copy, "{x}"), copy);
        // Every fixed name a script holds is one of these (a new one must be added above).
        for code in scripts::ALL {
            let copy = tag_script(code, "{x}");
            for quoted in copy.split('\'').skip(1).step_by(2) {
                if quoted.starts_with("fencelock:")
                    && !quoted.starts_with("fencelock: ")
                    && !quoted.ends_with(':')
                {
                    // The read-write lock's marker is a value, not a key.
                    assert!(
                        quoted == "fencelock:readers",
                        "a script names the key {quoted:?} itself: tag it in tag_script"
                    );
                }
            }
        }
    }
}
