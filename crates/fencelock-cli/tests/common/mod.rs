//! What the CLI's test files share: the binary, isolated from the user's files and from the
//! environment the tests run in, and a bounded wait for it.

// Each test file uses a part of this module.
#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_fencelock");
/// Per-node timeout for tests that are not about slowness: loose enough for a busy machine.
pub(crate) const LOOSE_NODE_TIMEOUT: &str = "250ms";
/// How long any `fencelock` invocation may take before the test calls it hung.
pub(crate) const HUNG: Duration = Duration::from_secs(60);

/// A `fencelock` command isolated from the user's files (HOME and the XDG dirs point into
/// `home`) and from every `FENCELOCK_` setting and `RUST_LOG` of the test's environment.
pub(crate) fn fencelock(home: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("FENCELOCK_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// `fencelock --nodes URLS --node-timeout 250ms --no-quarantine` for a node set. The testkit's
/// nodes were just started, not restarted: they never held a lock they could have forgotten, so
/// the restart quarantine would only make every test wait a TTL.
pub(crate) fn with_nodes(home: &Path, urls: &[String]) -> Command {
    let mut cmd = fencelock(home);
    cmd.arg("--nodes")
        .arg(urls.join(","))
        .arg("--node-timeout")
        .arg(LOOSE_NODE_TIMEOUT)
        .arg("--no-quarantine");
    cmd
}

/// Waits for `child`, killing it and failing the test after `limit`.
pub(crate) fn wait_status(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fencelock did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to its end (at most [`HUNG`]), its output captured.
pub(crate) fn output(cmd: &mut Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencelock");
    wait_output(child, HUNG)
}

/// Waits for `child` as [`wait_status`] does, its output drained meanwhile.
pub(crate) fn wait_output(mut child: Child, limit: Duration) -> Output {
    // Drain the pipes on threads so that a chatty child cannot block on a full pipe.
    fn drain(pipe: Option<impl Read>) -> Vec<u8> {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    }
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let out = std::thread::spawn(move || drain(stdout));
    let err = std::thread::spawn(move || drain(stderr));
    let status = wait_status(&mut child, limit);
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// An invocation's exit status, stdout and stderr, for a failure message.
pub(crate) fn outcome(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
