//! The blocking lock handle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{LockGuard, Runtime};
use crate::error::Result;
use crate::keepalive::AutoExtend;
use crate::pure::vote::Votes;

/// A held lock, as [`crate::Lock`], with blocking calls. Dropping it without
/// [`release`](Lock::release) releases it from the client's runtime thread (the drop itself
/// never blocks).
///
/// # Example
///
/// ```no_run
/// # fn demo(client: fencelock::blocking::Client) -> fencelock::Result<()> {
/// let lock = client.acquire("nightly-report")?;
/// let token = lock.fencing_token(); // Some in fencing mode: pass it to a fence
/// // ... the work, finished before lock.validity_deadline() ...
/// lock.release()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the lock releases it in the background; hold it while you work"]
#[derive(Debug)]
pub struct Lock {
    inner: Option<crate::Lock>,
    rt: Arc<Runtime>,
}

impl Lock {
    pub(super) fn new(inner: crate::Lock, rt: Arc<Runtime>) -> Lock {
        Lock {
            inner: Some(inner),
            rt,
        }
    }

    fn lock(&self) -> &crate::Lock {
        self.inner.as_ref().expect("present until consumed")
    }

    /// The (first) resource.
    pub fn resource(&self) -> &str {
        self.lock().resource()
    }

    /// The owner value stored in the keys.
    pub fn owner(&self) -> &str {
        self.lock().owner()
    }

    /// The fencing token with the lock that issued it, for the fenced storages (see
    /// [`crate::Lock::fencing_token`]): [`crate::fence::SqliteFence::write`] is blocking already.
    pub fn fencing_token(&self) -> Option<crate::FencingToken> {
        self.lock().fencing_token()
    }

    /// When the lock's validity runs out, unless extended.
    pub fn validity_deadline(&self) -> Instant {
        self.lock().validity_deadline()
    }

    /// The validity left.
    pub fn remaining(&self) -> Duration {
        self.lock().remaining()
    }

    /// Whether validity is left.
    pub fn is_valid(&self) -> bool {
        self.lock().is_valid()
    }

    /// The votes of the acquisition.
    pub fn votes(&self) -> &Votes {
        self.lock().votes()
    }

    /// Extends the lock by another TTL, as [`crate::Lock::extend`].
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::extend`]; [`crate::Error::InvalidConfig`] when called from inside an
    /// async runtime.
    pub fn extend(&mut self) -> Result<()> {
        let rt = self.rt.clone();
        let lock = self.inner.as_mut().expect("present until consumed");
        rt.block_on(lock.extend())?
    }

    /// Releases the lock, as [`crate::Lock::release`].
    ///
    /// # Errors
    ///
    /// As [`crate::Lock::release`]; [`crate::Error::InvalidConfig`] when called from inside an
    /// async runtime (the lock is then released in the background).
    pub fn release(mut self) -> Result<Votes> {
        let lock = self.inner.take().expect("present until consumed");
        if tokio::runtime::Handle::try_current().is_ok() {
            self.rt.drop_inside(lock);
        } else {
            return self.rt.block_on(lock.release())?;
        }
        self.rt.block_on(async { Ok(Votes::default()) })?
    }

    /// Keeps the lock extended from the runtime thread, as [`crate::Lock::auto_extend`].
    pub fn auto_extend(mut self, settings: AutoExtend) -> LockGuard {
        let lock = self.inner.take().expect("present until consumed");
        let guard = {
            let _entered = self.rt.rt().enter();
            lock.auto_extend(settings)
        };
        LockGuard::new(guard, self.rt.clone())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(lock) = self.inner.take() {
            self.rt.drop_inside(lock);
        }
    }
}
