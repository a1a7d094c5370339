//! A fencing token together with the lock that issued it.

use std::fmt;
use std::sync::Arc;

/// A fencing token and the lock that issued it, for the fenced storage
/// ([`crate::fence`]): tokens are ordered only among the holders of one lock, so a fence row
/// records the issuer of the first token it accepts and refuses tokens of any other lock
/// (another lock name, or the same name on the other backend) with a clear error, instead of
/// comparing numbers that mean nothing to each other.
///
/// Get one from [`Lock::issued_token`](crate::Lock::issued_token). A bare `u64` converts into
/// an *unbound* token, which says nothing of its issuer: a fence row that is already bound to
/// a lock refuses it; one that is not takes it as before.
///
/// The issuer is the backend and the lock's resource names, e.g. `redis:order:42` or
/// `etcd:a,b`. It does not name the node set: two Redis node sets whose locks share a name are
/// not told apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    value: u64,
    issuer: Option<Arc<str>>,
}

impl IssuedToken {
    /// A token issued by `issuer` (as [`IssuedToken::issuer`] prints it).
    pub fn new(value: u64, issuer: impl Into<Arc<str>>) -> IssuedToken {
        IssuedToken {
            value,
            issuer: Some(issuer.into()),
        }
    }

    /// A token whose issuer is not known (what a bare `u64` converts into).
    pub fn unbound(value: u64) -> IssuedToken {
        IssuedToken {
            value,
            issuer: None,
        }
    }

    /// The token's value.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// The lock that issued it, if known.
    pub fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref()
    }

    /// The issuer name of a lock on `resources` on `backend` (`"redis"` or `"etcd"`): the
    /// names joined by `,`, with `%` and `,` percent-escaped so that two lists never give one
    /// name.
    pub(crate) fn issuer_name(backend: &str, resources: &[String]) -> String {
        let mut name = format!("{backend}:");
        for (i, r) in resources.iter().enumerate() {
            if i > 0 {
                name.push(',');
            }
            name.push_str(&r.replace('%', "%25").replace(',', "%2C"));
        }
        name
    }
}

impl From<u64> for IssuedToken {
    fn from(value: u64) -> IssuedToken {
        IssuedToken::unbound(value)
    }
}

impl fmt::Display for IssuedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.issuer {
            Some(issuer) => write!(f, "{} (from {issuer})", self.value),
            None => write!(f, "{}", self.value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuer_names_tell_lists_and_backends_apart() {
        let name = |b: &str, rs: &[&str]| {
            IssuedToken::issuer_name(b, &rs.iter().map(|r| r.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(name("redis", &["order:42"]), "redis:order:42");
        assert_eq!(name("etcd", &["a", "b"]), "etcd:a,b");
        assert_ne!(name("redis", &["a,b"]), name("redis", &["a", "b"]));
        assert_ne!(name("redis", &["a%2Cb"]), name("redis", &["a,b"]));
        assert_ne!(name("redis", &["x"]), name("etcd", &["x"]));
        assert_eq!(IssuedToken::from(7), IssuedToken::unbound(7));
        assert_eq!(
            IssuedToken::new(7, "redis:x").to_string(),
            "7 (from redis:x)"
        );
    }
}
