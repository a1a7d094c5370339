//! `fencelock demo` end to end: the built binary starts its own redis-server nodes, tells every
//! scene, and leaves no process behind, also when interrupted with Ctrl-C (SIGINT).
//!
//! Each run gets its own HOME, XDG dirs and TMPDIR, so that the test neither sees the user's
//! dev set nor leaves files around, and so that the demo's nodes can be recognised in /proc by
//! their `--dir` argument, which lies under that TMPDIR.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fencelock");
/// How long the demo may take before the test calls it hung: it takes a few seconds, but the
/// machine may be busy.
const HUNG: Duration = Duration::from_secs(120);

fn demo(home: &Path) -> Command {
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("demo")
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("TMPDIR", &tmp)
        .env_remove("FENCELOCK_NODES")
        .env_remove("FENCELOCK_CONFIG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The demo's stdout, line by line as it comes, on a channel.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn stderr_of(child: &mut Child) -> std::thread::JoinHandle<String> {
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    })
}

/// Collects lines until the channel closes (the demo exited) or `until` matches a line.
fn read_until(rx: &mpsc::Receiver<String>, until: impl Fn(&str) -> bool) -> Vec<String> {
    let deadline = Instant::now() + HUNG;
    let mut lines = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let stop = until(&line);
                lines.push(line);
                if stop {
                    return lines;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return lines,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("the demo hung; output so far:\n{}", lines.join("\n"))
            }
        }
    }
}

fn wait(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + HUNG;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the demo did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a PID is gone: no such process, or a zombie waiting for its reaper.
fn pid_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z'),
    }
}

/// Live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) && !pid_gone(pid) {
            found.push(format!("{pid}: {text}"));
        }
    }
    found
}

/// The numbers after `pids` in a line: "... (ports ...; pids 1 2 3)." gives [1, 2, 3].
fn pids_in(line: &str) -> Vec<u32> {
    let Some((_, rest)) = line.split_once("pids ") else {
        return Vec::new();
    };
    rest.split(|c: char| !c.is_ascii_digit())
        .take_while(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect()
}

/// The PID after "(process " in a line of scene 4.
fn worker_pid(line: &str) -> Option<u32> {
    let (_, rest) = line.split_once("(process ")?;
    rest.split(')').next()?.parse().ok()
}

/// Asserts that nothing the demo started is alive and its temp dir is gone.
fn assert_nothing_left(home: &Path, lines: &[String]) {
    let mut pids = Vec::new();
    for line in lines {
        if line.starts_with("Started ") || line.starts_with("Stopped ") {
            pids.extend(pids_in(line));
        }
        pids.extend(worker_pid(line));
    }
    assert!(
        pids.len() >= 5,
        "no PIDs in the output:\n{}",
        lines.join("\n")
    );
    // The demo reaps its children before it exits; a short grace covers a slow /proc.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| !pid_gone(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let alive: Vec<u32> = pids.iter().copied().filter(|p| !pid_gone(*p)).collect();
    assert!(alive.is_empty(), "still running: {alive:?}");
    let tmp = home.join("tmp");
    let left = processes_mentioning(tmp.to_str().unwrap());
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let files: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(files.is_empty(), "files left in TMPDIR: {files:?}");
}

#[test]
fn the_demo_tells_every_scene_and_leaves_nothing_behind() {
    let home = tempfile::tempdir().unwrap();
    let mut child = demo(home.path()).spawn().unwrap();
    let stderr = stderr_of(&mut child);
    let rx = lines_of(&mut child);
    let lines = read_until(&rx, |_| false);
    let status = wait(&mut child);
    let out = lines.join("\n");
    let err = stderr.join().unwrap();
    assert!(status.success(), "exit {status}\n{out}\nstderr:\n{err}");

    for phrase in [
        // Scene 1: contention, then a wake-up on release.
        "Scene 1.",
        "refused: another client holds it (contention)",
        "after A's release: the release woke B at once.",
        // Scene 2: a node killed, then a majority.
        "Scene 2.",
        "kill -9 node 5",
        "still held: 4 of 5 nodes are up",
        "unavailable: 2 nodes cannot make a majority of 5",
        "Keys of \"invoice:7\" left on the 2 live nodes: none",
        // Scene 3: concurrent reservations never oversell.
        "Scene 3.",
        "Final stock 0 = 20 - 20: never oversold, no reservation lost.",
        // Scene 4: the pause corrupts the stock without fencing; with fencing the storage refuses it.
        "Scene 4.",
        "B's reservation was overwritten: the stock is corrupted.",
        "Stock is now 5, yet 5 + 3 pears were sold: it should be 2.",
        "refused by the storage (StaleToken)",
        "stale write on \"sku:pear\" refused",
        "Stock is 7 = 10 - 3: B's data is intact",
        "--test inventory clock_jump",
        // The end: the nodes are stopped and the summary says which lock when.
        "Stopped the demo's nodes",
        "Which lock when (article section 8)?",
        "an efficiency lock on one Redis node is enough",
        "fencing mode + fenced storage",
    ] {
        assert!(out.contains(phrase), "missing {phrase:?} in:\n{out}");
    }
    assert!(!out.contains('\x1b'), "colour codes in a pipe:\n{out}");
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("or constraints in the database")),
        "the summary is not the end:\n{out}"
    );
    assert_nothing_left(home.path(), &lines);
}

#[test]
fn ctrl_c_stops_the_demo_and_its_nodes() {
    let home = tempfile::tempdir().unwrap();
    let mut child = demo(home.path()).spawn().unwrap();
    let stderr = stderr_of(&mut child);
    let rx = lines_of(&mut child);
    // Interrupt in scene 2, right after a node was killed: nodes are running, one is gone.
    let mut lines = read_until(&rx, |l| l.contains("kill -9 node 5"));
    assert!(
        lines.last().is_some_and(|l| l.contains("kill -9 node 5")),
        "the demo ended before scene 2:\n{}",
        lines.join("\n")
    );
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child, not yet reaped, so the PID is still its own.
    unsafe { libc::kill(pid, libc::SIGINT) };
    lines.extend(read_until(&rx, |_| false));
    let status = wait(&mut child);
    let err = stderr.join().unwrap();
    assert_eq!(status.code(), Some(130), "{}\n{err}", lines.join("\n"));
    assert!(err.contains("interrupted by SIGINT"), "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Stopped the demo's nodes")),
        "{}",
        lines.join("\n")
    );
    assert_nothing_left(home.path(), &lines);
}
