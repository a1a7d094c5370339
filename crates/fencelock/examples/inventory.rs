//! The article's inventory service (sections 4.4 and 7.2): `reserve(sku, quantity)` under a
//! fencing lock, with the stock in SQLite (a file path) or PostgreSQL (a `postgres://` URL).
//!
//! ```text
//! inventory setup   --db DB --sku SKU --stock N
//! inventory reserve --db DB --sku SKU --qty Q --nodes URL,URL,.. [--times K] [--ttl 10s]
//!                   [--no-fencing] [--no-quarantine] [--stop-after-read]
//! inventory stock   --db DB --sku SKU
//! ```
//!
//! `reserve` takes the lock, reads the stock, and writes back `stock - qty` (a read-modify-write,
//! as a real service does when the new value is computed in the application). With fencing the
//! write carries the lock's fencing token and the storage refuses it if a newer holder already
//! wrote; with `--no-fencing` it writes blindly, as the article's first version does.
//! `--no-quarantine` counts nodes that restarted within the TTL at once (the tests start fresh
//! nodes; in production leave the quarantine on). `--stop-after-read` makes the process stop itself (SIGSTOP) right after reading, so a test can
//! play the article's pause scenario with a real paused process.
//!
//! Output, one line per reservation: `RESERVED <qty> left=<n> token=<t>`, `SOLD-OUT`, or
//! `REJECTED <reason>` (exit code 3 when any write was refused as stale).

use std::process::ExitCode;
use std::time::Duration;

use fencelock::fence::{PostgresFence, SqliteFence};
use fencelock::{Client, Config, Error, RetryPolicy};

/// Where the stock lives.
enum Stock {
    Sqlite(SqliteFence),
    Postgres(Box<PostgresFence>),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Stock {
    async fn open(target: &str) -> fencelock::Result<Stock> {
        if target.starts_with("postgres://") || target.starts_with("postgresql://") {
            Ok(Stock::Postgres(Box::new(
                PostgresFence::connect(target).await?,
            )))
        } else {
            Ok(Stock::Sqlite(SqliteFence::open(target)?))
        }
    }

    async fn setup(&mut self, sku: &str, stock: i64) -> Result<(), BoxError> {
        match self {
            Stock::Sqlite(f) => f.unfenced(|c| {
                c.execute_batch(
                    "CREATE TABLE IF NOT EXISTS inventory (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL)",
                )?;
                c.execute(
                    "INSERT INTO inventory (sku, stock) VALUES (?1, ?2)
                     ON CONFLICT (sku) DO UPDATE SET stock = excluded.stock",
                    rusqlite::params![sku, stock],
                )?;
                Ok(())
            }),
            Stock::Postgres(f) => {
                f.client()
                    .batch_execute(
                        "CREATE TABLE IF NOT EXISTS inventory (sku TEXT PRIMARY KEY, stock BIGINT NOT NULL)",
                    )
                    .await?;
                f.client()
                    .execute(
                        "INSERT INTO inventory (sku, stock) VALUES ($1, $2)
                         ON CONFLICT (sku) DO UPDATE SET stock = excluded.stock",
                        &[&sku, &stock],
                    )
                    .await?;
                Ok(())
            }
        }
    }

    async fn read(&self, sku: &str) -> Result<i64, BoxError> {
        match self {
            Stock::Sqlite(f) => f.unfenced(|c| {
                Ok(
                    c.query_row("SELECT stock FROM inventory WHERE sku = ?1", [sku], |r| {
                        r.get(0)
                    })?,
                )
            }),
            Stock::Postgres(f) => Ok(f
                .client()
                .query_one("SELECT stock FROM inventory WHERE sku = $1", &[&sku])
                .await?
                .get(0)),
        }
    }

    /// Writes the new stock: fenced (refused if a newer token wrote) when `token` is given.
    async fn write(
        &mut self,
        sku: &str,
        new_stock: i64,
        token: Option<u64>,
    ) -> Result<(), fencelock::Error> {
        let resource = format!("sku:{sku}");
        let sku = sku.to_string();
        let unfenced = |e: BoxError| Error::storage("the unfenced write", e);
        match (self, token) {
            (Stock::Sqlite(f), Some(t)) => {
                f.write_async(&resource, t, move |tx| {
                    tx.execute(
                        "UPDATE inventory SET stock = ?2 WHERE sku = ?1",
                        rusqlite::params![sku, new_stock],
                    )?;
                    Ok(())
                })
                .await
            }
            (Stock::Postgres(f), Some(t)) => {
                f.write(&resource, t, async |tx| {
                    tx.execute(
                        "UPDATE inventory SET stock = $2 WHERE sku = $1",
                        &[&sku, &new_stock],
                    )
                    .await?;
                    Ok(())
                })
                .await
            }
            (Stock::Sqlite(f), None) => f
                .unfenced(|c| {
                    c.execute(
                        "UPDATE inventory SET stock = ?2 WHERE sku = ?1",
                        rusqlite::params![sku, new_stock],
                    )
                })
                .map(|_| ())
                .map_err(|e| unfenced(e.into())),
            (Stock::Postgres(f), None) => f
                .client()
                .execute(
                    "UPDATE inventory SET stock = $2 WHERE sku = $1",
                    &[&sku, &new_stock],
                )
                .await
                .map(|_| ())
                .map_err(|e| unfenced(e.into())),
        }
    }
}

struct Args {
    cmd: String,
    db: String,
    sku: String,
    stock: i64,
    qty: i64,
    times: u32,
    nodes: Vec<String>,
    ttl: Duration,
    fencing: bool,
    quarantine: bool,
    stop_after_read: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let cmd = it
        .next()
        .ok_or("missing command: setup, reserve or stock")?;
    let mut a = Args {
        cmd,
        db: String::new(),
        sku: "sku-1".into(),
        stock: 0,
        qty: 1,
        times: 1,
        nodes: Vec::new(),
        ttl: Duration::from_secs(10),
        fencing: true,
        quarantine: true,
        stop_after_read: false,
    };
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match flag.as_str() {
            "--db" => a.db = value("--db")?,
            "--sku" => a.sku = value("--sku")?,
            "--stock" => {
                a.stock = value("--stock")?
                    .parse()
                    .map_err(|e| format!("--stock: {e}"))?
            }
            "--qty" => a.qty = value("--qty")?.parse().map_err(|e| format!("--qty: {e}"))?,
            "--times" => {
                a.times = value("--times")?
                    .parse()
                    .map_err(|e| format!("--times: {e}"))?
            }
            "--nodes" => a.nodes = value("--nodes")?.split(',').map(str::to_string).collect(),
            "--ttl" => {
                let ms: u64 = value("--ttl")?
                    .trim_end_matches("ms")
                    .parse()
                    .map_err(|e| format!("--ttl (in ms, e.g. 1500ms): {e}"))?;
                a.ttl = Duration::from_millis(ms);
            }
            "--no-fencing" => a.fencing = false,
            "--no-quarantine" => a.quarantine = false,
            "--stop-after-read" => a.stop_after_read = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.db.is_empty() {
        return Err("--db is required: an SQLite file path or a postgres:// URL".into());
    }
    Ok(a)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("inventory: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run() -> Result<ExitCode, BoxError> {
    let args = parse_args()?;
    let mut stock = Stock::open(&args.db).await?;
    match args.cmd.as_str() {
        "setup" => {
            stock.setup(&args.sku, args.stock).await?;
            Ok(ExitCode::SUCCESS)
        }
        "stock" => {
            println!("{}", stock.read(&args.sku).await?);
            Ok(ExitCode::SUCCESS)
        }
        "reserve" => reserve(&args, &mut stock).await,
        other => Err(format!("unknown command {other:?}: use setup, reserve or stock").into()),
    }
}

async fn reserve(args: &Args, stock: &mut Stock) -> Result<ExitCode, BoxError> {
    let client = Client::new(
        Config::new(&args.nodes)
            .with_ttl(args.ttl)
            .with_fencing(args.fencing)
            .with_quarantine(args.quarantine)
            .with_retry(
                RetryPolicy::new()
                    .with_wait(Duration::from_secs(60))
                    .with_base_delay(Duration::from_millis(5))
                    .with_max_delay(Duration::from_millis(50)),
            ),
    )?;
    let result = reserve_with(&client, args, stock).await;
    // A lock dropped by an early return is released in the background: let that finish.
    client.close().await;
    result
}

async fn reserve_with(
    client: &Client,
    args: &Args,
    stock: &mut Stock,
) -> Result<ExitCode, BoxError> {
    let mut refused = false;
    for _ in 0..args.times {
        let lock = client.acquire(&format!("lock:sku:{}", args.sku)).await?;
        let token = lock.fencing_token().map(|t| t.value());
        let current = stock.read(&args.sku).await?;
        if args.stop_after_read {
            println!("READ {current} token={}", token.unwrap_or(0));
            // A real pause, as a stop-the-world GC would make: the process does nothing, its
            // lock's keys expire, until someone sends SIGCONT.
            // SAFETY: raising a signal on our own process has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
        if current < args.qty {
            println!("SOLD-OUT");
            let _ = lock.release().await;
            break;
        }
        match stock.write(&args.sku, current - args.qty, token).await {
            Ok(()) => println!(
                "RESERVED {} left={} token={}",
                args.qty,
                current - args.qty,
                token.map_or("none".into(), |t| t.to_string())
            ),
            Err(e @ Error::StaleToken { .. }) => {
                println!("REJECTED {e}");
                refused = true;
            }
            Err(e) => return Err(e.into()),
        }
        // A lock that expired while we were stopped reports Lost here: that is the point.
        let _ = lock.release().await;
    }
    Ok(if refused {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}
