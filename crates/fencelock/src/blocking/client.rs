//! The blocking client.

use std::sync::Arc;

use super::{Lock, Runtime};
use crate::config::Config;
use crate::context::LockContext;
use crate::error::{Error, Result};
use crate::keepalive::AutoExtend;
use crate::pure::retry::RetryPolicy;
use crate::pure::vote::Votes;

/// A blocking [`crate::Client`]: takes locks on the calling thread, runs the background work
/// (connections, extensions, releases of dropped locks) on its own runtime thread. Cheap to
/// clone; the clones share the runtime and the connections.
///
/// # Example
///
/// ```no_run
/// use fencelock::blocking::Client;
/// use fencelock::Config;
///
/// let client = Client::new(Config::new(["redis://127.0.0.1:6379"]))?;
/// let rows = client.with_lock("nightly-report", |lock| {
///     // Blocking work; the lock is extended on the client's own thread meanwhile.
///     println!("working under {}", lock.resource());
///     42
/// })?;
/// client.close();
/// # Ok::<(), fencelock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    inner: crate::Client,
    rt: Arc<Runtime>,
}

impl Client {
    /// A client for `config`, and its runtime thread. No I/O: nodes are connected on first use.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::new`]; [`Error::InvalidConfig`] if the runtime thread cannot start.
    pub fn new(config: Config) -> Result<Client> {
        let rt = Runtime::new()?;
        let inner = {
            let _entered = rt.rt().enter();
            crate::Client::new(config)?
        };
        Ok(Client { inner, rt })
    }

    /// The async client underneath (for the settings, or to share its connections with async
    /// code running on another runtime).
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// One attempt, as [`crate::Client::try_acquire`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::try_acquire`]; [`Error::InvalidConfig`] when called from inside an
    /// async runtime.
    pub fn try_acquire(&self, resource: &str) -> Result<Lock> {
        let lock = self.rt.block_on(self.inner.try_acquire(resource))??;
        Ok(Lock::new(lock, self.rt.clone()))
    }

    /// Waits for the lock per the configured retry policy, as [`crate::Client::acquire`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::acquire`]; [`Error::InvalidConfig`] when called from inside an
    /// async runtime.
    pub fn acquire(&self, resource: &str) -> Result<Lock> {
        let lock = self.rt.block_on(self.inner.acquire(resource))??;
        Ok(Lock::new(lock, self.rt.clone()))
    }

    /// Waits for the lock per `policy`, as [`crate::Client::acquire_with`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::acquire_with`]; [`Error::InvalidConfig`] when called from inside an
    /// async runtime.
    pub fn acquire_with(&self, resource: &str, policy: &RetryPolicy) -> Result<Lock> {
        let lock = self
            .rt
            .block_on(self.inner.acquire_with(resource, policy))??;
        Ok(Lock::new(lock, self.rt.clone()))
    }

    /// Runs `work` on the calling thread under the lock on `resource`, kept extended by the
    /// runtime thread meanwhile, and releases it in every case: [`crate::Client::with_lock`]
    /// for blocking work. Blocking work cannot be interrupted: check
    /// [`LockContext::is_lost`] before each irreversible step. Work that comes back after the
    /// lock was lost gets [`Error::Lost`] instead of its output.
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`]; [`Error::Lost`] when the lock was lost before `work` returned.
    pub fn with_lock<T>(&self, resource: &str, work: impl FnOnce(LockContext) -> T) -> Result<T> {
        let guard = self.acquire(resource)?.auto_extend(AutoExtend::new());
        let output = work(guard.context());
        let (cause, released) = guard.finish();
        match (cause, released) {
            (None, Err(err @ Error::Lost { .. })) => Err(err),
            (None, released) => {
                if let Err(e) = released {
                    // The lock was held throughout; the keys expire by TTL.
                    tracing::debug!(resource, error = %e, "release after work failed");
                }
                Ok(output)
            }
            (Some(_), Err(err @ Error::Lost { .. })) => Err(err),
            (Some(cause), _) => Err(Error::lost(resource, Votes::default(), cause)),
        }
    }

    /// Waits for the background releases of locks dropped without [`Lock::release`], as
    /// [`crate::Client::close`]. Call it before the program exits.
    pub fn close(&self) {
        // From inside a runtime there is nothing to wait with; the TTL cleans up.
        let _ = self.rt.block_on(self.inner.close());
    }
}
