//! Scoped long work: acquire, keep extended while the work runs, release in every case.

use crate::client::Client;
use crate::context::LockContext;
use crate::error::{Error, LostCause, Result};
use crate::keepalive::AutoExtend;
use crate::lock::Lock;
use crate::pure::vote::Votes;

/// How scoped work ended.
pub(crate) enum Scoped<O> {
    /// It finished while the lock was held.
    Done(O),
    /// The lock was lost: before the work finished (`None`: it was cancelled) or by the time it
    /// did (its output, which may not be trusted as protected).
    Lost(Error, Option<O>),
}

impl<O> Scoped<O> {
    /// Runs `work` under `lock`, kept extended while it runs, and releases it in every case
    /// (the body of [`Client::with_lock`], for every primitive whose grant is a [`Lock`]).
    pub(crate) async fn run<F>(lock: Lock, work: F) -> Result<Scoped<O>>
    where
        F: AsyncFnOnce(LockContext) -> O,
    {
        let resource = lock.resource().to_string();
        let guard = lock.auto_extend(AutoExtend::new());
        let lost = guard.lost();
        let output = tokio::select! {
            biased;
            () = lost.fired() => None,
            output = work(guard.context()) => Some(output),
        };
        // The lost signal runs on a timer: work that kept its thread busy inside one poll kept
        // the timer (and, on this thread, the extensions) from running. The guard's time-based
        // state says whether the lock outlived the work.
        let cause = guard.lost_cause();
        let released = guard.release().await;
        match (output, cause, released) {
            // The release found our keys gone on a quorum: the lock did not last the work.
            (Some(output), None, Err(err @ Error::Lost { .. })) => {
                Ok(Scoped::Lost(err, Some(output)))
            }
            (Some(output), None, released) => {
                // The lock was held throughout; a failed release only means the keys expire
                // by TTL.
                if let Err(e) = released {
                    tracing::debug!(resource, error = %e, "release after work failed");
                }
                Ok(Scoped::Done(output))
            }
            (output, cause, released) => {
                let err = match released {
                    Err(err @ Error::Lost { .. }) => err,
                    _ => Error::lost(
                        resource,
                        Votes::default(),
                        cause.unwrap_or(LostCause::Expired),
                    ),
                };
                Ok(Scoped::Lost(err, output))
            }
        }
    }

    /// The output of work that finished under the lock, else the lock's error.
    pub(crate) fn into_output(self) -> Result<O> {
        match self {
            Scoped::Done(value) => Ok(value),
            Scoped::Lost(err, _) => Err(err),
        }
    }
}

impl<T, E: From<Error>> Scoped<Result<T, E>> {
    /// The work's own result; if the lock was lost, the work's own error when it failed anyway
    /// (it says more than the lock's), else the lock's.
    pub(crate) fn into_result(self) -> Result<T, E> {
        match self {
            Scoped::Done(result) => result,
            Scoped::Lost(_, Some(Err(e))) => Err(e),
            Scoped::Lost(err, _) => Err(err.into()),
        }
    }
}

impl Client {
    /// Runs `work` under the lock on `resource`: acquires (waiting per the retry policy), keeps
    /// the lock extended while `work` runs, hands it a [`LockContext`] (resource, fencing token,
    /// validity deadline, lost signal), and releases in every case. If the lock is lost first,
    /// `work` is dropped (cancelled at its next await point) and the call returns
    /// [`Error::Lost`]; so does work that comes back only after the lock was lost (it kept its
    /// thread busy past the deadline, and the lost signal had no chance to run). For work that
    /// returns a `Result`, [`Client::try_with_lock`] flattens the two layers.
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
    /// let rows = client
    ///     .with_lock("nightly-report", async |lock| {
    ///         // long work; check lock.is_lost() before each irreversible step
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Errors of [`Client::acquire`]; [`Error::Lost`] when the lock was lost before `work`
    /// finished, its cause saying how.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the background.
    pub async fn with_lock<T, F>(&self, resource: &str, work: F) -> Result<T>
    where
        F: AsyncFnOnce(LockContext) -> T,
    {
        Scoped::run(self.acquire(resource).await?, work)
            .await?
            .into_output()
    }

    /// [`Client::with_lock`] for work that can fail: its `Result` comes back as it is, instead
    /// of inside `Ok`. `try` as in `Iterator::try_fold`: the work is fallible; this waits for the
    /// lock like [`Client::acquire`] (for one attempt only, use a [`RetryPolicy`] of one attempt
    /// in the client's [`Config`](crate::Config)).
    ///
    /// `E` is the work's error type: any type that a [`fencelock::Error`](Error) converts into
    /// (`fencelock::Error` itself, `Box<dyn std::error::Error>`, `anyhow::Error`, or your own
    /// with a `From` impl).
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client, fence: fencelock::fence::SqliteFence) -> fencelock::Result<()> {
    /// let done: usize = client
    ///     .try_with_lock("nightly-report", async |lock| {
    ///         let token = lock.fencing_token().expect("fencing mode").value();
    ///         fence
    ///             .write_async("report", token, |tx| Ok(tx.execute("DELETE FROM report", [])?))
    ///             .await
    ///     })
    ///     .await?;
    /// # let _ = done; Ok(()) }
    /// ```
    ///
    /// [`RetryPolicy`]: crate::RetryPolicy
    ///
    /// # Errors
    ///
    /// `work`'s own error (after the release), when it returned one; otherwise as
    /// [`Client::with_lock`], converted into `E`.
    ///
    /// # Cancel safety
    ///
    /// As [`Client::with_lock`].
    pub async fn try_with_lock<T, E, F>(&self, resource: &str, work: F) -> Result<T, E>
    where
        F: AsyncFnOnce(LockContext) -> Result<T, E>,
        E: From<Error>,
    {
        Scoped::run(self.acquire(resource).await?, work)
            .await?
            .into_result()
    }
}
