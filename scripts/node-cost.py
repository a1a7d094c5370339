#!/usr/bin/env python3
"""What one lock cycle costs a Redis node, in CPU, for each way of taking the lock.

    scripts/node-cost.py [--cycles N] [--rounds R]

Starts its own redis-server (from PATH) on a free loopback port, with no persistence, and for
each form below runs N acquire + release cycles on random keys, pipelined 200 deep on one
connection (so that the socket's cost per command is small, as under the bench's `par`), and
prints the node's CPU time (`INFO cpu`, user + system) per cycle. The release is the same
compare-and-delete script in every form (the raw baseline's), so the differences are the
acquisitions':

  set       SET k owner NX PX 10000: a plain lock, as the raw baseline and fencelock's plain
            locks of one key take it
  fenced    the library's fencing-mode acquisition script (lua/acquire_fenced.lua with the
            fragments scripts.rs puts before it), one key, a proposal the node accepts
  slim      the same script with a slimmer body for one key (one MGET for the counters, SET NX
            in place of EXISTS and SET, the same announcement: four calls where it makes six),
            kept here only to measure what trimming the script could buy
  multi     MULTI / SET NX PX / ZADD XX GT CH / ZSCORE / EXEC: the cheapest atomic form of a grant
            that also raises a counter to a proposal we could find on Redis 7.0 (a counter kept
            as a one-member sorted set, which fencelock does not do: it is here to bound what
            any one-round fencing could cost)

docs/notes/performance-log.md ("What a fenced cycle costs a node") has the figures and what they mean.
Needs only python3's standard library and redis-server; not part of the build or the tests.
"""

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "fencelock",
                   "src", "redis", "lua")
# The fragments of ACQUIRE_FENCED_LUA, in the order scripts.rs concatenates them.
FENCED = ["announce", "hold", "counters", "fence", "keys", "wait_marks", "acquire_fenced"]
RELEASE = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
           "return redis.call('del', KEYS[1]) end return 0")
BATCH = 200
# The slimmer body of the form `slim`, after the same fragments; replies as acquire_fenced.lua.
SLIM = """
local p = proposal(ARGV[3])
if not p then return redis.error_reply('bad proposal') end
local v = redis.call('mget', KEYS[2], KEYS[3])
local best, exists = v[1] or '0', v[1] and 1 or 0
if v[2] then
  exists = 1
  if bigger(v[2], best) then best = v[2] end
end
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0, best, exists, 0} end
announce(ARGV[2])
if exists == 0 or not bigger(p, best) then return {1, best, exists, 0} end
redis.call('set', KEYS[2], p)
if v[2] then redis.call('del', KEYS[3]) end
return {1, p, 1, 1}
"""


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """A RESP connection that can pipeline: send bytes, then read replies one by one."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def reply(self):
        while True:
            parsed = self._parse(0)
            if parsed is not None:
                value, end = parsed
                self.buf = self.buf[end:]
                if isinstance(value, Exception):
                    raise value
                return value
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("redis-server closed the connection")
            self.buf += chunk

    def _parse(self, i):
        b = self.buf
        j = b.find(b"\r\n", i)
        if j < 0:
            return None
        kind, line = b[i:i + 1], b[i + 1:j]
        if kind == b"-":
            return RuntimeError(line.decode()), j + 2
        if kind in (b"+", b":"):
            return line, j + 2
        if kind == b"$":
            n = int(line)
            if n < 0:
                return None, j + 2
            if len(b) < j + 2 + n + 2:
                return None
            return b[j + 2:j + 2 + n], j + 4 + n
        if kind == b"*":
            n, k, items = int(line), j + 2, []
            for _ in range(max(n, 0)):
                parsed = self._parse(k)
                if parsed is None:
                    return None
                items.append(parsed[0])
                k = parsed[1]
            return items, k
        raise ValueError("unexpected reply %r" % b[i:j])

    def cmd(self, *args):
        self.send(enc(*args))
        return self.reply()


def node_cpu(conn):
    info = conn.cmd("INFO", "cpu").decode()
    fields = dict(l.split(":", 1) for l in info.split("\r\n") if ":" in l)
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    port = free_port()
    data = tempfile.mkdtemp(prefix="node-cost-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", data],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                conn = Conn(port)
                conn.cmd("PING")
                break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit("node-cost: redis-server did not answer on port %d" % port)
        fenced_lua = "".join(open(os.path.join(LUA, f + ".lua")).read() for f in FENCED)
        fenced = conn.cmd("SCRIPT", "LOAD", fenced_lua).decode()
        slim_lua = "".join(open(os.path.join(LUA, f + ".lua")).read() for f in FENCED[:-1]) + SLIM
        slim = conn.cmd("SCRIPT", "LOAD", slim_lua).decode()
        release = conn.cmd("SCRIPT", "LOAD", RELEASE).decode()
        # A node counter to accept proposals above, and the TTL's quarantine mark far off, so
        # that the announcement ends at its mark, as it does for all but one grant per TTL.
        conn.cmd("SET", "fencelock:fence", "1")
        conn.cmd("SET", "fencelock:ttls:10000", "1", "PX", "1000000000")
        conn.cmd("ZADD", "counter", "1", "t")
        proposal = [int(time.time() * 1e6)]

        def acquire(form, key):
            proposal[0] += 1
            if form == "set":
                return enc("SET", key, "owner", "NX", "PX", 10000), 1
            if form in ("fenced", "slim"):
                return enc("EVALSHA", fenced if form == "fenced" else slim, 3, key, "fencelock:fence",
                           "fencelock:fence:" + key, "owner", 10000, proposal[0], "", ""), 1
            return (enc("MULTI") + enc("SET", key, "owner", "NX", "PX", 10000)
                    + enc("ZADD", "counter", "XX", "GT", "CH", proposal[0], "t")
                    + enc("ZSCORE", "counter", "t") + enc("EXEC")), 5

        def cycles(form, n):
            for _ in range(n // BATCH):
                keys = ["k:%d" % random.randrange(10 ** 12) for _ in range(BATCH)]
                replies = 0
                data = []
                for k in keys:
                    req, r = acquire(form, k)
                    data.append(req)
                    replies += r
                conn.send(b"".join(data))
                last = None
                for _ in range(replies):
                    last = conn.reply()
                if form in ("fenced", "slim") and last[3] != b"1":
                    sys.exit("node-cost: the %s script did not accept its proposal: %r" % (form, last))
                conn.send(b"".join(enc("EVALSHA", release, 1, k, "owner") for k in keys))
                for _ in range(BATCH):
                    if conn.reply() != b"1":
                        sys.exit("node-cost: a release found its key gone")

        print("node CPU per acquire + release cycle, %d cycles each, one node" % args.cycles)
        for r in range(1, args.rounds + 1):
            for form in ["set", "fenced", "slim", "multi"]:
                cycles(form, 10 * BATCH)  # warm up
                before = node_cpu(conn)
                cycles(form, args.cycles)
                spent = node_cpu(conn) - before
                print("round %d  %-7s %6.2f us" % (r, form, spent / args.cycles * 1e6))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
