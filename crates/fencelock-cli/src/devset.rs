//! The dev set: local redis-server nodes started by `fencelock up` and stopped by `fencelock down`.
//!
//! The nodes are daemonized redis-server processes bound to 127.0.0.1, without persistence. Their
//! ports and PIDs are kept in a JSON state file under the user's data directory
//! (`$XDG_DATA_HOME/fencelock/dev-nodes.json`, else `~/.local/share/fencelock/dev-nodes.json`),
//! which is how the other commands find them when no nodes are given.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::exit::{self, Failure};
use crate::node::Node;

/// How many nodes `up` starts without --count.
pub(crate) const DEFAULT_COUNT: u16 = 5;
const STATE_FILE: &str = "dev-nodes.json";
const NODES_DIR: &str = "dev-nodes";
/// How long a started node has to answer PING before `up` gives up.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a node has to exit after SIGTERM before it gets SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The state file's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DevState {
    /// Where the nodes keep their pid, log and working files.
    pub(crate) dir: PathBuf,
    /// The nodes, in order.
    pub(crate) nodes: Vec<DevNode>,
}

/// One dev node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DevNode {
    pub(crate) port: u16,
    pub(crate) pid: i32,
}

impl DevState {
    /// The node URLs.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| url(n.port)).collect()
    }
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// The data directory of fencelock.
///
/// # Errors
///
/// A usage failure when neither `XDG_DATA_HOME` nor `HOME` is set.
pub(crate) fn data_dir() -> Result<PathBuf, Failure> {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("fencelock"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/fencelock")),
        None => Err(Failure::usage(
            "cannot find a data directory for the dev set: set XDG_DATA_HOME or HOME",
        )),
    }
}

/// The state file's path.
///
/// # Errors
///
/// As [`data_dir`].
pub(crate) fn state_path() -> Result<PathBuf, Failure> {
    Ok(data_dir()?.join(STATE_FILE))
}

/// Reads the state file; `None` if there is none.
///
/// # Errors
///
/// An internal failure if the file exists but cannot be read or parsed.
pub(crate) fn load(path: &Path) -> Result<Option<DevState>, Failure> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Failure::internal(format!(
                "cannot read the dev set state file {}: {e}",
                path.display()
            )))
        }
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        Failure::internal(format!(
            "the dev set state file {} is damaged ({e}); stop any redis-server it started by hand and delete the file",
            path.display()
        ))
    })
}

fn save(path: &Path, state: &DevState) -> Result<(), Failure> {
    let tmp = path.with_extension("json.tmp");
    // A data directory that is not UTF-8 cannot be written as JSON.
    let text = serde_json::to_string_pretty(state).map_err(std::io::Error::other);
    text.and_then(|text| std::fs::write(&tmp, text))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            Failure::internal(format!(
                "cannot write the dev set state file {}: {e}",
                path.display()
            ))
        })
}

/// Whether `pid` is a live redis-server (checked through /proc, so that a reused PID of an
/// unrelated process is never signalled).
fn is_our_redis(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    if !alive {
        return false;
    }
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => {
            let text = String::from_utf8_lossy(&cmdline);
            text.contains("redis-server") && !is_zombie(pid)
        }
        // No /proc (not Linux): trust the PID.
        Err(_) => true,
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .is_some_and(|state| state == 'Z')
}

/// `fencelock up`.
///
/// # Errors
///
/// A failure if redis-server is missing, a port is taken, or a node does not come up; the nodes
/// started so far are stopped again.
pub(crate) async fn up(
    count: u16,
    asked: bool,
    port_base: Option<u16>,
    json: bool,
) -> anyhow::Result<u8> {
    let path = state_path()?;
    if let Some(state) = load(&path)? {
        let running = state.nodes.iter().filter(|n| is_our_redis(n.pid)).count();
        if running == state.nodes.len() {
            let first = state.nodes.first().map(|n| n.port);
            let differs = usize::from(count) != state.nodes.len()
                || port_base.is_some_and(|p| Some(p) != first);
            if asked && differs {
                // Silently keeping the running set would hand the caller nodes it did not ask for.
                return Err(Failure::usage(format!(
                    "a dev set of {} node(s) is already up (from port {}); it was kept, and the arguments were not applied: run `fencelock down` first to start another",
                    state.nodes.len(),
                    first.map_or_else(|| "?".to_owned(), |p| p.to_string())
                ))
                .into());
            }
            report_up(&state, &path, json, true);
            return Ok(exit::OK);
        }
        eprintln!(
            "fencelock: the dev set in {} is partly down ({running} of {} running); replacing it",
            path.display(),
            state.nodes.len()
        );
        stop_all(&state).await;
        remove_state(&path, &state);
    }

    if count > 1 && count.is_multiple_of(2) {
        eprintln!(
            "fencelock: warning: {count} nodes, an even count: its quorum of {} tolerates no more failed nodes than {} would; 3 or 5 are the usual counts",
            count / 2 + 1,
            count - 1
        );
    }
    let ports = choose_ports(count, port_base)?;
    let root = data_dir()?.join(NODES_DIR);
    let mut state = DevState {
        dir: root.clone(),
        nodes: Vec::new(),
    };
    std::fs::create_dir_all(&root)
        .map_err(|e| Failure::internal(format!("cannot create {}: {e}", root.display())))?;
    for port in ports {
        match start_node(&root, port).await {
            Ok(pid) => state.nodes.push(DevNode { port, pid }),
            Err(err) => {
                stop_all(&state).await;
                let _ = std::fs::remove_dir_all(&root);
                return Err(err.into());
            }
        }
    }
    if let Err(err) = save(&path, &state) {
        stop_all(&state).await;
        let _ = std::fs::remove_dir_all(&root);
        return Err(err.into());
    }
    report_up(&state, &path, json, false);
    Ok(exit::OK)
}

fn report_up(state: &DevState, path: &Path, json: bool, already: bool) {
    let urls = state.urls();
    if json {
        let value = serde_json::json!({
            "already_running": already,
            "state_file": path,
            "nodes": state.nodes.iter().map(|n| serde_json::json!({
                "url": url(n.port), "port": n.port, "pid": n.pid,
            })).collect::<Vec<_>>(),
        });
        println!("{value}");
        return;
    }
    if already {
        println!(
            "the dev set is already up: {} node(s) (state in {})",
            state.nodes.len(),
            path.display()
        );
    } else {
        println!(
            "started {} redis-server node(s) on 127.0.0.1 (state in {})",
            state.nodes.len(),
            path.display()
        );
    }
    for node in &state.nodes {
        println!("  {}  pid {}", url(node.port), node.pid);
    }
    println!(
        "commands without --nodes now use this set; stop it with `fencelock down`. For other tools:\n  export FENCELOCK_NODES={}",
        urls.join(",")
    );
}

fn choose_ports(count: u16, base: Option<u16>) -> Result<Vec<u16>, Failure> {
    let mut ports = Vec::with_capacity(count.into());
    match base {
        Some(base) => {
            for i in 0..count {
                let port = base.checked_add(i).filter(|p| *p != 0).ok_or_else(|| {
                    Failure::usage(format!(
                        "--port-base {base} with {count} node(s) runs past port 65535; choose a lower base"
                    ))
                })?;
                if TcpListener::bind(("127.0.0.1", port)).is_err() {
                    return Err(Failure::usage(format!(
                        "port {port} on 127.0.0.1 is in use; choose another --port-base, or leave it out to use free ports"
                    )));
                }
                ports.push(port);
            }
        }
        None => {
            // Hold every listener until all ports are chosen, so that no port is picked twice.
            let mut listeners = Vec::new();
            for _ in 0..count {
                let listener = TcpListener::bind(("127.0.0.1", 0))
                    .and_then(|l| Ok((l.local_addr()?.port(), l)))
                    .map_err(|e| Failure::internal(format!("cannot find a free port: {e}")))?;
                ports.push(listener.0);
                listeners.push(listener.1);
            }
        }
    }
    Ok(ports)
}

/// The redis-server to start: `FENCELOCK_REDIS_SERVER`, else the one on PATH.
pub(crate) fn redis_server_binary() -> std::ffi::OsString {
    std::env::var_os("FENCELOCK_REDIS_SERVER")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "redis-server".into())
}

/// The error for a redis-server that could not be started.
pub(crate) fn spawn_failure(binary: &std::ffi::OsStr, e: &std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::NotFound {
        Failure::internal(format!(
            "{} not found on PATH: install Redis (e.g. apt-get install redis-server) or set FENCELOCK_REDIS_SERVER to its path",
            binary.to_string_lossy()
        ))
    } else {
        Failure::internal(format!("cannot start {}: {e}", binary.to_string_lossy()))
    }
}

/// Starts one daemonized node and waits until it answers PING. Returns its PID.
async fn start_node(root: &Path, port: u16) -> Result<i32, Failure> {
    let dir = root.join(port.to_string());
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::internal(format!("cannot create {}: {e}", dir.display())))?;
    let pidfile = dir.join("redis.pid");
    let logfile = dir.join("redis.log");
    let _ = std::fs::remove_file(&pidfile);
    let binary = redis_server_binary();
    let status = tokio::process::Command::new(&binary)
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "yes", "--protected-mode", "yes"])
        .arg("--dir")
        .arg(&dir)
        .arg("--pidfile")
        .arg(&pidfile)
        .arg("--logfile")
        .arg(&logfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await
        .map_err(|e| spawn_failure(&binary, &e))?;
    if !status.status.success() {
        return Err(Failure::internal(format!(
            "redis-server on port {port} did not start ({}): {}; see {}",
            status.status,
            String::from_utf8_lossy(&status.stderr).trim(),
            logfile.display()
        )));
    }

    let node = Node::parse(&url(port), 0)?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let pid = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            if let Ok(mut conn) = node.connect(Duration::from_millis(500)).await {
                if conn.query::<String>(&redis::cmd("PING")).await.is_ok() {
                    mark_new(&mut conn, port).await?;
                    return Ok(pid);
                }
            }
            if !is_our_redis(pid) {
                return Err(Failure::internal(format!(
                    "redis-server on port {port} exited right after starting; see {}",
                    logfile.display()
                )));
            }
        }
        if Instant::now() >= deadline {
            if let Some(pid) = pid {
                stop_pid(pid).await;
            }
            return Err(Failure::internal(format!(
                "redis-server on port {port} did not answer PING within {START_TIMEOUT:?}; see {}",
                logfile.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Marks a node that was just started as new: it never held a lock, so clients count it at
/// once instead of keeping it in restart quarantine (the marker is valid for this run of the
/// node only; see `fencelock::protocol::new_node_marker`).
async fn mark_new(conn: &mut crate::node::Conn, port: u16) -> Result<(), Failure> {
    let fail =
        |e: String| Failure::internal(format!("cannot mark the new node on port {port}: {e}"));
    let info: String = conn
        .query(redis::cmd("INFO").arg("server"))
        .await
        .map_err(fail)?;
    let run_id = crate::node::parse_info(&info)
        .remove("run_id")
        .ok_or_else(|| fail("its INFO has no run_id".to_owned()))?;
    let () = conn
        .query(
            redis::cmd("SET")
                .arg(fencelock::protocol::NODE_MARKER_KEY)
                .arg(fencelock::protocol::new_node_marker(&run_id)),
        )
        .await
        .map_err(fail)?;
    Ok(())
}

/// SIGTERM, then SIGKILL after [`STOP_TIMEOUT`]. Returns whether the process is gone.
async fn stop_pid(pid: i32) -> bool {
    if !is_our_redis(pid) {
        return true;
    }
    // SAFETY: plain kill(2) on a PID checked to be a redis-server.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if !is_our_redis(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if !is_our_redis(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn stop_all(state: &DevState) -> Vec<(u16, bool)> {
    let mut results = Vec::new();
    for node in &state.nodes {
        results.push((node.port, stop_pid(node.pid).await));
    }
    results
}

fn remove_state(path: &Path, state: &DevState) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_dir_all(&state.dir);
}

/// `fencelock down`.
///
/// # Errors
///
/// A failure if a node would not stop; the state file is kept then, so that `down` can be retried.
pub(crate) async fn down(json: bool) -> anyhow::Result<u8> {
    let path = state_path()?;
    let Some(state) = load(&path)? else {
        if json {
            println!("{}", serde_json::json!({"stopped": [], "running": false}));
        } else {
            println!(
                "no dev set is running (no state file at {})",
                path.display()
            );
        }
        return Ok(exit::OK);
    };
    let results = stop_all(&state).await;
    let stuck: Vec<String> = results
        .iter()
        .filter(|(_, gone)| !gone)
        .map(|(port, _)| port.to_string())
        .collect();
    if !stuck.is_empty() {
        return Err(Failure::internal(format!(
            "redis-server on port(s) {} did not stop even after SIGKILL; the state file {} is kept, retry `fencelock down`",
            stuck.join(", "),
            path.display()
        ))
        .into());
    }
    remove_state(&path, &state);
    if json {
        let ports: Vec<u16> = state.nodes.iter().map(|n| n.port).collect();
        println!(
            "{}",
            serde_json::json!({"stopped": ports, "running": false})
        );
    } else {
        println!("stopped {} dev node(s)", state.nodes.len());
    }
    Ok(exit::OK)
}
