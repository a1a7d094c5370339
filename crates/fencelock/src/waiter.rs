//! A wait for a lock split over several calls, which keeps its place in line between them.

use std::sync::Arc;
use std::time::SystemTime;

use crate::client::{check_resources, Client};
use crate::error::Result;
use crate::lock::Lock;
use crate::pure::retry::RetryPolicy;

/// A wait for a lock that the caller splits over several calls (a loop that reports progress
/// between calls, or checks for Ctrl-C), made by [`Client::waiter`]. It keeps one place in the
/// waiting line for all of them.
///
/// The line orders waiters by when their wait began. A waiter's ticket dates from when the
/// `Waiter` was made, so each [`Waiter::acquire`] takes back the place instead of the end of the
/// line, and a call that times out keeps the place for the next one (for at most a lease, about
/// three retry delays, if none comes; on etcd, the lease's TTL). A plain
/// [`Client::acquire_with`] instead begins its own wait, and leaves the line when it times out.
///
/// ```no_run
/// # async fn demo(client: fencelock::Client) -> fencelock::Result<()> {
/// use std::time::Duration;
/// use fencelock::RetryPolicy;
///
/// let mut waiter = client.waiter(&["report:daily"])?;
/// let slice = RetryPolicy::new().with_wait(Duration::from_secs(2));
/// let lock = loop {
///     match waiter.acquire(&slice).await {
///         Ok(lock) => break lock,
///         Err(e) if e.kind() == fencelock::ErrorKind::Timeout => eprintln!("still waiting"),
///         Err(e) => return Err(e),
///     }
/// };
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Waiter {
    client: Client,
    keys: Arc<[String]>,
    since: SystemTime,
}

impl Client {
    /// Starts a wait for `resources` (one, or several taken together) that may be split over
    /// several calls of [`Waiter::acquire`]; it takes its place in line from now on.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidConfig`] for the resource names, as [`Client::try_acquire_many`].
    pub fn waiter<S: AsRef<str>>(&self, resources: &[S]) -> Result<Waiter> {
        Ok(Waiter {
            client: self.clone(),
            keys: check_resources(resources)?,
            since: SystemTime::now(),
        })
    }
}

impl Waiter {
    /// Waits for the lock as `policy` allows, in the place this wait holds in line.
    ///
    /// # Errors
    ///
    /// As [`Client::acquire_many_with`]: [`crate::Error::Timeout`] when this slice of the wait
    /// ran out (the place in line is kept for the next call).
    ///
    /// # Cancel safety
    ///
    /// As [`Client::acquire`].
    pub async fn acquire(&mut self, policy: &RetryPolicy) -> Result<Lock> {
        let started = std::time::Instant::now();
        let result = self
            .client
            .backend()
            .acquire(&self.keys, policy, Some(self.since))
            .await;
        self.client
            .record_acquisition(&self.keys, true, started, &result);
        Ok(Lock::new(self.client.clone(), self.keys.clone(), result?))
    }

    /// When this wait began: its place in line.
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// The (first) resource waited for.
    pub fn resource(&self) -> &str {
        &self.keys[0]
    }
}
