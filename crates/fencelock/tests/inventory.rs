//! The inventory example end to end on real processes: worker processes reserving stock under a
//! fencing lock never oversell; the article's pause and clock-jump scenarios are refused by the
//! fenced storage, and the same scenarios without fencing corrupt the stock (so the tests show
//! that fencing is what prevents it).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fencelock_testkit::{Postgres, RedisNodes, RedisOptions};

/// The example binary of the workspace's test build (see `workspace_build`: under
/// `./dev test` it is there already).
fn inventory_bin() -> PathBuf {
    fencelock_testkit::workspace_build()
        .join("examples")
        .join("inventory")
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(inventory_bin()).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 3,
        "inventory {args:?} failed ({code}): {stderr}"
    );
    (code, stdout)
}

fn stock(db: &str) -> i64 {
    run(&["stock", "--db", db]).1.trim().parse().unwrap()
}

/// A worker that stops itself after reading; its stdout lines arrive on the channel.
struct Paused {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Paused {
    fn spawn(args: &[&str]) -> Paused {
        let mut child = Command::new(inventory_bin())
            .args(args)
            .arg("--stop-after-read")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let p = Paused { child, lines };
        let first = p.lines.recv_timeout(Duration::from_secs(60)).unwrap();
        assert!(first.starts_with("READ "), "{first}");
        p.wait_stopped();
        p
    }

    fn wait_stopped(&self) {
        let stat = format!("/proc/{}/stat", self.child.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = std::fs::read_to_string(&stat).unwrap();
            let state = s.rsplit(") ").next().unwrap().chars().next().unwrap();
            if state == 'T' {
                return;
            }
            assert!(Instant::now() < deadline, "worker never stopped");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Resumes the worker and returns its exit code and remaining output.
    fn resume(mut self) -> (i32, String) {
        // SAFETY: sending a signal to our own child has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
        let status = self.child.wait().unwrap();
        let rest: Vec<String> = self.lines.iter().collect();
        (status.code().unwrap_or(-1), rest.join("\n"))
    }
}

fn sqlite_db(dir: &tempfile::TempDir) -> String {
    dir.path().join("stock.db").to_str().unwrap().to_string()
}

/// Workers reserving one unit at a time, more attempts than stock: never oversold, no
/// reservation lost, sold out at the end.
fn oversell_check(db: &str, urls: &str, stock_units: i64, workers: usize, times: u32) {
    run(&["setup", "--db", db, "--stock", &stock_units.to_string()]);
    let times = times.to_string();
    let children: Vec<Child> = (0..workers)
        .map(|_| {
            Command::new(inventory_bin())
                .args(["reserve", "--db", db, "--nodes", urls, "--times", &times])
                .arg("--no-quarantine")
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut reserved = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        reserved += String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("RESERVED 1 "))
            .count();
    }
    let left = stock(db);
    assert!(left >= 0, "oversold: stock {left}");
    assert_eq!(
        reserved as i64,
        stock_units - left,
        "a reservation was lost"
    );
    assert_eq!(left, 0, "more attempts than units must sell out");
}

#[test]
fn concurrent_workers_never_oversell_sqlite() {
    let nodes = RedisNodes::start(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    oversell_check(&sqlite_db(&dir), &nodes.urls().join(","), 20, 4, 8);
}

#[test]
fn concurrent_workers_never_oversell_postgres() {
    let nodes = RedisNodes::start(3).unwrap();
    let pg = Postgres::start().unwrap();
    oversell_check(&pg.url(), &nodes.urls().join(","), 20, 4, 8);
}

/// The article's section 7.1 scenario: A reads, is paused past the TTL, B takes the lock and
/// reserves, A resumes and writes what it computed before the pause.
fn pause_scenario(db: &str, fencing: bool) -> (i32, String, i64) {
    let nodes = RedisNodes::start(3).unwrap();
    run(&["setup", "--db", db, "--stock", "10"]);
    let urls = nodes.urls().join(",");
    let mut common = vec![
        "reserve",
        "--db",
        db,
        "--nodes",
        &urls,
        "--ttl",
        "1000ms",
        "--no-quarantine",
    ];
    if !fencing {
        common.push("--no-fencing");
    }
    let a = Paused::spawn(&[&common[..], &["--qty", "5"]].concat());
    // A is stopped with the lock; its keys expire after the TTL.
    std::thread::sleep(Duration::from_millis(1500));
    let (code, out) = run(&[&common[..], &["--qty", "3"]].concat());
    assert_eq!(code, 0);
    assert!(out.contains("RESERVED 3 left=7"), "{out}");
    let (a_code, a_out) = a.resume();
    (a_code, a_out, stock(db))
}

#[test]
fn pause_scenario_fenced_sqlite_rejects_the_stale_write() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, left) = pause_scenario(&sqlite_db(&dir), true);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("REJECTED stale write"), "{out}");
    assert_eq!(left, 7, "B's reservation must stay intact");
}

#[test]
fn pause_scenario_fenced_postgres_rejects_the_stale_write() {
    let pg = Postgres::start().unwrap();
    let (code, out, left) = pause_scenario(&pg.url(), true);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("REJECTED stale write"), "{out}");
    assert_eq!(left, 7);
}

#[test]
fn pause_scenario_without_fencing_overwrites_the_stock() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, left) = pause_scenario(&sqlite_db(&dir), false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("RESERVED 5 left=5"), "{out}");
    // 8 units were sold out of 10, yet the stock says 5: B's reservation was lost.
    assert_eq!(left, 5);
}

/// Kleppmann's clock scenario on 5 nodes: A holds nodes 1-3; node 3's clock jumps forward and
/// A's key there expires; B takes nodes 3-5. Both hold a quorum at once.
fn clock_jump_scenario(fencing: bool) -> (i32, String, i64) {
    // With persistence: the scenario is about the clock jump, not about lost counters (a node
    // restarted without its counter would not count for the token: the amnesia guard).
    let options = RedisOptions::new()
        .clock_shift(true)
        .persistence(fencelock_testkit::Persistence::AofAlways);
    let nodes = RedisNodes::start_with(5, options).unwrap();
    // The set's first fenced grant starts its epoch and needs every node; A acquires with two
    // nodes down, so the epoch began before (as `fencelock reseed --above 0` would do).
    for n in nodes.iter() {
        n.cli(&["SET", fencelock::protocol::FENCE_COUNTER_KEY, "1"])
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    run(&["setup", "--db", &db, "--stock", "10"]);
    let urls = nodes.urls().join(",");
    // Without quarantine: the restarted nodes 4 and 5 never held A's key, and this scenario is
    // about the clock jump on node 3.
    let mut common = vec![
        "reserve",
        "--db",
        &db,
        "--nodes",
        &urls,
        "--ttl",
        "30000ms",
        "--no-quarantine",
    ];
    if !fencing {
        common.push("--no-fencing");
    }
    // A acquires while nodes 4 and 5 are down, so it holds exactly nodes 1 to 3.
    nodes.node(3).kill().unwrap();
    nodes.node(4).kill().unwrap();
    let a = Paused::spawn(&[&common[..], &["--qty", "5"]].concat());
    nodes.node(3).restart().unwrap();
    nodes.node(4).restart().unwrap();
    // Node 3's clock jumps a minute ahead: A's 30 s key there expires at once.
    nodes.node(2).set_clock_offset(60_000).unwrap();
    assert_eq!(
        nodes.node(2).cli(&["GET", "lock:sku:sku-1"]).unwrap(),
        "(nil)"
    );
    assert_ne!(
        nodes.node(0).cli(&["GET", "lock:sku:sku-1"]).unwrap(),
        "(nil)"
    );
    let (code, out) = run(&[&common[..], &["--qty", "3"]].concat());
    assert_eq!(code, 0);
    assert!(out.contains("RESERVED 3 left=7"), "{out}");
    let (a_code, a_out) = a.resume();
    (a_code, a_out, stock(&db))
}

#[test]
fn clock_jump_scenario_fenced_rejects_the_stale_write() {
    let (code, out, left) = clock_jump_scenario(true);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("REJECTED stale write"), "{out}");
    assert_eq!(left, 7);
}

#[test]
fn clock_jump_scenario_without_fencing_overwrites_the_stock() {
    let (code, out, left) = clock_jump_scenario(false);
    assert_eq!(code, 0, "{out}");
    assert_eq!(left, 5, "{out}");
}

/// The same example, unchanged, on etcd: only the node URL differs.
#[test]
fn concurrent_workers_never_oversell_on_etcd() {
    let etcd = fencelock_testkit::Etcd::start().unwrap();
    let url = etcd.endpoint().replace("http://", "etcd://");
    let dir = tempfile::tempdir().unwrap();
    oversell_check(&sqlite_db(&dir), &url, 12, 3, 6);
}
