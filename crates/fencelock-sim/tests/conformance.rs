//! The simulated node against a real redis-server: the same command sequences, fencelock's own
//! scripts included, run on both, and every reply compared. The simulated node's clock is set
//! to the real node's `TIME` before each command, so expiries fall at the same instants; a reply
//! that carries a time (a `PTTL`, a node time a script returns, a deadline stored as a score) is
//! compared within a tolerance, every other reply exactly. After each case, the whole keyspace
//! is compared too (every key, its type, its value and its remaining time).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use fencelock_sim::resp::{decode_reply, encode_command, Incomplete};
use fencelock_sim::{script, sha1, Node, Persistence, Reply, SCRIPT_NAMES};
use fencelock_testkit::RedisNode;

/// How far two times may differ (ms): the real node's clock runs on between the `TIME` that
/// sets the simulated clock and the command; a loaded machine can stretch that.
const TOL: i64 = 250;

struct Real {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Real {
    fn cmd(&mut self, args: &[&[u8]]) -> Reply {
        self.stream.write_all(&encode_command(args)).expect("write");
        loop {
            match decode_reply(&self.buf) {
                Ok((r, n)) => {
                    self.buf.drain(..n);
                    return r;
                }
                Err(Incomplete::More) => {
                    let mut chunk = [0u8; 65536];
                    let n = self.stream.read(&mut chunk).expect("read");
                    assert!(n > 0, "the real node closed the connection");
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                Err(Incomplete::Bad(e)) => panic!("bad reply from the real node: {e}"),
            }
        }
    }
}

struct Pair {
    _node: RedisNode,
    real: Real,
    sim: Node,
    case: String,
    step: usize,
}

fn same(a: &Reply, b: &Reply, tol: i64) -> bool {
    let num = |r: &Reply| match r {
        Reply::Int(i) => Some(*i),
        Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse::<i64>().ok(),
        _ => None,
    };
    match (a, b) {
        (Reply::Array(x), Reply::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q, tol))
        }
        _ if a == b => true,
        _ if tol > 0 && std::mem::discriminant(a) == std::mem::discriminant(b) => {
            matches!((num(a), num(b)), (Some(p), Some(q)) if (p - q).abs() <= tol)
        }
        _ => false,
    }
}

impl Pair {
    fn start() -> Pair {
        let node = RedisNode::start().expect("redis-server starts");
        let stream = TcpStream::connect(("127.0.0.1", node.port())).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut real = Real {
            stream,
            buf: Vec::new(),
        };
        let now = real_now(&mut real);
        Pair {
            _node: node,
            real,
            sim: Node::new("sim".into(), now, Persistence::None, 6379),
            case: String::new(),
            step: 0,
        }
    }

    fn case(&mut self, name: &str) {
        self.case = name.into();
        self.step = 0;
        for c in [&["FLUSHALL"][..], &["SCRIPT", "FLUSH"]] {
            self.run(c, 0);
        }
    }

    /// Runs a command on both nodes and compares the replies (times within `tol` ms).
    fn run<A: AsRef<[u8]>>(&mut self, args: &[A], tol: i64) -> Reply {
        self.step += 1;
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_ref().to_vec()).collect();
        let now = real_now(&mut self.real);
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let real = self.real.cmd(&refs);
        let sim = self.sim.exec(now, &args);
        assert!(
            same(&real, &sim, tol),
            "case {:?}, step {}: {:?}\n  real redis-server: {real:?}\n  simulated node:    {sim:?}",
            self.case,
            self.step,
            args.iter()
                .map(|a| String::from_utf8_lossy(a)
                    .chars()
                    .take(60)
                    .collect::<String>())
                .collect::<Vec<_>>(),
        );
        real
    }

    fn exact(&mut self, args: &[&str]) -> Reply {
        self.run(args, 0)
    }

    fn timed(&mut self, args: &[&str]) -> Reply {
        self.run(args, TOL)
    }

    /// Runs one of fencelock's scripts by its sha (as the client does), on both nodes.
    fn script(&mut self, name: &str, keys: &[&str], argv: &[&str], tol: i64) -> Reply {
        let sha = sha1(script(name).as_bytes());
        let n = keys.len().to_string();
        let mut args = vec!["EVALSHA", sha.as_str(), n.as_str()];
        args.extend_from_slice(keys);
        args.extend_from_slice(argv);
        self.run(&args, tol)
    }

    fn load_all(&mut self) {
        for name in SCRIPT_NAMES {
            self.run(&[b"SCRIPT".as_slice(), b"LOAD", script(name).as_bytes()], 0);
        }
    }

    /// Every key on both nodes: names, types, values and remaining times.
    fn compare_keyspaces(&mut self) {
        let now = real_now(&mut self.real);
        let mut keys = match self.real.cmd(&[b"KEYS", b"*"]) {
            Reply::Array(k) => k,
            other => panic!("KEYS: {other:?}"),
        };
        keys.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        let mut sim = match self.sim.exec(now, &[b"KEYS".to_vec(), b"*".to_vec()]) {
            Reply::Array(k) => k,
            other => panic!("KEYS: {other:?}"),
        };
        sim.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        assert_eq!(
            keys, sim,
            "case {:?}: the keys (real, simulated)",
            self.case
        );
        for k in keys {
            let Reply::Bulk(k) = k else { panic!() };
            let k = String::from_utf8(k).unwrap();
            let ty = self.exact(&["TYPE", &k]);
            match ty {
                Reply::Status(t) if t == "string" => {
                    // Fence counters and markers are exact; a mark or a lease's value too.
                    self.exact(&["GET", &k]);
                }
                Reply::Status(t) if t == "zset" => {
                    self.timed(&["ZRANGE", &k, "0", "-1", "WITHSCORES"]);
                }
                other => panic!("type of {k}: {other:?}"),
            }
            self.timed(&["PTTL", &k]);
        }
    }
}

fn real_now(real: &mut Real) -> i64 {
    match real.cmd(&[b"TIME"]) {
        Reply::Array(t) => {
            let n = |r: &Reply| match r {
                Reply::Bulk(b) => std::str::from_utf8(b).unwrap().parse::<i64>().unwrap(),
                _ => panic!("TIME: {r:?}"),
            };
            n(&t[0]) * 1000 + n(&t[1]) / 1000
        }
        other => panic!("TIME: {other:?}"),
    }
}

fn sleep(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

#[test]
fn strings_expiries_and_errors_match_a_real_node() {
    let mut p = Pair::start();
    p.case("strings");
    p.exact(&["SET", "k", "v", "NX", "PX", "300"]);
    p.exact(&["SET", "k", "w", "NX", "PX", "300"]);
    p.exact(&["GET", "k"]);
    p.timed(&["PTTL", "k"]);
    p.exact(&["SET", "k", "x", "XX"]);
    p.exact(&["PTTL", "k"]);
    p.exact(&["SET", "k", "y", "GET"]);
    p.exact(&["SET", "nokey", "y", "XX"]);
    p.exact(&["SET", "k", "v", "PX", "0"]);
    p.exact(&["SET", "k", "v", "PX", "-5"]);
    p.exact(&["SET", "k", "v", "PX", "abc"]);
    p.exact(&["SET", "k", "v", "NX", "XX"]);
    p.exact(&["SET", "k", "v", "BOGUS"]);
    p.exact(&["SET", "k"]);
    p.exact(&["GET"]);
    p.exact(&["PEXPIRE", "k", "100"]);
    p.timed(&["PTTL", "k"]);
    sleep(250);
    p.exact(&["GET", "k"]);
    p.exact(&["PTTL", "k"]);
    p.exact(&["EXISTS", "k"]);
    p.exact(&["SET", "a", "1"]);
    p.exact(&["SET", "b", "2", "PX", "10000"]);
    p.exact(&["EXISTS", "a", "b", "a", "c"]);
    p.exact(&["MGET", "a", "b", "c"]);
    p.exact(&["DEL", "a", "c", "b"]);
    p.exact(&["INCR", "n"]);
    p.exact(&["INCR", "n"]);
    p.exact(&["SET", "s", "x"]);
    p.exact(&["INCR", "s"]);
    p.exact(&["SET", "big", "9223372036854775807"]);
    p.exact(&["INCR", "big"]);
    p.exact(&["TYPE", "n"]);
    p.exact(&["TYPE", "missing"]);
    // Expiry commands: absolute, in the past, GT/LT/NX/XX on keys with and without a TTL.
    p.exact(&["PEXPIREAT", "n", "1000"]);
    p.exact(&["EXISTS", "n"]);
    p.exact(&["SET", "t", "1"]);
    p.exact(&["PEXPIRE", "t", "5000", "GT"]);
    p.exact(&["PEXPIRE", "t", "5000", "LT"]);
    p.exact(&["PEXPIRE", "t", "9000", "GT"]);
    p.exact(&["PEXPIRE", "t", "1000", "GT"]);
    p.exact(&["PEXPIRE", "t", "1000", "NX"]);
    p.exact(&["PEXPIRE", "t", "2000", "XX"]);
    p.timed(&["PTTL", "t"]);
    p.exact(&["PEXPIRE", "t", "1000", "NX", "XX"]);
    p.exact(&["PEXPIRE", "t", "1000", "GT", "LT"]);
    p.exact(&["PEXPIRE", "t", "x"]);
    p.exact(&["PEXPIRE", "gone", "1000"]);
    p.exact(&["PEXPIRE", "t", "-1"]);
    p.exact(&["EXISTS", "t"]);
    p.exact(&["SET", "z", "1", "PX", "60000"]);
    p.exact(&["SET", "z", "2", "KEEPTTL"]);
    p.timed(&["PTTL", "z"]);
    p.exact(&["SET", "z", "3"]);
    p.exact(&["PTTL", "z"]);
    p.exact(&["ZADD", "zs", "1", "m"]);
    p.exact(&["GET", "zs"]);
    p.exact(&["INCR", "zs"]);
    p.exact(&["MGET", "zs", "z"]);
    p.exact(&["SET", "zs", "now a string", "GET"]);
    p.exact(&["SET", "zs", "now a string"]);
    p.exact(&["TYPE", "zs"]);
    p.exact(&["PING"]);
    p.exact(&["PUBLISH", "ch", "hello"]);
    p.compare_keyspaces();
}

#[test]
fn sorted_sets_match_a_real_node() {
    let mut p = Pair::start();
    p.case("sorted sets");
    p.exact(&["ZADD", "z", "3", "c", "1", "a", "2", "b"]);
    p.exact(&["ZADD", "z", "1", "a"]);
    p.exact(&["ZADD", "z", "5", "a"]);
    p.exact(&["ZADD", "z", "NX", "0", "a", "0", "n"]);
    p.exact(&["ZADD", "z", "XX", "9", "x", "4", "c"]);
    p.exact(&["ZADD", "z", "CH", "4", "c", "7", "b"]);
    p.exact(&["ZADD", "z", "GT", "1", "b"]);
    p.exact(&["ZADD", "z", "NX", "XX", "1", "b"]);
    p.exact(&["ZADD", "z", "1.5", "f", "-2.25", "g", "1700000000123", "t"]);
    p.exact(&["ZADD", "z", "notafloat", "q"]);
    p.exact(&["ZADD", "z", "1"]);
    p.exact(&["ZADD", "z", "nan", "q"]);
    p.exact(&["ZADD", "z", "inf", "top", "-inf", "bottom"]);
    p.exact(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]);
    p.exact(&["ZRANGE", "z", "0", "0"]);
    p.exact(&["ZRANGE", "z", "-1", "-1", "withscores"]);
    p.exact(&["ZRANGE", "z", "5", "2"]);
    p.exact(&["ZRANGE", "z", "100", "200"]);
    p.exact(&["ZRANGE", "z", "-100", "1"]);
    p.exact(&["ZRANGE", "z", "0", "x"]);
    p.exact(&["ZRANGE", "none", "0", "-1"]);
    p.exact(&["ZRANGEBYSCORE", "z", "-inf", "+inf"]);
    p.exact(&["ZRANGEBYSCORE", "z", "(1", "4", "WITHSCORES"]);
    p.exact(&["ZRANGEBYSCORE", "z", "1", "(4", "LIMIT", "1", "2"]);
    p.exact(&["ZRANGEBYSCORE", "z", "x", "4"]);
    p.exact(&["ZSCORE", "z", "f"]);
    p.exact(&["ZSCORE", "z", "t"]);
    p.exact(&["ZSCORE", "z", "nope"]);
    p.exact(&["ZRANK", "z", "c"]);
    p.exact(&["ZRANK", "z", "nope"]);
    p.exact(&["ZCARD", "z"]);
    p.exact(&["ZCARD", "none"]);
    p.exact(&["ZREM", "z", "a", "nope", "g"]);
    p.exact(&["ZREMRANGEBYSCORE", "z", "-inf", "2"]);
    p.exact(&["ZREMRANGEBYRANK", "z", "0", "-3"]);
    p.exact(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]);
    p.exact(&["ZREMRANGEBYRANK", "z", "0", "-1"]);
    p.exact(&["EXISTS", "z"]);
    p.exact(&["SET", "s", "1"]);
    p.exact(&["ZADD", "s", "1", "a"]);
    p.exact(&["ZRANGE", "s", "0", "-1"]);
    p.exact(&["ZADD", "e", "1", "a"]);
    p.exact(&["PEXPIRE", "e", "100"]);
    p.exact(&["ZADD", "e", "2", "b"]);
    p.timed(&["PTTL", "e"]);
    sleep(250);
    p.exact(&["ZCARD", "e"]);
    p.compare_keyspaces();
}

#[test]
fn scripts_and_their_conversions_and_errors_match_a_real_node() {
    let mut p = Pair::start();
    p.case("script cache");
    let body = "return redis.call('get', KEYS[1])";
    let sha = sha1(body.as_bytes());
    p.exact(&["EVALSHA", &sha, "1", "k"]);
    p.exact(&["SCRIPT", "LOAD", body]);
    p.exact(&["SCRIPT", "EXISTS", &sha, "0000"]);
    p.exact(&["SET", "k", "v"]);
    p.exact(&["EVALSHA", &sha, "1", "k"]);
    p.exact(&["EVALSHA", &sha.to_uppercase(), "1", "k"]);
    p.exact(&["SCRIPT", "FLUSH"]);
    p.exact(&["EVALSHA", &sha, "1", "k"]);
    p.exact(&["EVAL", body, "1", "k"]);
    p.exact(&["EVALSHA", &sha, "1", "k"]);
    p.exact(&["EVAL", body, "2", "k"]);
    p.exact(&["EVAL", body, "-1", "k"]);
    p.exact(&["EVAL", body, "x", "k"]);
    p.exact(&["EVAL", body]);
    p.case("conversions");
    for code in [
        "return {1, 'a', false, 2.7, -2.7, {ok='fine'}, true, 5}",
        "return {1, nil, 3}",
        "return nil",
        "return false",
        "return true",
        "return 3.99",
        "return -3.99",
        "return 1e15 + 1",
        "return {}",
        "return {{1, {2, 'x'}}, 'y'}",
        "return redis.status_reply('FINE')",
        "return {ok = 'STATUS'}",
        "return redis.error_reply('fencelock: a message')",
        "return redis.error_reply('-MYCODE with a code')",
        "return {err = 'ERR plain'}",
        "return {err = 'no code here'}",
        "return redis.call('ping')",
        "return redis.call('get', 'missing')",
        "return type(redis.call('get', 'missing'))",
        "return redis.call('set', KEYS[1], 3.0)",
        "redis.call('set', KEYS[1], 1.5) return redis.call('get', KEYS[1])",
        "redis.call('set', KEYS[1], 10 / 4) return redis.call('get', KEYS[1])",
        "redis.call('set', KEYS[1], 1700000000123) return redis.call('get', KEYS[1])",
        "redis.call('set', KEYS[1], 12345678901234567) return redis.call('get', KEYS[1])",
        "return redis.call('pttl', KEYS[1])",
        "return redis.call('exists', 'a', 'b')",
        "return #KEYS + #ARGV",
        "return ARGV",
        "return KEYS",
        "return tostring(1/3) .. ' ' .. tostring(2^53) .. ' ' .. 7 / 2",
        "return tonumber('0x10') + tonumber('  12  ')",
        "return math.floor(-2.5) .. ',' .. math.ceil(2.1)",
        "return string.match('abc.def', '^[^.]*')",
        "return {unpack({1, 2, 3}, 2, 3)}",
        "local ok = redis.pcall('incr', 'str') return ok",
        "local r = redis.pcall('incr', 'str') return type(r) .. ':' .. r.err",
        "local r = redis.call('zrange', 'zz', 0, -1, 'withscores') return r",
        "return redis.call('zscore', 'zz', 'm')",
        "return redis.call('time')[1] > '0'",
        "return redis.sha1hex('abc')",
    ] {
        p.exact(&["SET", "str", "not a number"]);
        p.exact(&["ZADD", "zz", "1.5", "m", "2", "n"]);
        p.exact(&["EVAL", code, "1", "key", "arg1", "arg2"]);
    }
    p.case("errors");
    for code in [
        "return redis.call('incr', KEYS[1])",
        "return redis.call('get', KEYS[2])",
        "local x = 1\nlocal y = nil\nreturn x + y",
        "return redis.call('nosuchcommand')",
        "return redis.call()",
        "return redis.call('set', KEYS[1], {})",
        "return redis.call('set', KEYS[1], nil)",
        "error('plain message')",
        "error({err = 'TABLE error'})",
        "return redis.call('eval', 'return 1', 0)",
        "return (",
        "return redis.call('get')",
        "return redis.call('set', KEYS[1], 'v', 'PX', '0')",
    ] {
        p.exact(&["SET", "a", "x"]);
        p.exact(&["ZADD", "b", "1", "m"]);
        p.exact(&["EVAL", code, "2", "a", "b"]);
    }
    p.compare_keyspaces();
}

const OWNER: &str = "owner-a";
const OTHER: &str = "owner-b";

#[test]
fn fencelocks_mutex_and_fencing_scripts_match_a_real_node() {
    let mut p = Pair::start();
    p.case("acquire_many / extend / release");
    p.load_all();
    p.script("acquire_many", &["r1", "r2"], &[OWNER, "4000"], 0);
    p.script("acquire_many", &["r2", "r3"], &[OTHER, "4000"], 0);
    p.script(
        "acquire_many",
        &["r3", "r2", "w3", "w2"],
        &[OTHER, "4000", "500"],
        0,
    );
    p.script("acquire_many", &["r4"], &[OTHER, "2000", "", "host:42"], 0);
    p.compare_keyspaces();
    p.script("extend", &["r1", "r2"], &[OWNER, "6000"], 0);
    p.script("extend", &["r1", "r2"], &[OTHER, "6000"], 0);
    p.script("extend", &["r1"], &[OWNER, "100000", "1"], 0);
    p.script("announce_ahead", &[], &["6000", "0"], TOL);
    p.script("announce_ahead", &[], &["6000", "0"], TOL);
    p.script("announce_ahead", &[], &["100", "0"], TOL);
    p.script("announce_ahead", &[], &["90000", "0"], TOL);
    p.script("announce_ahead", &[], &["4000", "300"], TOL);
    p.script("announce_ahead", &[], &["4000", "300"], TOL);
    p.script("announce_ahead", &[], &["120000", "300"], TOL);
    p.compare_keyspaces();
    p.script("release", &["r1", "q1", "l1", "w1"], &[OTHER], 0);
    p.script("release", &["r2", "q2", "l2", "w2"], &[OWNER], 0);
    p.script("release", &["r1", "q1", "l1", "w1"], &[OWNER], 0);
    p.script("release", &["r1", "q1", "l1", "w1"], &[OWNER], 0);
    p.exact(&["ZADD", "zlock", "1", "m"]);
    p.script("release", &["zlock", "q", "l", "w"], &[OWNER], 0);
    p.script(
        "release",
        &["r3", "r4", "q3", "q4", "l3", "l4", "w3", "w4"],
        &[OTHER, "client.1"],
        0,
    );
    p.compare_keyspaces();
    p.script("extend", &["zlock"], &[OWNER, "100"], 0);

    p.case("acquire_fenced / write_back / reseed");
    p.load_all();
    let c = "fencelock:fence";
    p.script(
        "acquire_fenced",
        &["x", c, "fencelock:fence:x"],
        &[OWNER, "3000", "17"],
        0,
    );
    p.exact(&["SET", c, "40"]);
    p.script(
        "acquire_fenced",
        &["y", c, "fencelock:fence:y"],
        &[OWNER, "3000", "41"],
        0,
    );
    p.script(
        "acquire_fenced",
        &["z", c, "fencelock:fence:z"],
        &[OWNER, "3000", "30"],
        0,
    );
    p.script(
        "acquire_fenced",
        &["y", c, "fencelock:fence:y"],
        &[OTHER, "3000", "99"],
        0,
    );
    p.script(
        "acquire_fenced",
        &[
            "y",
            "v",
            c,
            "fencelock:fence:y",
            "fencelock:fence:v",
            "wy",
            "wv",
        ],
        &[OTHER, "3000", "99", "700", "host:1"],
        0,
    );
    p.exact(&["SET", "fencelock:fence:u", "1000"]);
    p.script(
        "acquire_fenced",
        &["u", c, "fencelock:fence:u"],
        &[OWNER, "3000", "999"],
        0,
    );
    p.script(
        "acquire_fenced",
        &["u2", c, "fencelock:fence:u2"],
        &[OWNER, "3000", "0"],
        0,
    );
    p.script(
        "acquire_fenced",
        &["u3", c, "fencelock:fence:u3"],
        &[OWNER, "3000"],
        0,
    );
    for bad in ["x1", "012", "-5", "10000000000000000000", "1.5", ""] {
        p.script(
            "acquire_fenced",
            &["bad", c, "fencelock:fence:bad"],
            &[OWNER, "3000", bad],
            0,
        );
    }
    p.script(
        "acquire_fenced",
        &["big", c, "fencelock:fence:big"],
        &[OWNER, "3000", "9999999999999999999"],
        0,
    );
    p.compare_keyspaces();
    p.script(
        "write_back",
        &["x", c, "fencelock:fence:x"],
        &[OWNER, "5"],
        0,
    );
    p.script(
        "write_back",
        &["u", c, "fencelock:fence:u"],
        &[OWNER, "12345678901234567890"],
        0,
    );
    p.script(
        "write_back",
        &["u", c, "fencelock:fence:u"],
        &[OTHER, "99999999999999999999"],
        0,
    );
    p.exact(&["GET", c]);
    // A plain write-back on a node without its counter creates nothing and starts the seed
    // wait (issue 27); an epoch start's creates it.
    p.exact(&["DEL", c]);
    let plain = p.script(
        "write_back",
        &["x", c, "fencelock:fence:x"],
        &[OWNER, "7"],
        0,
    );
    assert_eq!(plain, Reply::Int(3));
    p.exact(&["EXISTS", c, "fencelock:lost"]);
    let epoch = p.script(
        "write_back",
        &["x", c, "fencelock:fence:x"],
        &[OWNER, "7", "epoch"],
        0,
    );
    assert_eq!(epoch, Reply::Int(1));
    p.exact(&["GET", c]);
    p.exact(&["EXISTS", "fencelock:lost"]);
    p.script("reseed", &[c], &["100"], 0);
    p.script("reseed", &["fencelock:fence:new"], &["100"], 0);
    p.script("reseed", &["fencelock:fence:new"], &["50"], 0);
    p.script("reseed", &["fencelock:fence:new"], &["0000200"], 0);
    p.exact(&["SET", "notcounter", "abc"]);
    p.script("reseed", &["notcounter"], &["5"], 0);
    p.exact(&["SET", "lead0", "007"]);
    p.script("reseed", &["lead0"], &["5"], 0);
    p.script("mark", &["fencelock:node"], &["", "new"], 0);
    p.exact(&["SET", "fencelock:node", "old"]);
    p.script("mark", &["fencelock:node"], &["old", "new"], 0);
    p.script("mark", &["fencelock:node"], &["old", "newer"], 0);
    p.compare_keyspaces();
}

#[test]
fn fencelocks_line_permit_reader_and_election_scripts_match_a_real_node() {
    let mut p = Pair::start();
    p.case("acquire_queued");
    p.load_all();
    let c = "fencelock:fence";
    let q = ["lk", "lk:q", "lk:l", "lk:w"];
    p.script(
        "acquire_queued",
        &q,
        &[OWNER, "3000", "c1.a", "10", "2000", "5000"],
        0,
    );
    p.script(
        "acquire_queued",
        &q,
        &[OTHER, "3000", "c2.b", "11", "2000", "5000"],
        0,
    );
    p.script(
        "acquire_queued",
        &q,
        &[OTHER, "3000", "c3.c", "5", "100", "5000"],
        0,
    );
    p.compare_keyspaces();
    p.script("release", &q, &[OWNER, "c1.a"], 0);
    p.script(
        "acquire_queued",
        &q,
        &[OTHER, "3000", "c2.b", "11", "2000", "5000"],
        0,
    );
    sleep(250);
    p.script(
        "acquire_queued",
        &q,
        &[OTHER, "3000", "c2.b", "11", "2000", "5000"],
        0,
    );
    p.script("release", &q, &[OTHER, "c2.b"], 0);
    let qf = ["lf", "lf:q", "lf:l", "lf:w", c, "fencelock:fence:lf"];
    p.exact(&["SET", c, "7"]);
    p.script(
        "acquire_queued",
        &qf,
        &[OWNER, "3000", "c1.a", "1", "2000", "5000", "8", "h"],
        0,
    );
    p.script(
        "acquire_queued",
        &qf,
        &[OTHER, "3000", "c2.b", "2", "2000", "5000", "9"],
        0,
    );
    p.script(
        "acquire_queued",
        &qf,
        &[OTHER, "3000", "c2.b", "2", "2000", "5000", "x9"],
        0,
    );
    p.compare_keyspaces();

    p.case("acquire_permit");
    p.load_all();
    let slots = ["s:0", "s:1"];
    let marks = ["s:0:w", "s:1:w"];
    let keys = |slot: &'static str| -> Vec<&'static str> {
        let mut k = vec![slot, "s:q", "s:l"];
        k.extend(slots);
        k.extend(marks);
        k
    };
    p.script("acquire_permit", &keys("s:0"), &[OWNER, "3000", "2"], 0);
    p.script("acquire_permit", &keys("s:0"), &[OTHER, "3000", "2"], 0);
    p.script(
        "acquire_permit",
        &keys("s:1"),
        &[OTHER, "3000", "2", "c2.x", "4", "2000", "5000"],
        0,
    );
    p.script(
        "acquire_permit",
        &keys("s:1"),
        &[OTHER, "3000", "2", "c3.y", "3", "2000", "5000", "host"],
        0,
    );
    let mut fenced = keys("s:1");
    fenced.extend([c, "fencelock:fence:s:1"]);
    p.exact(&["SET", "fencelock:fence:s:1", "12"]);
    p.script("acquire_permit", &fenced, &[OWNER, "3000", "2"], 0);
    p.compare_keyspaces();

    p.case("readers and writers");
    p.load_all();
    let rk = ["rw", "rw:readers", "rw:writer", "rw:q", "rw:l", "rw:w"];
    p.script("read_acquire", &rk, &["r1", "3000"], 0);
    p.script(
        "read_acquire",
        &rk,
        &["r2", "5000", "c1.r1", "1", "2000", "5000"],
        0,
    );
    p.script("read_extend", &rk[..2], &["r1", "8000"], 0);
    p.script("read_extend", &rk[..2], &["nobody", "8000"], 0);
    p.script("read_extend", &rk[..2], &["r2", "1000", "1"], 0);
    p.compare_keyspaces();
    p.script(
        "read_release",
        &["rw", "rw:readers", "rw:q", "rw:l", "rw:w"],
        &["r1"],
        0,
    );
    p.script(
        "read_release",
        &["rw", "rw:readers", "rw:q", "rw:l", "rw:w"],
        &["r2", "c1.r1"],
        0,
    );
    p.script(
        "read_release",
        &["rw", "rw:readers", "rw:q", "rw:l", "rw:w"],
        &["r2"],
        0,
    );
    p.script("acquire_many", &["rw"], &[OWNER, "3000"], 0);
    p.script("write_record", &["rw", "rw:writer"], &[OWNER, "55"], 0);
    p.script("write_record", &["rw", "rw:writer"], &[OWNER, "44"], 0);
    p.script("write_record", &["rw", "rw:writer"], &[OTHER, "99"], 0);
    p.script("read_acquire", &rk, &["r3", "3000"], 0);
    p.script(
        "read_acquire",
        &rk,
        &["r3", "3000", "c1.w", "1", "2000", "5000"],
        0,
    );
    p.compare_keyspaces();

    p.case("election");
    p.load_all();
    p.script("acquire_many", &["el"], &[OWNER, "3000"], 0);
    for (term, member) in [("5", "a"), ("6", "b"), ("7", "c"), ("8", "d")] {
        p.script(
            "election_append",
            &["el", "el:log"],
            &[OWNER, term, member, "2"],
            0,
        );
    }
    p.script(
        "election_append",
        &["el", "el:log"],
        &[OTHER, "9", "e", "2"],
        0,
    );
    p.exact(&["ZRANGE", "el:log", "0", "-1", "WITHSCORES"]);
    p.compare_keyspaces();
}

#[test]
fn the_announcement_expires_with_the_node_clock_as_on_a_real_node() {
    let mut p = Pair::start();
    p.case("announce over time");
    p.load_all();
    p.script("announce_ahead", &[], &["200", "0"], TOL);
    p.script("announce_ahead", &[], &["100", "0"], TOL);
    p.compare_keyspaces();
    sleep(150);
    p.script("announce_ahead", &[], &["100", "0"], TOL);
    p.compare_keyspaces();
    sleep(500);
    p.exact(&["EXISTS", "fencelock:ttls"]);
    p.script("acquire_many", &["k"], &[OWNER, "150"], 0);
    p.compare_keyspaces();
    sleep(400);
    p.compare_keyspaces();
}

/// A node over `maxmemory` (`noeviction`): the real one filled past a 1 MB limit, the simulated
/// one told it is over. Plain writes and a script's first write are refused with the same error;
/// deletes run, and so does a script that wrote before (Redis 7.0 does not stop a script
/// half-way); fencelock's grant, extension and release scripts answer as on the real node.
#[test]
fn out_of_memory_refusals_match_a_real_node() {
    let mut p = Pair::start();
    p.case("over maxmemory");
    p.load_all();
    let c = "fencelock:fence";
    p.script(
        "acquire_fenced",
        &["held", c, "fencelock:fence:held"],
        &[OWNER, "30000", "17"],
        0,
    );
    p.exact(&["ZADD", "z", "5", "short"]);
    let big = "v".repeat(100_000);
    for i in 0..20 {
        p.run(
            &[
                b"SET".as_slice(),
                format!("big:{i}").as_bytes(),
                big.as_bytes(),
            ],
            0,
        );
    }
    // The real node over its limit; the simulated one told so.
    assert_eq!(
        p.real.cmd(&[b"CONFIG", b"SET", b"maxmemory", b"1mb"]),
        Reply::Status("OK".into())
    );
    p.sim.set_oom(true);
    p.exact(&["SET", "x", "1"]);
    p.exact(&["INCR", "n"]);
    p.exact(&["ZADD", "z", "9", "long"]);
    p.exact(&[
        "EVAL",
        "return redis.call('ZADD', KEYS[1], 9, 'long')",
        "1",
        "z",
    ]);
    p.exact(&[
        "EVAL",
        "redis.call('ZREM', KEYS[1], 'short') return redis.call('ZADD', KEYS[1], 9, 'long')",
        "1",
        "z",
    ]);
    p.exact(&["DEL", "big:0"]);
    p.exact(&["PEXPIRE", "big:1", "60000"]);
    p.script(
        "acquire_fenced",
        &["new", c, "fencelock:fence:new"],
        &[OWNER, "3000", "18"],
        0,
    );
    p.script("acquire_many", &["m1"], &[OWNER, "3000"], 0);
    p.script("extend", &["held"], &[OWNER, "30000"], 0);
    p.script("release", &["held", "q", "l", "w"], &[OWNER], 0);
    assert_eq!(
        p.real.cmd(&[b"CONFIG", b"SET", b"maxmemory", b"0"]),
        Reply::Status("OK".into())
    );
    p.sim.set_oom(false);
    p.exact(&["SET", "x", "1"]);
    p.compare_keyspaces();
}

/// Redis Cluster's routing (`net.rs`): the simulated cluster (three shards of a primary and a
/// replica, the slots split as `redis-cli --cluster create` splits them) against a real one
/// (`fencelock_testkit::RedisCluster`), command by command on the same shards: `CLUSTER
/// KEYSLOT`, `MOVED` from another primary and from the replica, `CROSSSLOT`, a script's key of
/// another slot, and while the slot migrates key by key: `ASK` for a moved key, a command of
/// two keys split by the move, `MOVED` at the importing node without `ASKING`, the command
/// there after `ASKING` (one key, two keys of which one is missing: `TRYAGAIN`), a script on
/// the owner touching a moved key ("non local key"), and `MOVED` to the new owner once the move
/// ends. A redirect's address is compared as the node it names (owner, importer, or other).
#[test]
fn cluster_redirects_and_refusals_match_a_real_cluster() {
    use fencelock_sim::net::World;
    use fencelock_testkit::RedisCluster;

    let cluster = RedisCluster::start().expect("a real cluster starts");
    let world = World::new(6, 0, false);
    world.cluster_up();
    let tag = "{conf}";
    let key = |k: &str| format!("{tag}{k}");
    let slot = cluster.key_slot(tag).unwrap();
    assert_eq!(fencelock_sim::slots::key_slot(tag.as_bytes()), slot);
    // Shard k: its primary's node index, real and simulated.
    let shard_of = |s: u16| usize::from(s) * 3 / 16384;
    let real_primary = |k: usize| cluster.slot_owner([0u16, 5461, 10923][k]).unwrap();
    let (k0, k1) = (shard_of(slot), (shard_of(slot) + 1) % 3);
    let (owner, other) = (real_primary(k0), real_primary(k1));
    let replica = cluster.replica_of(owner).unwrap();
    let mut real: Vec<Real> = (0..6)
        .map(|i| {
            let stream =
                TcpStream::connect(("127.0.0.1", cluster.node(i).port())).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            Real {
                stream,
                buf: Vec::new(),
            }
        })
        .collect();
    // The simulated node of each real one: shard k's primary is node 2k, its replica 2k + 1.
    let sim_of = |i: usize| {
        let k = (0..3).find(|&k| real_primary(k) == i);
        match k {
            Some(k) => 2 * k,
            None => {
                2 * (0..3)
                    .find(|&k| cluster.replica_of(real_primary(k)).unwrap() == i)
                    .unwrap()
                    + 1
            }
        }
    };
    // A redirect's address as the role of the node it names.
    let role =
        |r: &Reply, addr_of: &dyn Fn(&str) -> Option<usize>, (o, imp): (usize, usize)| -> Reply {
            let Reply::Error(e) = r else { return r.clone() };
            let mut words: Vec<String> = e.split(' ').map(str::to_string).collect();
            if matches!(words[0].as_str(), "MOVED" | "ASK") && words.len() == 3 {
                words[2] = match addr_of(&words[2]) {
                    Some(n) if n == o => "<owner>".into(),
                    Some(n) if n == imp => "<importer>".into(),
                    _ => "<other>".into(),
                };
            }
            Reply::Error(words.join(" "))
        };
    let real_addr = |a: &str| {
        let port: u16 = a.rsplit(':').next()?.parse().ok()?;
        (0..6).find(|&i| cluster.node(i).port() == port)
    };
    let sim_addr = |a: &str| {
        a.strip_prefix("sim")?
            .split(':')
            .next()?
            .parse::<usize>()
            .ok()
    };
    let none = (usize::MAX, usize::MAX);
    let mut step = 0;
    let mut check =
        |real: &mut Vec<Real>, node: usize, args: &[&str], asking: bool, roles: (usize, usize)| {
            step += 1;
            let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            if asking {
                assert_eq!(real[node].cmd(&[b"ASKING"]), Reply::Status("OK".into()));
            }
            let r = real[node].cmd(&bytes);
            let s = world.command(sim_of(node), &bytes, asking);
            let (r, s) = (
                role(&r, &real_addr, roles),
                role(
                    &s,
                    &sim_addr,
                    if roles == none {
                        none
                    } else {
                        (sim_of(roles.0), sim_of(roles.1))
                    },
                ),
            );
            assert_eq!(
                r, s,
                "step {step}: {args:?} on node {node} (asking: {asking})"
            );
            r
        };

    for k in [
        "foo",
        "{user1000}.following",
        "foo{}{bar}",
        "{fencelock}job",
        "fencelock:holder:{conf}x",
    ] {
        check(&mut real, owner, &["CLUSTER", "KEYSLOT", k], false, none);
    }
    let far = (0..)
        .map(|n| format!("far{n}"))
        .find(|k| shard_of(fencelock_sim::slots::key_slot(k.as_bytes())) == k1)
        .unwrap();
    let roles = (owner, other);
    check(&mut real, owner, &["SET", &key("a"), "v"], false, roles);
    check(&mut real, owner, &["SET", &key("b"), "w"], false, roles);
    check(&mut real, other, &["GET", &key("a")], false, roles);
    check(&mut real, replica, &["GET", &key("a")], false, roles);
    check(&mut real, owner, &["MGET", &key("a"), &far], false, roles);
    check(
        &mut real,
        owner,
        &["EVAL", "return redis.call('GET', KEYS[1])", "1", &key("a")],
        false,
        roles,
    );
    check(
        &mut real,
        owner,
        &[
            "EVAL",
            "return redis.call('GET', ARGV[1])",
            "1",
            &key("a"),
            &far,
        ],
        false,
        roles,
    );

    // The slot migrates to shard k1; `a` moves first.
    assert_eq!(cluster.begin_move(slot, other).unwrap(), owner);
    world.begin_move(slot, sim_of(other));
    assert_eq!(
        cluster
            .migrate(slot, owner, other, &key("a"), false)
            .unwrap(),
        "OK"
    );
    assert_eq!(
        world.migrate(slot, key("a").as_bytes(), false),
        fencelock_sim::Migrated::Moved
    );
    check(&mut real, owner, &["GET", &key("a")], false, roles);
    check(&mut real, owner, &["GET", &key("b")], false, roles);
    check(
        &mut real,
        owner,
        &["MGET", &key("a"), &key("b")],
        false,
        roles,
    );
    check(&mut real, owner, &["GET", &key("nowhere")], false, roles);
    check(&mut real, other, &["GET", &key("a")], false, roles);
    check(&mut real, other, &["GET", &key("a")], true, roles);
    check(
        &mut real,
        other,
        &["MGET", &key("a"), &key("b")],
        true,
        roles,
    );
    check(
        &mut real,
        other,
        &["EVAL", "return redis.call('GET', KEYS[1])", "1", &key("a")],
        true,
        roles,
    );
    check(
        &mut real,
        owner,
        &[
            "EVAL",
            "return redis.call('GET', ARGV[1])",
            "1",
            &key("b"),
            &key("a"),
        ],
        false,
        roles,
    );
    check(
        &mut real,
        owner,
        &[
            "EVAL",
            "return redis.call('GET', ARGV[1])",
            "1",
            &key("b"),
            &key("b"),
        ],
        false,
        roles,
    );

    // The rest moves; the slot changes owner.
    assert_eq!(
        cluster
            .migrate(slot, owner, other, &key("b"), false)
            .unwrap(),
        "OK"
    );
    assert_eq!(
        world.migrate(slot, key("b").as_bytes(), false),
        fencelock_sim::Migrated::Moved
    );
    cluster.finish_move(slot, owner, other).unwrap();
    world.finish_move(slot);
    check(&mut real, owner, &["GET", &key("b")], false, (other, owner));
    check(
        &mut real,
        other,
        &["MGET", &key("a"), &key("b")],
        false,
        (other, owner),
    );
}

/// The eviction policy as the client reads it (`INFO memory`'s `maxmemory_policy`) and as an
/// operator sets it (`CONFIG SET`/`GET maxmemory-policy`, a policy Redis does not know refused).
#[test]
fn the_eviction_policy_reads_as_on_a_real_node() {
    let mut p = Pair::start();
    p.case("maxmemory-policy");
    let policy = |p: &mut Pair| {
        let now = real_now(&mut p.real);
        let field = |r: Reply| match r {
            Reply::Bulk(b) => String::from_utf8_lossy(&b)
                .lines()
                .find_map(|l| l.strip_prefix("maxmemory_policy:").map(str::to_string)),
            _ => None,
        };
        let real = field(p.real.cmd(&[b"INFO", b"memory"]));
        let sim = field(p.sim.exec(now, &[b"INFO".to_vec(), b"memory".to_vec()]));
        assert_eq!(real, sim, "INFO memory's maxmemory_policy");
        real
    };
    assert_eq!(policy(&mut p).as_deref(), Some("noeviction"));
    p.exact(&["CONFIG", "GET", "maxmemory-policy"]);
    p.exact(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    p.exact(&["CONFIG", "GET", "maxmemory-policy"]);
    assert_eq!(policy(&mut p).as_deref(), Some("allkeys-lru"));
    p.exact(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
    assert_eq!(policy(&mut p).as_deref(), Some("volatile-ttl"));
    p.exact(&["CONFIG", "SET", "maxmemory-policy", "sometimes"]);
    p.exact(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    assert_eq!(policy(&mut p).as_deref(), Some("noeviction"));
}
