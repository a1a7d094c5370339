//! A simulated Redis node: the keyspace, the script cache, and Lua 5.1 (the interpreter Redis
//! embeds) running the scripts as Redis 7.0 does: `KEYS`/`ARGV` globals, `redis.call` raising
//! the command's error, `redis.pcall` returning it as a table, and Redis's conversions between
//! replies and Lua values both ways. Time is the node's own clock, given with each command.

use std::collections::HashMap;

use std::cell::RefCell;

use mlua::{ChunkMode, Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use crate::keyspace::{arity, Keyspace};
use crate::resp::Reply;

/// How a node keeps its data across a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// No persistence: a restart comes back empty.
    None,
    /// AOF with `appendfsync everysec`: a restart keeps the data (the simulation does not lose
    /// the last second of writes; a kill that does is a restart without persistence).
    AofEverySec,
    /// AOF with `appendfsync always`.
    AofAlways,
}

/// A Lua wrapper that runs a script as Redis 7.0 does: its error handler turns every error into
/// a table `{err=..., source=..., line=...}` (a runtime error's text gets `ERR ` in front), which
/// becomes the error reply.
const RUNNER: &str = r#"
local dbg = debug
debug = nil
local raw = redis.__raw
redis.__raw = nil
redis.pcall = raw
redis.error_reply = function(e)
  if type(e) ~= 'string' then error('wrong number or type of arguments') end
  return {err = e}
end
redis.status_reply = function(s)
  if type(s) ~= 'string' then error('wrong number or type of arguments') end
  return {ok = s}
end
redis.sha1hex = redis.__sha1hex
redis.__sha1hex = nil
local function handler(err)
  -- The first frame of the script itself: past the C function that raised (as Redis does)
  -- and past this runner's own redis.call.
  local l = 2
  local i = dbg.getinfo(l, 'nSl')
  while i and (i.what == 'C' or i.source == '=runner') do
    l = l + 1
    i = dbg.getinfo(l, 'nSl')
  end
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(err)} end
  if i then err.source = i.source; err.line = i.currentline end
  return err
end
return function(f) return xpcall(f, handler) end
"#;

thread_local! {
    /// sha1 -> the script compiled once, as Lua 5.1 bytecode (see `Node::compile`).
    static BYTECODE: RefCell<HashMap<String, Vec<u8>>> = RefCell::default();
}

/// Where the command runner that `redis.call` and `redis.pcall` share is kept.
const RAW_KEY: &str = "fencelock_sim_raw";

/// `redis.call`: runs the command and raises its error table, as Redis's C function does. A C
/// function, not a Lua one: Lua 5.1 keeps the caller's frame when it tail-calls a C function,
/// so the error names the script's line (`return redis.call(...)` is common).
unsafe extern "C-unwind" fn redis_call(l: *mut mlua::ffi::lua_State) -> std::os::raw::c_int {
    use mlua::ffi;
    unsafe {
        let n = ffi::lua_gettop(l);
        ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, c"fencelock_sim_raw".as_ptr());
        ffi::lua_insert(l, 1);
        ffi::lua_call(l, n, 1);
        if ffi::lua_type(l, -1) == ffi::LUA_TTABLE {
            ffi::lua_getfield(l, -1, c"err".as_ptr());
            let failed = ffi::lua_type(l, -1) == ffi::LUA_TSTRING;
            ffi::lua_settop(l, -2);
            if failed {
                ffi::lua_error(l)
            }
        }
        1
    }
}

/// One simulated node.
pub struct Node {
    lua: Lua,
    run: Function,
    /// sha1 -> the compiled script.
    scripts: HashMap<String, Function>,
    run_id: String,
    /// Node time (ms) of the last (re)start, for `uptime_in_seconds`.
    started: i64,
    persistence: Persistence,
    /// `maxmemory-policy` (`noeviction` unless set): what `INFO memory` and `CONFIG GET`
    /// report. A policy that evicts lets the eviction fault drop keys ([`Node::evict`]).
    policy: String,
    port: u16,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("run_id", &self.run_id)
            .field("persistence", &self.persistence)
            .finish_non_exhaustive()
    }
}

/// The sha1 of a script, as `SCRIPT LOAD` and `EVALSHA` name it.
pub fn sha1(code: &[u8]) -> String {
    sha1_smol::Sha1::from(code).digest().to_string()
}

/// `sha1(code)`, remembered: every new connection loads the same 15 texts, and hashing them
/// again each time was a tenth of a run (a length check and a memcmp find a known text).
fn known_sha1(code: &[u8]) -> String {
    thread_local! {
        static KNOWN: RefCell<Vec<(Vec<u8>, String)>> = RefCell::default();
    }
    KNOWN.with(|k| {
        let mut k = k.borrow_mut();
        if let Some((_, sha)) = k
            .iter()
            .find(|(text, _)| text.len() == code.len() && text[..] == code[..])
        {
            return sha.clone();
        }
        let sha = sha1(code);
        if k.len() < 64 {
            k.push((code.to_vec(), sha.clone()));
        }
        sha
    })
}

/// A Lua number as `redis.call` passes it on: Redis 7.0 writes it with its shortest exact form
/// (integers without a fraction).
fn number_arg(n: f64) -> Vec<u8> {
    if n == n.trunc() && n.abs() < 1e21 {
        format!("{n:.0}").into_bytes()
    } else {
        crate::keyspace::score_text(n).into_bytes()
    }
}

fn to_lua(lua: &Lua, r: Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Int(i) => Value::Number(i as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(&b)?),
        Reply::Nil => Value::Boolean(false),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s)?;
            Value::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table()?;
            t.raw_set("err", e)?;
            Value::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

fn from_lua(v: &Value) -> Reply {
    match v {
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Integer(i) => Reply::Int(*i),
        // Redis casts the double to a long long: the fraction is dropped.
        Value::Number(n) => Reply::Int(*n as i64),
        Value::Boolean(true) => Reply::Int(1),
        Value::Table(t) => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                return Reply::Error(error_text(&e.to_string_lossy()));
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                return Reply::Status(s.to_string_lossy().to_string());
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => items.push(from_lua(&v)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

/// An error table's text as the reply carries it: Redis drops a leading `-`.
fn error_text(e: &str) -> String {
    e.strip_prefix('-').unwrap_or(e).to_string()
}

impl Node {
    /// A node that starts now (node time `now`, ms), empty.
    pub fn new(run_id: String, now: i64, persistence: Persistence, port: u16) -> Node {
        let (lua, run) = Self::interpreter();
        let node = Node {
            lua,
            run,
            scripts: HashMap::new(),
            run_id,
            started: now,
            persistence,
            policy: "noeviction".to_string(),
            port,
        };
        node.keyspace().now = now;
        node
    }

    fn interpreter() -> (Lua, Function) {
        // The debug library is for the error handler only (Redis's own handler reads the line
        // from it); RUNNER takes it out of the scripts' reach.
        let lua = unsafe {
            Lua::unsafe_new_with(
                StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::DEBUG,
                LuaOptions::new(),
            )
        };
        lua.set_app_data(Keyspace::default());
        let redis = lua.create_table().expect("a table");
        let raw = lua
            .create_function(|lua, args: MultiValue| {
                let mut cmd = Vec::with_capacity(args.len());
                for a in args.iter() {
                    match a {
                        Value::String(s) => cmd.push(s.as_bytes().to_vec()),
                        Value::Number(n) => cmd.push(number_arg(*n)),
                        Value::Integer(i) => cmd.push(i.to_string().into_bytes()),
                        _ => return to_lua(
                            lua,
                            Reply::err(
                                "ERR Lua redis lib command arguments must be strings or integers",
                            ),
                        ),
                    }
                }
                if cmd.is_empty() {
                    return to_lua(
                        lua,
                        Reply::err(
                            "ERR Please specify at least one argument for this redis lib call",
                        ),
                    );
                }
                let reply = {
                    let mut ks = lua.app_data_mut::<Keyspace>().expect("the keyspace");
                    script_command(&mut ks, &cmd)
                };
                to_lua(lua, reply)
            })
            .expect("a function");
        lua.set_named_registry_value(RAW_KEY, raw.clone())
            .expect("set");
        redis.raw_set("__raw", raw).expect("set");
        // SAFETY: `redis_call` only uses the Lua C API on the state it is given.
        let call = unsafe { lua.create_c_function(redis_call) }.expect("a function");
        redis.raw_set("call", call).expect("set");
        let sha = lua
            .create_function(|_, s: mlua::String| Ok(sha1(&s.as_bytes())))
            .expect("a function");
        redis.raw_set("__sha1hex", sha).expect("set");
        lua.globals().raw_set("redis", redis).expect("set");
        let run: Function = lua
            .load(RUNNER)
            .set_name("=runner")
            .eval()
            .expect("the runner loads");
        (lua, run)
    }

    /// The keyspace, to inspect or change directly (a fault, a checker's read).
    pub fn keyspace(&self) -> mlua::AppDataRefMut<'_, Keyspace> {
        self.lua.app_data_mut::<Keyspace>().expect("the keyspace")
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Over `maxmemory` (with `noeviction`): the writes Redis refuses with `OOM` are refused.
    pub fn set_oom(&mut self, oom: bool) {
        self.keyspace().oom = oom;
    }

    /// The node's `maxmemory-policy`.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// Evicts `key` as memory pressure would under an evicting policy (allkeys-* evicts any
    /// key, volatile-* only keys with an expiry); whether it was evicted. Under `noeviction`
    /// nothing is: such a node refuses writes instead ([`Node::set_oom`]).
    pub fn evict(&mut self, now: i64, key: &str) -> bool {
        let (all, volatile) = (
            self.policy.starts_with("allkeys-"),
            self.policy.starts_with("volatile-"),
        );
        let mut ks = self.keyspace();
        ks.now = now;
        (all || volatile) && ks.evict(key.as_bytes(), volatile)
    }

    pub fn persistence(&self) -> Persistence {
        self.persistence
    }

    /// Changes how the node persists (takes effect at its next restart).
    pub fn set_persistence(&mut self, persistence: Persistence) {
        self.persistence = persistence;
    }

    /// Restarts the node at node time `now` under a new run id: the script cache is empty, and
    /// the data survives only with persistence.
    pub fn restart(&mut self, run_id: String, now: i64) {
        let kept = (self.persistence != Persistence::None).then(|| self.keyspace().clone());
        let (lua, run) = Self::interpreter();
        self.lua = lua;
        self.run = run;
        self.scripts.clear();
        self.run_id = run_id;
        self.started = now;
        let mut ks = self.keyspace();
        if let Some(mut kept) = kept {
            kept.subscribers.clear();
            kept.outbox.clear();
            *ks = kept;
        }
        ks.now = now;
    }

    /// Runs one command at node time `now` (ms since the epoch).
    /// Makes the node `ms` older: it started that long before it did (`uptime_in_seconds`).
    pub fn age(&mut self, ms: i64) {
        self.started -= ms;
    }

    pub fn exec(&mut self, now: i64, args: &[Vec<u8>]) -> Reply {
        if args.is_empty() {
            return Reply::err("ERR empty command");
        }
        self.keyspace().now = now;
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let a = &args[1..];
        match name.as_str() {
            "EVAL" | "EVALSHA" => self.eval(&name, a),
            "SCRIPT" => self.script(a),
            "PING" => match a {
                [] => Reply::Status("PONG".into()),
                [m] => Reply::Bulk(m.clone()),
                _ => arity(&name),
            },
            "ECHO" if a.len() == 1 => Reply::Bulk(a[0].clone()),
            "TIME" => Reply::Array(vec![
                Reply::bulk((now.div_euclid(1000)).to_string()),
                Reply::bulk((now.rem_euclid(1000) * 1000).to_string()),
            ]),
            "SELECT" => match a {
                [db] if db.as_slice() == b"0" => Reply::ok(),
                [_] => Reply::err("ERR DB index is out of range"),
                _ => arity(&name),
            },
            "FLUSHALL" | "FLUSHDB" => {
                self.keyspace().clear();
                Reply::ok()
            }
            "INFO" => self.info(a),
            "CONFIG" => self.config(a),
            "CLIENT" => match a
                .first()
                .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase())
            {
                Some(s) if s == "ID" => Reply::Int(1),
                Some(_) => Reply::ok(),
                None => arity(&name),
            },
            "SUBSCRIBE" | "UNSUBSCRIBE" | "PSUBSCRIBE" | "PUNSUBSCRIBE" => Reply::err(
                "ERR the simulated node handles subscriptions on its connections, not here",
            ),
            _ => match self.keyspace().exec(args) {
                Some(r) => r,
                None => Reply::err(format!(
                    "ERR unknown command '{}', with args beginning with: {}",
                    String::from_utf8_lossy(&args[0]),
                    a.iter()
                        .map(|x| format!("'{}' ", String::from_utf8_lossy(x)))
                        .collect::<String>()
                )),
            },
        }
    }

    /// Messages published since the last call, for delivery to subscribers.
    pub fn take_published(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        std::mem::take(&mut self.keyspace().outbox)
    }

    fn info(&self, a: &[Vec<u8>]) -> Reply {
        let section = a
            .first()
            .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
            .unwrap_or_default();
        let now = self.keyspace().now;
        let uptime = (now - self.started).max(0) / 1000;
        let aof = self.persistence != Persistence::None;
        let server = format!(
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nrun_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\n",
            self.run_id,
            self.port,
            uptime / 86400
        );
        let persistence = format!(
            "# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:0\r\naof_enabled:{}\r\n",
            u8::from(aof)
        );
        let memory = format!(
            "# Memory\r\nmaxmemory:{}\r\nmaxmemory_policy:{}\r\n",
            if self.policy == "noeviction" {
                0
            } else {
                1 << 30
            },
            self.policy
        );
        Reply::Bulk(
            match section.as_str() {
                "server" => server,
                "persistence" => persistence,
                "memory" => memory,
                _ => format!("{server}\r\n{persistence}\r\n{memory}"),
            }
            .into_bytes(),
        )
    }

    fn config(&mut self, a: &[Vec<u8>]) -> Reply {
        let sub = a
            .first()
            .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase())
            .unwrap_or_default();
        match (sub.as_str(), a.get(1).map(|s| s.as_slice())) {
            ("GET", Some(b"appendfsync")) => Reply::Array(vec![
                Reply::bulk("appendfsync"),
                Reply::bulk(match self.persistence {
                    Persistence::AofAlways => "always",
                    _ => "everysec",
                }),
            ]),
            ("GET", Some(b"appendonly")) => Reply::Array(vec![
                Reply::bulk("appendonly"),
                Reply::bulk(if self.persistence == Persistence::None {
                    "no"
                } else {
                    "yes"
                }),
            ]),
            ("GET", Some(b"maxmemory-policy")) => Reply::Array(vec![
                Reply::bulk("maxmemory-policy"),
                Reply::bulk(&self.policy),
            ]),
            ("GET", Some(_)) => Reply::Array(vec![]),
            ("SET", Some(b"maxmemory-policy")) => match a.get(2).map(|v| {
                String::from_utf8_lossy(v).to_ascii_lowercase()
            }) {
                Some(p)
                    if [
                        "noeviction",
                        "allkeys-lru",
                        "allkeys-lfu",
                        "allkeys-random",
                        "volatile-lru",
                        "volatile-lfu",
                        "volatile-random",
                        "volatile-ttl",
                    ]
                    .contains(&p.as_str()) =>
                {
                    self.policy = p;
                    Reply::ok()
                }
                _ => Reply::err(
                    "ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction",
                ),
            },
            _ => Reply::err("ERR the simulated node answers CONFIG GET and CONFIG SET maxmemory-policy only"),
        }
    }

    fn script(&mut self, a: &[Vec<u8>]) -> Reply {
        let sub = a
            .first()
            .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase())
            .unwrap_or_default();
        match (sub.as_str(), &a[a.len().min(1)..]) {
            ("LOAD", [code]) => match self.compile(code) {
                Ok(sha) => Reply::Bulk(sha.into_bytes()),
                Err(e) => e,
            },
            ("FLUSH", rest) if rest.len() <= 1 => {
                // Redis 7 recreates its Lua interpreter on a flush: globals a script left go too.
                let (lua, run) = Self::interpreter();
                let ks = std::mem::take(&mut *self.keyspace());
                self.lua = lua;
                self.run = run;
                *self.keyspace() = ks;
                self.scripts.clear();
                Reply::ok()
            }
            ("EXISTS", shas) if !shas.is_empty() => Reply::Array(
                shas.iter()
                    .map(|s| {
                        let s = String::from_utf8_lossy(s).to_ascii_lowercase();
                        Reply::Int(i64::from(self.scripts.contains_key(&s)))
                    })
                    .collect(),
            ),
            _ => Reply::err(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try SCRIPT HELP.",
                String::from_utf8_lossy(a.first().map(|s| s.as_slice()).unwrap_or(b""))
            )),
        }
    }

    fn compile(&mut self, code: &[u8]) -> Result<String, Reply> {
        let sha = known_sha1(code);
        if self.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        // Parsing the scripts was the run's largest cost (every restart and SCRIPT FLUSH
        // compiles all 15 again, on every node): the first compile of a text is kept as
        // bytecode (with its line information, for the error replies) for every later one.
        let dumped = BYTECODE.with(|b| b.borrow().get(&sha).cloned());
        if let Some(bytes) = dumped {
            if let Ok(f) = self
                .lua
                .load(&bytes[..])
                .set_mode(ChunkMode::Binary)
                .into_function()
            {
                self.scripts.insert(sha.clone(), f);
                return Ok(sha);
            }
        }
        let f = self
            .lua
            .load(code)
            .set_name("@user_script")
            .into_function()
            .map_err(|e| {
                let text = match &e {
                    mlua::Error::SyntaxError { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                Reply::err(format!("ERR Error compiling script (new function): {text}"))
            })?;
        BYTECODE.with(|b| b.borrow_mut().insert(sha.clone(), f.dump(false)));
        self.scripts.insert(sha.clone(), f);
        Ok(sha)
    }

    fn eval(&mut self, name: &str, a: &[Vec<u8>]) -> Reply {
        if a.len() < 2 {
            return arity(name);
        }
        let Ok(numkeys) = std::str::from_utf8(&a[1])
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or(())
        else {
            return Reply::err("ERR value is not an integer or out of range");
        };
        if numkeys < 0 {
            return Reply::err("ERR Number of keys can't be negative");
        }
        if numkeys as usize > a.len() - 2 {
            return Reply::err("ERR Number of keys can't be greater than number of args");
        }
        let sha = if name == "EVAL" {
            match self.compile(&a[0]) {
                Ok(sha) => sha,
                Err(e) => return e,
            }
        } else {
            let sha = String::from_utf8_lossy(&a[0]).to_ascii_lowercase();
            if !self.scripts.contains_key(&sha) {
                return Reply::err("NOSCRIPT No matching script. Please use EVAL.");
            }
            sha
        };
        let (keys, argv) = a[2..].split_at(numkeys as usize);
        match self.call(&sha, keys, argv) {
            Ok(r) => r,
            Err(e) => Reply::err(format!("ERR simulated node: {e}")),
        }
    }

    fn call(&mut self, sha: &str, keys: &[Vec<u8>], argv: &[Vec<u8>]) -> mlua::Result<Reply> {
        let list = |items: &[Vec<u8>]| -> mlua::Result<Table> {
            let t = self.lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(item)?)?;
            }
            Ok(t)
        };
        let globals = self.lua.globals();
        globals.raw_set("KEYS", list(keys)?)?;
        globals.raw_set("ARGV", list(argv)?)?;
        let f = self.scripts[sha].clone();
        self.keyspace().script_wrote = Some(false);
        let ran = self.run.call(f);
        self.keyspace().script_wrote = None;
        let (ok, value): (bool, Value) = ran?;
        if ok {
            return Ok(from_lua(&value));
        }
        let Value::Table(t) = &value else {
            return Ok(Reply::err(format!(
                "ERR Error running script {sha}, execution failure"
            )));
        };
        let msg = match t.raw_get::<Value>("err")? {
            Value::String(s) => error_text(&s.to_string_lossy()),
            _ => "ERR execution failure".to_string(),
        };
        let source: Option<String> = t.raw_get("source")?;
        let line: Option<i64> = t.raw_get("line")?;
        Ok(Reply::Error(match (source, line) {
            (Some(src), Some(line)) => format!("{msg} script: {sha}, on {src}:{line}."),
            _ => msg,
        }))
    }
}

/// A command a script runs: the data commands, and the few node commands scripts may call.
fn script_command(ks: &mut Keyspace, cmd: &[Vec<u8>]) -> Reply {
    if let Some((slot, migrating)) = ks.script_slot {
        let non_local = crate::slots::command_keys(cmd)
            .into_iter()
            .any(|k| crate::slots::key_slot(k) != slot || (migrating && !ks.holds(k)));
        if non_local {
            return Reply::err("ERR Script attempted to access a non local key in a cluster node");
        }
    }
    let name = String::from_utf8_lossy(&cmd[0]).to_ascii_uppercase();
    match name.as_str() {
        "TIME" => Reply::Array(vec![
            Reply::bulk(ks.now.div_euclid(1000).to_string()),
            Reply::bulk((ks.now.rem_euclid(1000) * 1000).to_string()),
        ]),
        "PING" => match cmd.len() {
            1 => Reply::Status("PONG".into()),
            2 => Reply::Bulk(cmd[1].clone()),
            _ => Reply::err("ERR Wrong number of args calling Redis command from script"),
        },
        "EVAL" | "EVALSHA" | "SCRIPT" | "SUBSCRIBE" | "FLUSHALL" | "FLUSHDB" => {
            Reply::err("ERR This Redis command is not allowed from script")
        }
        _ => match ks.exec(cmd) {
            // Redis checks the arity before it runs a script's command, with its own text.
            Some(Reply::Error(e)) if e.starts_with("ERR wrong number of arguments for") => {
                Reply::err("ERR Wrong number of args calling Redis command from script")
            }
            Some(r) => r,
            None => Reply::err("ERR Unknown Redis command called from script"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(parts: &[&str]) -> Vec<Vec<u8>> {
        parts.iter().map(|p| p.as_bytes().to_vec()).collect()
    }

    /// A script compiled from the kept bytecode (a second node, a restart) answers as the
    /// first compile did, its error's line included.
    #[test]
    fn a_script_from_bytecode_replies_as_when_parsed() {
        let script =
            "local x = 1\nredis.call('SET', KEYS[1], 'v')\nreturn redis.call('INCR', KEYS[1])";
        let eval = cmd(&["EVAL", script, "1", "k"]);
        let mut a = Node::new("a".into(), 0, Persistence::None, 1);
        let first = a.exec(0, &eval);
        assert!(
            matches!(&first, Reply::Error(e) if e.ends_with("on @user_script:3.")),
            "{first:?}"
        );
        let mut b = Node::new("b".into(), 0, Persistence::None, 2);
        assert_eq!(b.exec(0, &eval), first);
        a.restart("a2".into(), 0);
        assert_eq!(a.exec(0, &eval), first);
        let ok = cmd(&["EVAL", "return ARGV[1]", "0", "x"]);
        assert_eq!(b.exec(0, &ok), Reply::Bulk(b"x".to_vec()));
    }

    /// Over `maxmemory`, a script without flags is refused at its first `denyoom` command only
    /// while it has written nothing (Redis 7.0 does not stop a script half-way): an announcement
    /// that removed a shorter TTL's entry also writes its own.
    #[test]
    fn out_of_memory_stops_a_script_only_before_its_first_write() {
        let mut n = Node::new("a".into(), 0, Persistence::None, 1);
        n.exec(0, &cmd(&["ZADD", "z", "5", "short"]));
        n.keyspace().oom = true;
        let first = cmd(&[
            "EVAL",
            "return redis.call('ZADD', KEYS[1], 9, 'long')",
            "1",
            "z",
        ]);
        assert!(matches!(n.exec(0, &first), Reply::Error(e) if e.starts_with("OOM ")));
        let after =
            "redis.call('ZREM', KEYS[1], 'short') return redis.call('ZADD', KEYS[1], 9, 'long')";
        assert_eq!(n.exec(0, &cmd(&["EVAL", after, "1", "z"])), Reply::Int(1));
        // Outside a script, and in the next script, the refusal holds again.
        assert!(
            matches!(n.exec(0, &cmd(&["ZADD", "z", "1", "x"])), Reply::Error(e) if e.starts_with("OOM "))
        );
        assert!(matches!(n.exec(0, &first), Reply::Error(e) if e.starts_with("OOM ")));
    }
}
