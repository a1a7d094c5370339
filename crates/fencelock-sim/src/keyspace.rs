//! A node's data: strings and sorted sets with expiries in the node's own clock (ms), and the
//! data commands fencelock's scripts and client send, with Redis 7.0's replies and error texts.
//! Expiry is lazy, as seen by a client: a key whose deadline passed is gone at its next access
//! (Redis also deletes it in the background; no command here can tell the two apart).

use std::collections::HashMap;

use crate::resp::Reply;

pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const MINMAX: &str = "ERR min or max is not a float";

/// A sorted set's members, by (score, member).
type Zset = Vec<(f64, Vec<u8>)>;

#[derive(Clone, Debug)]
enum Val {
    Str(Vec<u8>),
    /// Sorted by (score, member), as Redis orders them.
    Zset(Vec<(f64, Vec<u8>)>),
}

#[derive(Clone, Debug)]
struct Entry {
    val: Val,
    /// Node time (ms) after which the key is gone.
    at: Option<i64>,
}

/// What `MIGRATE` of one key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrated {
    /// `OK`: the key moved.
    Moved,
    /// `NOKEY`: the key was not there.
    NoKey,
    /// `BUSYKEY`: the target has the key (and `REPLACE` was not given).
    BusyKey,
}

/// The keyspace of one node (database 0; SELECT of another database is refused).
#[derive(Clone, Debug, Default)]
pub struct Keyspace {
    map: HashMap<Vec<u8>, Entry>,
    /// The node's clock (ms since the epoch) for the command being run; a script runs at one
    /// instant, as Redis 7 freezes time for a script.
    pub(crate) now: i64,
    /// Subscribers per channel, kept by the node; PUBLISH reports them.
    pub(crate) subscribers: HashMap<Vec<u8>, i64>,
    /// Messages published by the command being run, for the node to deliver.
    pub(crate) outbox: Vec<(Vec<u8>, Vec<u8>)>,
    /// Over `maxmemory`: commands that may grow the data are refused (a fault).
    pub(crate) oom: bool,
    /// While a script runs: whether it has run a write command yet (Redis 7.0 refuses a
    /// `denyoom` command in a script only before its first write: a script that changed data
    /// is not stopped half-way). `None` outside scripts.
    pub(crate) script_wrote: Option<bool>,
    /// While a script runs on a cluster node: the slot its declared keys hash to and whether
    /// that slot is migrating away. A command of the script on a key of another slot, or on a
    /// key missing here while the slot migrates, is refused as Redis 7.0 refuses it ("a non
    /// local key": the cluster would redirect it, which a script cannot follow).
    pub(crate) script_slot: Option<(u16, bool)>,
}

pub(crate) fn arity(name: &str) -> Reply {
    Reply::err(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

fn int(arg: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(arg)
        .ok()
        .filter(|s| !(s.starts_with('+') || (s.len() > 1 && s.starts_with('0'))))
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| Reply::err(NOT_INT))
}

fn float(arg: &[u8], err: &str) -> Result<f64, Reply> {
    let s = std::str::from_utf8(arg).map_err(|_| Reply::err(err))?;
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        t if t.trim() != t || t.is_empty() => return Err(Reply::err(err)),
        _ => s.parse::<f64>().map_err(|_| Reply::err(err))?,
    };
    if v.is_nan() {
        return Err(Reply::err(err));
    }
    Ok(v)
}

/// A score bound of ZRANGEBYSCORE and friends: the value and whether it is exclusive.
fn bound(arg: &[u8]) -> Result<(f64, bool), Reply> {
    match arg.strip_prefix(b"(") {
        Some(rest) => Ok((float(rest, MINMAX)?, true)),
        None => Ok((float(arg, MINMAX)?, false)),
    }
}

/// A score as Redis 7.0 writes it in a RESP2 reply (and so as a script reads it): the shortest
/// text that reads back as the same double, integers without a fraction.
pub(crate) fn score_text(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if v == v.trunc() && v.abs() < 1e17 {
        return format!("{}", v as i64);
    }
    let s = format!("{v:e}");
    // Rust's `1.5e20` is Redis's `1.5e+20`; plain decimals are written alike.
    match s.split_once('e') {
        Some((m, e)) if (e.parse::<i32>().unwrap_or(0)).abs() >= 17 || v.abs() < 1e-4 => {
            let e: i32 = e.parse().unwrap_or(0);
            format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
        }
        _ => format!("{v}"),
    }
}

fn in_bound(v: f64, (b, excl): (f64, bool), lower: bool) -> bool {
    match (lower, excl) {
        (true, false) => v >= b,
        (true, true) => v > b,
        (false, false) => v <= b,
        (false, true) => v < b,
    }
}

/// Redis's clamping of a rank range over `len` items: the (start, end) inclusive or None.
fn rank_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut s = if start < 0 { len + start } else { start };
    let mut e = if stop < 0 { len + stop } else { stop };
    if s < 0 {
        s = 0;
    }
    if s > e || s >= len {
        return None;
    }
    if e >= len {
        e = len - 1;
    }
    Some((s as usize, e as usize))
}

impl Keyspace {
    /// Drops every key (FLUSHALL, or a restart without persistence).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// A replica's full synchronisation: the data becomes `primary`'s (expiry times are
    /// absolute, as Redis replicates them); the subscribers, the outbox and the memory state
    /// stay this node's own.
    pub fn sync_from(&mut self, primary: &Keyspace) {
        self.map = primary.map.clone();
    }

    /// Whether `key` lives here.
    pub fn holds(&mut self, key: &[u8]) -> bool {
        self.live(key).is_some()
    }

    /// The live keys whose slot is `slot`.
    pub fn keys_in_slot(&mut self, slot: u16) -> Vec<Vec<u8>> {
        let now = self.now;
        let mut keys: Vec<Vec<u8>> = self
            .map
            .iter()
            .filter(|(k, e)| e.at.is_none_or(|at| now <= at) && crate::slots::key_slot(k) == slot)
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// `MIGRATE` of one key to `to`: the key, its value and its expiry leave this keyspace and
    /// land in `to`'s, unless `to` has the key and `replace` is off (Redis's `BUSYKEY`).
    pub fn migrate(&mut self, key: &[u8], to: &mut Keyspace, replace: bool) -> Migrated {
        if self.live(key).is_none() {
            return Migrated::NoKey;
        }
        if !replace && to.live(key).is_some() {
            return Migrated::BusyKey;
        }
        let entry = self.map.remove(key).expect("live above");
        to.map.insert(key.to_vec(), entry);
        Migrated::Moved
    }

    /// Drops `key` as an eviction would (any live key, or with `volatile_only` one with an
    /// expiry); whether there was one to drop.
    pub fn evict(&mut self, key: &[u8], volatile_only: bool) -> bool {
        let eligible = self
            .live(key)
            .is_some_and(|e| !volatile_only || e.at.is_some());
        if eligible {
            self.map.remove(key);
        }
        eligible
    }

    /// The number of live keys.
    pub fn len(&mut self) -> usize {
        let now = self.now;
        self.map.retain(|_, e| e.at.is_none_or(|at| now <= at));
        self.map.len()
    }

    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    fn live(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let now = self.now;
        if self
            .map
            .get(key)
            .is_some_and(|e| e.at.is_some_and(|at| now > at))
        {
            self.map.remove(key);
        }
        self.map.get_mut(key)
    }

    fn string(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                val: Val::Str(s), ..
            }) => Ok(Some(s.clone())),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    fn zset(&mut self, key: &[u8]) -> Result<Option<&mut Zset>, Reply> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                val: Val::Zset(z), ..
            }) => Ok(Some(z)),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    /// Deletes an emptied sorted set, as Redis does.
    fn drop_if_empty(&mut self, key: &[u8]) {
        if matches!(self.map.get(key), Some(Entry { val: Val::Zset(z), .. }) if z.is_empty()) {
            self.map.remove(key);
        }
    }

    /// The members of the sorted set `key` (none if it is missing or not a set).
    pub fn zset_members(&mut self, key: &[u8]) -> Vec<Vec<u8>> {
        match self.zset(key) {
            Ok(Some(z)) => z.iter().map(|(_, m)| m.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// Runs one data command; `None` when the command is not a data command.
    pub(crate) fn exec(&mut self, args: &[Vec<u8>]) -> Option<Reply> {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let a = &args[1..];
        // Redis's `denyoom` commands among these (DEL, ZREM, EXPIRE and reads still run), from
        // a client and from a script alike; a script without flags meets the refusal at its
        // first such call, unless it wrote before (Redis 7.0's scriptVerifyOOM: "only if this is
        // the first write in the context of this script, otherwise we can't stop in the
        // middle").
        if self.oom
            && matches!(name.as_str(), "SET" | "INCR" | "ZADD")
            && self.script_wrote != Some(true)
        {
            return Some(Reply::err(
                "OOM command not allowed when used memory > 'maxmemory'.",
            ));
        }
        if self.script_wrote.is_some()
            && matches!(
                name.as_str(),
                "SET"
                    | "DEL"
                    | "UNLINK"
                    | "INCR"
                    | "PEXPIRE"
                    | "PEXPIREAT"
                    | "EXPIRE"
                    | "EXPIREAT"
                    | "PERSIST"
                    | "ZADD"
                    | "ZREM"
                    | "ZREMRANGEBYSCORE"
                    | "ZREMRANGEBYRANK"
                    | "FLUSHALL"
                    | "FLUSHDB"
            )
        {
            self.script_wrote = Some(true);
        }
        let r = match name.as_str() {
            "GET" => self.get(&name, a),
            "SET" => self.set(&name, a),
            "DEL" | "UNLINK" => self.del(&name, a),
            "EXISTS" => self.exists(&name, a),
            "MGET" => self.mget(&name, a),
            "TYPE" => self.type_of(&name, a),
            "INCR" => self.incr(&name, a),
            "PTTL" | "TTL" => self.pttl(&name, a),
            "PEXPIRE" | "PEXPIREAT" | "EXPIRE" | "EXPIREAT" => self.pexpire(&name, a),
            "PERSIST" => self.persist(&name, a),
            "ZADD" => self.zadd(&name, a),
            "ZRANGE" => self.zrange(&name, a),
            "ZRANGEBYSCORE" => self.zrangebyscore(&name, a),
            "ZREM" => self.zrem(&name, a),
            "ZREMRANGEBYSCORE" => self.zremrangebyscore(&name, a),
            "ZREMRANGEBYRANK" => self.zremrangebyrank(&name, a),
            "ZSCORE" => self.zscore(&name, a),
            "ZRANK" => self.zrank(&name, a),
            "ZCARD" => self.zcard(&name, a),
            "PUBLISH" => self.publish(&name, a),
            "DBSIZE" => Ok(Reply::Int(self.len() as i64)),
            // Only `KEYS *` (sorted, unlike Redis: tests compare the sets).
            "KEYS" if a.len() == 1 && a[0].as_slice() == b"*" => {
                self.len();
                let mut keys: Vec<Vec<u8>> = self.map.keys().cloned().collect();
                keys.sort();
                Ok(Reply::Array(keys.into_iter().map(Reply::Bulk).collect()))
            }
            _ => return None,
        };
        Some(r.unwrap_or_else(|e| e))
    }

    fn get(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 1 {
            return Err(arity(name));
        }
        Ok(self.string(&a[0])?.map_or(Reply::Nil, Reply::Bulk))
    }

    fn set(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() < 2 {
            return Err(arity(name));
        }
        let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
        let mut at: Option<i64> = None;
        let mut i = 2;
        while i < a.len() {
            let opt = String::from_utf8_lossy(&a[i]).to_ascii_uppercase();
            match opt.as_str() {
                "NX" if !xx => nx = true,
                "XX" if !nx => xx = true,
                "GET" => get = true,
                "KEEPTTL" if at.is_none() => keepttl = true,
                "PX" | "EX" | "PXAT" | "EXAT" if at.is_none() && !keepttl && i + 1 < a.len() => {
                    i += 1;
                    let v = int(&a[i])?;
                    if v <= 0 {
                        return Err(Reply::err("ERR invalid expire time in 'set' command"));
                    }
                    let ms = if opt.starts_with('E') {
                        v.checked_mul(1000)
                            .ok_or_else(|| Reply::err("ERR invalid expire time in 'set' command"))?
                    } else {
                        v
                    };
                    at = Some(if opt.ends_with("AT") {
                        ms
                    } else {
                        self.now
                            .checked_add(ms)
                            .ok_or_else(|| Reply::err("ERR invalid expire time in 'set' command"))?
                    });
                }
                _ => return Err(Reply::err(SYNTAX)),
            }
            i += 1;
        }
        let key = &a[0];
        let old = if get { Some(self.string(key)?) } else { None };
        let exists = self.live(key).is_some();
        if (nx && exists) || (xx && !exists) {
            return Ok(match old {
                Some(o) => o.map_or(Reply::Nil, Reply::Bulk),
                None => Reply::Nil,
            });
        }
        let at = if keepttl {
            self.live(key).and_then(|e| e.at)
        } else {
            at
        };
        self.map.insert(
            key.clone(),
            Entry {
                val: Val::Str(a[1].clone()),
                at,
            },
        );
        Ok(match old {
            Some(o) => o.map_or(Reply::Nil, Reply::Bulk),
            None => Reply::ok(),
        })
    }

    fn del(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.is_empty() {
            return Err(arity(name));
        }
        let mut n = 0;
        for k in a {
            if self.live(k).is_some() {
                self.map.remove(k);
                n += 1;
            }
        }
        Ok(Reply::Int(n))
    }

    fn exists(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.is_empty() {
            return Err(arity(name));
        }
        Ok(Reply::Int(
            a.iter().filter(|k| self.live(k).is_some()).count() as i64,
        ))
    }

    fn mget(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.is_empty() {
            return Err(arity(name));
        }
        Ok(Reply::Array(
            a.iter()
                .map(|k| match self.string(k) {
                    Ok(Some(v)) => Reply::Bulk(v),
                    _ => Reply::Nil,
                })
                .collect(),
        ))
    }

    fn type_of(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 1 {
            return Err(arity(name));
        }
        Ok(Reply::Status(
            match self.live(&a[0]) {
                None => "none",
                Some(Entry {
                    val: Val::Str(_), ..
                }) => "string",
                Some(Entry {
                    val: Val::Zset(_), ..
                }) => "zset",
            }
            .into(),
        ))
    }

    fn incr(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 1 {
            return Err(arity(name));
        }
        let cur = match self.string(&a[0])? {
            None => 0,
            Some(v) => int(&v)?,
        };
        let next = cur
            .checked_add(1)
            .ok_or_else(|| Reply::err("ERR increment or decrement would overflow"))?;
        let at = self.live(&a[0]).and_then(|e| e.at);
        self.map.insert(
            a[0].clone(),
            Entry {
                val: Val::Str(next.to_string().into_bytes()),
                at,
            },
        );
        Ok(Reply::Int(next))
    }

    fn pttl(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 1 {
            return Err(arity(name));
        }
        let now = self.now;
        Ok(Reply::Int(match self.live(&a[0]) {
            None => -2,
            Some(Entry { at: None, .. }) => -1,
            Some(Entry { at: Some(at), .. }) => {
                let ms = (*at - now).max(0);
                if name == "TTL" {
                    (ms + 500) / 1000
                } else {
                    ms
                }
            }
        }))
    }

    fn pexpire(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() < 2 {
            return Err(arity(name));
        }
        let v = int(&a[1])?;
        let ms = if name.starts_with('P') {
            v
        } else {
            v.checked_mul(1000).ok_or_else(|| {
                Reply::err(format!(
                    "ERR invalid expire time in '{}' command",
                    name.to_ascii_lowercase()
                ))
            })?
        };
        let when = if name.ends_with("AT") {
            ms
        } else {
            self.now.checked_add(ms).ok_or_else(|| {
                Reply::err(format!(
                    "ERR invalid expire time in '{}' command",
                    name.to_ascii_lowercase()
                ))
            })?
        };
        let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
        for o in &a[2..] {
            match String::from_utf8_lossy(o).to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                "GT" => gt = true,
                "LT" => lt = true,
                other => {
                    return Err(Reply::err(format!("ERR Unsupported option {other}")));
                }
            }
        }
        if nx && (xx || gt || lt) {
            return Err(Reply::err(
                "ERR NX and XX, GT or LT options at the same time are not compatible",
            ));
        }
        if gt && lt {
            return Err(Reply::err(
                "ERR GT and LT options at the same time are not compatible",
            ));
        }
        let now = self.now;
        let Some(e) = self.live(&a[0]) else {
            return Ok(Reply::Int(0));
        };
        let cur = e.at;
        let refused = (nx && cur.is_some())
            || (xx && cur.is_none())
            || (gt && cur.is_none_or(|c| when <= c))
            || (lt && cur.is_some_and(|c| when >= c));
        if refused {
            return Ok(Reply::Int(0));
        }
        if when <= now {
            self.map.remove(&a[0]);
        } else {
            e.at = Some(when);
        }
        Ok(Reply::Int(1))
    }

    fn persist(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 1 {
            return Err(arity(name));
        }
        Ok(Reply::Int(match self.live(&a[0]) {
            Some(e) if e.at.is_some() => {
                e.at = None;
                1
            }
            _ => 0,
        }))
    }

    fn zadd(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() < 3 {
            return Err(arity(name));
        }
        let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
        let mut i = 1;
        while i < a.len() {
            match String::from_utf8_lossy(&a[i]).to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                "GT" => gt = true,
                "LT" => lt = true,
                "CH" => ch = true,
                _ => break,
            }
            i += 1;
        }
        let pairs = &a[i..];
        if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
            return Err(Reply::err(SYNTAX));
        }
        if nx && xx {
            return Err(Reply::err(
                "ERR XX and NX options at the same time are not compatible",
            ));
        }
        if (nx && (gt || lt)) || (gt && lt) {
            return Err(Reply::err(
                "ERR GT, LT, and/or NX options at the same time are not compatible",
            ));
        }
        let mut parsed = Vec::with_capacity(pairs.len() / 2);
        for p in pairs.chunks(2) {
            parsed.push((float(&p[0], NOT_FLOAT)?, p[1].clone()));
        }
        let key = &a[0];
        if self.zset(key)?.is_none() {
            if xx {
                return Ok(Reply::Int(0));
            }
            self.map.insert(
                key.clone(),
                Entry {
                    val: Val::Zset(Vec::new()),
                    at: None,
                },
            );
        }
        let z = self.zset(key)?.expect("just made");
        let (mut added, mut changed) = (0, 0);
        for (score, member) in parsed {
            match z.iter().position(|(_, m)| *m == member) {
                Some(at) => {
                    let old = z[at].0;
                    let skip = nx || (gt && score <= old) || (lt && score >= old);
                    if skip || old == score {
                        continue;
                    }
                    z.remove(at);
                    insert_sorted(z, score, member);
                    changed += 1;
                }
                None => {
                    if xx {
                        continue;
                    }
                    insert_sorted(z, score, member);
                    added += 1;
                }
            }
        }
        self.drop_if_empty(key);
        Ok(Reply::Int(if ch { added + changed } else { added }))
    }

    fn zrange(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() < 3 {
            return Err(arity(name));
        }
        let mut withscores = false;
        for o in &a[3..] {
            match String::from_utf8_lossy(o).to_ascii_uppercase().as_str() {
                "WITHSCORES" => withscores = true,
                _ => return Err(Reply::err(SYNTAX)),
            }
        }
        let (start, stop) = (int(&a[1])?, int(&a[2])?);
        let Some(z) = self.zset(&a[0])? else {
            return Ok(Reply::Array(vec![]));
        };
        let Some((s, e)) = rank_range(start, stop, z.len()) else {
            return Ok(Reply::Array(vec![]));
        };
        Ok(items(&z[s..=e], withscores))
    }

    fn zrangebyscore(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() < 3 {
            return Err(arity(name));
        }
        let (min, max) = (bound(&a[1])?, bound(&a[2])?);
        let (mut withscores, mut limit) = (false, None);
        let mut i = 3;
        while i < a.len() {
            match String::from_utf8_lossy(&a[i]).to_ascii_uppercase().as_str() {
                "WITHSCORES" => withscores = true,
                "LIMIT" if i + 2 < a.len() => {
                    limit = Some((int(&a[i + 1])?, int(&a[i + 2])?));
                    i += 2;
                }
                _ => return Err(Reply::err(SYNTAX)),
            }
            i += 1;
        }
        let Some(z) = self.zset(&a[0])? else {
            return Ok(Reply::Array(vec![]));
        };
        let hits: Vec<(f64, Vec<u8>)> = z
            .iter()
            .filter(|(s, _)| in_bound(*s, min, true) && in_bound(*s, max, false))
            .cloned()
            .collect();
        let hits = match limit {
            Some((off, _)) if off < 0 => vec![],
            Some((off, n)) => hits
                .into_iter()
                .skip(off as usize)
                .take(if n < 0 { usize::MAX } else { n as usize })
                .collect(),
            None => hits,
        };
        Ok(items(&hits, withscores))
    }

    fn zrem(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() < 2 {
            return Err(arity(name));
        }
        let Some(z) = self.zset(&a[0])? else {
            return Ok(Reply::Int(0));
        };
        let before = z.len();
        z.retain(|(_, m)| !a[1..].contains(m));
        let n = (before - z.len()) as i64;
        self.drop_if_empty(&a[0]);
        Ok(Reply::Int(n))
    }

    fn zremrangebyscore(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 3 {
            return Err(arity(name));
        }
        let (min, max) = (bound(&a[1])?, bound(&a[2])?);
        let Some(z) = self.zset(&a[0])? else {
            return Ok(Reply::Int(0));
        };
        let before = z.len();
        z.retain(|(s, _)| !(in_bound(*s, min, true) && in_bound(*s, max, false)));
        let n = (before - z.len()) as i64;
        self.drop_if_empty(&a[0]);
        Ok(Reply::Int(n))
    }

    fn zremrangebyrank(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 3 {
            return Err(arity(name));
        }
        let (start, stop) = (int(&a[1])?, int(&a[2])?);
        let Some(z) = self.zset(&a[0])? else {
            return Ok(Reply::Int(0));
        };
        let n = match rank_range(start, stop, z.len()) {
            Some((s, e)) => {
                z.drain(s..=e);
                (e - s + 1) as i64
            }
            None => 0,
        };
        self.drop_if_empty(&a[0]);
        Ok(Reply::Int(n))
    }

    fn zscore(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 2 {
            return Err(arity(name));
        }
        Ok(self
            .zset(&a[0])?
            .and_then(|z| z.iter().find(|(_, m)| *m == a[1]))
            .map_or(Reply::Nil, |(s, _)| Reply::bulk(score_text(*s))))
    }

    fn zrank(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 2 {
            return Err(arity(name));
        }
        Ok(self
            .zset(&a[0])?
            .and_then(|z| z.iter().position(|(_, m)| *m == a[1]))
            .map_or(Reply::Nil, |i| Reply::Int(i as i64)))
    }

    fn zcard(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 1 {
            return Err(arity(name));
        }
        Ok(Reply::Int(self.zset(&a[0])?.map_or(0, |z| z.len() as i64)))
    }

    fn publish(&mut self, name: &str, a: &[Vec<u8>]) -> Result<Reply, Reply> {
        if a.len() != 2 {
            return Err(arity(name));
        }
        self.outbox.push((a[0].clone(), a[1].clone()));
        Ok(Reply::Int(
            self.subscribers.get(&a[0]).copied().unwrap_or(0),
        ))
    }
}

fn insert_sorted(z: &mut Vec<(f64, Vec<u8>)>, score: f64, member: Vec<u8>) {
    let at = z.partition_point(|(s, m)| *s < score || (*s == score && *m < member));
    z.insert(at, (score, member));
}

fn items(z: &[(f64, Vec<u8>)], withscores: bool) -> Reply {
    let mut out = Vec::with_capacity(z.len() * if withscores { 2 } else { 1 });
    for (s, m) in z {
        out.push(Reply::Bulk(m.clone()));
        if withscores {
            out.push(Reply::bulk(score_text(*s)));
        }
    }
    Reply::Array(out)
}
