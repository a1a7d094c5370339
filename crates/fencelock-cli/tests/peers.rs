//! The command line speaks like its peers: completions and a man page, settings from the
//! environment, flock's `-E`, logs behind `-v`/`RUST_LOG`, a refused TTL no lease needs, and no
//! panic when nobody reads stderr. Drives the built binary against real redis-server nodes.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fencelock_testkit::RedisNode;

mod common;
use common::{fencelock, HUNG};

/// `fencelock --nodes URL --node-timeout 250ms --no-quarantine` (a fresh node never held a lock).
fn on(home: &Path, node: &RedisNode) -> Command {
    let mut cmd = fencelock(home);
    cmd.args([
        "--nodes",
        &node.url(),
        "--node-timeout",
        "250ms",
        "--no-quarantine",
    ]);
    cmd
}

fn output(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fencelock");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + HUNG;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fencelock did not exit within {HUNG:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The key's remaining time to live on the node, in milliseconds.
fn pttl(node: &RedisNode, key: &str) -> i64 {
    node.cli(&["PTTL", key]).unwrap().parse().unwrap()
}

#[test]
fn completions_and_the_man_page_name_every_subcommand() {
    let home = home();
    for shell in ["bash", "zsh", "fish"] {
        let out = output(fencelock(home.path()).args(["completions", shell]));
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for sub in [
            "run",
            "acquire",
            "release",
            "inspect",
            "doctor",
            "completions",
        ] {
            assert!(script.contains(sub), "{shell} completions lack {sub}");
        }
        assert!(script.contains("conflict-exit-code"), "{shell}");
    }
    let out = output(fencelock(home.path()).arg("man"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH fencelock"),
        "{page}"
    );
    for sub in ["run", "acquire", "inspect", "doctor", "FENCELOCK_TTL"] {
        assert!(page.contains(sub), "the man page lacks {sub}");
    }
    let out = output(fencelock(home.path()).args(["man", "run"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.contains(".TH fencelock-run"), "{page}");
    assert!(page.contains("conflict\\-exit\\-code"), "{page}");
    let out = output(fencelock(home.path()).args(["man", "nope"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("acquire"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn help_names_the_environment_variables() {
    let out = output(fencelock(home().path()).arg("--help"));
    let help = text(&out.stdout);
    for var in ["FENCELOCK_TTL", "FENCELOCK_NODE_TIMEOUT", "78"] {
        assert!(help.contains(var), "--help lacks {var}: {help}");
    }
    let out = output(fencelock(home().path()).args(["run", "--help"]));
    let help = text(&out.stdout);
    for var in ["FENCELOCK_WAIT", "--conflict-exit-code"] {
        assert!(help.contains(var), "run --help lacks {var}: {help}");
    }
}

#[test]
fn settings_come_from_flag_then_environment_then_file_then_default() {
    let node = RedisNode::start().unwrap();
    let home = home();
    let file = home.path().join("fencelock.toml");
    std::fs::write(&file, "ttl = \"40s\"\n").unwrap();
    let acquire = |key: &str, ttl_flag: Option<&str>, ttl_env: Option<&str>, config: bool| {
        let mut cmd = on(home.path(), &node);
        if let Some(ttl) = ttl_env {
            cmd.env("FENCELOCK_TTL", ttl);
        }
        if config {
            cmd.arg("--config").arg(&file);
        }
        if let Some(ttl) = ttl_flag {
            cmd.args(["--ttl", ttl]);
        }
        let out = output(cmd.args(["acquire", key]));
        assert!(out.status.success(), "{key}: {}", text(&out.stderr));
        pttl(&node, key)
    };
    // Each bound is far from the others, so a loaded machine cannot blur them.
    let default = acquire("default", None, None, false);
    assert!((1..=10_000).contains(&default), "default: {default}");
    let file_ttl = acquire("file", None, None, true);
    assert!((30_001..=40_000).contains(&file_ttl), "file: {file_ttl}");
    let env = acquire("env", None, Some("60s"), true);
    assert!((50_001..=60_000).contains(&env), "env over file: {env}");
    let flag = acquire("flag", Some("20s"), Some("60s"), true);
    assert!((10_001..=20_000).contains(&flag), "flag over env: {flag}");

    // The node timeout: a zero one from the environment is refused, and a flag overrides it.
    let out = output(
        fencelock(home.path())
            .args(["--nodes", &node.url(), "--no-quarantine", "acquire", "nt"])
            .env("FENCELOCK_NODE_TIMEOUT", "0s"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("node timeout"),
        "{}",
        text(&out.stderr)
    );
    let out = output(
        on(home.path(), &node)
            .args(["acquire", "nt"])
            .env("FENCELOCK_NODE_TIMEOUT", "0s"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A bad value in the environment is a usage error, as on the command line.
    let out = output(
        on(home.path(), &node)
            .args(["acquire", "bad"])
            .env("FENCELOCK_TTL", "30"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("30s"), "{}", text(&out.stderr));
}

#[test]
fn run_exits_with_the_conflict_exit_code_and_waits_as_the_environment_says() {
    let node = RedisNode::start().unwrap();
    let home = home();
    let held = output(on(home.path(), &node).args(["--ttl", "60s", "acquire", "job"]));
    assert!(held.status.success(), "{}", text(&held.stderr));
    let marker = home.path().join("ran");
    let touch = format!("touch {}", marker.display());

    let out = output(
        on(home.path(), &node).args(["run", "-n", "-E", "9", "job", "--", "sh", "-c", &touch]),
    );
    assert_eq!(out.status.code(), Some(9), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("held by another client"));

    // FENCELOCK_WAIT bounds run's wait (its default is to wait as long as the lock is held);
    // the timeout is a conflict too.
    let started = Instant::now();
    let out = output(
        on(home.path(), &node)
            .args([
                "run",
                "--conflict-exit-code",
                "3",
                "job",
                "--",
                "sh",
                "-c",
                &touch,
            ])
            .env("FENCELOCK_WAIT", "500ms"),
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(started.elapsed() < HUNG);
    assert!(!marker.exists(), "the command ran without the lock");

    // Without -E: 75, as before. --no-wait overrides a FENCELOCK_WAIT from the environment.
    let out = output(
        on(home.path(), &node)
            .args(["run", "--no-wait", "job", "--", "true"])
            .env("FENCELOCK_WAIT", "10m"),
    );
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));

    // The command's own status is not rewritten.
    let out = output(
        on(home.path(), &node).args(["run", "-E", "9", "free", "--", "sh", "-c", "exit 75"]),
    );
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
}

#[test]
fn a_ttl_no_lease_needs_is_refused_unless_asked_for() {
    let node = RedisNode::start().unwrap();
    let home = home();
    let out = output(on(home.path(), &node).args(["--ttl", "1000y", "acquire", "forever"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("longer than") && err.contains("285 years"),
        "{err}"
    );
    let out = output(on(home.path(), &node).args(["--ttl", "100y", "acquire", "forever"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("longer than a day") && err.contains("--allow-long-ttl"),
        "{err}"
    );
    assert_eq!(node.cli(&["EXISTS", "forever"]).unwrap(), "0");

    let out = output(on(home.path(), &node).args([
        "--ttl",
        "2days",
        "--allow-long-ttl",
        "acquire",
        "long",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(pttl(&node, "long") > 24 * 3600 * 1000);
    let out = output(
        on(home.path(), &node)
            .args(["--ttl", "2days", "acquire", "long-env"])
            .env("FENCELOCK_ALLOW_LONG_TTL", "true"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn verbose_and_rust_log_show_the_librarys_events() {
    let node = RedisNode::start().unwrap();
    let home = home();
    let quiet = output(on(home.path(), &node).args(["acquire", "a"]));
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    assert!(
        !text(&quiet.stderr).contains("node answered"),
        "{}",
        text(&quiet.stderr)
    );

    let info = output(on(home.path(), &node).args(["-v", "acquire", "v"]));
    let log = text(&info.stderr);
    assert!(
        log.contains("INFO") && log.contains("settings resolved") && log.contains("connected"),
        "{log}"
    );
    // -v shows the acquisition (the library's record of it) and no other debug record.
    assert!(log.contains("acquired resource=\"v\""), "{log}");
    assert!(!log.contains("node answered"), "{log}");

    let verbose = output(on(home.path(), &node).args(["-vv", "acquire", "b"]));
    assert!(verbose.status.success(), "{}", text(&verbose.stderr));
    let log = text(&verbose.stderr);
    assert!(
        log.contains("DEBUG") && log.contains("node answered"),
        "{log}"
    );
    assert!(!log.contains('\x1b'), "colour on a pipe: {log}");

    let env = output(
        on(home.path(), &node)
            .args(["acquire", "c"])
            .env("RUST_LOG", "fencelock=debug"),
    );
    assert!(
        text(&env.stderr).contains("node answered"),
        "{}",
        text(&env.stderr)
    );
}

/// A stream whose reader is gone: every write to it fails with EPIPE, as to a pipe whose reader
/// exited (`| head -c 100`).
fn closed_pipe() -> Stdio {
    let (writer, reader) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(reader);
    Stdio::from(std::os::fd::OwnedFd::from(writer))
}

#[test]
fn a_closed_stderr_or_stdout_is_no_panic() {
    let home = home();
    let dead = {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        listener.local_addr().unwrap().port()
    };
    // An error written to a pipe nobody reads: the exit code is still the documented one.
    let status = fencelock(home.path())
        .args([
            "--nodes",
            &format!("redis://127.0.0.1:{dead}"),
            "-vv",
            "acquire",
            "x",
        ])
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(69));
    // A usage error of our own.
    let status = fencelock(home.path())
        .args([
            "--ttl",
            "100y",
            "--nodes",
            "redis://127.0.0.1:1",
            "acquire",
            "x",
        ])
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
    // Output nobody reads.
    for args in [&["completions", "bash"][..], &["man"][..], &["--help"][..]] {
        let status = fencelock(home.path())
            .args(args)
            .stdout(closed_pipe())
            .stderr(closed_pipe())
            .status()
            .unwrap();
        assert_ne!(status.code(), Some(101), "{args:?} panicked");
    }
    let node = RedisNode::start().unwrap();
    let status = on(home.path(), &node)
        .args(["inspect", "x"])
        .stdout(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_refused_password_is_a_configuration_error_named_once() {
    let password = "s3cret-pw-4711";
    let node = RedisNode::start().unwrap();
    // Set after the start: the testkit's readiness check speaks no AUTH.
    node.cli(&["CONFIG", "SET", "requirepass", password])
        .unwrap();
    let home = home();
    let wrong = format!("redis://:wrong-pw-0815@127.0.0.1:{}/0", node.port());
    for nodes in [node.url(), wrong] {
        let started = Instant::now();
        let out = output(fencelock(home.path()).args([
            "--nodes",
            &nodes,
            "--no-quarantine",
            "run",
            "--wait",
            "60s",
            "job",
            "--",
            "true",
        ]));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "waited on a refusal: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("fencelock: error: lock \"job\": authentication failed (wrong or missing password) on redis://"),
            "{err}"
        );
        assert!(err.contains("password in its URL"), "{err}");
        assert!(
            !err.contains("wrong-pw") && !err.contains(password),
            "{err}"
        );
    }
    // One node of three refuses: the lock is taken on the others, and a warning names it.
    let others: Vec<RedisNode> = (0..2).map(|_| RedisNode::start().unwrap()).collect();
    let urls = [node.url(), others[0].url(), others[1].url()].join(",");
    let out = output(fencelock(home.path()).args([
        "--nodes",
        &urls,
        "--no-quarantine",
        "acquire",
        "one-off",
    ]));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("fencelock: warning: {}: authentication failed (wrong or missing password); put the node's password in its URL", node.url())),
        "{err}"
    );
    // doctor says the same of the node.
    let out = output(fencelock(home.path()).args(["--nodes", &node.url(), "doctor"]));
    let report = text(&out.stdout) + &text(&out.stderr);
    assert!(
        report.contains("authentication failed (wrong or missing password)"),
        "{report}"
    );
}
