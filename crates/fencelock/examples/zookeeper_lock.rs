//! The ZooKeeper guide's example: a lock on a ZooKeeper ensemble, with its fencing token.
//!
//! ```text
//! FENCELOCK_NODES=zk://127.0.0.1:2181/apps/billing \
//!     cargo run -p fencelock --features zookeeper --example zookeeper_lock
//! ```
//!
//! docs/guide/zookeeper.md shows the region below; `tests/guides.rs` checks that it is the same
//! text and runs this program against a real ZooKeeper.

// region: main
use std::time::Duration;

use fencelock::{AutoExtend, Client, Config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // FENCELOCK_NODES=zk://zk1:2181,zk2:2181,zk3:2181/apps/billing
    // The TTL is the ZooKeeper session timeout.
    let client = Client::new(Config::from_env()?.with_ttl(Duration::from_secs(10)))?;
    let guard = client
        .acquire("nightly-report") // waits in line, first come first served
        .await?
        .auto_extend(AutoExtend::new());
    let token = guard.fencing_token().expect("every ZooKeeper lock has one");
    let lost = guard.lost();
    tokio::select! {
        () = lost.fired() => return Err("lost the lock: stop writing".into()),
        () = tokio::time::sleep(Duration::from_secs(1)) => {} // the work
    }
    guard.release().await?;
    println!("held under fencing token {}", token.value());
    Ok(())
}
// endregion: main
