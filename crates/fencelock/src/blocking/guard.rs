//! The blocking guard of an auto-extended lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{LostSignal, Runtime};
use crate::context::LockContext;
use crate::error::{LostCause, Result};
use crate::pure::vote::Votes;

/// A lock kept extended by the client's runtime thread, as [`crate::LockGuard`]: the calling
/// thread may block in its work meanwhile. Dropping it stops the extension and releases the lock
/// from the runtime thread.
///
/// # Example
///
/// ```no_run
/// # fn demo(client: fencelock::blocking::Client) -> fencelock::Result<()> {
/// use fencelock::AutoExtend;
///
/// let guard = client
///     .acquire("nightly-report")?
///     .auto_extend(AutoExtend::new());
/// for step in 0..10 {
///     if guard.is_lost() {
///         break; // another client may hold it now
///     }
///     // ... step `step` of the work ...
/// }
/// guard.release()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock; hold it while you work"]
#[derive(Debug)]
pub struct LockGuard {
    inner: Option<crate::LockGuard>,
    rt: Arc<Runtime>,
}

impl LockGuard {
    pub(super) fn new(inner: crate::LockGuard, rt: Arc<Runtime>) -> LockGuard {
        LockGuard {
            inner: Some(inner),
            rt,
        }
    }

    fn guard(&self) -> &crate::LockGuard {
        self.inner.as_ref().expect("present until consumed")
    }

    /// The (first) resource.
    pub fn resource(&self) -> &str {
        self.guard().resource()
    }

    /// The owner value stored in the keys.
    pub fn owner(&self) -> &str {
        self.guard().owner()
    }

    /// The fencing token with its issuer and the guard's live state, for the fenced storages
    /// (see [`crate::LockGuard::fencing_token`]).
    pub fn fencing_token(&self) -> Option<crate::FencingToken> {
        self.guard().fencing_token()
    }

    /// When the validity runs out, unless the next extension succeeds.
    pub fn validity_deadline(&self) -> Instant {
        self.guard().validity_deadline()
    }

    /// The validity left.
    pub fn remaining(&self) -> Duration {
        self.guard().remaining()
    }

    /// The signal that fires when the lock is lost, with blocking waits.
    pub fn lost(&self) -> LostSignal {
        LostSignal::new(self.guard().lost(), self.rt.clone())
    }

    /// Whether the lock is lost (the signal fired, or the validity is within the safety margin
    /// of running out).
    pub fn is_lost(&self) -> bool {
        self.guard().is_lost()
    }

    /// What work under the lock needs: resource, fencing token, deadline, lost signal.
    pub fn context(&self) -> LockContext {
        self.guard().context()
    }

    /// Stops the extension and releases the lock, as [`crate::LockGuard::release`].
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::release`]; [`crate::Error::InvalidConfig`] when called from
    /// inside an async runtime (the lock is then released in the background).
    pub fn release(mut self) -> Result<Votes> {
        let guard = self.inner.take().expect("present until consumed");
        if tokio::runtime::Handle::try_current().is_ok() {
            self.rt.drop_inside(guard);
            return self.rt.block_on(async { Ok(Votes::default()) })?;
        }
        self.rt.block_on(guard.release())?
    }

    /// For `with_lock`: whether the lock was lost by now, then the release.
    pub(super) fn finish(mut self) -> (Option<LostCause>, Result<Votes>) {
        let guard = self.inner.take().expect("present until consumed");
        let cause = guard.lost_cause();
        let released = match self.rt.block_on(guard.release()) {
            Ok(released) => released,
            Err(e) => Err(e),
        };
        (cause, released)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            self.rt.drop_inside(guard);
        }
    }
}
