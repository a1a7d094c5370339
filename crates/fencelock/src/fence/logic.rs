//! The fence logic, written once: lock and read the resource's fence row in the write's own
//! transaction, admit or refuse the token ([`super::admit`]), and record it. Each database
//! adapter (rusqlite, tokio-postgres, sqlx) implements [`FenceRow`], the two statements that
//! differ between drivers; everything that decides is here.

use std::future::Future;

use super::{admit, must_record, token_to_sql, Row};
use crate::error::Result;
use crate::FencingToken;

/// A token on its way into a fence row: the token and the signed value the column stores,
/// checked before any I/O.
#[derive(Debug)]
pub(crate) struct Presented<'a> {
    pub(crate) token: &'a FencingToken,
    pub(crate) stored: i64,
}

impl<'a> Presented<'a> {
    /// # Errors
    ///
    /// [`crate::Error::InvalidConfig`] for a token above `i64::MAX`.
    pub(crate) fn new(resource: &str, token: &'a FencingToken) -> Result<Presented<'a>> {
        Ok(Presented {
            token,
            stored: token_to_sql(resource, token.value())?,
        })
    }
}

/// The two statements an adapter runs inside the caller's (or its own) open transaction.
pub(crate) trait FenceRow {
    /// The storage's name in the fenced-write metric (`telemetry.rs`).
    const STORAGE: &'static str;

    /// Reads the fence row of `resource` and keeps other fenced writers of it out until the
    /// transaction ends (SQLite: the database's write lock, taken by `BEGIN IMMEDIATE`;
    /// PostgreSQL: the row's lock, `SELECT ... FOR UPDATE`, after creating the row with
    /// `presented` if it is missing, so that there is a row to lock). `None`: no row.
    fn lock_row(
        &mut self,
        resource: &str,
        presented: &Presented<'_>,
    ) -> impl Future<Output = Result<Option<Row>>>;

    /// Sets the row's token to `presented`, and its issuer if it had none.
    fn record(
        &mut self,
        resource: &str,
        presented: &Presented<'_>,
    ) -> impl Future<Output = Result<()>>;
}

/// What [`check`] decided for an admitted token.
#[derive(Debug, Clone, Copy)]
#[must_use = "an admitted token must be recorded with `finish` before the commit"]
pub(crate) struct Admitted {
    record: bool,
}

/// Locks and reads the row, then admits `presented` or refuses it
/// ([`crate::Error::StaleToken`], [`crate::Error::CounterReset`], or
/// [`crate::Error::InvalidConfig`] for a token of another lock). Nothing is written on a refusal
/// but a row [`FenceRow::lock_row`] created, which the caller's rollback removes.
pub(crate) async fn check<R: FenceRow>(
    rows: &mut R,
    resource: &str,
    presented: &Presented<'_>,
) -> Result<Admitted> {
    let current = rows.lock_row(resource, presented).await?;
    let verdict = admit(resource, presented.token, current.as_ref());
    crate::telemetry::fenced_write(R::STORAGE, &verdict);
    verdict?;
    Ok(Admitted {
        record: must_record(presented.token, current.as_ref()),
    })
}

/// Records an admitted token (if the row does not hold it already), in the same transaction.
pub(crate) async fn finish<R: FenceRow>(
    rows: &mut R,
    resource: &str,
    presented: &Presented<'_>,
    admitted: Admitted,
) -> Result<()> {
    if admitted.record {
        rows.record(resource, presented).await?;
    }
    Ok(())
}

#[cfg(any(feature = "sqlite", all(feature = "blocking", feature = "postgres")))]
/// The output of a future that does not wait: a synchronous adapter's (rusqlite's, the
/// `postgres` crate's), whose statements run inside `poll`, so the first poll is ready. Should
/// one ever wait, the thread parks until it is woken, as an executor would: never a panic.
pub(crate) fn ready<F: Future>(future: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake};

    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// Pending once (waking itself from another thread), then ready.
    struct Later(bool);
    impl Future for Later {
        type Output = u8;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u8> {
            if self.0 {
                return Poll::Ready(7);
            }
            self.0 = true;
            let waker = cx.waker().clone();
            std::thread::spawn(move || waker.wake());
            Poll::Pending
        }
    }

    #[test]
    fn a_future_that_waits_is_waited_for_not_a_panic() {
        assert_eq!(super::ready(async { 3 }), 3);
        assert_eq!(super::ready(Later(false)), 7);
    }
}
