//! `fencelock doctor`: checks a node set against what locks on its backend need (for Redis, the
//! article's list of Redlock mistakes and the others we know), read by the node set's backend
//! (`probe`). Read-only: it never changes a key.

use crate::probe::Backend;
use crate::settings::Settings;

/// `fencelock doctor`.
///
/// # Errors
///
/// A usage failure for a bad node URL; unreachable nodes are a failing check, not an error.
pub(crate) async fn doctor(settings: &Settings, json: bool) -> anyhow::Result<u8> {
    Backend::of(settings).doctor(settings, json).await
}
