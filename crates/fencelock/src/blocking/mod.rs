//! A blocking API: the same [`Client`], [`Lock`], [`LockGuard`] and [`LostSignal`] for code that
//! is not async (CLI tools, rayon workers, synchronous web frameworks), with no tokio in the
//! caller's code. The `reqwest::blocking` pattern.
//!
//! # What it costs
//!
//! Each [`Client`] owns a tokio runtime with one worker thread of its own
//! (`fencelock-blocking`): the connections, the auto-extension of a [`LockGuard`] and the
//! background release of a dropped lock run there, so a guard keeps its lock extended while the
//! calling thread is busy in blocking work. A call blocks the calling thread for the duration of
//! its async counterpart; clone the client (cheap: the clones share the runtime and the
//! connections) to use it from several threads at once. When the last clone (and every lock
//! taken through it) is dropped, the releases of locks dropped without [`Lock::release`] are
//! waited for, at most twice the node timeout, before the runtime stops; [`Client::close`]
//! waits for them at a point of your choosing.
//!
//! Calling it from inside an async runtime is refused with [`Error::InvalidConfig`](crate::Error)
//! (blocking there would stall that runtime's thread): use [`crate::Client`] there.
//!
//! ```no_run
//! use fencelock::blocking::Client;
//! use fencelock::Config;
//!
//! let client = Client::new(Config::new(["redis://127.0.0.1:6379/0"]))?;
//! let lock = client.acquire("nightly-report")?;
//! // ... work ...
//! lock.release()?;
//! client.close();
//! # Ok::<(), fencelock::Error>(())
//! ```
//!
//! Tested from plain `std::thread`s against real nodes in `tests/blocking.rs`: mutual exclusion
//! among threads, the lost signal, and the release of a dropped lock by the background task.

mod client;
mod guard;
mod lock;
mod lost;
#[cfg(feature = "postgres")]
mod postgres_fence;

pub use self::client::Client;
pub use self::guard::LockGuard;
pub use self::lock::Lock;
pub use self::lost::LostSignal;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::postgres_fence::PostgresFence;

use std::sync::Arc;

use crate::error::{Error, Result};

/// The runtime of one blocking client and its clones. Stopped without waiting when the last
/// clone goes (a `Drop` never blocks): what is still in flight then is left to the TTL.
#[derive(Debug)]
pub(crate) struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> Result<Arc<Runtime>> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fencelock-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::config(
                    "blocking client",
                    format!(
                        "cannot start its runtime thread ({e}); check the process's thread limit"
                    ),
                )
            })?;
        Ok(Arc::new(Runtime(Some(rt))))
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the runtime lives until drop")
    }

    /// Runs `future` to completion, blocking the calling thread.
    pub(crate) fn block_on<F: std::future::Future>(&self, future: F) -> Result<F::Output> {
        outside_async("fencelock::Client (async)")?;
        Ok(self.rt().block_on(future))
    }

    /// Drops `value` inside the runtime's context: a lock's `Drop` signals a task there.
    pub(crate) fn drop_inside<T>(&self, value: T) {
        let _entered = self.rt().enter();
        drop(value);
    }
}

/// Refuses a blocking call made from inside an async runtime, whose thread it would block (and
/// where starting another runtime panics); `instead` names the async counterpart.
pub(crate) fn outside_async(instead: &str) -> Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::config(
            "fencelock::blocking",
            format!(
                "called from inside an async runtime, whose thread it would block; use {instead} there, or call it from tokio::task::spawn_blocking"
            ),
        ));
    }
    Ok(())
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}
