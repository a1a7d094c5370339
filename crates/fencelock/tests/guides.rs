//! The user docs are programs that run: every Rust block of README.md and docs/guide/ is a
//! region of a program in examples/, each of those programs runs here against real servers,
//! and no line of those pages names a test (docs/guarantees.md links claims to tests).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fencelock_testkit::{Etcd, Postgres, RedisCluster, RedisNodes, SentinelGroup, ZooKeeper};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The user-facing pages: the READMEs and every page of docs/guide/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![
        repo().join("README.md"),
        repo().join("crates/fencelock/README.md"),
        repo().join("crates/fencelock-cli/README.md"),
    ];
    let dir = repo().join("docs/guide");
    let mut guides: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    guides.sort();
    assert!(!guides.is_empty(), "docs/guide/ has no page");
    pages.extend(guides);
    pages
}

/// Region `name` of `examples/<example>.rs` (`// region: NAME` .. `// endregion: NAME`), with
/// its common indentation removed.
fn region(example: &str, name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{example}.rs"));
    let text = read(&path);
    let mut lines = None::<Vec<&str>>;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed == format!("// region: {name}") {
            lines = Some(Vec::new());
        } else if trimmed == format!("// endregion: {name}") {
            let lines = lines.take().expect("endregion before region");
            let indent = lines
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.len() - l.trim_start().len())
                .min()
                .unwrap_or(0);
            let body: Vec<&str> = lines
                .iter()
                .map(|l| if l.len() >= indent { &l[indent..] } else { "" })
                .collect();
            return body.join("\n");
        } else if let Some(lines) = lines.as_mut() {
            if !trimmed.starts_with("// region: ") && !trimmed.starts_with("// endregion: ") {
                lines.push(line);
            }
        }
    }
    panic!("{} has no complete region {name}", path.display())
}

#[test]
fn every_rust_block_of_readme_and_the_guides_is_a_region_of_an_example() {
    let mut checked = 0;
    for path in pages() {
        let text = read(&path);
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].trim() != "```rust" {
                i += 1;
                continue;
            }
            let start = i + 1;
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| l.trim().strip_prefix("<!-- example: "))
                .and_then(|l| l.strip_suffix(" -->"))
                .unwrap_or_else(|| {
                    panic!(
                        "{}:{start}: this ```rust block is not taken from an example, so nothing \
                         compiles or runs it; put it in a region of a program in \
                         crates/fencelock/examples/ and mark the block with \
                         <!-- example: FILE REGION --> on the line before",
                        path.display()
                    )
                });
            let (example, name) = marker.split_once(' ').unwrap_or_else(|| {
                panic!(
                    "{}:{start}: marker {marker:?} is not FILE REGION",
                    path.display()
                )
            });
            let end = start
                + lines[start..]
                    .iter()
                    .position(|l| l.trim() == "```")
                    .expect("an unclosed code block");
            let shown = lines[start..end].join("\n");
            let wanted = region(example, name);
            if shown != wanted {
                let line = shown
                    .lines()
                    .zip(wanted.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or_else(|| shown.lines().count().min(wanted.lines().count()));
                panic!(
                    "{}:{start} is not region {name} of examples/{example}.rs any more (line {} \
                     of the block differs). Change the example (it is compiled and run) and copy \
                     the region over the block: scripts/sync-guides.py does it.",
                    path.display(),
                    line + 1
                );
            }
            checked += 1;
            i = end + 1;
        }
    }
    assert!(
        checked >= 8,
        "the pages lost their examples: {checked} blocks"
    );
}

/// Every test function's name in the workspace: `fn NAME` right after a `#[test]` or
/// `#[tokio::test...]` attribute.
fn test_names() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            if entry.is_dir() {
                walk(&entry, out);
            } else if entry.extension().is_some_and(|x| x == "rs") {
                out.push(entry);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo().join("crates"), &mut files);
    let mut names = BTreeSet::new();
    for file in files {
        let text = read(&file);
        let mut after_test = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
                after_test = true;
            } else if after_test {
                let rest = line.strip_prefix("async ").unwrap_or(line);
                if let Some(rest) = rest.strip_prefix("fn ") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    names.insert(name);
                    after_test = false;
                } else if !line.starts_with("#[") {
                    after_test = false;
                }
            }
        }
    }
    names
}

#[test]
fn no_line_of_readme_or_the_guides_names_a_test() {
    let names = test_names();
    assert!(names.len() > 100, "found only {} test names", names.len());
    for path in pages() {
        for (n, line) in read(&path).lines().enumerate() {
            let words: BTreeSet<&str> = line
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .collect();
            // Short names (`restart`, `reseed`) are ordinary words too; a test's name is a sentence.
            if let Some(name) = names
                .iter()
                .find(|name| name.matches('_').count() >= 3 && words.contains(name.as_str()))
            {
                panic!(
                    "{}:{}: names the test {name}; a claim's test belongs in docs/guarantees.md",
                    path.display(),
                    n + 1
                );
            }
            assert!(
                !line.contains("tests/"),
                "{}:{}: points into tests/; link docs/guarantees.md instead",
                path.display(),
                n + 1
            );
        }
    }
}

// ---- the programs, run against real servers ----

/// The example binary of the workspace's test build (`cargo test` builds the examples).
fn example(name: &str) -> Command {
    let mut cmd = Command::new(
        fencelock_testkit::workspace_build()
            .join("examples")
            .join(name),
    );
    // Fresh nodes: nothing to protect by waiting out the restart quarantine.
    cmd.env("FENCELOCK_QUARANTINE", "off");
    cmd
}

fn ok(name: &str, out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn redis_urls(nodes: &RedisNodes) -> String {
    nodes.urls().join(",")
}

fn etcd_url(etcd: &Etcd) -> String {
    etcd.endpoint().replacen("http://", "etcd://", 1)
}

#[test]
fn the_front_page_example_runs_on_redis_and_on_etcd() {
    let nodes = RedisNodes::start(3).unwrap();
    let etcd = Etcd::start().unwrap();
    let (redis_dir, etcd_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut tokens = Vec::new();
    // A fence row follows one lock: the etcd run writes to a database of its own.
    for (url, dir) in [
        (redis_urls(&nodes), &redis_dir),
        (redis_urls(&nodes), &redis_dir),
        (etcd_url(&etcd), &etcd_dir),
    ] {
        let out = example("hello")
            .env("FENCELOCK_NODES", &url)
            .env("TMPDIR", dir.path())
            .output()
            .unwrap();
        let stdout = ok("hello", out);
        let token: u64 = stdout
            .trim()
            .strip_prefix("wrote under fencing token ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{url}: {stdout}"));
        tokens.push(token);
    }
    // The second Redis run follows the first holder of the same lock.
    assert!(tokens[1] > tokens[0], "{tokens:?}");
}

#[test]
fn the_managed_redis_guide_runs_on_a_sentinel_group() {
    let group = SentinelGroup::start().unwrap();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let out = example("managed_redis")
            .env("FENCELOCK_NODES", group.url())
            .output()
            .unwrap();
        let stdout = ok("managed_redis", out);
        let token: u64 = stdout
            .trim()
            .strip_prefix("held nightly-report under fencing token ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"));
        tokens.push(token);
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    // The lock went through the primary the Sentinels name: its counter is there.
    let primary = group.node(group.primary().unwrap());
    let counter: u64 = primary
        .cli(&["GET", "fencelock:fence"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(counter >= tokens[1], "counter {counter}, tokens {tokens:?}");
}

#[test]
fn the_managed_redis_guide_runs_on_a_cluster() {
    let cluster = RedisCluster::start().unwrap();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let out = example("managed_redis")
            .env("FENCELOCK_NODES", cluster.url())
            .output()
            .unwrap();
        let stdout = ok("managed_redis", out);
        let token: u64 = stdout
            .trim()
            .strip_prefix("held nightly-report under fencing token ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"));
        tokens.push(token);
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    // The lock went through the shard that owns the tag's slot: its counter is there.
    let slot = cluster.key_slot("{fencelock}").unwrap();
    let owner = cluster.node(cluster.slot_owner(slot).unwrap());
    let counter: u64 = owner
        .cli(&["GET", "{fencelock}fencelock:fence"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(counter >= tokens[1], "counter {counter}, tokens {tokens:?}");
}

fn semaphore_on(url: &str) {
    let out = example("semaphore")
        .env("FENCELOCK_NODES", url)
        .output()
        .unwrap();
    let stdout = ok("semaphore", out);
    assert_eq!(stdout.matches(" holds ").count(), 6, "{url}: {stdout}");
    let most: usize = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("at most ")?
                .strip_suffix(" jobs at once")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{url}: {stdout}"));
    assert!((1..=2).contains(&most), "{url}: {stdout}");
}

#[test]
fn the_semaphore_guide_runs_on_redis_and_on_etcd() {
    let nodes = RedisNodes::start(3).unwrap();
    semaphore_on(&redis_urls(&nodes));
    let etcd = Etcd::start().unwrap();
    semaphore_on(&etcd_url(&etcd));
}

/// A process whose stdout lines arrive on a channel.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Running { child, lines }
    }

    /// The first line that starts with `prefix`, within a wide margin (a loaded machine).
    fn line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => panic!("no line {prefix:?}: {e}"),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn term(line: &str) -> u64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn the_election_guide_fails_over_when_the_leader_is_killed() {
    let nodes = RedisNodes::start(3).unwrap();
    let candidate = |arg: &str| {
        let mut cmd = example("election");
        cmd.arg(arg)
            .env("FENCELOCK_NODES", redis_urls(&nodes))
            .env("FENCELOCK_TTL", "2s");
        Running::spawn(cmd)
    };
    let observer = candidate("--observe");
    let mut first = candidate("web-1");
    let first_term = term(&first.line("web-1 leads, term "));
    let second = candidate("web-2");
    // kill -9: no resignation; the standby takes over once the dead leader's lock expires.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let second_term = term(&second.line("web-2 leads, term "));
    assert!(second_term > first_term, "{first_term} then {second_term}");
    let seen = [observer.line("leader "), observer.line("leader ")];
    assert_eq!(
        seen,
        [
            format!("leader web-1 term {first_term}"),
            format!("leader web-2 term {second_term}")
        ]
    );
}

#[test]
fn the_rwlock_guide_runs() {
    let nodes = RedisNodes::start(3).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = example("rwlock")
        .env("FENCELOCK_NODES", redis_urls(&nodes))
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stdout = ok("rwlock", out);
    let written = stdout
        .lines()
        .find_map(|l| l.strip_prefix("wrote: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let reads: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("reader "))
        .collect();
    assert_eq!(reads.len(), 4, "{stdout}");
    for read in reads {
        assert!(read.contains(&format!("{written:?}")), "{read} ({written})");
    }
}

#[test]
fn the_blocking_guide_counts_every_increment() {
    let nodes = RedisNodes::start(3).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = example("blocking")
        .env("FENCELOCK_NODES", redis_urls(&nodes))
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stdout = ok("blocking", out);
    assert_eq!(stdout.trim(), "counter = 20");
}

#[test]
fn the_fenced_writes_guide_runs_on_postgres() {
    let nodes = RedisNodes::start(3).unwrap();
    let pg = Postgres::start().unwrap();
    for left in [99, 98] {
        let out = example("fenced_writes")
            .env("FENCELOCK_NODES", redis_urls(&nodes))
            .env("DATABASE_URL", pg.url())
            .output()
            .unwrap();
        let stdout = ok("fenced_writes", out);
        assert_eq!(
            stdout.trim(),
            format!("apple: {left} left\npear: {left} left"),
            "{stdout}"
        );
    }
}

#[test]
fn the_postgres_lock_guide_runs_and_each_run_gets_a_larger_token() {
    let pg = Postgres::start().unwrap();
    let mut last = 0;
    for _ in 0..2 {
        let out = example("postgres_lock")
            .env("FENCELOCK_NODES", pg.url())
            .output()
            .unwrap();
        let stdout = ok("postgres_lock", out);
        let token: u64 = stdout
            .trim()
            .strip_prefix("held under fencing token ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(token > last, "{token} after {last}");
        last = token;
    }
}

#[test]
fn the_zookeeper_guide_runs_and_each_run_gets_a_larger_token() {
    let zk = ZooKeeper::start().unwrap();
    let mut last = 0;
    for _ in 0..2 {
        let out = example("zookeeper_lock")
            .env("FENCELOCK_NODES", format!("{}/apps/billing", zk.url()))
            .output()
            .unwrap();
        let stdout = ok("zookeeper_lock", out);
        let token: u64 = stdout
            .trim()
            .strip_prefix("held under fencing token ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(token > last, "{token} after {last}");
        last = token;
    }
}

#[test]
fn the_zookeeper_guides_family_runs() {
    let zk = ZooKeeper::start().unwrap();
    let out = example("zookeeper_family")
        .env("FENCELOCK_NODES", format!("{}/apps/billing", zk.url()))
        .output()
        .unwrap();
    let stdout = ok("zookeeper_family", out);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with("both accounts under token "),
        "{stdout}"
    );
    assert!(
        ["holding gpu:permit:0", "holding gpu:permit:1"].contains(&lines[1]),
        "{stdout}"
    );
    // The reader sees the writer's token.
    let written = lines[2]
        .strip_prefix("read after the write of token ")
        .and_then(|rest| rest.split_once(':'))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(written.1.trim(), format!("Some({})", written.0), "{stdout}");
    assert!(lines[3].starts_with("leader host-a in term "), "{stdout}");
}

#[test]
fn the_published_crates_readmes_link_only_to_absolute_addresses() {
    // crates.io shows a crate's README without the repository around it: a relative link there
    // leads nowhere.
    for krate in ["fencelock", "fencelock-cli"] {
        let path = repo().join(format!("crates/{krate}/README.md"));
        let text = read(&path);
        for (n, line) in text.lines().enumerate() {
            for target in line.split("](").skip(1) {
                let target = target.split(')').next().unwrap_or("");
                assert!(
                    target.starts_with("https://"),
                    "{}:{}: link {target:?} is relative; crates.io cannot follow it",
                    path.display(),
                    n + 1
                );
            }
        }
        let manifest = read(&repo().join(format!("crates/{krate}/Cargo.toml")));
        assert!(
            manifest.contains("readme = \"README.md\""),
            "crates/{krate}/Cargo.toml must publish its own README.md"
        );
    }
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_relative_link_of_readme_and_the_guides_leads_to_a_file_and_heading() {
    let mut pages = pages();
    pages.retain(|p| !p.starts_with(repo().join("crates")));
    for page in pages {
        let text = read(&page);
        let dir = page.parent().unwrap();
        let mut targets = Vec::new();
        for line in text.lines() {
            // Inline links, and the definitions of reference links (`[name]: target`).
            for rest in line.split("](").skip(1) {
                targets.push(rest.split(')').next().unwrap_or("").to_owned());
            }
            if let Some((_, target)) = line.strip_prefix('[').and_then(|l| l.split_once("]: ")) {
                targets.push(target.trim().to_owned());
            }
        }
        for target in targets {
            if target.starts_with("https://") || target.starts_with("http://") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            assert!(
                file.exists(),
                "{}: link {target:?} leads to no file",
                page.display()
            );
            if !anchor.is_empty() {
                let headings: Vec<String> = read(&file)
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .map(|l| slug(l.trim_start_matches('#')))
                    .collect();
                assert!(
                    headings.iter().any(|h| h == anchor),
                    "{}: link {target:?}: {} has no heading #{anchor}",
                    page.display(),
                    file.display()
                );
            }
        }
    }
}
