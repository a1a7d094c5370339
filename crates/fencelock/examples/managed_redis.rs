//! docs/guide/managed-redis.md's example: a fenced lock on a Sentinel-managed primary.
//!
//! ```text
//! FENCELOCK_NODES=redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster/0 \
//!     cargo run -p fencelock --example managed_redis
//! ```
//!
//! The guide shows the region below; `tests/guides.rs` checks that it is the same text and runs
//! this program against a real Sentinel group.

// region: main
use std::time::Duration;

use fencelock::{Client, Config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // FENCELOCK_NODES=redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster/0
    let config = Config::from_env()?
        .with_fencing(true)
        .with_ttl(Duration::from_secs(10));
    let client = Client::new(config)?;

    let lock = client.acquire("nightly-report").await?; // waits, also through a failover
    let token = lock.fencing_token().expect("the client is in fencing mode");
    // ... write to your storage under `token` ...
    lock.release().await?;
    client.close().await;
    println!("held nightly-report under fencing token {}", token.value());
    Ok(())
}
// endregion: main
