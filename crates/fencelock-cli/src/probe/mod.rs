//! Reading nodes for `inspect` and `doctor`: what each backend's nodes say, one file per
//! backend behind [`Backend`] (`redis`, with its doctor checks in `redis/doctor.rs`; `etcd`),
//! and what every backend's report shares: the doctor's checks and their table, a holder in
//! words. Nothing here imports a command.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::cli::human;
use crate::exit;
use crate::settings::Settings;

pub(crate) mod etcd;
pub(crate) mod pg;
pub(crate) mod redis;
pub(crate) mod zk;

/// Which backend's nodes a node set names: the one interface `inspect` and `doctor` read nodes
/// through. A new backend (a cluster, Sentinel, ZooKeeper, PostgreSQL) is a variant and a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Redis,
    Etcd,
    ZooKeeper,
    Postgres,
}

impl Backend {
    /// The backend of the settings' node list (the first URL decides, as in the library).
    pub(crate) fn of(settings: &Settings) -> Backend {
        let scheme = settings
            .nodes
            .first()
            .and_then(|url| fencelock::NodeAddr::parse(url).ok())
            .map(|addr| addr.scheme());
        match scheme {
            Some(s) if s.is_zookeeper() => Backend::ZooKeeper,
            Some(s) if s.is_postgres() => Backend::Postgres,
            _ if etcd::is_etcd(settings) => Backend::Etcd,
            // A bad URL too: the Redis reader names it as the lock commands do.
            _ => Backend::Redis,
        }
    }

    /// `inspect RESOURCE` on these nodes.
    ///
    /// # Errors
    ///
    /// A usage failure for a bad node URL; unreachable nodes are shown, not errors.
    pub(crate) async fn inspect(
        self,
        settings: &Settings,
        resource: &str,
        json: bool,
    ) -> anyhow::Result<u8> {
        match self {
            Backend::Redis => redis::inspect(settings, resource, json).await,
            Backend::Etcd => etcd::inspect(settings, resource, json).await,
            Backend::ZooKeeper => zk::inspect(settings, resource, json).await,
            Backend::Postgres => pg::inspect(settings, resource, json).await,
        }
    }

    /// `doctor` on these nodes: gathers each node's facts, turns them into checks and prints
    /// them (`report`).
    ///
    /// # Errors
    ///
    /// A usage failure for a bad node URL; unreachable nodes are a failing check, not an error.
    pub(crate) async fn doctor(self, settings: &Settings, json: bool) -> anyhow::Result<u8> {
        match self {
            Backend::Redis => redis::doctor::doctor(settings, json).await,
            Backend::Etcd => etcd::doctor(settings, json).await,
            Backend::ZooKeeper => zk::doctor(settings, json).await,
            Backend::Postgres => pg::doctor(settings, json).await,
        }
    }
}

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) check: &'static str,
    pub(crate) node: Option<String>,
    pub(crate) status: Status,
    pub(crate) detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hint: Option<String>,
}

/// The settings a backend's checks are measured against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) ttl: Duration,
    pub(crate) node_timeout: Duration,
}

/// One check's line.
pub(crate) fn check(
    check: &'static str,
    node: Option<&str>,
    status: Status,
    detail: impl Into<String>,
    hint: Option<&str>,
) -> Check {
    Check {
        check,
        node: node.map(str::to_owned),
        status,
        detail: detail.into(),
        hint: hint.map(str::to_owned),
    }
}

/// Prints the checks (the table or JSON) and returns the exit code: 0, or 1 when one failed.
///
/// # Errors
///
/// None today; a `Result` as the commands return.
pub(crate) fn report(
    checks: &[Check],
    nodes: &[String],
    settings: &Settings,
    json: bool,
) -> anyhow::Result<u8> {
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    if json {
        let value = serde_json::json!({
            "nodes": nodes,
            "ttl_ms": u64::try_from(settings.ttl.as_millis()).unwrap_or(u64::MAX),
            "node_timeout_ms": u64::try_from(settings.node_timeout.as_millis()).unwrap_or(u64::MAX),
            "checks": checks,
            "summary": {"pass": count(Status::Pass), "warn": count(Status::Warn), "fail": count(Status::Fail)},
            "ok": !failed,
        });
        println!("{value}");
    } else {
        print!("{}", render(checks));
        println!(
            "{} pass, {} warn, {} fail (TTL {}, per-node timeout {}, nodes from {})",
            count(Status::Pass),
            count(Status::Warn),
            count(Status::Fail),
            human(settings.ttl),
            human(settings.node_timeout),
            settings.source
        );
    }
    Ok(if failed { exit::CHECK_FAILED } else { exit::OK })
}

/// The human table.
pub(crate) fn render(checks: &[Check]) -> String {
    let node_width = checks
        .iter()
        .map(|c| c.node.as_deref().map_or(1, str::len))
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6}{:<16}{:<node_width$}  DETAIL",
        "", "CHECK", "NODE"
    );
    for c in checks {
        let _ = writeln!(
            out,
            "{:<6}{:<16}{:<node_width$}  {}",
            c.status.label(),
            c.check,
            c.node.as_deref().unwrap_or("-"),
            c.detail
        );
        if let (Some(hint), true) = (&c.hint, c.status != Status::Pass) {
            let _ = writeln!(out, "{:<6}  hint: {hint}", "");
        }
    }
    out
}

/// A stored holder label in words: `"job" (process 4121 on web-3)`.
pub(crate) fn show_holder(text: &str) -> String {
    match fencelock::Holder::parse(text) {
        Some(h) => match h.label() {
            Some(l) => format!("{l:?} (process {} on {})", h.pid(), h.host()),
            None => format!("process {} on {}", h.pid(), h.host()),
        },
        None => text.to_string(),
    }
}

/// What the probes' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use std::time::Duration;

    use super::{Check, Limits, Status};

    /// A TTL of 10 s and a node timeout of 50 ms.
    pub(crate) fn limits() -> Limits {
        Limits {
            ttl: Duration::from_secs(10),
            node_timeout: Duration::from_millis(50),
        }
    }

    /// The worst status among the checks named `name` (`None`: no such check).
    pub(crate) fn worst(checks: &[Check], name: &str) -> Option<Status> {
        checks
            .iter()
            .filter(|c| c.check == name)
            .map(|c| c.status)
            .max()
    }
}
