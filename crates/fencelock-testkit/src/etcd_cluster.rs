//! A static etcd cluster of N members on loopback ports.

use std::collections::HashMap;
use std::io;
use std::ops::Index;
use std::slice;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use crate::etcd_member::{EtcdMember, START_TIMEOUT};
use crate::http;
use crate::ports::free_port;
use crate::process::retry_addr_in_use;

/// Start attempts with fresh ports when another process took one first.
const START_TRIES: usize = 5;

/// N `etcd` members forming one cluster through a static
/// `--initial-cluster` on loopback ports, each with its own client port,
/// peer port and data directory in a shared temporary directory.
///
/// Quick elections (heartbeat 50 ms, election timeout 500 ms), so a killed
/// or paused leader is replaced within about a second. Dropping the cluster
/// kills and reaps every member and removes the directory; during a panic
/// the last 40 log lines of each member go to stderr.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// use std::time::Duration;
/// let cluster = fencelock_testkit::EtcdCluster::start(3)?;
/// let leader = cluster.wait_for_leader(Duration::from_secs(10))?;
/// cluster.member(leader).pause()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    // Last, so the processes are gone before their directories.
    _dir: TempDir,
}

impl EtcdCluster {
    /// Starts `n` members and waits until every one reports itself healthy
    /// (serving, with a leader).
    ///
    /// # Errors
    ///
    /// Fails when `etcd` is not installed, `n` is 0, or the cluster does
    /// not become healthy within 30 s; the error carries the log of the
    /// member that failed.
    pub fn start(n: usize) -> io::Result<EtcdCluster> {
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an etcd cluster needs at least one member",
            ));
        }
        retry_addr_in_use(START_TRIES, || EtcdCluster::start_once(n, &|_| None))
    }

    /// Starts one member that also serves TLS on a port of its own (see `etcd_tls.rs`).
    pub(crate) fn start_tls(flags: Vec<String>) -> io::Result<(EtcdCluster, u16)> {
        retry_addr_in_use(START_TRIES, || {
            let port = free_port()?;
            let cluster = EtcdCluster::start_once(1, &|_| Some((port, flags.clone())))?;
            Ok((cluster, port))
        })
    }

    /// `tls(i)`: the TLS port and flags of member `i`, if it serves TLS.
    fn start_once(
        n: usize,
        tls: &dyn Fn(usize) -> Option<(u16, Vec<String>)>,
    ) -> io::Result<EtcdCluster> {
        static CLUSTERS: AtomicU64 = AtomicU64::new(0);
        let dir = tempfile::Builder::new()
            .prefix("fencelock-etcd-")
            .tempdir()?;
        let mut ports = Vec::with_capacity(n);
        for i in 0..n {
            ports.push((format!("m{i}"), free_port()?, free_port()?));
        }
        let initial_cluster = ports
            .iter()
            .map(|(name, _, peer)| EtcdMember::peer_entry(name, *peer))
            .collect::<Vec<_>>()
            .join(",");
        // A token unique per cluster keeps members of different test
        // clusters from ever joining each other.
        let token = format!(
            "fencelock-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        );
        let members = ports
            .into_iter()
            .enumerate()
            .map(|(i, (name, client, peer))| {
                let member = EtcdMember::new(
                    name,
                    client,
                    peer,
                    initial_cluster.clone(),
                    token.clone(),
                    dir.path(),
                );
                match tls(i) {
                    Some((port, flags)) => member.with_tls(port, flags),
                    None => member,
                }
            })
            .collect();
        let cluster = EtcdCluster { members, _dir: dir };
        for member in &cluster.members {
            member.spawn()?;
        }
        cluster.wait_healthy(START_TIMEOUT)?;
        Ok(cluster)
    }

    /// Waits until every running member reports itself healthy, and learns
    /// each member's raft id for [`leader_index`](Self::leader_index).
    ///
    /// # Errors
    ///
    /// Fails when a member exits meanwhile (kind `AddrInUse` if its port was
    /// taken) or `timeout` passes; the error carries logs.
    pub fn wait_healthy(&self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let running: Vec<&EtcdMember> =
                self.members.iter().filter(|m| m.is_running()).collect();
            for member in &self.members {
                member.check_exited()?;
            }
            if !running.is_empty() && running.iter().all(|m| m.is_healthy()) {
                for member in &running {
                    member.status()?;
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| {
                        let log = m.log();
                        let lines: Vec<&str> = log.lines().collect();
                        format!(
                            "--- {} ---\n{}",
                            m.name(),
                            lines[lines.len().saturating_sub(15)..].join("\n")
                        )
                    })
                    .collect();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "etcd cluster not healthy within {timeout:?}; logs:\n{}",
                        logs.join("\n")
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts every member that is not running (e.g. after the cluster lost
    /// its quorum) and waits until all are healthy.
    ///
    /// # Errors
    ///
    /// As [`wait_healthy`](Self::wait_healthy), with a 30 s timeout.
    pub fn restart_all(&self) -> io::Result<()> {
        for member in &self.members {
            if !member.is_running() {
                member.spawn()?;
            }
        }
        self.wait_healthy(START_TIMEOUT)
    }

    /// Index of the member that the reachable members name as leader, or
    /// `None` when none of them knows a leader (no quorum, election under
    /// way, or all paused or down). Each paused member costs up to 0.5 s.
    ///
    /// # Errors
    ///
    /// None at present; the `Result` leaves room for probes that can fail.
    pub fn leader_index(&self) -> io::Result<Option<usize>> {
        let mut votes: HashMap<String, usize> = HashMap::new();
        for member in self.members.iter().filter(|m| m.is_running()) {
            if let Ok(leader) = member.status() {
                if leader != "0" {
                    *votes.entry(leader).or_default() += 1;
                }
            }
        }
        let Some((leader, _)) = votes.into_iter().max_by_key(|(_, count)| *count) else {
            return Ok(None);
        };
        Ok(self
            .members
            .iter()
            .position(|m| m.known_member_id().as_deref() == Some(leader.as_str())))
    }

    /// Polls [`leader_index`](Self::leader_index) until a leader is known.
    ///
    /// # Errors
    ///
    /// Fails with [`io::ErrorKind::TimedOut`] when no leader appears within
    /// `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.leader_index()? {
                return Ok(i);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no etcd leader within {timeout:?}"),
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for a leader and picks a follower: its index and the endpoints with it listed
    /// first (a client that starts on the first member then starts on the follower, the member
    /// a test stops next).
    ///
    /// # Errors
    ///
    /// As [`wait_for_leader`](Self::wait_for_leader).
    pub fn follower_first(&self, timeout: Duration) -> io::Result<(usize, Vec<String>)> {
        let leader = self.wait_for_leader(timeout)?;
        let follower = (leader + 1) % self.members.len();
        let mut endpoints = self.endpoints();
        endpoints.swap(0, follower);
        Ok((follower, endpoints))
    }

    /// What an operator must do to bring back a member whose data directory was lost (etcd
    /// refuses it under its old identity: [`EtcdMember::start_expecting_refusal`]): kills
    /// member `i` and deletes its data directory, removes it from the cluster (`etcdctl member
    /// remove`), adds it back as a new member with the same peer URL (`etcdctl member add`), and
    /// starts it with `--initial-cluster-state existing` on an empty data directory. It then
    /// catches up from the leader. Waits until every running member is healthy.
    ///
    /// # Errors
    ///
    /// Fails when no other member answers the membership calls (a quorum is needed), or the
    /// member does not serve within 30 s.
    pub fn replace_member_empty(&self, i: usize) -> io::Result<()> {
        let member = &self.members[i];
        member.kill_and_wipe()?;
        let via = self
            .members
            .iter()
            .enumerate()
            .find(|(j, m)| *j != i && m.is_running())
            .map(|(_, m)| m.client_port())
            .ok_or_else(|| io::Error::other("no other etcd member runs"))?;
        let call = |path: &str, body: &str| -> io::Result<Value> {
            let (code, reply) = http::request(via, path, Some(body), Duration::from_secs(5))?;
            if code != 200 {
                return Err(io::Error::other(format!(
                    "etcd {path} answered HTTP {code}: {reply}"
                )));
            }
            serde_json::from_str(&reply).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        };
        let peer_url = format!("http://127.0.0.1:{}", member.peer_port());
        let list = call("/v3/cluster/member/list", "{}")?;
        let old = list["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["peerURLs"][0].as_str() == Some(peer_url.as_str()))
            .and_then(|m| m["ID"].as_str().map(str::to_owned));
        if let Some(id) = old {
            call("/v3/cluster/member/remove", &format!(r#"{{"ID":"{id}"}}"#))?;
        }
        // Right after a removal the leader may call the cluster unhealthy (etcd's strict
        // reconfiguration check waits for every remaining member to be connected): retry.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match call(
                "/v3/cluster/member/add",
                &format!(r#"{{"peerURLs":["{peer_url}"]}}"#),
            ) {
                Ok(_) => break,
                Err(e)
                    if e.to_string().contains("unhealthy cluster") && Instant::now() < deadline =>
                {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
        member.join_existing();
        member.start_serving()?;
        self.wait_healthy(START_TIMEOUT)
    }

    /// `http://127.0.0.1:<client port>` of every member, in order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::endpoint).collect()
    }

    /// Member `i`.
    ///
    /// # Panics
    ///
    /// Panics when `i >= len()`, like slice indexing.
    pub fn member(&self, i: usize) -> &EtcdMember {
        &self.members[i]
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Iterates over the members in order.
    pub fn iter(&self) -> slice::Iter<'_, EtcdMember> {
        self.members.iter()
    }
}

impl Index<usize> for EtcdCluster {
    type Output = EtcdMember;

    fn index(&self, i: usize) -> &EtcdMember {
        &self.members[i]
    }
}

impl<'a> IntoIterator for &'a EtcdCluster {
    type Item = &'a EtcdMember;
    type IntoIter = slice::Iter<'a, EtcdMember>;

    fn into_iter(self) -> Self::IntoIter {
        self.members.iter()
    }
}
