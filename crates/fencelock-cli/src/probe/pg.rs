//! `inspect` and `doctor` on a PostgreSQL database (`postgres://`): a resource's lease row (its
//! owner value, token and time left by the database's clock), and what matters for locks there
//! (the server's version, the lease table and token sequence present or creatable with this
//! user's rights, `synchronous_commit`, a standby, the server's clock against this host's).
//! Gathering does the I/O; [`evaluate`] turns facts into checks and has none.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio_postgres::NoTls;

use super::{check, Check, Limits, Status};
use crate::exit::{self, Failure};
use crate::settings::Settings;

/// Bound on each request: generous, doctor measures slowness and must not fail on it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The oldest server the client runs on: its session sets `plan_cache_mode` (12), its functions
/// use `hashtextextended` (11) and `INSERT ... ON CONFLICT` (9.5).
const MIN_VERSION_NUM: i64 = 120_000;

/// The database of the node list: its driver settings and its redacted name.
struct Database {
    name: String,
    config: tokio_postgres::Config,
}

/// The database the node list names.
///
/// # Errors
///
/// A usage failure for a bad URL or more than one URL.
fn database(settings: &Settings) -> Result<Database, Failure> {
    let url = match settings.nodes.as_slice() {
        [one] => one,
        _ => {
            return Err(Failure::usage(format!(
                "{} postgres:// URLs given; the lock lives in one database: give one URL",
                settings.nodes.len()
            )))
        }
    };
    let addr = fencelock::NodeAddr::parse(url)
        .map_err(|e| Failure::usage(format!("node 1 of the list: {e}")))?;
    let name = addr.redacted();
    let mut config = url.trim().parse::<tokio_postgres::Config>().map_err(|e| {
        Failure::usage(format!(
            "node 1 of the list ({name}): PostgreSQL cannot use it: {e}; expected postgres://user:password@host:5432/database"
        ))
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PROBE_TIMEOUT);
    }
    Ok(Database { name, config })
}

/// A connection, its driver task spawned.
async fn connect(db: &Database) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio::time::timeout(PROBE_TIMEOUT, db.config.connect(NoTls))
        .await
        .map_err(|_| format!("no connection within {PROBE_TIMEOUT:?}"))?
        .map_err(|e| describe(&e))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The driver's error in one line: the server's message when it sent one.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// One query, bounded.
async fn query(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, client.query(sql, params)).await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(e)) => Err(describe(&e)),
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// A resource's lease row.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Lease {
    pub(crate) owner: String,
    pub(crate) token: i64,
    /// Milliseconds left by the database's clock (negative: expired, not yet overwritten).
    pub(crate) left_ms: i64,
}

/// `fencelock inspect RESOURCE` on PostgreSQL.
///
/// # Errors
///
/// 69 when the database cannot be reached; a usage failure for a bad URL.
pub(crate) async fn inspect(settings: &Settings, resource: &str, json: bool) -> anyhow::Result<u8> {
    let db = database(settings)?;
    let unavailable = |why: String| {
        Failure::new(
            exit::UNAVAILABLE,
            format!(
                "cannot read the lock table of {}: {why}; check the database (`fencelock doctor`)",
                db.name
            ),
        )
    };
    let client = connect(&db).await.map_err(unavailable)?;
    let table = fencelock::protocol::PG_LOCK_TABLE;
    let exists = query(&client, "SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .map_err(unavailable)?
        .first()
        .is_some_and(|r| r.get::<_, bool>(0));
    let lease = if exists {
        let sql = format!(
            "SELECT owner, token, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint FROM {table} WHERE resource = $1"
        );
        query(&client, &sql, &[&resource])
            .await
            .map_err(unavailable)?
            .first()
            .map(|r| Lease {
                owner: r.get(0),
                token: r.get(1),
                left_ms: r.get(2),
            })
    } else {
        None
    };
    if json {
        let value = serde_json::json!({
            "resource": resource,
            "backend": "postgres",
            "table": table,
            "holder": lease.as_ref().filter(|l| l.left_ms > 0),
            "expired": lease.as_ref().filter(|l| l.left_ms <= 0),
        });
        println!("{value}");
    } else {
        print!("{}", render_lease(resource, &db.name, lease.as_ref()));
    }
    Ok(exit::OK)
}

/// A lease row in words.
pub(crate) fn render_lease(resource: &str, db: &str, lease: Option<&Lease>) -> String {
    let human = |ms: i64| crate::cli::human(Duration::from_millis(ms.unsigned_abs()));
    match lease {
        None => format!("lock {resource:?}: not held (PostgreSQL, {db})\n"),
        Some(l) if l.left_ms <= 0 => format!(
            "lock {resource:?}: free: the row of owner value {} (token {}) expired {} ago (PostgreSQL, {db})\n",
            l.owner,
            l.token,
            human(l.left_ms)
        ),
        Some(l) => format!(
            "lock {resource:?}: held by owner value {} (token {} = fencing token, {} left by the database's clock) (PostgreSQL, {db})\n",
            l.owner,
            l.token,
            human(l.left_ms)
        ),
    }
}

/// Whether the lease table or the sequence is there, and if not, whether this user may create it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Object {
    /// There; `rights`: this user has the rights the lock needs on it.
    Present { rights: bool },
    /// Missing; `creatable`: this user may create in the schema.
    Missing { creatable: bool },
}

/// What the database told.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    pub(crate) version: String,
    pub(crate) version_num: i64,
    pub(crate) table: Object,
    pub(crate) sequence: Object,
    pub(crate) synchronous_commit: String,
    pub(crate) in_recovery: bool,
    /// Replicas streaming from it, and whether any is synchronous.
    pub(crate) replicas: i64,
    pub(crate) sync_replica: bool,
    /// The server's clock minus this host's, read halfway through the round trip.
    pub(crate) clock_offset: Duration,
    pub(crate) clock_ahead: bool,
    pub(crate) rtt: Duration,
}

/// Reads the facts. Read-only.
async fn gather(db: &Database) -> Result<Facts, String> {
    let client = connect(db).await?;
    let one = |rows: Vec<tokio_postgres::Row>| rows.into_iter().next().ok_or("no row");
    let started = Instant::now();
    let row = one(query(
        &client,
        "SELECT current_setting('server_version'), current_setting('server_version_num')::bigint,
                current_setting('synchronous_commit'), pg_is_in_recovery(),
                (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
        &[],
    )
    .await?)?;
    let rtt = started.elapsed();
    let here = SystemTime::now() - rtt / 2;
    let server_us: i64 = row.get(4);
    let here_us = i64::try_from(
        here.duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros(),
    )
    .unwrap_or(i64::MAX);
    let offset_us = server_us - here_us;
    let (table, sequence) = (
        fencelock::protocol::PG_LOCK_TABLE,
        fencelock::protocol::PG_TOKEN_SEQUENCE,
    );
    let rights = one(query(
        &client,
        "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
                has_schema_privilege(current_schema(), 'CREATE')",
        &[&table, &sequence],
    )
    .await?)?;
    let creatable: bool = rights.get(2);
    let table_state = if rights.get(0) {
        let ok = one(query(
            &client,
            "SELECT has_table_privilege($1, 'SELECT, INSERT, UPDATE, DELETE')",
            &[&table],
        )
        .await?)?;
        Object::Present { rights: ok.get(0) }
    } else {
        Object::Missing { creatable }
    };
    let sequence_state = if rights.get(1) {
        let ok = one(query(
            &client,
            "SELECT has_sequence_privilege($1, 'USAGE')",
            &[&sequence],
        )
        .await?)?;
        Object::Present { rights: ok.get(0) }
    } else {
        Object::Missing { creatable }
    };
    // pg_stat_replication shows other users' rows only to a privileged role: a count of 0 may
    // then hide replicas, which the check says.
    let replication = one(query(
        &client,
        "SELECT count(*), count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')) FROM pg_stat_replication",
        &[],
    )
    .await?)?;
    let sync: i64 = replication.get(1);
    Ok(Facts {
        version: row.get(0),
        version_num: row.get(1),
        table: table_state,
        sequence: sequence_state,
        synchronous_commit: row.get(2),
        in_recovery: row.get(3),
        replicas: replication.get(0),
        sync_replica: sync > 0,
        clock_offset: Duration::from_micros(offset_us.unsigned_abs()),
        clock_ahead: offset_us > 0,
        rtt,
    })
}

/// Turns the facts into checks. No I/O.
pub(crate) fn evaluate(name: &str, facts: &Result<Facts, String>, limits: Limits) -> Vec<Check> {
    let node = Some(name);
    let f = match facts {
        Ok(f) => f,
        Err(why) => {
            return vec![check(
                "reachable",
                node,
                Status::Fail,
                format!("cannot reach the database: {why}"),
                Some("start the server, or fix the URL (host, port, database, user, password)"),
            )]
        }
    };
    let human = crate::cli::human;
    let mut checks = vec![check(
        "version",
        node,
        if f.version_num >= MIN_VERSION_NUM {
            Status::Pass
        } else {
            Status::Fail
        },
        format!("PostgreSQL {}", f.version),
        Some("the client needs PostgreSQL 12 or later (its session sets plan_cache_mode)"),
    )];
    checks.push(object_check(
        "lock table",
        fencelock::protocol::PG_LOCK_TABLE,
        &f.table,
        "SELECT, INSERT, UPDATE, DELETE",
    ));
    checks.push(object_check(
        "token sequence",
        fencelock::protocol::PG_TOKEN_SEQUENCE,
        &f.sequence,
        "USAGE",
    ));
    checks.push(match f.synchronous_commit.as_str() {
        "off" => check(
            "durability",
            node,
            Status::Fail,
            "synchronous_commit is off: a crash can lose an acknowledged lock and hand its fencing token out again",
            Some("set synchronous_commit = on (the default) for this database or the lock's user"),
        ),
        "local" if f.replicas > 0 => check(
            "durability",
            node,
            Status::Warn,
            "synchronous_commit is local: commits do not wait for the replicas, so a failover can lose held locks",
            Some("use synchronous replication (synchronous_commit = on with synchronous_standby_names), or accept it"),
        ),
        other => check("durability", node, Status::Pass, format!("synchronous_commit is {other}"), None),
    });
    checks.push(if f.in_recovery {
        check(
            "primary",
            node,
            Status::Fail,
            "the server is a standby (in recovery): it refuses every write, so no lock can be taken",
            Some("point the URL at the primary"),
        )
    } else if f.replicas > 0 && !f.sync_replica {
        check(
            "replication",
            node,
            Status::Warn,
            format!("{} asynchronous replica(s): after a failover to one, rows committed on the old primary may be missing and two clients can hold a lock", f.replicas),
            Some("use synchronous replication, or accept it"),
        )
    } else {
        check(
            "primary",
            node,
            Status::Pass,
            match f.replicas {
                0 => "a primary; no replica this user can see".to_string(),
                n => format!("a primary with {n} replica(s), synchronous"),
            },
            None,
        )
    });
    // No lock compares this host's clock with the database's; a large offset still says one of
    // them runs without NTP, and makes expiry times hard to read across hosts.
    let skew_limit = Duration::from_secs(1).max(limits.ttl / 10);
    checks.push(check(
        "clock",
        node,
        if f.clock_offset > skew_limit { Status::Warn } else { Status::Pass },
        format!(
            "the database's clock is {} {} this host's; every expiry is set and compared by the database's clock alone",
            human(f.clock_offset),
            if f.clock_ahead { "ahead of" } else { "behind" }
        ),
        Some("locks are not shortened by it, but one side runs without NTP: fix that (a step of the database's clock does shorten locks)"),
    ));
    let limit = limits.node_timeout.max(fencelock_min_request());
    checks.push(check(
        "latency",
        node,
        if f.rtt > limit { Status::Warn } else { Status::Pass },
        format!("a query's round trip took {}", human(f.rtt)),
        Some("slower than the request timeout: lock requests will fail; raise --node-timeout or check the network"),
    ));
    checks
}

/// The least time the library gives a request on PostgreSQL (a commit waits for a WAL flush).
fn fencelock_min_request() -> Duration {
    Duration::from_secs(1)
}

/// The table's or sequence's check.
fn object_check(name: &'static str, object: &str, state: &Object, rights: &str) -> Check {
    match state {
        Object::Present { rights: true } => check(name, None, Status::Pass, format!("{object} is there, with {rights} for this user"), None),
        Object::Present { rights: false } => check(
            name,
            None,
            Status::Fail,
            format!("{object} is there, but this user lacks {rights} on it"),
            Some("let an administrator grant them (GRANT ... TO this user)"),
        ),
        Object::Missing { creatable: true } => check(
            name,
            None,
            Status::Pass,
            format!("{object} is missing; this user may create it, and the first lock does"),
            None,
        ),
        Object::Missing { creatable: false } => check(
            name,
            None,
            Status::Fail,
            format!("{object} is missing, and this user may not create it (no CREATE on the schema, as on public since PostgreSQL 15)"),
            Some("let an administrator's client connect once to create it, then grant it to this user"),
        ),
    }
}

/// `fencelock doctor` on PostgreSQL.
///
/// # Errors
///
/// A usage failure for a bad URL; an unreachable database is a failing check.
pub(crate) async fn doctor(settings: &Settings, json: bool) -> anyhow::Result<u8> {
    let db = database(settings)?;
    let facts = gather(&db).await;
    let limits = Limits {
        ttl: settings.ttl,
        node_timeout: settings.node_timeout,
    };
    let checks = evaluate(&db.name, &facts, limits);
    super::report(&checks, &[db.name], settings, json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::testing::{limits, worst as status};

    fn healthy() -> Facts {
        Facts {
            version: "15.4".into(),
            version_num: 150_004,
            table: Object::Present { rights: true },
            sequence: Object::Missing { creatable: true },
            synchronous_commit: "on".into(),
            in_recovery: false,
            replicas: 0,
            sync_replica: false,
            clock_offset: Duration::from_millis(3),
            clock_ahead: true,
            rtt: Duration::from_millis(1),
        }
    }

    #[test]
    fn a_healthy_database_passes() {
        let checks = evaluate("db", &Ok(healthy()), limits());
        assert!(
            checks.iter().all(|c| c.status == Status::Pass),
            "{checks:?}"
        );
    }

    #[test]
    fn what_loses_locks_fails_and_what_may_warns() {
        let mut f = healthy();
        f.synchronous_commit = "off".into();
        assert_eq!(
            status(&evaluate("db", &Ok(f.clone()), limits()), "durability"),
            Some(Status::Fail)
        );
        f.synchronous_commit = "on".into();
        f.in_recovery = true;
        assert_eq!(
            status(&evaluate("db", &Ok(f.clone()), limits()), "primary"),
            Some(Status::Fail)
        );
        f.in_recovery = false;
        f.replicas = 2;
        assert_eq!(
            status(&evaluate("db", &Ok(f.clone()), limits()), "replication"),
            Some(Status::Warn)
        );
        f.replicas = 0;
        f.table = Object::Missing { creatable: false };
        assert_eq!(
            status(&evaluate("db", &Ok(f.clone()), limits()), "lock table"),
            Some(Status::Fail)
        );
        f.table = Object::Present { rights: false };
        assert_eq!(
            status(&evaluate("db", &Ok(f.clone()), limits()), "lock table"),
            Some(Status::Fail)
        );
        f.table = Object::Present { rights: true };
        f.clock_offset = Duration::from_secs(5);
        assert_eq!(
            status(&evaluate("db", &Ok(f.clone()), limits()), "clock"),
            Some(Status::Warn)
        );
        f.version_num = 110_022;
        assert_eq!(
            status(&evaluate("db", &Ok(f), limits()), "version"),
            Some(Status::Fail)
        );
        assert_eq!(
            status(
                &evaluate("db", &Err("refused".into()), limits()),
                "reachable"
            ),
            Some(Status::Fail)
        );
    }

    #[test]
    fn a_lease_renders_held_free_or_absent() {
        let lease = |left_ms| Lease {
            owner: "ab12".into(),
            token: 7,
            left_ms,
        };
        assert!(render_lease("r", "db", Some(&lease(5000)))
            .contains("held by owner value ab12 (token 7 = fencing token, 5.00 s left"));
        assert!(render_lease("r", "db", Some(&lease(-2000)))
            .contains("free: the row of owner value ab12 (token 7) expired 2.00 s ago"));
        assert!(render_lease("r", "db", None).contains("not held"));
    }
}
