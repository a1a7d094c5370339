//! Cancel safety of an acquisition: a call dropped mid-round (`tokio::time::timeout`,
//! `select!`) may have set its keys on some nodes, and nothing would release them before their
//! TTL. [`Undo`] is armed before an attempt's first write and disarmed when the attempt returns
//! (a grant that becomes a `Lock`, whose own drop releases it, or an error after the attempt's
//! own release); dropped armed, it hands the release to a background task, as a dropped `Lock`
//! does. The release is the usual compare-and-delete by owner value: a key that holds another
//! token (another client's, or ours no more) is left alone, and on each node it is sent behind
//! the attempt's requests on the same connection.

use std::sync::Arc;

use super::RedisBackend;

/// Which release undoes the attempt.
#[derive(Debug, Clone, Copy)]
pub(super) enum Side {
    /// A mutex, a write lock, a semaphore's slot (the release script).
    Exclusive,
    /// A read lock (the readers' release script).
    Reader,
}

/// See the module docs.
#[must_use = "an Undo dropped at once releases what it guards"]
pub(super) struct Undo {
    armed: Option<Armed>,
}

/// The backend, the keys, the owner value and the release to send.
type Armed = (Arc<RedisBackend>, Vec<String>, Box<str>, Side);

impl Undo {
    /// Armed for the keys `token` may set.
    pub(super) fn arm(
        backend: &Arc<RedisBackend>,
        keys: &[String],
        token: &str,
        side: Side,
    ) -> Undo {
        Undo {
            armed: Some((backend.clone(), keys.to_vec(), token.into(), side)),
        }
    }

    /// The attempt returned: nothing to undo here.
    pub(super) fn disarm(mut self) {
        self.armed = None;
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        let Some((backend, keys, token, side)) = self.armed.take() else {
            return;
        };
        // Without a runtime no task can run: the keys expire by TTL.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::debug!(resource = %keys[0], "acquisition dropped mid-call: releasing in the background");
        // Counted like a release's stragglers, so that `Client::close` (and the drop of the last
        // client handle) waits for it.
        let counted = backend.count_background();
        runtime.spawn(async move {
            let _counted = counted;
            match side {
                Side::Exclusive => backend.release_quietly(&keys, &token, None).await,
                Side::Reader => {
                    backend.release_reader_quietly(&keys[0], &token, None).await;
                }
            }
        });
    }
}
