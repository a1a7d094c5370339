//! A semaphore: at most two of six workers encode at once, each under its own permit.
//!
//! ```text
//! fencelock up && eval "$(fencelock nodes --export)"
//! cargo run -p fencelock --example semaphore
//! ```
//!
//! docs/guide/semaphore.md shows the regions below; `tests/guides.rs` checks them and runs this
//! program against Redis nodes and against etcd.

// region: main
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fencelock::{Client, Config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(Config::from_env()?.with_fencing(true))?;
    // Two permits, shared by every client of these nodes that names "encoder".
    let encoder = client.semaphore("encoder", 2)?;

    let busy = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for job in 0..6 {
        let (encoder, busy, most) = (encoder.clone(), busy.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            encoder
                .with_permit(async |permit| {
                    let now = busy.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    println!("job {job} holds {}", permit.resource());
                    tokio::time::sleep(Duration::from_millis(200)).await; // the work
                    busy.fetch_sub(1, Ordering::SeqCst);
                })
                .await
        }));
    }
    for worker in workers {
        worker.await??;
    }
    client.close().await;
    println!("at most {} jobs at once", most.load(Ordering::SeqCst));
    Ok(())
}
// endregion: main
