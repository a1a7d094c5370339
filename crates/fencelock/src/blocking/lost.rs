//! The lost signal, with blocking waits.

use std::sync::Arc;
use std::time::Duration;

use super::Runtime;
use crate::error::LostCause;

/// Fires when the lock is lost, as [`crate::LostSignal`]; its waits block the calling thread.
/// Cheap to clone; every clone fires together.
#[derive(Debug, Clone)]
pub struct LostSignal {
    inner: crate::LostSignal,
    rt: Arc<Runtime>,
}

impl LostSignal {
    pub(super) fn new(inner: crate::LostSignal, rt: Arc<Runtime>) -> LostSignal {
        LostSignal { inner, rt }
    }

    /// Whether the signal has fired (or its time has come).
    pub fn is_fired(&self) -> bool {
        self.inner.is_fired()
    }

    /// Why the lock was lost, once it is.
    pub fn cause(&self) -> Option<LostCause> {
        self.inner.cause()
    }

    /// Blocks until the lock is lost. From inside an async runtime it cannot wait and returns
    /// at once.
    pub fn wait(&self) {
        let _ = self.rt.block_on(self.inner.fired());
    }

    /// Blocks until the lock is lost or `timeout` passes; whether it was lost. From inside an
    /// async runtime it cannot wait and answers at once.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        // The timer is made inside: it needs the runtime's context.
        let _ = self.rt.block_on(async {
            let _ = tokio::time::timeout(timeout, self.inner.fired()).await;
        });
        self.is_fired()
    }
}
