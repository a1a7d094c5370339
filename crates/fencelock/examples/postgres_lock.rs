//! The PostgreSQL lock guide's example: a lock kept in the application's own database.
//!
//! ```text
//! FENCELOCK_NODES=postgres://app:secret@127.0.0.1:5432/shop \
//!     cargo run -p fencelock --features postgres-lock --example postgres_lock
//! ```
//!
//! docs/guide/postgres-lock.md shows the region below; `tests/guides.rs` checks that it is the
//! same text and runs this program against a real PostgreSQL.

// region: main
use std::time::Duration;

use fencelock::{AutoExtend, Client, Config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // FENCELOCK_NODES=postgres://app:secret@db.internal:5432/shop
    let client = Client::new(Config::from_env()?.with_ttl(Duration::from_secs(10)))?;
    let guard = client
        .acquire("nightly-report") // waits in line until the row is free
        .await?
        .auto_extend(AutoExtend::new());
    let token = guard
        .fencing_token()
        .expect("every PostgreSQL lock has one");
    let lost = guard.lost();
    tokio::select! {
        () = lost.fired() => return Err("lost the lock: stop writing".into()),
        () = tokio::time::sleep(Duration::from_secs(1)) => {} // the work
    }
    guard.release().await?;
    waiting(&client).await?;
    several(&client).await?;
    permits(&client).await?;
    readers(&client).await?;
    leader(&client).await?;
    println!("held under fencing token {}", token.value());
    Ok(())
}
// endregion: main

async fn waiting(client: &Client) -> fencelock::Result<()> {
    // region: line
    let lock = client.acquire("nightly-report").await?; // a place in line, woken by a release
    let refused = client.try_acquire("nightly-report").await; // held, or someone waits: refused
    assert!(refused.is_err());
    lock.release().await?; // NOTIFY: the next in line wakes
                           // endregion: line
    Ok(())
}

async fn several(client: &Client) -> fencelock::Result<()> {
    // region: several
    let lock = client.acquire_many(&["account:7", "account:9"]).await?;
    let token = lock.fencing_token().expect("one token for both rows");
    lock.release().await?;
    // endregion: several
    assert!(token.value() > 0);
    Ok(())
}

async fn permits(client: &Client) -> fencelock::Result<()> {
    // region: semaphore
    let encoders = client.semaphore("encoders", 3)?; // no I/O
    let permit = encoders.acquire().await?; // one of 3 lease rows; in line while all are held
    let token = permit.fencing_token().expect("every permit has one");
    permit.release().await?; // NOTIFY: the next in line wakes
                             // endregion: semaphore
    assert!(token.value() > 0);
    Ok(())
}

async fn readers(client: &Client) -> fencelock::Result<()> {
    // region: rwlock
    let doc = client.rwlock("doc")?; // no I/O
    let read = doc.read().await?; // shared; in line behind any writer that waits
    let last = read.last_writer_token(); // at least every earlier writer's token
    read.release().await?;
    let write = doc.write().await?; // the mutex of "doc": excludes readers and writers
    write.release().await?;
    // endregion: rwlock
    assert!(last.is_some());
    Ok(())
}

async fn leader(client: &Client) -> fencelock::Result<()> {
    // region: election
    let election = client.election("primary")?; // no I/O
    let mut leaders = election.observe(); // each leader once, in term order
    let leadership = election.campaign("node-a").await?; // waits in line; kept extended
    let seen = leaders.next().await; // woken by the announcement's NOTIFY
    assert_eq!(seen.term(), leadership.term()); // the term is the lock's token
    leadership.resign().await?;
    // endregion: election
    Ok(())
}
