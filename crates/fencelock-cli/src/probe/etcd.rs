//! `inspect` and `doctor` on an etcd node set: what the waiting line of a resource holds (the
//! holder, the waiters, their revisions and leases), and what matters for locks on etcd (member
//! health, one leader, quorum, lease TTL against the election timeout). Gathering does the
//! I/O; [`evaluate`] turns facts into checks and has none, as `redis/doctor.rs` does for Redis.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions, SortOrder, SortTarget};
use serde::Serialize;

use super::{check, show_holder, Check, Limits, Status};
use crate::exit::{self, Failure};
use crate::node::TlsFiles;
use crate::settings::Settings;

/// Bound on each request: generous, doctor measures slowness and must not fail on it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One member of the node list: its client endpoint, its name for display, and the login.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) name: String,
    endpoint: String,
    login: Option<(String, String)>,
    tls: bool,
}

/// Whether the node list names etcd members (the first URL decides, as in the library).
pub(crate) fn is_etcd(settings: &Settings) -> bool {
    settings
        .nodes
        .first()
        .is_some_and(|u| u.starts_with("etcd://") || u.starts_with("etcds://"))
}

/// The members of `urls`, without I/O.
///
/// # Errors
///
/// A usage failure naming the entry that is not an etcd URL.
pub(crate) fn members(urls: &[String]) -> Result<Vec<Member>, Failure> {
    urls.iter()
        .enumerate()
        .map(|(i, url)| {
            let addr = fencelock::NodeAddr::parse(url)
                .map_err(|e| Failure::usage(format!("node {} of the list: {e}", i + 1)))?;
            let name = addr.redacted();
            let (tls, rest) = match (url.strip_prefix("etcds://"), url.strip_prefix("etcd://")) {
                (Some(rest), _) => (true, rest),
                (None, Some(rest)) => (false, rest),
                _ => {
                    return Err(Failure::usage(format!(
                        "node {} of the list ({name}) is not an etcd node; give etcd:// URLs for every node",
                        i + 1
                    )))
                }
            };
            let rest = rest.trim_end_matches('/');
            let (login, host_port) = match rest.rsplit_once('@') {
                Some((auth, hp)) => {
                    let (user, pass) = auth.split_once(':').unwrap_or((auth, ""));
                    (Some((user.to_string(), pass.to_string())), hp)
                }
                None => (None, rest),
            };
            let scheme = if tls { "https" } else { "http" };
            Ok(Member {
                name,
                endpoint: format!("{scheme}://{host_port}"),
                login,
                tls,
            })
        })
        .collect()
}

/// A client of `members` (all of them, or one for a per-member probe).
async fn connect(members: &[&Member], tls: &TlsFiles) -> Result<Client, String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(PROBE_TIMEOUT)
        .with_timeout(PROBE_TIMEOUT);
    if let Some((user, pass)) = members.iter().find_map(|m| m.login.clone()) {
        options = options.with_user(user, pass);
    }
    if members.iter().any(|m| m.tls) {
        options = options.with_tls(tls_options(tls)?);
    }
    let endpoints: Vec<&str> = members.iter().map(|m| m.endpoint.as_str()).collect();
    tokio::time::timeout(PROBE_TIMEOUT, Client::connect(endpoints, Some(options)))
        .await
        .map_err(|_| format!("no answer within {PROBE_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())
}

/// The CA and client certificate of `--tls-*` for etcds:// members (the key's path is never
/// shown).
fn tls_options(tls: &TlsFiles) -> Result<etcd_client::TlsOptions, String> {
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).map_err(|e| format!("{what}: cannot read it ({:?})", e.kind()))
    };
    let mut options = etcd_client::TlsOptions::new();
    if let Some(ca) = &tls.ca {
        options = options.ca_certificate(etcd_client::Certificate::from_pem(read(ca, "--tls-ca")?));
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        options = options.identity(etcd_client::Identity::from_pem(
            read(cert, "--tls-cert")?,
            read(key, "--tls-key")?,
        ));
    }
    Ok(options)
}

/// One waiter of a resource's line on etcd, oldest first: the first holds the lock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Waiter {
    pub(crate) key: String,
    /// The key's create revision: the holder's fencing token.
    pub(crate) revision: i64,
    pub(crate) lease: String,
    /// Seconds left on the lease (`None` when etcd no longer knows it).
    pub(crate) lease_ttl_s: Option<i64>,
    /// The holder label its client stored (`fencelock::Holder` as text), if any; on an
    /// election's key, the leader's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
    /// Written again after its creation: an election's leader wrote its value on it.
    #[serde(skip)]
    pub(crate) proclaimed: bool,
}

/// `fencelock inspect RESOURCE` on etcd.
///
/// # Errors
///
/// A failure when the cluster cannot be reached (nothing to show).
pub(crate) async fn inspect(settings: &Settings, resource: &str, json: bool) -> anyhow::Result<u8> {
    let members = members(&settings.nodes)?;
    let all: Vec<&Member> = members.iter().collect();
    let mut client = connect(&all, &settings.tls).await.map_err(|why| {
        Failure::new(
            exit::UNAVAILABLE,
            format!(
                "cannot reach the etcd cluster ({}): {why}; check the members (`fencelock doctor`)",
                names(&members)
            ),
        )
    })?;
    let prefix = fencelock::protocol::etcd_queue_prefix(resource);
    let line = read_line(&mut client, &prefix).await?;
    let family = read_family(&mut client, resource, &line).await?;
    if json {
        let value = serde_json::json!({
            "resource": resource,
            "backend": "etcd",
            "prefix": prefix,
            "holder": line.first(),
            "waiters": line.get(1..).unwrap_or_default(),
            "permits": family.permits,
            "readers": family.readers,
            "writers_waiting": family.writers_waiting,
            "writer_record": family.writer_record,
            "election": family.election,
        });
        println!("{value}");
    } else {
        print!("{}", render_line(resource, &line, &family));
        print!("{}", render_family(resource, &family));
    }
    Ok(exit::OK)
}

/// The keys under `prefix`, oldest first, each with its lease's time left.
///
/// # Errors
///
/// 69 when the cluster does not answer the read.
async fn read_line(client: &mut Client, prefix: &str) -> Result<Vec<Waiter>, Failure> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let resp = tokio::time::timeout(PROBE_TIMEOUT, client.get(prefix, Some(options)))
        .await
        .map_err(|_| {
            Failure::new(
                exit::UNAVAILABLE,
                "the etcd cluster did not answer the read in time",
            )
        })?
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("reading {prefix}: {e}")))?;
    let mut line = Vec::new();
    for kv in resp.kvs() {
        let lease = kv.lease();
        let ttl = match client.lease_client().time_to_live(lease, None).await {
            Ok(r) if r.ttl() >= 0 => Some(r.ttl()),
            _ => None,
        };
        let holder = kv
            .value_str()
            .ok()
            .filter(|v| !v.is_empty())
            .map(str::to_string);
        line.push(Waiter {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            revision: kv.create_revision(),
            lease: format!("{:016x}", lease as u64),
            lease_ttl_s: ttl,
            holder,
            proclaimed: kv.mod_revision() > kv.create_revision(),
        });
    }
    Ok(line)
}

/// A permit of a semaphore held on etcd: its slot and the slot key's holder.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Permit {
    pub(crate) slot: u32,
    /// The slot key, its create revision (the permit's fencing token), lease and holder (the
    /// label on the holder's key in the semaphore's line, which shares the slot key's lease).
    #[serde(flatten)]
    pub(crate) key: Waiter,
}

/// An election's leader: the oldest key of its line, once it wrote its value on it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Leader {
    pub(crate) value: String,
    /// The key's create revision.
    pub(crate) term: i64,
    pub(crate) key: String,
    /// Candidates behind it.
    pub(crate) candidates: usize,
}

/// What the primitives built on the mutex keep under a name on etcd.
#[derive(Debug, Clone, Default)]
pub(crate) struct Family {
    pub(crate) permits: Vec<Permit>,
    /// A read-write lock's readers that hold (no writer's key older than theirs).
    pub(crate) readers: Vec<Waiter>,
    /// Writers in line behind readers that hold.
    pub(crate) writers_waiting: Vec<Waiter>,
    /// The fencing token of the resource's last write lock (`<prefix>.last-writer`).
    pub(crate) writer_record: Option<String>,
    pub(crate) election: Option<Leader>,
    /// The election's candidates' keys, its leader's included.
    pub(crate) candidates: usize,
}

/// Reads a semaphore's slots and line, a read-write lock's sides (from `line`, the resource's
/// own) and record, and an election's line, each where the library writes it.
///
/// # Errors
///
/// 69 when the cluster does not answer a read.
async fn read_family(
    client: &mut Client,
    resource: &str,
    line: &[Waiter],
) -> Result<Family, Failure> {
    use fencelock::protocol;
    let mut family = Family::default();
    // Every slot's queue shares this prefix: `fencelock/<name>:permit:`.
    let mut slots_prefix = protocol::etcd_queue_prefix(&protocol::permit_key(resource, 0));
    slots_prefix.truncate(slots_prefix.len() - "0/".len());
    let slots = read_line(client, &slots_prefix).await?;
    if !slots.is_empty() {
        let waiters = read_line(
            client,
            &protocol::etcd_queue_prefix(&protocol::permit_line(resource)),
        )
        .await?;
        family.permits = permits(&slots_prefix, slots, &waiters);
    }
    let (readers, writers_waiting) = sides(&protocol::etcd_queue_prefix(resource), line);
    family.readers = readers;
    family.writers_waiting = writers_waiting;
    let mut record_key = protocol::etcd_queue_prefix(resource);
    record_key.pop();
    record_key.push_str(".last-writer");
    family.writer_record = tokio::time::timeout(PROBE_TIMEOUT, client.get(record_key, None))
        .await
        .ok()
        .and_then(Result::ok)
        .and_then(|r| {
            r.kvs()
                .first()
                .and_then(|kv| kv.value_str().ok().map(str::to_owned))
        });
    let candidates = read_line(
        client,
        &protocol::etcd_queue_prefix(&protocol::election_key(resource)),
    )
    .await?;
    family.election = leader(&candidates);
    family.candidates = candidates.len();
    Ok(family)
}

/// The permits held: the oldest key of each slot's queue (`<slots_prefix><i>/<lease>`), with
/// the holder label of the line key on the same lease. No I/O.
pub(crate) fn permits(slots_prefix: &str, slots: Vec<Waiter>, line: &[Waiter]) -> Vec<Permit> {
    let mut held: std::collections::BTreeMap<u32, Waiter> = std::collections::BTreeMap::new();
    for mut key in slots {
        let Some(slot) = key
            .key
            .strip_prefix(slots_prefix)
            .and_then(|rest| rest.split_once('/'))
            .and_then(|(i, _)| i.parse::<u32>().ok())
        else {
            continue; // another resource's queue that happens to share the prefix
        };
        if key.holder.is_none() {
            key.holder = line
                .iter()
                .find(|w| w.lease == key.lease)
                .and_then(|w| w.holder.clone());
        }
        // Oldest first: the slot's holder is its first key.
        held.entry(slot).or_insert(key);
    }
    held.into_iter()
        .map(|(slot, key)| Permit { slot, key })
        .collect()
}

/// A read-write lock's readers that hold, and the writers waiting behind them, in a line
/// read oldest first (readers' keys are `<prefix>r<lease>`, writers' start with a hex digit).
/// Empty when a writer is first (it holds as a mutex does). No I/O.
pub(crate) fn sides(prefix: &str, line: &[Waiter]) -> (Vec<Waiter>, Vec<Waiter>) {
    let is_reader = |w: &Waiter| {
        w.key
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('r'))
    };
    let Some(first_writer) = line.iter().position(|w| !is_reader(w)) else {
        return (line.to_vec(), Vec::new());
    };
    let readers: Vec<Waiter> = line[..first_writer].to_vec();
    if readers.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let writers = line[first_writer..]
        .iter()
        .filter(|w| !is_reader(w))
        .cloned()
        .collect();
    (readers, writers)
}

/// The leader of an election whose candidates' keys are `candidates`, oldest first: the oldest,
/// once it wrote its value (a key modified after its creation). No I/O.
pub(crate) fn leader(candidates: &[Waiter]) -> Option<Leader> {
    let (first, rest) = candidates.split_first()?;
    first.proclaimed.then(|| Leader {
        value: first.holder.clone().unwrap_or_default(),
        term: first.revision,
        key: first.key.clone(),
        candidates: rest.len(),
    })
}

/// The family's lines, after the resource's own. No I/O.
pub(crate) fn render_family(resource: &str, family: &Family) -> String {
    let mut out = String::new();
    let ttl = |w: &Waiter| {
        w.lease_ttl_s
            .map_or("gone".to_string(), |s| format!("{s}s"))
    };
    let by = |w: &Waiter| {
        w.holder
            .as_deref()
            .map(|h| format!(" by {}", show_holder(h)))
            .unwrap_or_default()
    };
    if !family.permits.is_empty() {
        let _ = writeln!(
            out,
            "semaphore {resource:?}: {} permit(s) held",
            family.permits.len()
        );
        for p in &family.permits {
            let _ = writeln!(
                out,
                "  permit {}: token {}{}, lease {} with {} left",
                p.slot,
                p.key.revision,
                by(&p.key),
                p.key.lease,
                ttl(&p.key)
            );
        }
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
                "  reader: key {} (revision {}){}, lease {} with {} left",
                r.key,
                r.revision,
                by(r),
                r.lease,
                ttl(r)
            );
        }
        for w in &family.writers_waiting {
            let _ = writeln!(
                out,
                "  writer waiting: key {} (revision {}){}",
                w.key,
                w.revision,
                by(w)
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
            "election {resource:?}: leader {:?}, term {} (key {}), {} candidate(s) behind it",
            leader.value, leader.term, leader.key, leader.candidates
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

fn names(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| m.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The human form of a line; `family` tells what holds the name when no lock does. No I/O.
pub(crate) fn render_line(resource: &str, line: &[Waiter], family: &Family) -> String {
    let mut out = String::new();
    let Some((first, rest)) = line.split_first() else {
        if family.permits.is_empty() {
            let _ = writeln!(out, "lock {resource:?}: not held, nobody waits (etcd)");
        } else {
            let _ = writeln!(
                out,
                "lock {resource:?}: a semaphore: {} permit(s) held, the name itself is not held as a lock (etcd)",
                family.permits.len()
            );
        }
        return out;
    };
    if !family.readers.is_empty() {
        // Readers first in line share the lock: no one key holds it.
        let _ = writeln!(
            out,
            "lock {resource:?}: held by {} reader(s) (a read-write lock), {} writer(s) waiting (etcd)",
            family.readers.len(),
            family.writers_waiting.len()
        );
        return out;
    }
    let ttl = |w: &Waiter| {
        w.lease_ttl_s
            .map_or("gone".to_string(), |s| format!("{s}s"))
    };
    let _ =
        writeln!(
        out,
        "lock {resource:?}: held by key {} (revision {} = fencing token, lease {} with {} left)",
        first.key, first.revision, first.lease, ttl(first)
    );
    if let Some(h) = &first.holder {
        let _ = writeln!(out, "holder: {}", show_holder(h));
    }
    if rest.is_empty() {
        let _ = writeln!(out, "nobody waits");
    } else {
        let _ = writeln!(out, "{} waiting, in order:", rest.len());
        for w in rest {
            let who = w.holder.as_deref().map(show_holder);
            let _ = writeln!(
                out,
                "  revision {}  lease {} ({} left)  {}{}",
                w.revision,
                w.lease,
                ttl(w),
                w.key,
                who.map(|h| format!("  {h}")).unwrap_or_default()
            );
        }
    }
    out
}

/// What one member said.
#[derive(Debug, Clone)]
pub(crate) struct MemberFacts {
    pub(crate) name: String,
    /// `Err` with the reason when the member could not be reached.
    pub(crate) reachable: Result<(), String>,
    pub(crate) member_id: u64,
    /// The leader this member follows (0: none).
    pub(crate) leader: u64,
    pub(crate) version: String,
    pub(crate) errors: Vec<String>,
    /// How many members the cluster lists.
    pub(crate) cluster_size: usize,
    /// Round trips of a few status requests.
    pub(crate) rtts: Vec<Duration>,
    /// The TTL etcd granted a lease asked for with 1 s: its minimum, which etcd derives from
    /// its election timeout (1.5 times it, in whole seconds).
    pub(crate) min_lease_ttl: Option<Duration>,
}

/// Asks one member what the checks need (a lease of 1 s is granted and revoked at once: the
/// only way to learn the smallest lease the cluster gives, which follows its election timeout).
pub(crate) async fn gather(member: &Member, tls: &TlsFiles) -> MemberFacts {
    let mut facts = MemberFacts {
        name: member.name.clone(),
        reachable: Ok(()),
        member_id: 0,
        leader: 0,
        version: String::new(),
        errors: Vec::new(),
        cluster_size: 0,
        rtts: Vec::new(),
        min_lease_ttl: None,
    };
    let mut client = match connect(&[member], tls).await {
        Ok(c) => c,
        Err(why) => {
            facts.reachable = Err(why);
            return facts;
        }
    };
    for _ in 0..3 {
        let sent = Instant::now();
        match client.status().await {
            Ok(status) => {
                facts.rtts.push(sent.elapsed());
                facts.member_id = status.header().map_or(0, |h| h.member_id());
                facts.leader = status.leader();
                facts.version = status.version().to_string();
                facts.errors = status.errors().to_vec();
            }
            Err(e) => {
                facts.reachable = Err(format!("status failed: {e}"));
                return facts;
            }
        }
    }
    if let Ok(list) = client.member_list().await {
        facts.cluster_size = list.members().len();
    }
    if let Ok(grant) = client.lease_grant(1, None).await {
        facts.min_lease_ttl = u64::try_from(grant.ttl()).ok().map(Duration::from_secs);
        let _ = client.lease_revoke(grant.id()).await;
    }
    facts
}

/// Turns the members' facts into checks. No I/O.
pub(crate) fn evaluate(facts: &[MemberFacts], limits: Limits) -> Vec<Check> {
    let reachable: Vec<&MemberFacts> = facts.iter().filter(|f| f.reachable.is_ok()).collect();
    let mut checks: Vec<Check> = facts.iter().filter_map(unreachable_member).collect();
    checks.extend(quorum_checks(facts.len(), &reachable));
    for f in &reachable {
        checks.extend(follows_a_leader(f));
        checks.extend(member_health(f));
        checks.extend(member_latency(f, limits));
    }
    checks.extend(leader_agreement(&reachable));
    checks.extend(duplicate_members(&reachable));
    if let Some(min) = reachable.iter().filter_map(|f| f.min_lease_ttl).max() {
        checks.push(lease_check(min, limits.ttl));
    }
    checks.push(check(
        "clock skew",
        None,
        Status::Pass,
        "not measured: etcd's client API carries no clock; leases are timed by the leader's own clock, so skew between members does not shorten a lock",
        None,
    ));
    checks
}

/// A member that could not be reached.
fn unreachable_member(f: &MemberFacts) -> Option<Check> {
    let why = f.reachable.as_ref().err()?;
    Some(check(
        "reachable",
        Some(&f.name),
        Status::Fail,
        format!("cannot reach the member: {why}"),
        Some("start the member or fix its URL"),
    ))
}

/// Whether a quorum of the cluster's members answers without errors, and whether the node list
/// (`listed` entries) names every member.
fn quorum_checks(listed: usize, reachable: &[&MemberFacts]) -> Vec<Check> {
    let size = reachable.iter().map(|f| f.cluster_size).max().unwrap_or(0);
    if size == 0 {
        return if reachable.is_empty() {
            Vec::new()
        } else {
            vec![check(
                "quorum",
                None,
                Status::Fail,
                "no member listed the cluster's members",
                Some("check the members' health (`etcdctl endpoint health`)"),
            )]
        };
    }
    let quorum = size / 2 + 1;
    let healthy = reachable.iter().filter(|f| f.errors.is_empty()).count();
    let status = if healthy >= quorum {
        if healthy == size {
            Status::Pass
        } else {
            Status::Warn
        }
    } else {
        Status::Fail
    };
    let mut checks = vec![check(
        "quorum",
        None,
        status,
        format!("{healthy} of {size} member(s) answer without errors, a quorum needs {quorum}"),
        Some(if status == Status::Fail {
            "no lock can be granted or released until a quorum of members is back"
        } else {
            "locks work; one more failure may stop them"
        }),
    )];
    if size == 1 {
        checks.push(check(
            "members",
            None,
            Status::Warn,
            "a single-member cluster: when it is down, no lock can be taken, extended or released",
            Some("fine for development; in production run 3 or 5 members on separate machines"),
        ));
    }
    if listed < size {
        checks.push(check(
            "node list",
            None,
            Status::Warn,
            format!("the node list names {listed} of the cluster's {size} member(s)"),
            Some("list every member, so that the client can go to another when one is down"),
        ));
    }
    checks
}

/// A member that follows no leader.
fn follows_a_leader(f: &MemberFacts) -> Option<Check> {
    (f.leader == 0).then(|| {
        check(
            "leader",
            Some(&f.name),
            Status::Fail,
            "the member follows no leader",
            Some("the cluster has no quorum or is electing: locks wait until it has a leader"),
        )
    })
}

/// A member that reports errors (alarms).
fn member_health(f: &MemberFacts) -> Option<Check> {
    (!f.errors.is_empty()).then(|| {
        check(
            "health",
            Some(&f.name),
            Status::Fail,
            format!("the member reports: {}", f.errors.join("; ")),
            Some("see the member's log (an alarm such as NOSPACE blocks every write)"),
        )
    })
}

/// The slowest status round trip against the per-request timeout.
fn member_latency(f: &MemberFacts, limits: Limits) -> Option<Check> {
    let worst = f.rtts.iter().max()?;
    let (status, hint) = if *worst > limits.node_timeout.max(Duration::from_secs(1)) {
        (Status::Warn, Some("slower than the per-request timeout: requests will fail; raise --node-timeout or check the network"))
    } else {
        (Status::Pass, None)
    };
    Some(check(
        "latency",
        Some(&f.name),
        status,
        format!("status round trip up to {}", crate::cli::human(*worst)),
        hint,
    ))
}

/// Whether the reachable members follow one leader.
fn leader_agreement(reachable: &[&MemberFacts]) -> Option<Check> {
    let leaders: std::collections::BTreeSet<u64> = reachable
        .iter()
        .map(|f| f.leader)
        .filter(|l| *l != 0)
        .collect();
    match leaders.len() {
        0 => None,
        1 => Some(check("leader", None, Status::Pass, format!("every reachable member follows leader {:x}", leaders.iter().next().unwrap_or(&0)), None)),
        _ => Some(check("leader", None, Status::Fail, format!("the members follow different leaders ({})", leaders.iter().map(|l| format!("{l:x}")).collect::<Vec<_>>().join(", ")), Some("the node list mixes clusters, or a partition split this one: list the members of one cluster"))),
    }
}

/// Two entries of the node list that reach the same member.
fn duplicate_members(reachable: &[&MemberFacts]) -> Option<Check> {
    let ids: std::collections::BTreeSet<u64> = reachable.iter().map(|f| f.member_id).collect();
    (ids.len() < reachable.len()).then(|| {
        check(
            "duplicates",
            None,
            Status::Fail,
            "two entries of the node list reach the same member",
            Some("list each member once"),
        )
    })
}

/// The lock's TTL against the smallest lease etcd grants (1.5 times its election timeout).
fn lease_check(min: Duration, ttl: Duration) -> Check {
    let election = min.mul_f64(2.0 / 3.0);
    let lease = Duration::from_secs(ttl.as_secs_f64().ceil().max(1.0) as u64);
    if lease < min {
        return check(
            "lease ttl",
            None,
            Status::Warn,
            format!("the TTL {} is below the smallest lease this cluster grants ({}): etcd raises it, so a crashed holder's lock outlives it by {}", crate::cli::human(ttl), crate::cli::human(min), crate::cli::human(min - lease)),
            Some("use a TTL of at least the minimum lease (or lower etcd's --election-timeout)"),
        );
    }
    if lease < 3 * election {
        return check(
            "lease ttl",
            None,
            Status::Warn,
            format!("the TTL {} is short next to the election timeout (up to about {}): a leader election can take a renewal interval (TTL/3) or more", crate::cli::human(ttl), crate::cli::human(election)),
            Some("use a TTL of at least three election timeouts"),
        );
    }
    check(
        "lease ttl",
        None,
        Status::Pass,
        format!("TTL {} against an election timeout of at most about {} (the smallest lease, {}, is 1.5 times it rounded up to whole seconds)", crate::cli::human(ttl), crate::cli::human(election), crate::cli::human(min)),
        None,
    )
}

/// `fencelock doctor` on etcd.
///
/// # Errors
///
/// A usage failure for a bad URL; unreachable members are failing checks.
pub(crate) async fn doctor(settings: &Settings, json: bool) -> anyhow::Result<u8> {
    let members = members(&settings.nodes)?;
    let facts =
        futures_util::future::join_all(members.iter().map(|m| gather(m, &settings.tls))).await;
    let limits = Limits {
        ttl: settings.ttl,
        node_timeout: settings.node_timeout,
    };
    let checks = evaluate(&facts, limits);
    super::report(
        &checks,
        &facts.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
        settings,
        json,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::testing::{limits, worst};

    fn member(name: &str, id: u64) -> MemberFacts {
        MemberFacts {
            name: name.into(),
            reachable: Ok(()),
            member_id: id,
            leader: 1,
            version: "3.4.23".into(),
            errors: Vec::new(),
            cluster_size: 3,
            rtts: vec![Duration::from_millis(1)],
            min_lease_ttl: Some(Duration::from_secs(2)),
        }
    }

    #[test]
    fn a_healthy_cluster_passes() {
        let facts = [member("a", 1), member("b", 2), member("c", 3)];
        let checks = evaluate(&facts, limits());
        assert!(
            checks.iter().all(|c| c.status == Status::Pass),
            "{checks:?}"
        );
    }

    #[test]
    fn one_member_down_warns_two_fail() {
        let mut facts = vec![member("a", 1), member("b", 2), member("c", 3)];
        facts[2].reachable = Err("refused".into());
        assert_eq!(
            worst(&evaluate(&facts, limits()), "quorum"),
            Some(Status::Warn)
        );
        facts[1].errors = vec!["NOSPACE".into()];
        let checks = evaluate(&facts, limits());
        assert_eq!(worst(&checks, "quorum"), Some(Status::Fail));
        assert_eq!(worst(&checks, "health"), Some(Status::Fail));
    }

    #[test]
    fn no_leader_or_two_leaders_fail() {
        let mut facts = vec![member("a", 1), member("b", 2), member("c", 3)];
        facts[0].leader = 0;
        assert_eq!(
            worst(&evaluate(&facts, limits()), "leader"),
            Some(Status::Fail)
        );
        facts[0].leader = 7;
        assert_eq!(
            worst(&evaluate(&facts, limits()), "leader"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn the_same_member_twice_fails() {
        let facts = [member("a", 1), member("b", 1), member("c", 3)];
        assert_eq!(
            worst(&evaluate(&facts, limits()), "duplicates"),
            Some(Status::Fail)
        );
    }

    #[test]
    fn a_ttl_below_the_smallest_lease_or_near_the_election_timeout_warns() {
        let facts = [member("a", 1)];
        let short = Limits {
            ttl: Duration::from_secs(1),
            ..limits()
        };
        assert_eq!(
            worst(&evaluate(&facts, short), "lease ttl"),
            Some(Status::Warn)
        );
        let mut slow = member("a", 1);
        slow.min_lease_ttl = Some(Duration::from_secs(6)); // election timeout about 4 s
        assert_eq!(
            worst(&evaluate(&[slow], limits()), "lease ttl"),
            Some(Status::Warn)
        );
        assert_eq!(
            worst(&evaluate(&facts, limits()), "lease ttl"),
            Some(Status::Pass)
        );
    }

    #[test]
    fn a_partial_node_list_warns() {
        let facts = [member("a", 1), member("b", 2)];
        assert_eq!(
            worst(&evaluate(&facts, limits()), "node list"),
            Some(Status::Warn)
        );
    }

    #[test]
    fn the_line_renders_holder_waiters_and_leases() {
        let w = |rev, holder: Option<&str>| Waiter {
            key: format!("fencelock/r/{rev:016x}"),
            revision: rev,
            lease: format!("{rev:016x}"),
            lease_ttl_s: Some(9),
            holder: holder.map(Into::into),
            proclaimed: false,
        };
        let text = render_line(
            "r",
            &[w(5, Some("host=h pid=1 label=job")), w(7, None)],
            &Family::default(),
        );
        assert!(text.contains("revision 5 = fencing token"), "{text}");
        assert!(text.contains("holder: \"job\" (process 1 on h)"), "{text}");
        assert!(
            text.contains("1 waiting, in order:\n  revision 7"),
            "{text}"
        );
        assert!(render_line("r", &[], &Family::default()).contains("not held"));
    }

    fn key(key: &str, revision: i64, lease: &str, holder: Option<&str>) -> Waiter {
        Waiter {
            key: key.into(),
            revision,
            lease: lease.into(),
            lease_ttl_s: Some(9),
            holder: holder.map(Into::into),
            proclaimed: false,
        }
    }

    #[test]
    fn readers_first_in_line_hold_and_the_writers_behind_them_wait() {
        let p = "fencelock/doc/";
        let r1 = key("fencelock/doc/r01", 3, "01", None);
        let r2 = key("fencelock/doc/r02", 4, "02", None);
        let w = key("fencelock/doc/03.0", 5, "03", None);
        let r3 = key("fencelock/doc/r04", 6, "04", None);
        let (readers, writers) = sides(p, &[r1.clone(), r2.clone(), w.clone(), r3.clone()]);
        assert_eq!(readers.len(), 2);
        assert_eq!(writers.len(), 1);
        // A writer first holds as a mutex: no reader holds, whoever is behind it.
        let (readers, writers) = sides(p, &[w, r1, r3]);
        assert!(readers.is_empty() && writers.is_empty());
    }

    #[test]
    fn each_slot_is_held_by_its_oldest_key_with_the_line_keys_holder() {
        let prefix = "fencelock/pool:permit:";
        let slots = vec![
            key("fencelock/pool:permit:1/0b", 5, "0b", None),
            key("fencelock/pool:permit:0/0a", 6, "0a", None),
            key("fencelock/pool:permit:12x/0c", 7, "0c", None),
        ];
        let line = [key(
            "fencelock/fencelock:permits:pool/0a",
            2,
            "0a",
            Some("host=h pid=1"),
        )];
        let held = permits(prefix, slots, &line);
        assert_eq!(
            held.iter()
                .map(|p| (p.slot, p.key.revision))
                .collect::<Vec<_>>(),
            [(0, 6), (1, 5)]
        );
        assert_eq!(held[0].key.holder.as_deref(), Some("host=h pid=1"));
    }

    #[test]
    fn the_leader_is_the_oldest_candidate_once_it_wrote_its_value() {
        let mut first = key("fencelock/election:c/01.0", 10, "01", Some("boss"));
        let second = key("fencelock/election:c/02.0", 11, "02", None);
        assert!(leader(&[first.clone(), second.clone()]).is_none());
        first.proclaimed = true;
        let l = leader(&[first, second]).unwrap();
        assert_eq!((l.value.as_str(), l.term, l.candidates), ("boss", 10, 1));
    }
}
