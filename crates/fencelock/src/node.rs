//! Node addresses: parsing, validation and redaction of secrets. No I/O.

use std::fmt;

use crate::error::Error;

/// The kind of server a node URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// `redis://`: a Redis node over plain TCP.
    Redis,
    /// `rediss://`: a Redis node over TLS (needs the `tls` feature).
    RedisTls,
    /// `etcd://`: an etcd cluster member over plain HTTP/2.
    Etcd,
    /// `etcds://`: an etcd member over TLS.
    EtcdTls,
    /// `postgres://` or `postgresql://`: one PostgreSQL database (needs the `postgres-lock`
    /// feature).
    Postgres,
}

impl Scheme {
    /// Whether the scheme names a Redis node.
    pub fn is_redis(self) -> bool {
        matches!(self, Scheme::Redis | Scheme::RedisTls)
    }

    /// Whether the scheme names a PostgreSQL database.
    pub fn is_postgres(self) -> bool {
        self == Scheme::Postgres
    }

    /// The backend the scheme selects, in words: `"Redis"`, `"etcd"` or `"PostgreSQL"`.
    pub fn backend(self) -> &'static str {
        match self {
            Scheme::Redis | Scheme::RedisTls => "Redis",
            Scheme::Etcd | Scheme::EtcdTls => "etcd",
            Scheme::Postgres => "PostgreSQL",
        }
    }
}

/// One node's address, parsed from a URL such as `redis://user:secret@10.0.0.5:6379/0`.
///
/// `Display` and `Debug` print the URL with the password replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeAddr {
    url: String,
    scheme: Scheme,
    host: String,
    port: u16,
    user: Option<String>,
    has_password: bool,
    path: String,
}

impl NodeAddr {
    /// Parses a node URL.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the URL (redacted) when the scheme is unknown, the host is
    /// missing, or the port or database is not a number.
    pub fn parse(url: &str) -> Result<NodeAddr, Error> {
        let url = url.trim();
        let what = || format!("node URL {}", redact(url));
        let (scheme_str, rest) = url.split_once("://").ok_or_else(|| {
            Error::config(
                what(),
                "it has no scheme; write it as redis://host:port/db (or rediss://, etcd://)",
            )
        })?;
        let scheme = match scheme_str.to_ascii_lowercase().as_str() {
            "redis" => Scheme::Redis,
            "rediss" => Scheme::RedisTls,
            "etcd" => Scheme::Etcd,
            "etcds" => Scheme::EtcdTls,
            "postgres" | "postgresql" => Scheme::Postgres,
            // Taken as etcd once, which sent a Redis or web server's address to the etcd
            // client: the scheme must name the backend.
            "http" | "https" => {
                let tls = if scheme_str.eq_ignore_ascii_case("https") {
                    "s"
                } else {
                    ""
                };
                return Err(Error::config(
                    what(),
                    format!(
                        "{scheme_str}:// does not say which server it is; for an etcd member write etcd{tls}://host:port, for a Redis node redis{tls}://host:port"
                    ),
                ));
            }
            other => {
                return Err(Error::config(
                    what(),
                    format!(
                        "unknown scheme {other:?}; use redis://, rediss://, etcd://, etcds:// or postgres://"
                    ),
                ))
            }
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (user, has_password) = match userinfo {
            None => (None, false),
            Some(info) => match info.split_once(':') {
                Some((u, _)) => ((!u.is_empty()).then(|| u.to_string()), true),
                None => ((!info.is_empty()).then(|| info.to_string()), false),
            },
        };
        let (host, port_str) = split_host_port(hostport);
        if host.is_empty() {
            return Err(Error::config(
                what(),
                "the host is missing; write it as redis://host:port/db",
            ));
        }
        let default_port = match scheme {
            Scheme::Redis | Scheme::RedisTls => 6379,
            Scheme::Etcd | Scheme::EtcdTls => 2379,
            Scheme::Postgres => 5432,
        };
        let port = match port_str {
            None | Some("") => default_port,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                Error::config(
                    what(),
                    format!("port {p:?} is not a number from 1 to 65535"),
                )
            })?,
        };
        if scheme.is_redis() {
            let db = path.trim_start_matches('/');
            let db = db.split('?').next().unwrap_or("");
            if !db.is_empty() && db.parse::<i64>().is_err() {
                return Err(Error::config(
                    what(),
                    format!("database {db:?} is not a number; write redis://host:port/0"),
                ));
            }
        }
        Ok(NodeAddr {
            url: url.to_string(),
            scheme,
            host: host.to_string(),
            port,
            user,
            has_password,
            path: path.to_string(),
        })
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host name or address (IPv6 without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port (6379 for Redis, 2379 for etcd and 5432 for PostgreSQL when the URL gives
    /// none).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, the identity used to check that nodes are distinct.
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URL with its secret, for the driver only.
    pub(crate) fn secret_url(&self) -> &str {
        &self.url
    }

    /// The URL with the password replaced by `***`.
    pub fn redacted(&self) -> String {
        let scheme = match self.scheme {
            Scheme::Redis => "redis",
            Scheme::RedisTls => "rediss",
            Scheme::Etcd => "etcd",
            Scheme::EtcdTls => "etcds",
            Scheme::Postgres => "postgres",
        };
        let auth = match (&self.user, self.has_password) {
            (Some(u), true) => format!("{u}:***@"),
            (None, true) => ":***@".to_string(),
            (Some(u), false) => format!("{u}@"),
            (None, false) => String::new(),
        };
        format!("{scheme}://{auth}{}{}", self.host_port(), self.path)
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeAddr({})", self.redacted())
    }
}

fn split_host_port(hostport: &str) -> (&str, Option<&str>) {
    if let Some(rest) = hostport.strip_prefix('[') {
        // [v6]:port
        return match rest.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => ("", None),
        };
    }
    match hostport.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (hostport, None),
    }
}

/// Redacts the password of a URL that may not even parse, for error messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => {
            let info = &rest[..at];
            let user = info.split_once(':').map_or(info, |(u, _)| u);
            let shown = if info.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{scheme}://{shown}@{}", &rest[at + 1..])
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_redis_urls() {
        let n = NodeAddr::parse("redis://127.0.0.1:7001/0").unwrap();
        assert_eq!(n.scheme(), Scheme::Redis);
        assert_eq!(n.host_port(), "127.0.0.1:7001");
        assert_eq!(n.to_string(), "redis://127.0.0.1:7001/0");
        let n = NodeAddr::parse("redis://localhost").unwrap();
        assert_eq!(n.port(), 6379);
    }

    #[test]
    fn redacts_passwords_everywhere() {
        let n = NodeAddr::parse("rediss://app:hunter2@cache.internal:6380/2").unwrap();
        assert_eq!(n.scheme(), Scheme::RedisTls);
        assert_eq!(n.to_string(), "rediss://app:***@cache.internal:6380/2");
        assert!(!format!("{n:?}").contains("hunter2"));
        let n = NodeAddr::parse("redis://:hunter2@h:1/0").unwrap();
        assert_eq!(n.to_string(), "redis://:***@h:1/0");
        assert!(!redact("redis://u:hunter2@h:x/0").contains("hunter2"));
    }

    #[test]
    fn rejects_bad_urls_with_the_reason() {
        for (url, why) in [
            ("127.0.0.1:6379", "no scheme"),
            ("http2://h:1", "unknown scheme"),
            ("http://h:2379", "for an etcd member write etcd://host:port"),
            ("https://h:2379", "etcds://host:port"),
            ("redis://:6379", "host is missing"),
            ("redis://h:99999/0", "port"),
            ("redis://h:abc/0", "port"),
            ("redis://h:1/zero", "database"),
        ] {
            let err = NodeAddr::parse(url).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
        }
        let err = NodeAddr::parse("redis://u:hunter2@h:abc/0")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn ipv6_hosts() {
        let n = NodeAddr::parse("redis://[::1]:7000/0").unwrap();
        assert_eq!(n.host(), "::1");
        assert_eq!(n.host_port(), "[::1]:7000");
    }

    #[test]
    fn postgres_urls_keep_their_database_and_hide_the_password() {
        for url in [
            "postgres://app:hunter2@db.internal/shop",
            "postgresql://app:hunter2@db.internal:5432/shop",
        ] {
            let n = NodeAddr::parse(url).unwrap();
            assert_eq!(n.scheme(), Scheme::Postgres);
            assert_eq!(n.port(), 5432);
            assert_eq!(n.to_string(), "postgres://app:***@db.internal:5432/shop");
            assert_eq!(n.secret_url(), url);
        }
    }

    #[test]
    fn etcd_urls_default_to_2379() {
        let n = NodeAddr::parse("etcd://127.0.0.1").unwrap();
        assert_eq!(n.scheme(), Scheme::Etcd);
        assert_eq!(n.port(), 2379);
    }
}
