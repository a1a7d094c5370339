//! The ZooKeeper guide's family example: a lock of several resources, a semaphore, a
//! read-write lock and an election on a ZooKeeper ensemble.
//!
//! ```text
//! FENCELOCK_NODES=zk://127.0.0.1:2181/apps/billing \
//!     cargo run -p fencelock --features zookeeper --example zookeeper_family
//! ```
//!
//! docs/guide/zookeeper.md shows the regions below; `tests/guides.rs` checks that they are the
//! same text and runs this program against a real ZooKeeper.

use fencelock::{Client, Config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::new(Config::from_env()?)?;

    // region: many
    // All or nothing. The resources are taken in sorted order, so two clients
    // asking for the same two in opposite orders never wait on each other.
    let both = client.acquire_many(&["account:1", "account:2"]).await?;
    let token = both.fencing_token().expect("every ZooKeeper lock has one");
    println!("both accounts under token {}", token.value());
    both.release().await?;
    // endregion: many

    // region: semaphore
    // Two permits. Every client of "gpu" must ask for 2: another count is refused.
    let gpus = client.semaphore("gpu", 2)?;
    let permit = gpus.acquire().await?; // first come, first served
    println!("holding {}", permit.resource()); // gpu:permit:0 or gpu:permit:1
    permit.release().await?;
    // endregion: semaphore

    // region: rwlock
    let doc = client.rwlock("doc:7")?;
    let write = doc.write().await?; // alone; its token is recorded for readers
    let written = write.fencing_token().expect("a writer's token").value();
    write.release().await?;
    let read = doc.read().await?; // shared with other readers
    println!(
        "read after the write of token {written}: {:?}",
        read.last_writer_token()
    );
    read.release().await?;
    // endregion: rwlock

    // region: election
    let election = client.election("scheduler")?;
    let mut observer = election.observe();
    let leadership = election.campaign("host-a").await?; // waits while another leads
    let leader = observer.next().await;
    println!("leader {} in term {}", leader.value(), leader.term());
    leadership.resign().await?;
    // endregion: election
    Ok(())
}
