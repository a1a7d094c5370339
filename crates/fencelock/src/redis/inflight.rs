//! The requests of one round, in flight together, in one allocation.
//!
//! A round sends one request per node and collects the answers as they come. Boxing each
//! request's future for a `FuturesUnordered` cost two allocations of about 2.6 KB per node and
//! round (above the allocator's fast path), which profiling showed as the largest single cost of
//! a round on the client (see `docs/notes/performance-log.md`, "Where the time goes"). Here the futures of a round live side by
//! side in one pinned slice, and every poll polls those still pending: with a handful of nodes,
//! polling them all is cheaper than the bookkeeping that would avoid it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Futures polled together; each yields once, with its position.
pub(crate) struct Inflight<F> {
    slots: Pin<Box<[Option<F>]>>,
    left: usize,
}

impl<F> std::fmt::Debug for Inflight<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflight")
            .field("left", &self.left)
            .finish_non_exhaustive()
    }
}

impl<F: Future> Inflight<F> {
    pub(crate) fn new(futures: impl IntoIterator<Item = F>) -> Inflight<F> {
        let slots: Box<[Option<F>]> = futures.into_iter().map(Some).collect();
        let left = slots.len();
        Inflight {
            slots: Box::into_pin(slots),
            left,
        }
    }

    /// The size of one future (for the performance notes and a test that keeps it small).
    #[cfg(test)]
    pub(crate) fn future_size(&self) -> usize {
        std::mem::size_of::<Option<F>>()
    }

    /// How many futures have not finished.
    pub(crate) fn left(&self) -> usize {
        self.left
    }

    /// Whether the future at `pos` has not finished.
    pub(crate) fn is_pending(&self, pos: usize) -> bool {
        self.slots.get(pos).is_some_and(Option::is_some)
    }

    /// Polls every unfinished future; returns the first that is ready (its position and output),
    /// `None` once all have finished.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, F::Output)>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        // SAFETY: no future is ever moved out of its slot. Each is polled where it lies, through
        // `Pin::new_unchecked`, and a finished one is dropped in place by assigning `None`, which
        // `Pin` allows (the drop runs before the memory is reused). The slice itself never moves:
        // it is pinned in its box for the whole life of `Inflight`.
        let slots = unsafe { self.slots.as_mut().get_unchecked_mut() };
        for (pos, slot) in slots.iter_mut().enumerate() {
            let Some(future) = slot.as_mut() else {
                continue;
            };
            // SAFETY: see above; `future` stays in its pinned slot.
            let future = unsafe { Pin::new_unchecked(future) };
            if let Poll::Ready(out) = future.poll(cx) {
                *slot = None;
                self.left -= 1;
                return Poll::Ready(Some((pos, out)));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn yields_each_future_once_in_completion_order() {
        let delays = [30u64, 10, 20];
        let mut inflight = Inflight::new(delays.iter().map(|&ms| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ms
        }));
        let mut seen = Vec::new();
        while let Some((pos, ms)) = std::future::poll_fn(|cx| inflight.poll_next(cx)).await {
            assert_eq!(delays[pos], ms);
            seen.push(pos);
            assert_eq!(inflight.left(), delays.len() - seen.len());
        }
        assert_eq!(seen, [1, 2, 0]);
    }

    #[tokio::test]
    async fn an_empty_set_is_done_at_once() {
        let mut inflight = Inflight::new(Vec::<std::future::Ready<()>>::new());
        assert!(std::future::poll_fn(|cx| inflight.poll_next(cx))
            .await
            .is_none());
    }

    #[tokio::test]
    async fn dropping_unfinished_futures_drops_them_in_place() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        struct Count(Arc<AtomicUsize>);
        impl Drop for Count {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut inflight = Inflight::new((0..3u64).map(|i| {
            let guard = Count(dropped.clone());
            async move {
                let _guard = guard;
                if i > 0 {
                    std::future::pending::<()>().await;
                }
                i
            }
        }));
        let first = std::future::poll_fn(|cx| inflight.poll_next(cx)).await;
        assert_eq!(first.map(|(pos, _)| pos), Some(0));
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(inflight);
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
    }
}
