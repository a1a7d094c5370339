//! `inspect` and `doctor` on a ZooKeeper ensemble (`zk://`): the waiters of a resource's lock
//! (the holder, its node's `czxid` = fencing token, its session, the waiters in order), and
//! what matters for locks on ZooKeeper (each server's mode from `srvr`, one leader, a quorum
//! serving, the session timeout the ensemble grants against the TTL, the chroot). Gathering
//! does the I/O; [`evaluate`] turns facts into checks and has none.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

use super::{check, show_holder, Check, Limits, Status};
use crate::exit::{self, Failure};
use crate::settings::Settings;

/// What a refused read means: the nodes carry another identity's ACL.
const NO_AUTH: &str = "refused (NoAuth): the nodes belong to another identity; check the user and password in the URL (zk://user:password@host/chroot)";

/// Bound on each request: generous, doctor measures slowness and must not fail on it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The ensemble of a `zk://` node list: its servers (`host:port`), its chroot, its name (the
/// URL without its password), and the URL's `user:password` for digest authentication.
#[derive(Clone)]
pub(crate) struct Ensemble {
    pub(crate) name: String,
    pub(crate) servers: Vec<String>,
    pub(crate) chroot: String,
    digest: Option<String>,
}

impl std::fmt::Debug for Ensemble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The digest holds the password: its presence only.
        f.debug_struct("Ensemble")
            .field("name", &self.name)
            .field("servers", &self.servers)
            .field("chroot", &self.chroot)
            .field("digest", &self.digest.as_ref().map(|_| "***"))
            .finish()
    }
}

/// The ensemble the node list names.
///
/// # Errors
///
/// A usage failure for a bad URL or a list of more than one URL (the library's own words).
pub(crate) fn ensemble(settings: &Settings) -> Result<Ensemble, Failure> {
    let url = match settings.nodes.as_slice() {
        [one] => one,
        _ => {
            return Err(Failure::usage(format!(
                "{} zk:// URLs given; one URL is one ensemble: list every server in it, e.g. zk://zk1:2181,zk2:2181,zk3:2181/chroot",
                settings.nodes.len()
            )))
        }
    };
    let addr = fencelock::NodeAddr::parse(url)
        .map_err(|e| Failure::usage(format!("node 1 of the list: {e}")))?;
    let (servers, chroot) = fencelock::protocol::zk_ensemble(&addr).ok_or_else(|| {
        Failure::usage(format!(
            "node 1 of the list ({}) is not a ZooKeeper URL; write it as zk://host:2181,host:2181/chroot",
            addr.redacted()
        ))
    })?;
    Ok(Ensemble {
        name: addr.redacted(),
        servers,
        chroot,
        digest: fencelock::protocol::zk_digest(&addr),
    })
}

/// A session on the ensemble with the lock's TTL as its timeout, as the library opens one.
async fn session(ensemble: &Ensemble, ttl: Duration) -> Result<zk::Client, String> {
    let mut connector = zk::Client::connector()
        .with_session_timeout(ttl)
        .with_connection_timeout(PROBE_TIMEOUT)
        .with_fail_eagerly();
    if let Some(digest) = &ensemble.digest {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    match tokio::time::timeout(
        PROBE_TIMEOUT * 2,
        connector.connect(&ensemble.servers.join(",")),
    )
    .await
    {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no session within {:?}", PROBE_TIMEOUT * 2)),
    }
}

/// One request, bounded.
async fn bounded<T>(
    what: &str,
    request: impl std::future::Future<Output = Result<T, zk::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// One waiter of a resource's line, oldest first: the first holds the lock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Waiter {
    /// The node's name: `<owner value>-lock-<sequence>`.
    pub(crate) node: String,
    pub(crate) sequence: i64,
    /// The node's creation zxid: the holder's fencing token.
    pub(crate) czxid: i64,
    /// The session that owns the node, as ZooKeeper shows it (`0x...`).
    pub(crate) session: String,
    /// The holder label its client stored, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
    /// A read lock's node (a read-write lock's reader).
    pub(crate) reader: bool,
    /// Written after its creation: an election's leader wrote its value on it, a semaphore's
    /// waiter was admitted.
    #[serde(skip)]
    pub(crate) written: bool,
}

/// `fencelock inspect RESOURCE` on ZooKeeper: the resource's line (a lock's holder and
/// waiters, a read-write lock's readers and writers), and what the family keeps under the
/// name: a semaphore's permit count, holders and waiters, the last writer's token, an
/// election's leader and term.
///
/// # Errors
///
/// 69 when the ensemble cannot be reached; a usage failure for a bad URL.
pub(crate) async fn inspect(settings: &Settings, resource: &str, json: bool) -> anyhow::Result<u8> {
    use fencelock::protocol;
    let ensemble = ensemble(settings)?;
    let unavailable = |why: String| {
        Failure::new(
            exit::UNAVAILABLE,
            format!(
                "cannot read the ZooKeeper ensemble {}: {why}; check the servers (`fencelock doctor`)",
                ensemble.name
            ),
        )
    };
    let client = session(&ensemble, settings.ttl.max(PROBE_TIMEOUT * 2))
        .await
        .map_err(unavailable)?;
    let dir = protocol::zk_lock_dir(&ensemble.chroot, resource);
    let line = read_line(&client, &dir).await.map_err(unavailable)?;
    let family = read_family(&client, &ensemble.chroot, resource, &line)
        .await
        .map_err(unavailable)?;
    if json {
        let value = serde_json::json!({
            "resource": resource,
            "backend": "zookeeper",
            "path": dir,
            "holder": line.first(),
            "waiters": line.get(1..).unwrap_or_default(),
            "permit_count": family.permit_count,
            "permits": family.permits,
            "permits_waiting": family.permits_waiting,
            "readers": family.readers,
            "writers_waiting": family.writers_waiting,
            "writer_record": family.writer_record,
            "election": family.election,
        });
        println!("{value}");
    } else {
        print!("{}", render_line(resource, &dir, &line, &family));
        print!("{}", render_family(resource, &family));
    }
    Ok(exit::OK)
}

/// The data and stat of `path`; `None` when there is no such node.
async fn read_node(
    client: &zk::Client,
    what: &str,
    path: &str,
) -> Result<Option<(Vec<u8>, zk::Stat)>, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, client.get_data(path)).await {
        Ok(Ok(answer)) => Ok(Some(answer)),
        Ok(Err(zk::Error::NoNode)) => Ok(None),
        Ok(Err(zk::Error::NoAuth)) => Err(format!("{what}: {NO_AUTH}")),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// The children of `dir` (none when it does not exist).
async fn children(client: &zk::Client, dir: &str) -> Result<Vec<String>, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, client.list_children(dir)).await {
        Ok(Ok(children)) => Ok(children),
        Ok(Err(zk::Error::NoNode)) => Ok(Vec::new()),
        Ok(Err(zk::Error::NoAuth)) => Err(format!("listing {dir}: {NO_AUTH}")),
        Ok(Err(e)) => Err(format!("listing {dir}: {e}")),
        Err(_) => Err(format!("listing {dir}: no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// The waiters' nodes in `dir`, oldest first (a node gone between the list and its read left
/// the line, and is skipped).
async fn read_line(client: &zk::Client, dir: &str) -> Result<Vec<Waiter>, String> {
    let mut named: Vec<(i64, String)> = children(client, dir)
        .await?
        .into_iter()
        .filter_map(|c| fencelock::protocol::zk_sequence(&c).map(|s| (s, c)))
        .collect();
    named.sort();
    let mut line = Vec::new();
    for (sequence, node) in named {
        let Some((data, stat)) =
            read_node(client, "reading a waiter", &format!("{dir}/{node}")).await?
        else {
            continue;
        };
        let holder = String::from_utf8(data).ok().filter(|h| !h.is_empty());
        line.push(Waiter {
            reader: fencelock::protocol::zk_is_reader(&node),
            node,
            sequence,
            czxid: stat.czxid,
            session: format!("{:#x}", stat.ephemeral_owner),
            holder,
            written: stat.version > 0,
        });
    }
    Ok(line)
}

/// A permit of a semaphore held on ZooKeeper: its slot node, whose `czxid` is the permit's
/// fencing token, and the holder label of the holder's place in line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Permit {
    pub(crate) slot: usize,
    pub(crate) node: String,
    pub(crate) czxid: i64,
    pub(crate) session: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
}

/// An election's leader: the first node of its line, once it wrote its value on it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Leader {
    pub(crate) value: String,
    /// The node's `czxid`.
    pub(crate) term: i64,
    pub(crate) node: String,
    /// Candidates behind it.
    pub(crate) candidates: usize,
}

/// What the primitives built on the line keep under a name on ZooKeeper.
#[derive(Debug, Clone, Default)]
pub(crate) struct Family {
    /// The semaphore's permit count (its directory's data), when one of that name is in use.
    pub(crate) permit_count: Option<u32>,
    pub(crate) permits: Vec<Permit>,
    /// The semaphore's waiters not admitted yet, oldest first.
    pub(crate) permits_waiting: Vec<Waiter>,
    /// A read-write lock's readers that hold (no writer's node ahead of them).
    pub(crate) readers: Vec<Waiter>,
    /// Writers in line behind readers that hold.
    pub(crate) writers_waiting: Vec<Waiter>,
    /// The fencing token the resource's last write lock recorded for its readers.
    pub(crate) writer_record: Option<String>,
    pub(crate) election: Option<Leader>,
    /// The election's candidates' nodes, its leader's included.
    pub(crate) candidates: usize,
}

/// Reads a semaphore's directory, a read-write lock's sides (from `line`, the resource's own)
/// and record, and an election's line, each where the library writes it.
async fn read_family(
    client: &zk::Client,
    chroot: &str,
    resource: &str,
    line: &[Waiter],
) -> Result<Family, String> {
    use fencelock::protocol;
    let mut family = Family::default();
    let sem = protocol::zk_semaphore_dir(chroot, resource);
    if let Some((count, _)) = read_node(client, "reading the semaphore", &sem).await? {
        family.permit_count = String::from_utf8_lossy(&count).parse().ok();
        let places = read_line(client, &sem).await?;
        let mut slots = Vec::new();
        for name in children(client, &sem).await? {
            let Some(slot) = protocol::zk_slot_of(&name) else {
                continue;
            };
            let path = format!("{sem}/{name}");
            if let Some((owner, stat)) = read_node(client, "reading a permit", &path).await? {
                slots.push((
                    slot,
                    name,
                    String::from_utf8_lossy(&owner).into_owned(),
                    stat,
                ));
            }
        }
        (family.permits, family.permits_waiting) = permits(slots, places);
    }
    (family.readers, family.writers_waiting) = sides(line);
    let record = protocol::zk_writer_record(chroot, resource);
    family.writer_record = read_node(client, "reading the writers' record", &record)
        .await?
        .map(|(data, _)| String::from_utf8_lossy(&data).into_owned());
    let candidates = read_line(
        client,
        &protocol::zk_lock_dir(chroot, &protocol::election_key(resource)),
    )
    .await?;
    family.election = leader(&candidates);
    family.candidates = candidates.len();
    Ok(family)
}

/// The permits held (each slot node with the holder label of its holder's place: the place
/// whose name starts with the owner value the slot holds), and the places of the waiters not
/// admitted yet. No I/O.
pub(crate) fn permits(
    mut slots: Vec<(usize, String, String, zk::Stat)>,
    places: Vec<Waiter>,
) -> (Vec<Permit>, Vec<Waiter>) {
    slots.sort_by_key(|s| s.0);
    let place_of = |owner: &str| {
        places
            .iter()
            .position(|p| !owner.is_empty() && p.node.starts_with(&format!("{owner}-")))
    };
    let mut admitted = Vec::new();
    let permits = slots
        .into_iter()
        .map(|(slot, node, owner, stat)| {
            let place = place_of(&owner);
            admitted.extend(place);
            Permit {
                slot,
                node,
                czxid: stat.czxid,
                session: format!("{:#x}", stat.ephemeral_owner),
                holder: place.and_then(|i| places[i].holder.clone()),
            }
        })
        .collect();
    let waiting = places
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !admitted.contains(i))
        .map(|(_, p)| p)
        .collect();
    (permits, waiting)
}

/// A read-write lock's readers that hold and the writers waiting behind them, in a line read
/// oldest first. Empty when a writer is first (it holds as a mutex does). No I/O.
pub(crate) fn sides(line: &[Waiter]) -> (Vec<Waiter>, Vec<Waiter>) {
    let readers = line.iter().take_while(|w| w.reader).count();
    if readers == 0 {
        return (Vec::new(), Vec::new());
    }
    let writers = line[readers..]
        .iter()
        .filter(|w| !w.reader)
        .cloned()
        .collect();
    (line[..readers].to_vec(), writers)
}

/// The leader of an election whose candidates' nodes are `candidates`, oldest first: the first,
/// once it wrote its value on its node. No I/O.
pub(crate) fn leader(candidates: &[Waiter]) -> Option<Leader> {
    let (first, rest) = candidates.split_first()?;
    first.written.then(|| Leader {
        value: first.holder.clone().unwrap_or_default(),
        term: first.czxid,
        node: first.node.clone(),
        candidates: rest.len(),
    })
}

/// The line in words; `family` tells what holds the name when no lock does. No I/O.
pub(crate) fn render_line(resource: &str, dir: &str, line: &[Waiter], family: &Family) -> String {
    let mut out = String::new();
    let Some((first, rest)) = line.split_first() else {
        if family.permit_count.is_some() {
            let _ = writeln!(
                out,
                "lock {resource:?}: a semaphore: {} permit(s) held, the name itself is not held as a lock (ZooKeeper)",
                family.permits.len()
            );
        } else {
            let _ = writeln!(
                out,
                "lock {resource:?}: not held, nobody waits (ZooKeeper, {dir})"
            );
        }
        return out;
    };
    let readers = line.iter().take_while(|w| w.reader).count();
    if readers > 0 {
        // Readers ahead of the first writer share the lock: no one node holds it.
        let _ = writeln!(
            out,
            "lock {resource:?}: held by {readers} reader(s) (a read-write lock), {} waiting behind them (ZooKeeper, {dir})",
            line.len() - readers
        );
        return out;
    }
    let _ = writeln!(
        out,
        "lock {resource:?}: held by node {} (czxid {} = fencing token, session {}) (ZooKeeper, {dir})",
        first.node, first.czxid, first.session
    );
    if let Some(h) = &first.holder {
        let _ = writeln!(out, "holder: {}", show_holder(h));
    }
    render_waiting(&mut out, "", rest);
    out
}

/// The waiters in order, or "nobody waits".
fn render_waiting(out: &mut String, indent: &str, rest: &[Waiter]) {
    if rest.is_empty() {
        let _ = writeln!(out, "{indent}nobody waits");
        return;
    }
    let _ = writeln!(out, "{indent}{} waiting, in order:", rest.len());
    for w in rest {
        let who = w.holder.as_deref().map(show_holder);
        let _ = writeln!(
            out,
            "{indent}  sequence {}  session {}  {}{}",
            w.sequence,
            w.session,
            w.node,
            who.map(|h| format!("  {h}")).unwrap_or_default()
        );
    }
}

/// The family's lines, after the resource's own. No I/O.
pub(crate) fn render_family(resource: &str, family: &Family) -> String {
    let mut out = String::new();
    let by = |h: &Option<String>| {
        h.as_deref()
            .map(|h| format!(" by {}", show_holder(h)))
            .unwrap_or_default()
    };
    if let Some(count) = family.permit_count {
        let _ = writeln!(
            out,
            "semaphore {resource:?}: {} permit(s) held of {count}",
            family.permits.len()
        );
        for p in &family.permits {
            let _ = writeln!(
                out,
                "  permit {}: token {}{}, node {}, session {}",
                p.slot,
                p.czxid,
                by(&p.holder),
                p.node,
                p.session
            );
        }
        render_waiting(&mut out, "  ", &family.permits_waiting);
    }
    if !family.readers.is_empty() {
        let _ = writeln!(
            out,
            "read-write lock {resource:?}: {} reader(s), no writer holds; {} writer(s) waiting",
            family.readers.len(),
            family.writers_waiting.len()
        );
        for r in &family.readers {
            let _ = writeln!(
                out,
                "  reader: node {} (czxid {}){}, session {}",
                r.node,
                r.czxid,
                by(&r.holder),
                r.session
            );
        }
        for w in &family.writers_waiting {
            let _ = writeln!(
                out,
                "  writer waiting: node {} (czxid {}){}",
                w.node,
                w.czxid,
                by(&w.holder)
            );
        }
    }
    if let Some(record) = &family.writer_record {
        let _ = writeln!(
            out,
            "read-write lock {resource:?}: the last write lock's fencing token was {record}"
        );
    }
    if let Some(leader) = &family.election {
        let _ = writeln!(
            out,
            "election {resource:?}: leader {:?}, term {} (node {}), {} candidate(s) behind it",
            leader.value, leader.term, leader.node, leader.candidates
        );
    } else if family.candidates > 0 {
        let _ = writeln!(
            out,
            "election {resource:?}: {} candidate(s), none leads yet (the first in line has not written its value)",
            family.candidates
        );
    }
    out
}

/// What one server said to `srvr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Srvr {
    /// It serves: its mode (`leader`, `follower`, `standalone`, `observer`) and version.
    Serving { mode: String, version: String },
    /// It answers but does not serve clients (a member without a quorum).
    NotServing,
    /// `srvr` is not in its `4lw.commands.whitelist`.
    NotAllowed,
}

/// What one server of the list told.
#[derive(Debug, Clone)]
pub(crate) struct ServerFacts {
    pub(crate) name: String,
    pub(crate) srvr: Result<Srvr, String>,
}

/// The chroot, as the session found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Chroot {
    /// No chroot: the locks live under `/fencelock`.
    None,
    Exists(String),
    /// Missing; `creatable`: its nearest existing ancestor lets anyone create children (the
    /// client makes it on first use).
    Missing {
        path: String,
        ancestor: String,
        creatable: bool,
    },
}

/// What the session on the ensemble told.
#[derive(Debug, Clone)]
pub(crate) struct SessionFacts {
    /// The session timeout the ensemble granted for the TTL.
    pub(crate) negotiated: Duration,
    /// The slowest of a few `sync` round trips.
    pub(crate) rtt: Duration,
    pub(crate) chroot: Chroot,
}

/// Everything `doctor` gathered.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    pub(crate) servers: Vec<ServerFacts>,
    pub(crate) session: Result<SessionFacts, String>,
}

/// Sends `srvr` to one server (ZooKeeper's four-letter word, on the client port).
async fn srvr(server: &str) -> Result<Srvr, String> {
    let talk = async {
        let mut stream = tokio::net::TcpStream::connect(server).await?;
        stream.write_all(b"srvr").await?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await?;
        Ok::<_, std::io::Error>(text)
    };
    let text = match tokio::time::timeout(PROBE_TIMEOUT, talk).await {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => return Err(format!("cannot reach it: {e}")),
        Err(_) => return Err(format!("no answer to srvr within {PROBE_TIMEOUT:?}")),
    };
    Ok(parse_srvr(&text))
}

/// Reads a `srvr` answer.
pub(crate) fn parse_srvr(text: &str) -> Srvr {
    if text.contains("not in the whitelist") {
        return Srvr::NotAllowed;
    }
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    match field("Mode:") {
        Some(mode) => Srvr::Serving {
            mode,
            version: field("Zookeeper version:")
                .map(|v| {
                    v.split([',', '-'])
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .to_string()
                })
                .unwrap_or_default(),
        },
        None => Srvr::NotServing,
    }
}

/// Opens a session as a lock would and reads what it was granted, the round trips and the
/// chroot. Read-only.
async fn gather_session(ensemble: &Ensemble, ttl: Duration) -> Result<SessionFacts, String> {
    let client = session(ensemble, ttl).await?;
    let negotiated = client.session_timeout();
    let mut rtt = Duration::ZERO;
    for _ in 0..3 {
        let started = Instant::now();
        bounded("sync", client.sync("/")).await?;
        rtt = rtt.max(started.elapsed());
    }
    let chroot = if ensemble.chroot.is_empty() {
        Chroot::None
    } else if bounded("reading the chroot", client.check_stat(&ensemble.chroot))
        .await?
        .is_some()
    {
        Chroot::Exists(ensemble.chroot.clone())
    } else {
        let mut ancestor = ensemble.chroot.clone();
        loop {
            ancestor = match ancestor.rsplit_once('/') {
                Some(("", _)) | None => "/".to_string(),
                Some((parent, _)) => parent.to_string(),
            };
            let seen = bounded("reading the chroot's parent", client.check_stat(&ancestor)).await?;
            if seen.is_some() || ancestor == "/" {
                break;
            }
        }
        let (acls, _) = bounded("reading the parent's ACL", client.get_acl(&ancestor)).await?;
        let creatable = acls.iter().any(|acl| {
            acl.scheme() == "world"
                && acl.id() == "anyone"
                && acl.permission().has(zk::Permission::CREATE)
        });
        Chroot::Missing {
            path: ensemble.chroot.clone(),
            ancestor,
            creatable,
        }
    };
    Ok(SessionFacts {
        negotiated,
        rtt,
        chroot,
    })
}

/// Turns the facts into checks. No I/O.
pub(crate) fn evaluate(facts: &Facts, limits: Limits) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut serving = 0;
    let mut leaders = Vec::new();
    let mut known = 0;
    let mut standalone = false;
    for s in &facts.servers {
        match &s.srvr {
            Err(why) => checks.push(check(
                "reachable",
                Some(&s.name),
                Status::Fail,
                why.clone(),
                Some("start the server or fix its address in the URL"),
            )),
            Ok(Srvr::NotAllowed) => checks.push(check(
                "mode",
                Some(&s.name),
                Status::Warn,
                "the server refuses `srvr` (not in its 4lw.commands.whitelist): its mode is unknown",
                Some("add srvr to 4lw.commands.whitelist for doctor to see the leader"),
            )),
            Ok(Srvr::NotServing) => {
                known += 1;
                checks.push(check(
                    "mode",
                    Some(&s.name),
                    Status::Fail,
                    "the server answers but does not serve clients (no quorum, or still joining)",
                    Some("see the server's log: it needs a quorum of its ensemble"),
                ));
            }
            Ok(Srvr::Serving { mode, version }) => {
                known += 1;
                serving += 1;
                if mode == "leader" {
                    leaders.push(s.name.clone());
                }
                standalone |= mode == "standalone";
                checks.push(check(
                    "mode",
                    Some(&s.name),
                    Status::Pass,
                    format!("{mode}, ZooKeeper {version}"),
                    None,
                ));
            }
        }
    }
    let listed = facts.servers.len();
    let quorum = listed / 2 + 1;
    if known > 0 {
        let status = match serving {
            n if n == listed => Status::Pass,
            n if n >= quorum => Status::Warn,
            _ => Status::Fail,
        };
        checks.push(check(
            "quorum",
            None,
            status,
            format!(
                "{serving} of the {listed} listed server(s) serve clients, a quorum needs {quorum}"
            ),
            Some(if status == Status::Fail {
                "no lock can be taken or kept until a quorum of servers is back"
            } else {
                "locks work; one more failure may stop them"
            }),
        ));
    }
    if standalone || listed == 1 {
        checks.push(check(
            "servers",
            None,
            Status::Warn,
            "a single server: when it is down, no lock can be taken, and held locks are lost after the session timeout",
            Some("fine for development; in production run 3 or 5 servers and list them all"),
        ));
    } else if known == listed {
        let status = if leaders.len() == 1 {
            Status::Pass
        } else {
            Status::Fail
        };
        let detail = match leaders.len() {
            0 => "no listed server is the leader".to_string(),
            1 => format!("one leader: {}", leaders[0]),
            _ => format!(
                "several leaders ({}): the URL mixes ensembles",
                leaders.join(", ")
            ),
        };
        checks.push(check(
            "leader",
            None,
            status,
            detail,
            Some("list the servers of one ensemble; without a leader it is electing or has no quorum"),
        ));
    }
    match &facts.session {
        Err(why) => checks.push(check(
            "session",
            None,
            Status::Fail,
            format!("cannot open a session: {why}"),
            Some("no lock can be taken: check the servers above and the URL"),
        )),
        Ok(s) => {
            checks.push(session_check(s.negotiated, limits.ttl));
            checks.push(chroot_check(&s.chroot));
            let limit = limits.node_timeout.max(Duration::from_secs(1));
            checks.push(check(
                "latency",
                None,
                if s.rtt > limit { Status::Warn } else { Status::Pass },
                format!("sync round trip up to {}", crate::cli::human(s.rtt)),
                Some("slower than the per-request timeout: requests will fail; raise --node-timeout or check the network"),
            ));
        }
    }
    checks.push(check(
        "clock skew",
        None,
        Status::Pass,
        "not measured: sessions are timed by the ensemble's leader alone, so skew between hosts does not shorten a lock",
        None,
    ));
    checks
}

/// The session timeout the ensemble granted against the TTL the lock asked for.
fn session_check(negotiated: Duration, ttl: Duration) -> Check {
    let human = crate::cli::human;
    // The server grants whole milliseconds.
    let asked = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    if negotiated == asked {
        return check(
            "session timeout",
            None,
            Status::Pass,
            format!(
                "the ensemble grants the TTL {} as the session timeout",
                human(ttl)
            ),
            None,
        );
    }
    let detail = if negotiated > asked {
        format!(
            "asked for the TTL {}, the ensemble grants {} (its minSessionTimeout): a crashed holder's lock lasts that long",
            human(ttl),
            human(negotiated)
        )
    } else {
        format!(
            "asked for the TTL {}, the ensemble grants {} (its maxSessionTimeout): a paused holder loses its lock after that",
            human(ttl),
            human(negotiated)
        )
    };
    check(
        "session timeout",
        None,
        Status::Warn,
        detail,
        Some("use a TTL within the servers' bounds (2 to 20 ticks by default), or change minSessionTimeout/maxSessionTimeout"),
    )
}

/// The chroot: there, or can be made.
fn chroot_check(chroot: &Chroot) -> Check {
    match chroot {
        Chroot::None => check("chroot", None, Status::Pass, "none: the locks live under /fencelock", None),
        Chroot::Exists(path) => check("chroot", None, Status::Pass, format!("{path} exists"), None),
        Chroot::Missing { path, ancestor, creatable: true } => check(
            "chroot",
            None,
            Status::Pass,
            format!("{path} is missing; the client creates it on first use ({ancestor} lets anyone create)"),
            None,
        ),
        Chroot::Missing { path, ancestor, creatable: false } => check(
            "chroot",
            None,
            Status::Fail,
            format!("{path} is missing and {ancestor} does not let this client create it"),
            Some("create the chroot with zkCli.sh (create /path), or fix the URL's path"),
        ),
    }
}

/// `fencelock doctor` on ZooKeeper.
///
/// # Errors
///
/// A usage failure for a bad URL; unreachable servers are failing checks.
pub(crate) async fn doctor(settings: &Settings, json: bool) -> anyhow::Result<u8> {
    let ensemble = ensemble(settings)?;
    let servers = futures_util::future::join_all(ensemble.servers.iter().map(|s| async move {
        ServerFacts {
            name: s.clone(),
            srvr: srvr(s).await,
        }
    }))
    .await;
    let facts = Facts {
        servers,
        session: gather_session(&ensemble, settings.ttl).await,
    };
    let limits = Limits {
        ttl: settings.ttl,
        node_timeout: settings.node_timeout,
    };
    super::report(&evaluate(&facts, limits), &[ensemble.name], settings, json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::testing::{limits, worst};

    fn serving(name: &str, mode: &str) -> ServerFacts {
        ServerFacts {
            name: name.into(),
            srvr: Ok(Srvr::Serving {
                mode: mode.into(),
                version: "3.8.0".into(),
            }),
        }
    }

    fn session(negotiated: Duration) -> Result<SessionFacts, String> {
        Ok(SessionFacts {
            negotiated,
            rtt: Duration::from_millis(2),
            chroot: Chroot::None,
        })
    }

    #[test]
    fn srvr_answers_read_as_modes() {
        let text = "Zookeeper version: 3.8.0-debian--1, built on 2022-01-01\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n";
        assert_eq!(
            parse_srvr(text),
            Srvr::Serving {
                mode: "follower".into(),
                version: "3.8.0".into()
            }
        );
        assert_eq!(
            parse_srvr("This ZooKeeper instance is not currently serving requests\n"),
            Srvr::NotServing
        );
        assert_eq!(
            parse_srvr("srvr is not executed because it is not in the whitelist.\n"),
            Srvr::NotAllowed
        );
    }

    #[test]
    fn a_healthy_ensemble_passes() {
        let facts = Facts {
            servers: vec![
                serving("a", "leader"),
                serving("b", "follower"),
                serving("c", "follower"),
            ],
            session: session(Duration::from_secs(10)),
        };
        let checks = evaluate(&facts, limits());
        assert!(
            checks.iter().all(|c| c.status == Status::Pass),
            "{checks:?}"
        );
    }

    #[test]
    fn a_lost_quorum_or_two_leaders_fail() {
        let mut facts = Facts {
            servers: vec![
                serving("a", "leader"),
                serving("b", "follower"),
                serving("c", "follower"),
            ],
            session: session(Duration::from_secs(10)),
        };
        facts.servers[2].srvr = Err("refused".into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "quorum"),
            Some(Status::Warn)
        );
        facts.servers[1].srvr = Ok(Srvr::NotServing);
        assert_eq!(
            worst(&evaluate(&facts, limits()), "quorum"),
            Some(Status::Fail)
        );
        let two = Facts {
            servers: vec![
                serving("a", "leader"),
                serving("b", "leader"),
                serving("c", "follower"),
            ],
            session: session(Duration::from_secs(10)),
        };
        assert_eq!(
            worst(&evaluate(&two, limits()), "leader"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn a_session_timeout_other_than_the_ttl_warns_and_no_session_fails() {
        let mut facts = Facts {
            servers: vec![serving("a", "standalone")],
            session: session(Duration::from_secs(4)),
        };
        let checks = evaluate(&facts, limits());
        assert_eq!(worst(&checks, "session timeout"), Some(Status::Warn));
        assert_eq!(worst(&checks, "servers"), Some(Status::Warn));
        facts.session = Err("no hosts".into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "session"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn a_missing_chroot_passes_only_when_it_can_be_made() {
        let missing = |creatable| Chroot::Missing {
            path: "/apps/x".into(),
            ancestor: "/".into(),
            creatable,
        };
        assert_eq!(chroot_check(&missing(true)).status, Status::Pass);
        assert_eq!(chroot_check(&missing(false)).status, Status::Fail);
    }

    #[test]
    fn the_line_renders_holder_and_waiters() {
        let w = |seq, czxid, holder: Option<&str>| Waiter {
            node: format!("abc-lock-{seq:010}"),
            sequence: seq,
            czxid,
            session: "0x10".into(),
            holder: holder.map(Into::into),
            reader: false,
            written: false,
        };
        let none = Family::default();
        let text = render_line(
            "r",
            "/fencelock/locks/r",
            &[w(1, 40, Some("host=h pid=1 label=job")), w(2, 41, None)],
            &none,
        );
        assert!(text.contains("czxid 40 = fencing token"), "{text}");
        assert!(text.contains("holder: \"job\" (process 1 on h)"), "{text}");
        assert!(
            text.contains("1 waiting, in order:\n  sequence 2"),
            "{text}"
        );
        assert!(render_line("r", "/d", &[], &none).contains("not held"));
        let mut reader = w(3, 42, None);
        reader.reader = true;
        let shared = render_line("r", "/d", &[reader.clone(), reader, w(5, 44, None)], &none);
        assert!(
            shared.contains("held by 2 reader(s) (a read-write lock), 1 waiting"),
            "{shared}"
        );
    }
}
