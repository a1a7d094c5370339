//! An election with failover: run it on several hosts; one leads, the others stand by, and
//! when the leader dies (even by `kill -9`) a standby takes over with a larger term.
//!
//! ```text
//! fencelock up && eval "$(fencelock nodes --export)"
//! cargo run -p fencelock --example election -- web-1     # leads
//! cargo run -p fencelock --example election -- web-2     # stands by
//! cargo run -p fencelock --example election -- --observe # prints each leader once
//! ```
//!
//! docs/guide/election.md shows the region below; `tests/guides.rs` checks it and runs three
//! of these processes against real nodes, killing the leader.

// region: main
use fencelock::{Client, Config, ErrorKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let me = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "candidate".to_owned());
    let client = Client::new(Config::from_env()?.with_fencing(true))?;
    let election = client.election("scheduler")?;

    if me == "--observe" {
        let mut leaders = election.observe();
        loop {
            let leader = leaders.next().await; // each leader once, in term order
            println!("leader {} term {}", leader.value(), leader.term());
        }
    }

    // A standby waits in line; its wait budget running out only means "still standing by".
    let leadership = loop {
        match election.campaign(&me).await {
            Ok(leadership) => break leadership,
            Err(e) if e.kind() == ErrorKind::Timeout => continue,
            Err(e) => return Err(e.into()),
        }
    };
    println!("{me} leads, term {}", leadership.term());

    // Lead (leadership is extended in the background) until it is lost or we are stopped.
    let lost = leadership.lost();
    tokio::select! {
        () = lost.fired() => println!("{me} lost leadership: stop acting as leader"),
        _ = tokio::signal::ctrl_c() => println!("{me} steps down"),
    }
    leadership.resign().await?;
    client.close().await;
    Ok(())
}
// endregion: main
