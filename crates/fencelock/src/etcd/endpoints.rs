//! From fencelock node URLs to what the etcd client takes: pure logic, no I/O.

use std::fmt;

use crate::error::{Error, Result};
use crate::node::{NodeAddr, Scheme};

/// The members of one etcd cluster, as gRPC endpoints, and the credentials to log in with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoints {
    /// `http://host:port` (`https://` for `etcds://`) per member, in configured order.
    pub(crate) urls: Vec<String>,
    /// The user and password from the URLs (`etcd://user:password@host:port`), if any.
    pub(crate) credentials: Option<Credentials>,
}

/// An etcd user and password. `Debug` prints the user only.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credentials({}:***)", self.user)
    }
}

impl Endpoints {
    /// Checks the URLs of one cluster's members and turns them into endpoints.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for `etcds://` in a build without the `tls` feature, members
    /// reached partly with and partly without TLS, a URL with a path (fencelock chooses its own keys), or members given different credentials.
    pub(crate) fn parse(addrs: &[NodeAddr]) -> Result<Endpoints> {
        let mut urls = Vec::with_capacity(addrs.len());
        let mut credentials: Option<Credentials> = None;
        for addr in addrs {
            if addr.scheme() == Scheme::EtcdTls && !cfg!(feature = "tls") {
                return Err(Error::config(
                    format!("node URL {addr}"),
                    "etcds:// (TLS) needs fencelock's `tls` feature (cargo add fencelock --features etcd,tls)",
                ));
            }
            if (addr.scheme() == Scheme::EtcdTls) != (addrs[0].scheme() == Scheme::EtcdTls) {
                return Err(Error::config(
                    "nodes",
                    format!("{addr} and {} mix etcd:// and etcds://; the members of one cluster are reached one way", addrs[0]),
                ));
            }
            let (userinfo, path) = split_url(addr.secret_url());
            if !path.is_empty() && path != "/" {
                return Err(Error::config(
                    format!("node URL {addr}"),
                    "an etcd URL takes no path (fencelock keeps its keys under fencelock/); write it as etcd://host:port",
                ));
            }
            let mine = userinfo.map(|info| match info.split_once(':') {
                Some((user, password)) => Credentials {
                    user: user.to_string(),
                    password: password.to_string(),
                },
                None => Credentials {
                    user: info.to_string(),
                    password: String::new(),
                },
            });
            match (&credentials, mine) {
                (_, None) => {}
                (None, Some(c)) => credentials = Some(c),
                (Some(known), Some(c)) if *known == c => {}
                (Some(_), Some(_)) => {
                    return Err(Error::config(
                        "nodes",
                        "the etcd URLs carry different credentials; the members of one cluster share one login, give it once or the same on every URL",
                    ))
                }
            }
            let scheme = if addr.scheme() == Scheme::EtcdTls {
                "https"
            } else {
                "http"
            };
            urls.push(format!("{scheme}://{}", addr.host_port()));
        }
        Ok(Endpoints { urls, credentials })
    }
}

/// The user info (before `@`) and the path (from the first `/` or `?`) of a URL that
/// [`NodeAddr::parse`] accepted.
fn split_url(url: &str) -> (Option<&str>, &str) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let userinfo = authority.rfind('@').map(|at| &authority[..at]);
    (userinfo.filter(|u| !u.is_empty()), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(urls: &[&str]) -> Result<Endpoints> {
        let addrs: Vec<NodeAddr> = urls.iter().map(|u| NodeAddr::parse(u).unwrap()).collect();
        Endpoints::parse(&addrs)
    }

    #[test]
    fn members_become_http_endpoints() {
        let e = parse(&[
            "etcd://127.0.0.1:2379",
            "etcd://10.0.0.2",
            "etcd://[::1]:23790/",
        ])
        .unwrap();
        assert_eq!(
            e.urls,
            [
                "http://127.0.0.1:2379",
                "http://10.0.0.2:2379",
                "http://[::1]:23790"
            ]
        );
        assert_eq!(e.credentials, None);
    }

    #[test]
    fn credentials_come_from_the_urls_and_stay_secret() {
        let e = parse(&["etcd://app:hunter2@h:1", "etcd://h:2"]).unwrap();
        let c = e.credentials.unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("app", "hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
        let err = parse(&["etcd://app:a@h:1", "etcd://app:b@h:2"]).unwrap_err();
        assert!(err.to_string().contains("different credentials"), "{err}");
        assert!(!err.to_string().contains("a@"), "{err}");
    }

    #[test]
    fn tls_mixes_and_paths_are_refused_with_the_reason() {
        if cfg!(feature = "tls") {
            assert_eq!(parse(&["etcds://h:1"]).unwrap().urls, ["https://h:1"]);
        } else {
            let err = parse(&["etcds://h:1"]).unwrap_err().to_string();
            assert!(err.contains("`tls` feature"), "{err}");
        }
        let err = parse(&["etcd://h:1", "etcds://h:2"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("mix"), "{err}");
        let err = parse(&["etcd://u:hunter2@h:1/prefix"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("no path"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
