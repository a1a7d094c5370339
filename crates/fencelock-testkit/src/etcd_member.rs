//! One `etcd` process of an [`EtcdCluster`](crate::EtcdCluster).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http;
use crate::process::{retry_addr_in_use, ServerProcess, STOP_GRACE};

/// Raft heartbeat, short so that tests see elections quickly.
const HEARTBEAT_MS: &str = "50";
/// Raft election timeout, ten heartbeats as etcd recommends.
const ELECTION_TIMEOUT_MS: &str = "500";
/// How long a member may take to serve clients after a (re)start.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of one HTTP probe; a paused member costs at most this much.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// One member of a static etcd cluster on loopback ports.
///
/// Control methods take `&self`. Dropping the owning cluster kills and
/// reaps every member.
#[derive(Debug)]
pub struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    initial_cluster: String,
    token: String,
    data_dir: PathBuf,
    /// Raft member id as etcd's JSON gateway prints it (decimal), learned
    /// from the member itself; stable across restarts.
    member_id: Mutex<Option<String>>,
    process: ServerProcess,
    /// A second client port serving TLS, and the TLS flags (see `etcd_tls.rs`).
    tls: Option<(u16, Vec<String>)>,
    /// Joins a running cluster (`--initial-cluster-state existing`): set once the member was
    /// removed and added back as a new member (see `EtcdCluster::replace_member_empty`).
    joins_existing: AtomicBool,
}

impl EtcdMember {
    pub(crate) fn new(
        name: String,
        client_port: u16,
        peer_port: u16,
        initial_cluster: String,
        token: String,
        dir: &Path,
    ) -> EtcdMember {
        let log = dir.join(format!("{name}.log"));
        EtcdMember {
            process: ServerProcess::new(format!("etcd {name} on port {client_port}"), log),
            data_dir: dir.join(format!("{name}.etcd")),
            name,
            client_port,
            peer_port,
            initial_cluster,
            token,
            member_id: Mutex::new(None),
            tls: None,
            joins_existing: AtomicBool::new(false),
        }
    }

    /// Also serves clients over TLS on `port`, with these etcd flags (certificate files).
    pub(crate) fn with_tls(mut self, port: u16, flags: Vec<String>) -> EtcdMember {
        self.tls = Some((port, flags));
        self
    }

    /// `name=http://127.0.0.1:<peer port>`, this member's part of
    /// `--initial-cluster`.
    pub(crate) fn peer_entry(name: &str, peer_port: u16) -> String {
        format!("{name}=http://127.0.0.1:{peer_port}")
    }

    /// Spawns the process without waiting for it.
    pub(crate) fn spawn(&self) -> io::Result<()> {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        // With TLS, the plain port stays for the kit's health probes (loopback only).
        let listen = match &self.tls {
            Some((port, _)) => format!("{client},https://127.0.0.1:{port}"),
            None => client.clone(),
        };
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &listen])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args([
                "--initial-cluster-state",
                if self.joins_existing.load(Ordering::SeqCst) {
                    "existing"
                } else {
                    "new"
                },
            ])
            .args(["--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", HEARTBEAT_MS])
            .args(["--election-timeout", ELECTION_TIMEOUT_MS])
            .args(["--logger", "zap", "--log-outputs", "stderr"]);
        if let Some((_, flags)) = &self.tls {
            cmd.args(flags);
        }
        // Settings from the environment (ETCD_*) would override the flags.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(key);
            }
        }
        self.process.spawn(&mut cmd, "apt-get install etcd-server")
    }

    /// Fails if the process exited (kind `AddrInUse` when its port was
    /// taken).
    pub(crate) fn check_exited(&self) -> io::Result<()> {
        self.process.check_exited()
    }

    /// Waits until the member serves client requests (which etcd does only
    /// once it has joined a cluster with a quorum).
    pub(crate) fn wait_serving(&self, timeout: Duration) -> io::Result<()> {
        self.process.wait_ready(timeout, || self.serves())
    }

    /// Whether the client port answers HTTP at all.
    fn serves(&self) -> bool {
        matches!(
            http::request(self.client_port, "/version", None, PROBE_TIMEOUT),
            Ok((200, _))
        )
    }

    /// Whether the member reports itself healthy (`/health`: it is serving
    /// and sees a leader).
    pub fn is_healthy(&self) -> bool {
        let Ok((200, body)) = http::request(self.client_port, "/health", None, PROBE_TIMEOUT)
        else {
            return false;
        };
        serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.get("health").cloned())
            .is_some_and(|h| h == Value::String("true".into()) || h == Value::Bool(true))
    }

    /// Asks the member for its status: returns the raft id of the leader it
    /// follows ("0" for none) and remembers the member's own id.
    pub(crate) fn status(&self) -> io::Result<String> {
        let (code, body) = http::request(
            self.client_port,
            "/v3/maintenance/status",
            Some("{}"),
            PROBE_TIMEOUT,
        )?;
        if code != 200 {
            return Err(io::Error::other(format!(
                "etcd {} status answered HTTP {code}: {body}",
                self.name
            )));
        }
        let json: Value = serde_json::from_str(&body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let id_of = |v: Option<&Value>| -> Option<String> {
            // The gateway prints uint64 as a string; accept a number too.
            match v? {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        let member_id =
            id_of(json.get("header").and_then(|h| h.get("member_id"))).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("no member_id in {body}"),
                )
            })?;
        let leader = id_of(json.get("leader")).unwrap_or_else(|| "0".to_owned());
        *self.member_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(member_id);
        Ok(leader)
    }

    /// The raft member id learned from an earlier status call.
    pub(crate) fn known_member_id(&self) -> Option<String> {
        self.member_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The member's name (`m0`, `m1`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `http://127.0.0.1:<client port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The raft peer port.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// The member's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The pid while a process exists (running or paused).
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Whether a process exists (a paused one counts).
    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// The member's log so far (all runs).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Stops the member with SIGTERM and waits (SIGKILL after 10 s). A
    /// no-op when not running.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be signalled or reaped.
    pub fn stop(&self) -> io::Result<()> {
        self.process.terminate(libc::SIGTERM, STOP_GRACE)
    }

    /// Kills the member with SIGKILL and reaps it: a crash. Its data dir
    /// stays, so [`restart`](Self::restart) brings it back as the same
    /// member. A no-op when not running.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be reaped.
    pub fn kill(&self) -> io::Result<()> {
        self.process.kill()
    }

    /// Stops the member if it runs and starts it again with the same ports
    /// and data, waiting until it serves clients. That needs a quorum of
    /// members running: to bring back a cluster that lost its quorum, use
    /// [`EtcdCluster::restart_all`](crate::EtcdCluster::restart_all).
    ///
    /// # Errors
    ///
    /// Fails when the ports stay taken or the member does not serve within
    /// 30 s.
    pub fn restart(&self) -> io::Result<()> {
        self.stop()?;
        let mut tries = 0;
        retry_addr_in_use(10, || {
            if tries > 0 {
                thread::sleep(Duration::from_millis(200));
            }
            tries += 1;
            self.spawn()?;
            self.wait_serving(START_TIMEOUT)
        })
    }

    /// Kills the member (SIGKILL) and deletes its data directory: a disk lost with the machine.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be reaped or the directory cannot be removed.
    pub fn kill_and_wipe(&self) -> io::Result<()> {
        self.kill()?;
        match std::fs::remove_dir_all(&self.data_dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Starts the member again under its old identity on whatever its data directory holds,
    /// and waits up to `timeout` for the process to exit: what etcd does with a member whose
    /// data directory was emptied (it refuses to start; see
    /// [`EtcdCluster::replace_member_empty`](crate::EtcdCluster::replace_member_empty) for the
    /// way back). Returns the member's log since that start.
    ///
    /// # Errors
    ///
    /// Fails when the process cannot be spawned, or when it still runs after `timeout` (it
    /// is then killed): etcd accepted the member.
    pub fn start_expecting_refusal(&self, timeout: Duration) -> io::Result<String> {
        let from = self.log().len();
        self.spawn()?;
        let deadline = Instant::now() + timeout;
        while self.process.exit_status().is_none() {
            if Instant::now() >= deadline {
                self.kill()?;
                return Err(io::Error::other(format!(
                    "etcd {} still runs {timeout:?} after starting on an emptied data directory",
                    self.name
                )));
            }
            thread::sleep(Duration::from_millis(20));
        }
        // Clears the exited process, so the cluster's health checks do not report its exit.
        self.kill()?;
        Ok(self.log().get(from..).unwrap_or_default().to_owned())
    }

    /// From now on the member starts as one joining a running cluster, with a raft id it
    /// learns anew (its old one was removed from the cluster).
    pub(crate) fn join_existing(&self) {
        self.joins_existing.store(true, Ordering::SeqCst);
        *self.member_id.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Starts the member (not running) and waits until it serves clients.
    pub(crate) fn start_serving(&self) -> io::Result<()> {
        self.spawn()?;
        self.wait_serving(START_TIMEOUT)
    }

    /// Freezes the member with SIGSTOP (a stalled or partitioned node).
    ///
    /// # Errors
    ///
    /// Fails when the member is not running.
    pub fn pause(&self) -> io::Result<()> {
        self.process.signal(libc::SIGSTOP)
    }

    /// Continues a paused member with SIGCONT.
    ///
    /// # Errors
    ///
    /// Fails when the member is not running.
    pub fn resume(&self) -> io::Result<()> {
        self.process.signal(libc::SIGCONT)
    }
}
