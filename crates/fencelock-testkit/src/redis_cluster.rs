//! A Redis Cluster: three primaries and three replicas, all real `redis-server` processes on
//! loopback ports, joined by `redis-cli --cluster create`.

use std::io;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::{RedisNode, RedisOptions};

/// How long a node may go unanswered before the others call it failing (`cluster-node-timeout`):
/// short, so that a replica takes over a killed primary within a few seconds.
pub const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// A cluster of six nodes, `--cluster-replicas 1`: which node is the primary of a slot is what
/// the cluster says now ([`slot_owner`](Self::slot_owner)), and changes with each failover or
/// slot move. Every node runs with `cluster-node-timeout` [`CLUSTER_NODE_TIMEOUT`] and without
/// persistence.
///
/// Dropping the cluster kills every process.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// let cluster = fencelock_testkit::RedisCluster::start()?;
/// let url = cluster.url(); // redis+cluster://127.0.0.1:<p>,127.0.0.1:<p>,127.0.0.1:<p>
/// let slot = cluster.key_slot("{fencelock}")?;
/// let owner = cluster.slot_owner(slot)?;
/// cluster.node(owner).kill()?;
/// let new = cluster.wait_for_owner_change(slot, owner, std::time::Duration::from_secs(30))?;
/// # let _ = (url, new); Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisNode>,
}

impl RedisCluster {
    /// Starts six cluster-enabled nodes, joins them with `redis-cli --cluster create
    /// --cluster-replicas 1`, and waits until every node says `cluster_state:ok` and knows all
    /// six, and every primary has its replica in sync.
    ///
    /// # Errors
    ///
    /// Fails when a node does not start, `redis-cli` is missing or fails, or the cluster does
    /// not form within 60 s.
    pub fn start() -> io::Result<RedisCluster> {
        let options = RedisOptions::default().extra_args(vec![
            "--cluster-enabled".into(),
            "yes".into(),
            // Relative: in the node's own directory (its working directory).
            "--cluster-config-file".into(),
            "nodes.conf".into(),
            "--cluster-node-timeout".into(),
            CLUSTER_NODE_TIMEOUT.as_millis().to_string(),
        ]);
        let nodes = crate::RedisNodes::start_with(6, options)?.into_nodes();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = create.output().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("redis-cli --cluster create: {e} (apt-get install redis-tools)"),
            )
        })?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(60);
        wait(deadline, "every node to see the cluster ok", || {
            cluster.nodes.iter().all(|n| {
                let info = n.cli(&["CLUSTER", "INFO"]).unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:6")
            })
        })?;
        wait(deadline, "every primary's replica in sync", || {
            cluster
                .nodes
                .iter()
                .filter(|n| n.cli(&["ROLE"]).unwrap_or_default().starts_with("master"))
                .all(|n| {
                    let info = n.cli(&["INFO", "replication"]).unwrap_or_default();
                    info.contains("connected_slaves:1") && info.contains("state=online")
                })
        })?;
        Ok(cluster)
    }

    /// `redis+cluster://` with the first three nodes as seeds and the default tag.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..3]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Node `i` of six.
    ///
    /// # Panics
    ///
    /// When `i > 5`.
    pub fn node(&self, i: usize) -> &RedisNode {
        &self.nodes[i]
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of the first node that answers).
    ///
    /// # Errors
    ///
    /// When no node answers.
    pub fn key_slot(&self, key: &str) -> io::Result<u16> {
        self.any(|n| n.cli(&["CLUSTER", "KEYSLOT", key]))?
            .trim()
            .parse()
            .map_err(|e| io::Error::other(format!("CLUSTER KEYSLOT: {e}")))
    }

    /// Which node the first node that answers names as the primary serving `slot`
    /// (`CLUSTER NODES`), without the nodes it flags as failing.
    ///
    /// # Errors
    ///
    /// When no node answers, or none serves the slot.
    pub fn slot_owner(&self, slot: u16) -> io::Result<usize> {
        let table = self.any(|n| n.cli(&["CLUSTER", "NODES"]))?;
        self.owner_in(&table, slot)
            .ok_or_else(|| io::Error::other(format!("no primary serves slot {slot}:\n{table}")))
    }

    /// The replica of node `primary` (the node whose `CLUSTER NODES` line names it as its
    /// primary).
    ///
    /// # Errors
    ///
    /// When no node answers, or `primary` has no replica.
    pub fn replica_of(&self, primary: usize) -> io::Result<usize> {
        let id = self.nodes[primary].cli(&["CLUSTER", "MYID"])?;
        let table = self.any(|n| n.cli(&["CLUSTER", "NODES"]))?;
        table
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(' ').collect();
                (f.len() > 3 && f[3] == id).then(|| self.index_of(f[1]))?
            })
            .next()
            .ok_or_else(|| io::Error::other(format!("node {primary} has no replica:\n{table}")))
    }

    /// Waits until every running node names the same primary for `slot`, other than `old`, and
    /// that node says `ROLE master`; returns it.
    ///
    /// # Errors
    ///
    /// When that does not happen within `timeout`.
    pub fn wait_for_owner_change(
        &self,
        slot: u16,
        old: usize,
        timeout: Duration,
    ) -> io::Result<usize> {
        let mut found = None;
        wait(
            Instant::now() + timeout,
            "another primary for the slot",
            || {
                let views: Vec<Option<usize>> = self
                    .nodes
                    .iter()
                    .filter(|n| n.is_running())
                    .map(|n| {
                        let table = n.cli(&["CLUSTER", "NODES"]).ok()?;
                        self.owner_in(&table, slot)
                    })
                    .collect();
                let Some(Some(owner)) = views.first().copied() else {
                    return false;
                };
                if owner == old || views.iter().any(|v| *v != Some(owner)) {
                    return false;
                }
                found = Some(owner);
                self.nodes[owner]
                    .cli(&["ROLE"])
                    .unwrap_or_default()
                    .starts_with("master")
            },
        )?;
        found.ok_or_else(|| io::Error::other("no new owner"))
    }

    /// Moves `slot` from its owner to the primary `to`, keys and all, as `redis-cli --cluster
    /// reshard` does for each slot: `SETSLOT IMPORTING` on `to`, `SETSLOT MIGRATING` on the
    /// owner, `MIGRATE` of every key (one at a time, waiting `between` before each and before
    /// the end, so that clients meet the slot half moved), then `SETSLOT NODE` on `to`, the old
    /// owner and every other primary.
    ///
    /// # Errors
    ///
    /// When a step fails (the message names it).
    pub fn move_slot(&self, slot: u16, to: usize, between: Duration) -> io::Result<()> {
        let from = self.begin_move(slot, to)?;
        loop {
            let keys = self.keys_in_slot(from, slot)?;
            if keys.is_empty() {
                break;
            }
            for key in keys {
                thread::sleep(between);
                self.migrate(slot, from, to, &key, false)?;
            }
        }
        thread::sleep(between);
        self.finish_move(slot, from, to)
    }

    /// Opens the move of `slot` from its owner to the primary `to` (`SETSLOT IMPORTING` on `to`,
    /// `SETSLOT MIGRATING` on the owner); returns the owner. From then on the owner answers
    /// `ASK` for a command whose keys it does not hold.
    ///
    /// # Errors
    ///
    /// When a step fails (the message names it).
    pub fn begin_move(&self, slot: u16, to: usize) -> io::Result<usize> {
        let from = self.slot_owner(slot)?;
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let src_id = src.cli(&["CLUSTER", "MYID"])?;
        let dst_id = dst.cli(&["CLUSTER", "MYID"])?;
        let slot_s = slot.to_string();
        step(
            slot,
            "SETSLOT IMPORTING",
            dst.cli(&["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &src_id]),
        )?;
        step(
            slot,
            "SETSLOT MIGRATING",
            src.cli(&["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &dst_id]),
        )?;
        Ok(from)
    }

    /// The keys node `node` holds in `slot` (`CLUSTER GETKEYSINSLOT`, up to 1000).
    ///
    /// # Errors
    ///
    /// When the node does not answer.
    pub fn keys_in_slot(&self, node: usize, slot: u16) -> io::Result<Vec<String>> {
        let keys = step(
            slot,
            "GETKEYSINSLOT",
            self.nodes[node].cli(&["CLUSTER", "GETKEYSINSLOT", &slot.to_string(), "1000"]),
        )?;
        Ok(keys
            .lines()
            .filter(|k| !k.is_empty())
            .map(str::to_string)
            .collect())
    }

    /// `MIGRATE` of `key` from node `from` to node `to` (with `REPLACE` when `replace`: what
    /// `redis-cli --cluster reshard --cluster-replace` does when the target holds the key
    /// already). Returns the reply: `OK`, or `NOKEY` when `from` no longer holds it.
    ///
    /// # Errors
    ///
    /// When the node does not answer, or refuses (`BUSYKEY` without `replace`: the message
    /// holds it).
    pub fn migrate(
        &self,
        slot: u16,
        from: usize,
        to: usize,
        key: &str,
        replace: bool,
    ) -> io::Result<String> {
        let port = self.nodes[to].port().to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, key, "0", "5000"];
        if replace {
            args.push("REPLACE");
        }
        let reply = step(slot, "MIGRATE", self.nodes[from].cli(&args))?;
        if reply == "OK" || reply == "NOKEY" {
            Ok(reply)
        } else {
            Err(io::Error::other(format!(
                "moving slot {slot}: MIGRATE {key}: {reply}"
            )))
        }
    }

    /// Closes the move of `slot` from node `from` to node `to`: `SETSLOT NODE` on `to`, on
    /// `from` and on every other running primary.
    ///
    /// # Errors
    ///
    /// When a step fails (the message names it).
    pub fn finish_move(&self, slot: u16, from: usize, to: usize) -> io::Result<()> {
        let dst_id = self.nodes[to].cli(&["CLUSTER", "MYID"])?;
        let slot_s = slot.to_string();
        let setslot = ["CLUSTER", "SETSLOT", &slot_s, "NODE", &dst_id];
        step(
            slot,
            "SETSLOT NODE on the new owner",
            self.nodes[to].cli(&setslot),
        )?;
        step(
            slot,
            "SETSLOT NODE on the old owner",
            self.nodes[from].cli(&setslot),
        )?;
        for (i, n) in self.nodes.iter().enumerate() {
            if i != from
                && i != to
                && n.is_running()
                && n.cli(&["ROLE"]).unwrap_or_default().starts_with("master")
            {
                step(slot, "SETSLOT NODE on another primary", n.cli(&setslot))?;
            }
        }
        Ok(())
    }

    fn any(&self, ask: impl Fn(&RedisNode) -> io::Result<String>) -> io::Result<String> {
        let mut last = io::Error::other("no node runs");
        for n in self.nodes.iter().filter(|n| n.is_running()) {
            match ask(n) {
                Ok(answer) => return Ok(answer),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The node whose `CLUSTER NODES` line in `table` is a primary, not failing, serving `slot`.
    fn owner_in(&self, table: &str, slot: u16) -> Option<usize> {
        table.lines().find_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                return None;
            }
            let serves = f[8..].iter().any(|range| {
                if range.starts_with('[') {
                    return false;
                }
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
            });
            serves.then(|| self.index_of(f[1])).flatten()
        })
    }

    /// The node at `ip:port@cport[,hostname]`.
    fn index_of(&self, addr: &str) -> Option<usize> {
        let port: u16 = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
        self.nodes.iter().position(|n| n.port() == port)
    }
}

fn wait(deadline: Instant, what: &str, mut ready: impl FnMut() -> bool) -> io::Result<()> {
    loop {
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("timed out waiting for {what}"),
            ));
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// A step of a slot move, its error naming the slot and the step.
fn step(slot: u16, what: &str, r: io::Result<String>) -> io::Result<String> {
    r.map_err(|e| io::Error::other(format!("moving slot {slot}: {what}: {e}")))
}
