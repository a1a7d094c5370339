//! Fenced writes to PostgreSQL: inside your own sqlx transaction, and through tokio-postgres.
//!
//! ```text
//! fencelock up && eval "$(fencelock nodes --export)"
//! DATABASE_URL=postgres://user:password@localhost/shop \
//!   cargo run -p fencelock --features sqlx-postgres,postgres --example fenced_writes
//! ```
//!
//! docs/guide/fenced-writes.md shows the regions below; `tests/guides.rs` checks them and runs
//! this program against real Redis nodes and a real PostgreSQL.

use fencelock::fence::{FenceOptions, PostgresFence, SqlxPostgresFence};
use fencelock::sqlx::{self, PgPool};
use fencelock::{Client, Config};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let client = Client::new(Config::from_env()?.with_fencing(true))?;
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL=postgres://...")?;
    let pool = PgPool::connect(&url).await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, n BIGINT NOT NULL);
         INSERT INTO stock VALUES ('apple', 100), ('pear', 100) ON CONFLICT DO NOTHING;",
    )
    .execute(&pool)
    .await?;

    // region: sqlx
    // Once at start-up: creates the fence table if it is missing.
    let fence = SqlxPostgresFence::setup(&pool, &FenceOptions::default()).await?;

    let lock = client.acquire("sku:apple").await?;
    let token = lock.fencing_token().expect("the client is in fencing mode");
    let mut tx = pool.begin().await?;
    // Refused, and the transaction aborted, if a later holder of the lock already wrote.
    fence.admit(&mut tx, "sku:apple", token).await?;
    sqlx::query("UPDATE stock SET n = n - 1 WHERE sku = 'apple'")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?; // your statements and the token, together
    lock.release().await?;
    // endregion: sqlx

    // region: tokio-postgres
    // The fence's own connection: it opens the transaction and runs your closure in it.
    let mut fence = PostgresFence::connect(&url).await?;

    let lock = client.acquire("sku:pear").await?;
    let token = lock.fencing_token().expect("the client is in fencing mode");
    fence
        .write("sku:pear", token, async |tx| {
            tx.execute("UPDATE stock SET n = n - 1 WHERE sku = 'pear'", &[])
                .await?;
            Ok(())
        })
        .await?;
    lock.release().await?;
    // endregion: tokio-postgres

    let left: Vec<(String, i64)> = sqlx::query_as("SELECT sku, n FROM stock ORDER BY sku")
        .fetch_all(&pool)
        .await?;
    for (sku, n) in left {
        println!("{sku}: {n} left");
    }
    client.close().await;
    Ok(())
}
