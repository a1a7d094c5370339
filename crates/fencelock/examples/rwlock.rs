//! A read-write lock: readers of a price list share it, a writer has it alone.
//!
//! ```text
//! fencelock up && eval "$(fencelock nodes --export)"
//! cargo run -p fencelock --example rwlock
//! ```
//!
//! docs/guide/rwlock.md shows the region below; `tests/guides.rs` checks it and runs this
//! program against real nodes.

// region: main
use std::path::PathBuf;

use fencelock::{Client, Config};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let client = Client::new(Config::from_env()?.with_fencing(true))?;
    let prices = client.rwlock("price-list")?;
    let file: PathBuf = std::env::temp_dir().join("fencelock-prices.txt");

    // One writer: nobody reads while it writes, and its token is recorded for the readers.
    let written = prices
        .try_with_write(async |lock| {
            let version = format!(
                "prices written under token {:?}",
                lock.fencing_token().map(|t| t.value())
            );
            std::fs::write(&file, &version)?;
            Ok::<_, BoxError>(version)
        })
        .await?;
    println!("wrote: {written}");

    // Many readers at once.
    let mut readers = Vec::new();
    for reader in 0..4 {
        let (prices, file) = (prices.clone(), file.clone());
        readers.push(tokio::spawn(async move {
            prices
                .try_with_read(async |lock| {
                    let text = std::fs::read_to_string(&file)?;
                    // In fencing mode a reader learns the last writer's token.
                    println!(
                        "reader {reader} read {text:?}, last writer {:?}",
                        lock.last_writer_token()
                    );
                    Ok::<_, BoxError>(())
                })
                .await
        }));
    }
    for reader in readers {
        reader.await??;
    }
    client.close().await;
    Ok(())
}
// endregion: main
