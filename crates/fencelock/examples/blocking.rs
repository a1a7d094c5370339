//! The blocking API from plain threads, with fenced writes to SQLite (which is blocking too).
//!
//! ```text
//! fencelock up && eval "$(fencelock nodes --export)"
//! cargo run -p fencelock --features blocking,sqlite --example blocking
//! ```
//!
//! docs/guide/blocking.md shows the region below; `tests/guides.rs` checks it and runs this
//! program against real nodes.

// region: main
use std::thread;

use fencelock::blocking::Client;
use fencelock::fence::SqliteFence;
use fencelock::Config;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    // One runtime thread for the client and its clones; no tokio in this code.
    let client = Client::new(Config::from_env()?.with_fencing(true))?;
    let path = std::env::temp_dir().join("fencelock-blocking.db");
    let db = SqliteFence::open(&path)?;
    db.unfenced(|db| {
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS counter (n INTEGER NOT NULL);
             DELETE FROM counter; INSERT INTO counter VALUES (0);",
        )
    })?;

    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (client, path) = (client.clone(), path.clone());
            thread::spawn(move || -> Result<(), BoxError> {
                let db = SqliteFence::open(&path)?;
                for _ in 0..5 {
                    // Acquire, run the closure with the lock kept extended, release.
                    client.with_lock("counter", |lock| {
                        let token = lock.fencing_token().expect("fencing mode");
                        db.write("counter", token, |tx| {
                            Ok(tx.execute("UPDATE counter SET n = n + 1", [])?)
                        })
                    })??;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a worker panicked")?;
    }
    let n: i64 = db.unfenced(|db| db.query_row("SELECT n FROM counter", [], |r| r.get(0)))?;
    client.close();
    println!("counter = {n}");
    Ok(())
}
// endregion: main
