//! A [`Config`] from `FENCELOCK_*` environment variables (`FENCELOCK_NODES` is the one the
//! `fencelock` command reads too).

use std::time::Duration;

use crate::config::Config;
use crate::error::{Error, Result};

/// The node URLs, comma separated.
const NODES: &str = "FENCELOCK_NODES";
/// The lock TTL, with a unit: `10s`, `500ms`.
const TTL: &str = "FENCELOCK_TTL";
/// The per-node timeout, with a unit.
const NODE_TIMEOUT: &str = "FENCELOCK_NODE_TIMEOUT";
/// The connect timeout, with a unit.
const CONNECT_TIMEOUT: &str = "FENCELOCK_CONNECT_TIMEOUT";
/// TLS files (PEM): the CA, the client certificate, its key.
const TLS_CA: &str = "FENCELOCK_TLS_CA";
const TLS_CERT: &str = "FENCELOCK_TLS_CERT";
const TLS_KEY: &str = "FENCELOCK_TLS_KEY";
/// Restart quarantine: `on` or `off` (also `true`/`false`, `1`/`0`).
const QUARANTINE: &str = "FENCELOCK_QUARANTINE";

impl Config {
    /// A configuration from the environment:
    ///
    /// - `FENCELOCK_NODES` (required): the node URLs, comma separated, e.g.
    ///   `redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003`, as the
    ///   `fencelock` command reads it. For the local dev set started by `fencelock up`,
    ///   `eval "$(fencelock nodes --export)"` sets it.
    /// - `FENCELOCK_TTL`, `FENCELOCK_NODE_TIMEOUT` (optional): durations with a unit (`ms`,
    ///   `s`, `m`, `h`), e.g. `10s`, `50ms`.
    /// - `FENCELOCK_CONNECT_TIMEOUT` (optional): a duration, [`Config::with_connect_timeout`].
    /// - `FENCELOCK_TLS_CA`, `FENCELOCK_TLS_CERT`, `FENCELOCK_TLS_KEY` (optional): PEM files
    ///   for `rediss://` and `etcds://` nodes ([`Config::with_tls`]), as the command reads them.
    /// - `FENCELOCK_QUARANTINE` (optional): `on` or `off`, the restart quarantine
    ///   ([`Config::with_quarantine`]).
    ///
    /// Settings not given keep their defaults; `with_*` setters apply on top.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the variable: `FENCELOCK_NODES` unset or empty, or a
    /// value that does not parse. The URLs themselves are checked by
    /// [`Client::new`](crate::Client::new).
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Config::from_env`] over any source of variables.
    pub(crate) fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let nodes = var(NODES).unwrap_or_default();
        // A Sentinel URL lists its Sentinels with commas too.
        let nodes = crate::NodeAddr::split_list(&nodes);
        if nodes.is_empty() {
            return Err(Error::config(
                NODES,
                "it is not set; set it to the node URLs, comma separated (e.g. redis://127.0.0.1:6379), or for local nodes run `fencelock up` and then `eval \"$(fencelock nodes --export)\"`",
            ));
        }
        let mut config = Config::new(nodes);
        if let Some(ttl) = duration(&var, TTL)? {
            config = config.with_ttl(ttl);
        }
        if let Some(timeout) = duration(&var, NODE_TIMEOUT)? {
            config = config.with_node_timeout(timeout);
        }
        if let Some(timeout) = duration(&var, CONNECT_TIMEOUT)? {
            config = config.with_connect_timeout(timeout);
        }
        let path = |name| var(name).filter(|v| !v.trim().is_empty());
        let mut tls = crate::TlsConfig::new();
        if let Some(ca) = path(TLS_CA) {
            tls = tls.with_ca_file(ca);
        }
        if let Some(cert) = path(TLS_CERT) {
            tls = tls.with_client_cert_file(cert);
        }
        if let Some(key) = path(TLS_KEY) {
            tls = tls.with_client_key_file(key);
        }
        config = config.with_tls(tls);
        if let Some(text) = var(QUARANTINE).filter(|v| !v.trim().is_empty()) {
            let on = match text.trim().to_ascii_lowercase().as_str() {
                "on" | "true" | "1" | "yes" => true,
                "off" | "false" | "0" | "no" => false,
                _ => {
                    return Err(Error::config(
                        QUARANTINE,
                        format!("{text:?} is neither on nor off"),
                    ))
                }
            };
            config = config.with_quarantine(on);
        }
        Ok(config)
    }
}

/// A duration variable, if set: a number and a unit (`ms`, `s`, `m`, `h`).
fn duration(var: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<Duration>> {
    let Some(text) = var(name).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    parse_duration(text.trim()).map(Some).ok_or_else(|| {
        Error::config(
            name,
            format!("{text:?} is not a duration; give a number and a unit, e.g. 10s or 500ms"),
        )
    })
}

fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ms" => number / 1_000.0,
        "s" => number,
        "m" | "min" => number * 60.0,
        "h" => number * 3_600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Config> {
        Config::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn reads_the_nodes_and_the_optional_settings() {
        let c = from(&[
            (
                NODES,
                " redis://127.0.0.1:7001, redis://127.0.0.1:7002 ,redis://127.0.0.1:7003,",
            ),
            (TTL, "2s"),
            (NODE_TIMEOUT, "250ms"),
            (QUARANTINE, "off"),
            (CONNECT_TIMEOUT, "3s"),
            (TLS_CA, "/etc/ca.pem"),
        ])
        .unwrap();
        assert_eq!(c.connect_timeout(), Duration::from_secs(3));
        assert!(c.tls().has_ca() && !c.tls().has_client_cert());
        assert_eq!(
            c.nodes(),
            [
                "redis://127.0.0.1:7001",
                "redis://127.0.0.1:7002",
                "redis://127.0.0.1:7003"
            ]
        );
        assert_eq!(c.ttl(), Duration::from_secs(2));
        assert_eq!(c.node_timeout(), Duration::from_millis(250));
        assert!(!c.quarantine());
        let c = from(&[(NODES, "redis://a:1,redis://b:1,redis://c:1")]).unwrap();
        assert_eq!(c.ttl(), Config::DEFAULT_TTL);
        assert!(c.quarantine());
    }

    #[test]
    fn a_sentinel_url_keeps_its_commas_and_turns_the_quarantine_on() {
        let c = from(&[(
            NODES,
            "redis+sentinel://s1:26379, s2:26379,s3/main/0,redis://b:1",
        )])
        .unwrap();
        assert_eq!(
            c.nodes(),
            [
                "redis+sentinel://s1:26379,s2:26379,s3/main/0",
                "redis://b:1"
            ]
        );
        // One Sentinel node: its failover may lose data, so the quarantine is on by default.
        let one = from(&[(NODES, "redis+sentinel://s1,s2/main")]).unwrap();
        assert_eq!(one.nodes().len(), 1);
        assert!(one.quarantine());
        assert!(!from(&[(NODES, "redis://a:1")]).unwrap().quarantine());
    }

    #[test]
    fn says_which_variable_is_wrong_and_what_to_do() {
        let unset = from(&[]).unwrap_err().to_string();
        assert!(unset.contains("FENCELOCK_NODES"), "{unset}");
        assert!(unset.contains("fencelock up"), "{unset}");
        assert!(from(&[(NODES, " , ")]).is_err());
        let bad = from(&[(NODES, "redis://a:1"), (TTL, "10")]).unwrap_err();
        assert!(bad.to_string().contains("FENCELOCK_TTL"), "{bad}");
        assert!(bad.to_string().contains("10s"), "{bad}");
        let bad = from(&[(NODES, "redis://a:1"), (QUARANTINE, "maybe")]).unwrap_err();
        assert!(bad.to_string().contains("FENCELOCK_QUARANTINE"), "{bad}");
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1_500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("s"), None);
        assert_eq!(parse_duration("5 fortnights"), None);
    }
}
