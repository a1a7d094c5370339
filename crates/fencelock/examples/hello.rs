//! The front page's example: a lock in fencing mode and a fenced write to SQLite.
//!
//! ```text
//! fencelock up && eval "$(fencelock nodes --export)"
//! cargo run -p fencelock --features sqlite --example hello
//! ```
//!
//! README.md shows the region below; `tests/guides.rs` checks that it is the same text and runs
//! this program against real nodes.

// region: main
use fencelock::fence::SqliteFence;
use fencelock::{Client, Config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // FENCELOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
    let client = Client::new(Config::from_env()?.with_fencing(true))?;
    let db = SqliteFence::open(std::env::temp_dir().join("hello.db"))?;
    db.unfenced(|db| db.execute_batch("CREATE TABLE IF NOT EXISTS runs (token INTEGER)"))?;

    let lock = client.acquire("nightly-report").await?; // waits in line
    let token = lock.fencing_token().expect("the client is in fencing mode");
    let n = token.value();
    db.write_async("nightly-report", token, move |tx| {
        // Runs only if no later holder of "nightly-report" has written yet.
        Ok(tx.execute("INSERT INTO runs VALUES (?1)", [n])?)
    })
    .await?;
    lock.release().await?;
    client.close().await;
    println!("wrote under fencing token {n}");
    Ok(())
}
// endregion: main
