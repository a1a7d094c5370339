//! Scenes 1 to 3: contention, a node killed while the lock is held, and the inventory's
//! `reserve` with concurrent workers.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fencelock::{Client, ErrorKind, RetryPolicy};

use super::out::{human, Tone};
use super::stock::{lock_resource, Shop};
use super::{client, config, Stage};
use crate::node::Node;

/// Scene 1: A gets the lock, B is refused, A releases, B gets it at once.
///
/// # Errors
///
/// A node error, or an outcome other than the one the story needs (the demo then says what it
/// saw instead).
pub(crate) async fn contention(stage: &mut Stage<'_>) -> anyhow::Result<()> {
    let out = stage.out;
    out.scene(1, "Two clients want the same order");
    let urls = stage.nodes.urls();
    let a = client(config(&urls)).await?;
    let b = client(config(&urls)).await?;
    let resource = "order:42";

    let lock_a = a.try_acquire(resource).await.context("A's first attempt")?;
    out.step(
        &format!("A asks for {resource:?}"),
        lock_a.votes(),
        format!(
            "{}: {} nodes said yes (3 needed); valid for {}",
            out.paint(Tone::Good, "granted"),
            lock_a.votes().granted(),
            human(lock_a.remaining())
        ),
    );
    match b.try_acquire(resource).await {
        Err(e) if e.kind() == ErrorKind::Contention => out.step(
            &format!("B asks for {resource:?}"),
            e.votes().unwrap_or(&Default::default()),
            format!(
                "{}: another client holds it (contention)",
                out.paint(Tone::Bad, "refused")
            ),
        ),
        Err(e) => return Err(e).context("B's first attempt"),
        Ok(_) => bail!("B got {resource:?} while A held it: mutual exclusion is broken"),
    }

    // B's retry delay is 2 s on purpose: if B gets the lock within milliseconds of A's release,
    // the release woke it, not a retry.
    let patient = RetryPolicy::new()
        .with_wait(Duration::from_secs(20))
        .with_base_delay(Duration::from_secs(2))
        .with_max_delay(Duration::from_secs(2));
    let work = Duration::from_millis(300);
    out.line(format!(
        "B waits for it (retrying only every 2 s); A works for {} and releases.",
        human(work)
    ));
    let ((b_result, b_at), (released_at, a_release)) = tokio::join!(
        async {
            let result = b.acquire_with(resource, &patient).await;
            (result, Instant::now())
        },
        async {
            tokio::time::sleep(work).await;
            let at = Instant::now();
            (at, lock_a.release().await)
        }
    );
    a_release.context("A's release")?;
    let lock_b = b_result.context("B's wait")?;
    out.line(format!(
        "B got the lock {} after A's release: {}.",
        human(b_at.saturating_duration_since(released_at)),
        out.paint(Tone::Good, "the release woke B at once")
    ));
    lock_b.release().await.context("B's release")?;
    out.lesson(
        "one holder at a time: two clients cannot both win a majority of the nodes. A waiting client does not need to poll.",
    );
    Ok(())
}

/// Scene 2: kill -9 of one node while A holds the lock; then of a majority.
///
/// # Errors
///
/// As [`contention`].
pub(crate) async fn node_down(stage: &mut Stage<'_>) -> anyhow::Result<()> {
    let out = stage.out;
    out.scene(2, "A node dies while the lock is held");
    let urls = stage.nodes.urls();
    let a = client(config(&urls)).await?;
    let b = client(config(&urls)).await?;
    let held = "report:daily";
    let mut lock_a = a.try_acquire(held).await.context("A's attempt")?;
    out.step(
        &format!("A holds {held:?}"),
        lock_a.votes(),
        out.paint(Tone::Good, "granted"),
    );

    let pid = stage.nodes.kill9(4).unwrap_or(0);
    out.line(format!(
        "{} node 5 (pid {pid}): no shutdown, no goodbye.",
        out.paint(Tone::Bad, "kill -9")
    ));
    lock_a.extend().await.context(
        "A's extension with 4 of 5 nodes up (it should have succeeded: 4 is a majority)",
    )?;
    out.step(
        "A extends its lock",
        lock_a.votes(),
        format!(
            "{}: 4 of 5 nodes are up, and a majority (3) renewed it",
            out.paint(Tone::Good, "still held")
        ),
    );

    let pids: Vec<String> = [2, 3]
        .into_iter()
        .filter_map(|i| stage.nodes.kill9(i))
        .map(|p| p.to_string())
        .collect();
    out.line(format!(
        "{} nodes 3 and 4 as well (pids {}): 2 of 5 nodes are left.",
        out.paint(Tone::Bad, "kill -9"),
        pids.join(", ")
    ));
    let wanted = "invoice:7";
    match b.try_acquire(wanted).await {
        Err(e) if e.kind() == ErrorKind::Unavailable => out.step(
            &format!("B asks for {wanted:?}"),
            e.votes().unwrap_or(&Default::default()),
            format!(
                "{}: 2 nodes cannot make a majority of 5",
                out.paint(Tone::Bad, "unavailable")
            ),
        ),
        Err(e) => return Err(e).context("B's attempt with 3 of 5 nodes down"),
        Ok(_) => bail!("B got {wanted:?} with 3 of 5 nodes down: a minority granted a lock"),
    }
    let left = keys_left(&urls[..2], wanted).await?;
    if left != 0 {
        bail!("{left} key(s) of {wanted:?} were left on the live nodes after the failed attempt");
    }
    out.line(format!(
        "Keys of {wanted:?} left on the 2 live nodes: {}: B's partial grants were released at once.",
        out.paint(Tone::Good, "none")
    ));
    match lock_a.extend().await {
        Err(e) => out.step(
            "A extends again",
            e.votes().unwrap_or(&Default::default()),
            format!(
                "{}: no majority can renew it; A must treat its lock as lost and stop its work",
                out.paint(Tone::Bad, "failed")
            ),
        ),
        Ok(()) => bail!("A extended {held:?} with 3 of 5 nodes down"),
    }
    // The keys on the 2 live nodes expire by TTL; the release just saves the wait.
    let _ = lock_a.release().await;

    for i in 2..5 {
        stage.nodes.restart(i).await?;
    }
    out.line(out.paint(
        Tone::Dim,
        "(nodes 3, 4 and 5 restarted, empty. In production a restarted node must stay out for a TTL, or it may grant a lock it forgot: fencelock's restart quarantine does that by default.)",
    ));
    out.lesson(
        "with 5 nodes the lock survives 2 dead ones; with a majority dead it fails cleanly instead of granting a lock that is not one.",
    );
    Ok(())
}

/// How many of the nodes hold `key`.
async fn keys_left(urls: &[String], key: &str) -> anyhow::Result<usize> {
    let mut count = 0;
    for (i, url) in urls.iter().enumerate() {
        let node = Node::parse(url, i)?;
        let mut conn = node
            .connect(super::NODE_TIMEOUT * 5)
            .await
            .map_err(|e| anyhow::anyhow!("node {}: {e}", i + 1))?;
        let exists: i64 = conn
            .query(redis::cmd("EXISTS").arg(key))
            .await
            .map_err(|e| anyhow::anyhow!("node {}: {e}", i + 1))?;
        count += usize::try_from(exists).unwrap_or(0);
    }
    Ok(count)
}

/// The inventory scene's numbers.
const START_STOCK: i64 = 20;
const WORKERS: usize = 4;
const ATTEMPTS: usize = 8;

/// Scene 3: concurrent workers reserve stock under a fencing lock; nothing is oversold.
///
/// # Errors
///
/// As [`contention`]; also a storage error.
pub(crate) async fn inventory(stage: &mut Stage<'_>) -> anyhow::Result<()> {
    let out = stage.out;
    out.scene(
        3,
        "The inventory service: reserve(sku, qty) under a fencing lock",
    );
    let sku = "apple";
    let shop = Shop::open(&stage.dir.join("shop.db"))?;
    shop.set_stock(sku, START_STOCK)?;
    out.line(format!(
        "Stock of {sku:?} in SQLite: {START_STOCK}. {WORKERS} workers (separate clients, like {WORKERS} instances of a service)"
    ));
    out.line(format!(
        "each try {ATTEMPTS} times to reserve 1: take {:?} in fencing mode, read the stock, write stock - 1",
        lock_resource(sku)
    ));
    out.line("with the lock's fencing token, release.");

    let urls = stage.nodes.urls();
    let mut clients = Vec::new();
    for _ in 0..WORKERS {
        clients.push(client(config(&urls).with_fencing(true)).await?);
    }
    // Tokens in the order the storage accepted them: the writes happen under the lock, so the
    // pushes happen in commit order.
    let accepted = Mutex::new(Vec::new());
    let started = Instant::now();
    let results = futures_util::future::join_all(
        clients
            .iter()
            .map(|c| worker(c, &shop, sku, ATTEMPTS, &accepted)),
    )
    .await;
    let elapsed = started.elapsed();
    let (mut reserved, mut sold_out) = (0, 0);
    for result in results {
        let (r, s) = result?;
        reserved += r;
        sold_out += s;
    }
    let left = shop.stock(sku)?;
    let tokens = accepted.into_inner().unwrap_or_else(|e| e.into_inner());
    if left < 0 || i64::try_from(reserved).ok() != Some(START_STOCK - left) {
        bail!("stock {left} after {reserved} reservations from {START_STOCK}: the lock did not protect the stock");
    }
    out.line(format!(
        "{} attempts in {}: {reserved} reserved, {sold_out} found it sold out. Final stock {}: {}.",
        WORKERS * ATTEMPTS,
        human(elapsed),
        out.paint(Tone::Good, format!("{left} = {START_STOCK} - {reserved}")),
        out.paint(Tone::Good, "never oversold, no reservation lost")
    ));
    if !tokens.windows(2).all(|w| w[0] < w[1]) {
        bail!("the storage accepted fencing tokens out of order: {tokens:?}");
    }
    if let (Some(first), Some(last)) = (tokens.first(), tokens.last()) {
        out.line(format!(
            "The {} writes carried strictly increasing fencing tokens, {first} ... {last}: every holder's token was newer than the last.",
            tokens.len()
        ));
    }
    out.lesson(
        "under the lock, reserve()'s read-modify-write is safe, as long as each holder finishes within its lock's validity. Scene 4 shows one that does not.",
    );
    Ok(())
}

/// One worker of scene 3: `attempts` reservations of 1. Returns (reserved, sold out).
async fn worker(
    client: &Client,
    shop: &Shop,
    sku: &str,
    attempts: usize,
    accepted: &Mutex<Vec<u64>>,
) -> anyhow::Result<(usize, usize)> {
    let (mut reserved, mut sold_out) = (0, 0);
    for _ in 0..attempts {
        let lock = client
            .acquire(&lock_resource(sku))
            .await
            .context("a worker's lock")?;
        let token = lock
            .fencing_token()
            .map(|t| t.value())
            .context("a fencing-mode lock without a fencing token")?;
        let stock = shop.stock(sku)?;
        if stock < 1 {
            sold_out += 1;
        } else {
            shop.write_fenced(sku, stock - 1, token).await?;
            accepted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(token);
            reserved += 1;
        }
        // The write is already fenced; a release that finds the lock expired changes nothing.
        let _ = lock.release().await;
    }
    Ok((reserved, sold_out))
}
