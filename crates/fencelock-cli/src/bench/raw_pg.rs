//! The PostgreSQL baseline: the library's own two statements, sent by hand over one
//! tokio-postgres connection with nothing around them (no validity, no timeouts, no retries, no
//! keep-alive engine). A lease row taken with `INSERT ... ON CONFLICT DO UPDATE ... WHERE
//! expired`, its token from a sequence, and a `DELETE` by owner to release, in a table of the
//! baseline's own (`fencelock_bench_locks`): what a lease lock costs in this database and
//! nothing else.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_postgres::{NoTls, Statement};

/// The baseline's table and sequence, the library's in shape, and the counters of `contended`.
const SETUP: &str = "
CREATE TABLE IF NOT EXISTS fencelock_bench_locks (
    resource text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL,
    expires_at timestamptz NOT NULL);
CREATE SEQUENCE IF NOT EXISTS fencelock_bench_tokens AS bigint MINVALUE 1;
CREATE TABLE IF NOT EXISTS fencelock_bench_counters (key text PRIMARY KEY, value bigint NOT NULL)";

const ACQUIRE: &str = "
INSERT INTO fencelock_bench_locks AS l (resource, owner, token, expires_at)
VALUES ($1, $2, nextval('fencelock_bench_tokens'),
        clock_timestamp() + $3::bigint::float8 * interval '1 millisecond')
ON CONFLICT (resource) DO UPDATE
    SET owner = EXCLUDED.owner, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
    WHERE l.expires_at <= clock_timestamp()
RETURNING token";

const RELEASE: &str = "DELETE FROM fencelock_bench_locks WHERE resource = $1 AND owner = $2";

/// One connection with the two statements prepared.
#[derive(Clone)]
pub(crate) struct RawPg {
    client: Arc<tokio_postgres::Client>,
    acquire: Statement,
    release: Statement,
    ttl_ms: i64,
}

impl std::fmt::Debug for RawPg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPg")
            .field("ttl_ms", &self.ttl_ms)
            .finish_non_exhaustive()
    }
}

impl RawPg {
    /// Connects to the database of `urls` (one `postgres://` URL); with `setup`, creates the
    /// baseline's table, sequence and counters if missing (once per run: concurrent `CREATE ...
    /// IF NOT EXISTS` race on the catalog).
    ///
    /// # Errors
    ///
    /// A URL that is not one `postgres://` URL, or a database that cannot be reached.
    pub(crate) async fn connect(
        urls: &[String],
        ttl: Duration,
        setup: bool,
    ) -> anyhow::Result<RawPg> {
        let [url] = urls else {
            anyhow::bail!("raw PostgreSQL baseline: give one postgres:// URL");
        };
        let (client, connection) = tokio_postgres::connect(url.trim(), NoTls)
            .await
            .context("raw PostgreSQL baseline: cannot connect")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        if setup {
            client
                .batch_execute(SETUP)
                .await
                .context("raw PostgreSQL baseline: cannot create its table")?;
        }
        let acquire = client.prepare(ACQUIRE).await?;
        let release = client.prepare(RELEASE).await?;
        Ok(RawPg {
            client: Arc::new(client),
            acquire,
            release,
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        })
    }

    /// Takes the key's row for `token`; true when granted.
    pub(crate) async fn acquire(&self, key: &str, token: &str) -> bool {
        matches!(
            self.client
                .query_opt(&self.acquire, &[&key, &token, &self.ttl_ms])
                .await,
            Ok(Some(_))
        )
    }

    /// Deletes the key's row if `token` owns it; true when it did.
    pub(crate) async fn release(&self, key: &str, token: &str) -> bool {
        matches!(
            self.client.execute(&self.release, &[&key, &token]).await,
            Ok(1)
        )
    }

    /// One round trip: `SELECT 1`.
    pub(crate) async fn ping(&self) -> Duration {
        let started = Instant::now();
        let _ = self.client.simple_query("SELECT 1").await;
        started.elapsed()
    }

    /// The counter of `contended`: its value (0 when absent).
    pub(crate) async fn read_counter(&self, key: &str) -> anyhow::Result<i64> {
        let row = self
            .client
            .query_opt(
                "SELECT value FROM fencelock_bench_counters WHERE key = $1",
                &[&key],
            )
            .await?;
        Ok(row.map_or(0, |r| r.get(0)))
    }

    /// Writes the counter of `contended`.
    pub(crate) async fn write_counter(&self, key: &str, value: i64) -> anyhow::Result<()> {
        self.client
            .execute(
                "INSERT INTO fencelock_bench_counters (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[&key, &value],
            )
            .await?;
        Ok(())
    }

    /// Deletes the counter of `contended`.
    pub(crate) async fn delete(&self, key: &str) {
        let _ = self
            .client
            .execute(
                "DELETE FROM fencelock_bench_counters WHERE key = $1",
                &[&key],
            )
            .await;
    }
}
