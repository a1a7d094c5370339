//! Taking locks: the `Client` methods that make a [`Lock`]. They live here, above `lock.rs`,
//! so that `client.rs` does not depend on the lock handle (which holds a `Client`): the import
//! graph has no cycle.

use std::time::Instant;

use tracing::Instrument;

use crate::backend::Grant;
use crate::client::{check_resources, Client};
// The error variants the docs name.
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::lock::Lock;
use crate::pure::retry::RetryPolicy;

impl Client {
    /// Makes one attempt to take the lock on `resource`.
    ///
    /// # Errors
    ///
    /// [`Error::Contention`] when another owner holds it, [`Error::Unavailable`] when too many
    /// nodes failed, [`Error::TooSlow`] when no validity was left, [`Error::InvalidConfig`] for an
    /// empty resource name, [`Error::AlreadyHeld`] (before any I/O) when the calling task holds
    /// it already through this client. Whatever the error, release has been sent to every node.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a call dropped before it returns (`tokio::time::timeout`, `select!`)
    /// releases what it may have set in the background, as a dropped [`Lock`] is released
    /// (compare-and-delete by its own owner value: a key another client holds is left alone);
    /// [`Client::close`] and the drop of the last client handle wait for it. Without a running
    /// tokio runtime the keys expire after the TTL.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
    /// use fencelock::ErrorKind;
    ///
    /// match client.try_acquire("cache:rebuild").await {
    ///     Ok(lock) => {
    ///         // ... rebuild the cache ...
    ///         lock.release().await?;
    ///     }
    ///     Err(e) if e.kind() == ErrorKind::Contention => println!("another client rebuilds it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, resource: &str) -> Result<Lock> {
        self.try_acquire_many(&[resource]).await
    }

    /// Makes one attempt to take all of `resources` at once: on each node one script sets all
    /// the keys or none (on etcd, one transaction joins every resource's queue, and the lock is
    /// granted only if it is first in all of them), so two requests with overlapping sets are
    /// never both granted. They are released (and extended) together.
    ///
    /// # Errors
    ///
    /// As [`Client::try_acquire`]; [`Error::InvalidConfig`] when the list is empty or names a
    /// resource twice, or, on etcd, names more than 63 resources (one transaction's worth).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: see [`Client::try_acquire`].
    pub async fn try_acquire_many<S: AsRef<str>>(&self, resources: &[S]) -> Result<Lock> {
        let keys = check_resources(resources)?;
        self.holdings().check(&keys)?;
        let span = tracing::debug_span!("acquire", resource = %keys[0], attempt = 1u32);
        let started = Instant::now();
        let result = self.backend().try_acquire(&keys).instrument(span).await;
        self.record_acquisition(&keys, false, started, &result);
        Ok(Lock::new(self.clone(), keys, result?))
    }

    /// Takes the lock on `resource`, waiting per the configured [`RetryPolicy`]: by default it
    /// gives up after **10 s** ([`RetryPolicy::DEFAULT_WAIT`]) with [`Error::Timeout`], retrying
    /// after jittered delays of 50 ms to 500 ms (sooner when woken by a release); set another
    /// wait with [`Config::with_retry`](crate::Config::with_retry) or per call with
    /// [`Client::acquire_with`].
    ///
    /// After a first refusal the call waits in line: waiters of one resource are served in the
    /// order they started waiting (on every node the first live waiter is the only one granted),
    /// each woken by its turn, which the release of the previous holder announces. A client that
    /// asks again right after releasing a lock others wait for goes to the end of the line.
    /// Jittered retries (the policy's delays) renew the place in line and cover lost wake-ups.
    /// The line only orders fencelock's waiters; other Redlock clients and
    /// [`Client::try_acquire`] can still take a free key ahead of it. On Redis, several
    /// resources at once ([`Client::acquire_many`]) do not queue: those waiters are woken by
    /// every release. On etcd every wait queues, several resources included: a waiter's keys
    /// are created in one transaction, so waiters for overlapping sets are served in one order
    /// and never wait for each other in a cycle.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] (holding the last attempt's error) when the wait or the attempt count
    /// ran out; the last attempt's error directly when it is not worth retrying;
    /// [`Error::AlreadyHeld`] at once when the calling task holds it already through this client.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: an attempt cut short is released in the background as in
    /// [`Client::try_acquire`], and the waiter leaves the line in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
    /// let lock = client.acquire("report:daily").await?; // waits in line, per the retry policy
    /// // ... the work, finished before lock.validity_deadline() ...
    /// lock.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, resource: &str) -> Result<Lock> {
        let policy = self.config().retry().clone();
        self.acquire_with(resource, &policy).await
    }

    /// Like [`Client::acquire`], with a retry policy for this call only.
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`].
    pub async fn acquire_with(&self, resource: &str, policy: &RetryPolicy) -> Result<Lock> {
        self.acquire_many_with(&[resource], policy).await
    }

    /// [`Client::try_acquire_many`], waiting like [`Client::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`] and [`Client::try_acquire_many`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
    /// // Both accounts or neither: no deadlock between transfers in opposite directions.
    /// let lock = client.acquire_many(&["account:7", "account:9"]).await?;
    /// // ... move the money ...
    /// lock.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_many<S: AsRef<str>>(&self, resources: &[S]) -> Result<Lock> {
        let policy = self.config().retry().clone();
        self.acquire_many_with(resources, &policy).await
    }

    /// [`Client::acquire_many`] with a retry policy for this call only.
    ///
    /// # Errors
    ///
    /// As [`Client::acquire`] and [`Client::try_acquire_many`].
    pub async fn acquire_many_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        policy: &RetryPolicy,
    ) -> Result<Lock> {
        let keys = check_resources(resources)?;
        self.holdings().check(&keys)?;
        let started = Instant::now();
        let result = self.backend().acquire(&keys, policy, None).await;
        self.record_acquisition(&keys, true, started, &result);
        Ok(Lock::new(self.clone(), keys, result?))
    }

    /// Records an acquisition call that began at `started` (see `telemetry.rs`).
    pub(crate) fn record_acquisition(
        &self,
        keys: &[String],
        wait: bool,
        started: Instant,
        result: &Result<Grant>,
    ) {
        let telemetry = self.telemetry();
        telemetry.acquired(
            &telemetry.label(&keys[0]),
            wait,
            started.elapsed(),
            result,
            result.as_ref().ok().map(|g| &g.votes),
        );
    }
}
