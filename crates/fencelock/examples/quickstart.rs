//! The quick start: take a lock, work, release; a fenced write to SQLite; long work under
//! `try_with_lock`. Needs nothing but Redis nodes:
//!
//! ```text
//! fencelock up                          # 5 local redis-server nodes (the dev set)
//! eval "$(fencelock nodes --export)"    # export FENCELOCK_NODES=redis://127.0.0.1:...,...
//! cargo run -p fencelock --features sqlite --example quickstart
//! ```
//!
//! The SQLite database is `fencelock-quickstart.db` in the temporary directory. The crate docs
//! and docs/guide/mutex.md show the regions marked below; `tests/first_hour.rs` and
//! `tests/guides.rs` check that they are the same text, and the first runs this program against
//! real nodes.

// region: main
use std::process::ExitCode;
use std::time::Duration;

use fencelock::fence::SqliteFence;
use fencelock::{Client, Config};

#[tokio::main]
async fn main() -> ExitCode {
    // FENCELOCK_NODES holds the node URLs: redis://127.0.0.1:7001,redis://127.0.0.1:7002,...
    let result = match Config::from_env().and_then(|c| Client::new(c.with_fencing(true))) {
        Ok(client) => {
            let result = run(&client).await;
            // A lock dropped by an early return (`?`) is released by a background task: let it
            // finish before the runtime stops, or the lock stays taken until its TTL runs out.
            client.close().await;
            result
        }
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(client: &Client) -> Result<(), Box<dyn std::error::Error>> {
    // Acquire, work, release. `acquire` waits in line while another client holds the lock.
    let lock = client.acquire("report:daily").await?;
    println!("holding {} for {:?}", lock.resource(), lock.remaining());
    tokio::time::sleep(Duration::from_millis(100)).await; // the work: done before the TTL ends
    lock.release().await?;

    // Fencing: the lock's token goes with the write, and the storage refuses a write whose
    // token is older than one it already accepted (a holder that was paused past its TTL).
    let path = std::env::temp_dir().join("fencelock-quickstart.db");
    let stock = SqliteFence::open(&path)?;
    stock.unfenced(|db| {
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS inventory (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL);
             INSERT OR IGNORE INTO inventory VALUES ('sku:42', 1000);
             CREATE TABLE IF NOT EXISTS report (step INTEGER NOT NULL);",
        )
    })?;
    let lock = client.acquire("sku:42").await?;
    // The token and the lock that issued it: the fence row remembers which lock it follows.
    let token = lock.fencing_token().expect("the client is in fencing mode");
    let left: i64 = stock
        .write_async("sku:42", token.clone(), |tx| {
            tx.execute(
                "UPDATE inventory SET stock = stock - 1 WHERE sku = 'sku:42'",
                [],
            )?;
            Ok(tx.query_row(
                "SELECT stock FROM inventory WHERE sku = 'sku:42'",
                [],
                |r| r.get(0),
            )?)
        })
        .await?;
    lock.release().await?;
    println!(
        "reserved one of sku:42 with fencing token {}; {left} left",
        token.value()
    );

    nightly_report(client, &stock).await
}
// endregion: main

// region: long-work
/// Long work: `try_with_lock` keeps the lock extended while the work runs, hands it the
/// lock's context, cancels it if the lock is lost, and releases in every case.
async fn nightly_report(
    client: &Client,
    stock: &SqliteFence,
) -> Result<(), Box<dyn std::error::Error>> {
    let rows = client
        .try_with_lock("report:nightly", async |lock| {
            let token = lock.fencing_token().expect("the client is in fencing mode");
            let mut rows = 0;
            for step in 0..3 {
                tokio::time::sleep(Duration::from_millis(50)).await; // a slice of long work
                if lock.is_lost() {
                    return Err(format!("lost {} at step {step}", lock.resource()).into());
                }
                rows += stock
                    .write_async("report:nightly", token.clone(), move |tx| {
                        Ok(tx.execute("INSERT INTO report (step) VALUES (?1)", [step])?)
                    })
                    .await?;
            }
            Ok::<_, Box<dyn std::error::Error>>(rows)
        })
        .await?;
    println!("nightly report wrote {rows} row(s) under the lock");
    Ok(())
}
// endregion: long-work
