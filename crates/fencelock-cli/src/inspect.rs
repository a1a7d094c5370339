//! `fencelock inspect`: what each node holds for one resource, read by the node set's backend
//! (`probe`). Read-only: it never changes a key.

use crate::exit::Failure;
use crate::probe::Backend;
use crate::settings::Settings;

/// `fencelock inspect RESOURCE`.
///
/// # Errors
///
/// A usage failure for a bad node URL or an empty resource; unreachable nodes are shown, not
/// errors.
pub(crate) async fn inspect(settings: &Settings, resource: &str, json: bool) -> anyhow::Result<u8> {
    if resource.is_empty() {
        return Err(Failure::usage(
            "the resource name is empty; name what the lock protects, e.g. order:42",
        )
        .into());
    }
    Backend::of(settings)
        .inspect(settings, resource, json)
        .await
}
