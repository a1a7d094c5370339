//! What the semaphore and election modes take instead of the mutex: a permit of the harness's
//! semaphore (its slot's fenced record is the one the holder writes), or leadership of the
//! harness's election (the term is the fencing token of the fenced record).

use fencelock::{Client, Election, Lock, Semaphore};

use crate::client::RESOURCE;
use crate::mode::Mode;

/// How a client of a mode takes its lock.
#[derive(Debug)]
pub(crate) enum Taker {
    /// The mutex on [`RESOURCE`].
    Mutex,
    /// A permit of the semaphore [`RESOURCE`].
    Permit(Semaphore),
    /// Leadership of the election [`RESOURCE`], with this client's leader value.
    Leader(Election, String),
}

impl Taker {
    /// The taker of `mode`'s client `id`. No I/O.
    ///
    /// # Errors
    ///
    /// As `Client::semaphore` and `Client::election`.
    pub(crate) fn new(client: &Client, mode: Mode, id: u32) -> fencelock::Result<Taker> {
        if let Some(n) = mode.permits() {
            return Ok(Taker::Permit(client.semaphore(RESOURCE, n)?));
        }
        if mode.election() {
            return Ok(Taker::Leader(
                client.election(RESOURCE)?,
                format!("client-{id}"),
            ));
        }
        Ok(Taker::Mutex)
    }

    /// Takes the lock (waiting per the client's retry policy); a permit's slot with it.
    ///
    /// # Errors
    ///
    /// As `Client::acquire`, `Semaphore::acquire` and `Election::campaign_lock`.
    pub(crate) async fn take(&self, client: &Client) -> fencelock::Result<(Lock, Option<u32>)> {
        match self {
            Taker::Mutex => Ok((client.acquire(RESOURCE).await?, None)),
            Taker::Permit(sem) => {
                let lock = sem.acquire().await?;
                let slot = slot_of(lock.resource());
                Ok((lock, slot))
            }
            Taker::Leader(election, value) => Ok((election.campaign_lock(value).await?, None)),
        }
    }
}

/// The slot of a permit's resource (`<RESOURCE>:permit:<i>`).
fn slot_of(resource: &str) -> Option<u32> {
    resource
        .strip_prefix(RESOURCE)?
        .strip_prefix(":permit:")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permits_resource_names_its_slot() {
        assert_eq!(
            slot_of(&fencelock::protocol::permit_key(RESOURCE, 1)),
            Some(1)
        );
        assert_eq!(slot_of(RESOURCE), None);
        assert_eq!(slot_of("other:permit:1"), None);
    }
}
