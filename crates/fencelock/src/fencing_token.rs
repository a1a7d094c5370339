//! A fencing token together with the lock that issued it.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::keepalive::GuardState;

/// A fencing token and the lock that issued it, for the fenced storage
/// ([`crate::fence`]): tokens are ordered only among the holders of one lock, so a fence row
/// records the issuer of the first token it accepts and refuses tokens of any other lock
/// (another lock name, or the same name on the other backend) with a clear error, instead of
/// comparing numbers that mean nothing to each other.
///
/// Get one from [`Lock::fencing_token`](crate::Lock::fencing_token). A bare `u64` converts into
/// an *unbound* token, which says nothing of its issuer: a fence row that is already bound to
/// a lock refuses it; one that is not takes it as before.
///
/// The issuer is the backend and the lock's resource names, e.g. `redis:order:42` or
/// `etcd:a,b`. It does not name the node set: two Redis node sets whose locks share a name are
/// not told apart.
///
/// A token from [`Lock::fencing_token`](crate::Lock::fencing_token) or
/// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token) also knows whether its lock is
/// still valid, which lets a fenced storage that refuses it tell a stale holder (the lock is
/// over: [`Error::StaleToken`](crate::Error::StaleToken)) from a live holder whose token is
/// below the storage's last because the lock's fence counters were reset
/// ([`Error::CounterReset`](crate::Error::CounterReset)). From a `Lock`, that is its validity
/// deadline when `fencing_token` was called (call it again after [`Lock::extend`](crate::Lock::extend));
/// from a `LockGuard`, the guard's live state (its lost signal and its deadline as extensions
/// move it). Equality compares the value and the issuer only.
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
/// // The client is in fencing mode (Config::with_fencing(true)).
/// let lock = client.acquire("sku:42").await?;
/// let token = lock.fencing_token().expect("fencing mode");
/// println!("token {} issued by {:?}", token.value(), token.issuer());
/// // fence.write("sku:42", token, ...) with any fence of fencelock::fence
/// lock.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FencingToken {
    value: u64,
    issuer: Option<Arc<str>>,
    holder: Holder,
}

/// What a token knows of its lock's validity, for telling a stale holder from a reset. Read
/// only by the fences, which are behind features.
#[derive(Debug, Clone)]
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "sqlx-postgres",
        feature = "sqlx-mysql",
        feature = "sqlx-sqlite"
    )),
    allow(dead_code)
)]
enum Holder {
    /// Nothing: a bare number, or a token built by hand without a deadline.
    Unknown,
    /// Valid until this instant (a `Lock`'s deadline when the token was taken from it).
    Until(Instant),
    /// A guard's live state: valid while its lost signal has not fired.
    Guard(Arc<GuardState>),
}

impl PartialEq for FencingToken {
    fn eq(&self, other: &FencingToken) -> bool {
        self.value == other.value && self.issuer == other.issuer
    }
}

impl Eq for FencingToken {}

impl FencingToken {
    /// A token issued by `issuer` (as [`FencingToken::issuer`] prints it).
    pub fn new(value: u64, issuer: impl Into<Arc<str>>) -> FencingToken {
        FencingToken {
            value,
            issuer: Some(issuer.into()),
            holder: Holder::Unknown,
        }
    }

    /// A token whose issuer is not known (what a bare `u64` converts into).
    pub fn unbound(value: u64) -> FencingToken {
        FencingToken {
            value,
            issuer: None,
            holder: Holder::Unknown,
        }
    }

    /// Says that the lock that issued this token is valid until `deadline` (on this process's
    /// monotonic clock, as [`Lock::validity_deadline`](crate::Lock::validity_deadline)), for a
    /// token that travelled without its lock. A fenced storage that refuses the token before
    /// `deadline` reports [`Error::CounterReset`](crate::Error::CounterReset) instead of
    /// [`Error::StaleToken`](crate::Error::StaleToken). Pass only a deadline the lock really has:
    /// a later one turns a stale holder's refusal into advice to reseed.
    pub fn with_valid_until(mut self, deadline: Instant) -> FencingToken {
        self.holder = Holder::Until(deadline);
        self
    }

    /// The token of a lock kept by a guard whose state is `state`.
    pub(crate) fn with_guard(mut self, state: Arc<GuardState>) -> FencingToken {
        self.holder = Holder::Guard(state);
        self
    }

    /// Whether the issuing lock is known to be still valid right now: `None` if the token does
    /// not know its lock. Read only when a fenced storage refuses the token.
    #[cfg_attr(
        not(any(
            feature = "sqlite",
            feature = "postgres",
            feature = "sqlx-postgres",
            feature = "sqlx-mysql"
        )),
        allow(dead_code)
    )]
    pub(crate) fn lock_still_valid(&self) -> Option<bool> {
        match &self.holder {
            Holder::Unknown => None,
            Holder::Until(deadline) => Some(Instant::now() < *deadline),
            Holder::Guard(state) => Some(!state.is_lost()),
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

impl From<u64> for FencingToken {
    fn from(value: u64) -> FencingToken {
        FencingToken::unbound(value)
    }
}

impl fmt::Display for FencingToken {
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
            FencingToken::issuer_name(b, &rs.iter().map(|r| r.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(name("redis", &["order:42"]), "redis:order:42");
        assert_eq!(name("etcd", &["a", "b"]), "etcd:a,b");
        assert_ne!(name("redis", &["a,b"]), name("redis", &["a", "b"]));
        assert_ne!(name("redis", &["a%2Cb"]), name("redis", &["a,b"]));
        assert_ne!(name("redis", &["x"]), name("etcd", &["x"]));
        assert_eq!(FencingToken::from(7), FencingToken::unbound(7));
        assert_eq!(
            FencingToken::new(7, "redis:x").to_string(),
            "7 (from redis:x)"
        );
    }
}
