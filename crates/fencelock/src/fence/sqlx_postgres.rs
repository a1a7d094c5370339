//! Fenced writes inside the caller's own sqlx transaction, on PostgreSQL.

use std::fmt;

use sqlx::{Acquire, Executor, PgConnection, Postgres, Row as _, Transaction};

use super::logic::{self, FenceRow, Presented};
use super::pg_sql::{advisory_key, PgSql};
use super::{token_from_sql, FenceOptions, Row};
use crate::error::{Error, Result};
use crate::FencingToken;

/// The fence check inside **your** sqlx transaction on PostgreSQL (feature `sqlx-postgres`): you
/// keep your pool and your transaction, and the token check commits or rolls back with your
/// statements (see the [module docs](super) for the rule).
///
/// [`admit`](Self::admit) locks the resource's fence row in the transaction, refuses a token
/// older than the row's last (or from another lock), and records the token. Your statements
/// then run in the same transaction, and your `commit` makes them and the token durable
/// together; a rollback (or dropping the transaction) undoes both. Other fenced writers of the
/// resource wait on the row's lock until your transaction ends, so keep it short.
///
/// A refused [`admit`](Self::admit) also aborts the transaction on the server, so that not even
/// a `commit` that ignores the error can apply the statements already run in it: PostgreSQL
/// turns the `COMMIT` of an aborted transaction into a rollback.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, lock: fencelock::Lock) -> Result<(), Box<dyn std::error::Error>> {
/// use fencelock::fence::{FenceOptions, SqlxPostgresFence};
///
/// let fence = SqlxPostgresFence::setup(&pool, &FenceOptions::default()).await?;
/// let mut tx = pool.begin().await?;
/// fence.admit(&mut tx, "sku:apple", lock.fencing_token().unwrap()).await?;
/// sqlx::query("UPDATE inventory SET stock = stock - 3 WHERE sku = 'apple'")
///     .execute(&mut *tx)
///     .await?;
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SqlxPostgresFence {
    table: String,
    sql: PgSql,
}

impl SqlxPostgresFence {
    /// Creates the fence table if it is missing (and adds the `issuer` column to one of an
    /// earlier version), on a connection taken from `conn` (a `&PgPool`, a
    /// `&mut PgConnection`, ...), and returns the fence. Creators take turns on an advisory
    /// lock, so workers that start together do not race on the catalog.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is not a plain identifier (before any I/O);
    /// [`Error::Storage`] if the table cannot be created.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the creation runs in one transaction, rolled back if the future is dropped.
    pub async fn setup<'a, A>(conn: A, options: &FenceOptions) -> Result<SqlxPostgresFence>
    where
        A: Acquire<'a, Database = Postgres>,
    {
        let fence = SqlxPostgresFence::new(options)?;
        let table = fence.table.as_str();
        let failed = |e| Error::storage(format!("setting up the fence table {table}"), e);
        let mut tx = conn.begin().await.map_err(failed)?;
        sqlx::query(fence.sql.advisory_lock)
            .bind(advisory_key(table))
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        sqlx::raw_sql(&fence.sql.create_table)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        let has_issuer: bool = sqlx::query(fence.sql.has_issuer)
            .bind(table)
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(failed)?;
        if !has_issuer {
            sqlx::raw_sql(&fence.sql.add_issuer)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
        }
        tx.commit().await.map_err(failed)?;
        Ok(fence)
    }

    /// The fence without any I/O, for a table that already exists (created by
    /// [`setup`](Self::setup) or by your migrations: `resource TEXT PRIMARY KEY, token BIGINT
    /// NOT NULL, issuer TEXT`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is not a plain identifier.
    pub fn new(options: &FenceOptions) -> Result<SqlxPostgresFence> {
        let table = options.checked_table()?.to_owned();
        Ok(SqlxPostgresFence {
            sql: PgSql::new(&table),
            table,
        })
    }

    /// The fence table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Admits `token` for a fenced write of `resource` in the open transaction `tx`: locks the
    /// resource's fence row until `tx` ends (waiting while another fenced write of it is in
    /// progress), checks the token, and records it. Run your statements in `tx` before or after
    /// it, then commit: the token and your statements apply together, or not at all.
    ///
    /// `token` is a [`FencingToken`] (from [`Lock::fencing_token`](crate::Lock::fencing_token)),
    /// which binds the row to its lock and, if it is refused while the lock is still valid,
    /// tells a counter reset from a stale holder; or a bare `u64`, which a bound row refuses.
    ///
    /// # Errors
    ///
    /// Every error leaves `tx` aborted (a later `commit` rolls back): do not use it further.
    ///
    /// - [`Error::StaleToken`] if the database already accepted a newer token for `resource`;
    ///   [`Error::CounterReset`] instead if `token`'s lock is still valid (see there).
    /// - [`Error::InvalidConfig`] if `token` is above `i64::MAX`, or comes from another lock
    ///   than the row is bound to, or is a bare number and the row is bound.
    /// - [`Error::Storage`] if PostgreSQL failed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future mid-way leaves `tx` in an unknown state: roll it back (dropping it
    /// does). Nothing commits without your `commit`.
    pub async fn admit(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        resource: &str,
        token: impl Into<FencingToken>,
    ) -> Result<()> {
        let token: FencingToken = token.into();
        let conn: &mut PgConnection = tx;
        let result = check_and_record(self, &mut *conn, resource, &token).await;
        if result.is_err() {
            // Whatever the caller does next, the statements it ran in this transaction must
            // not commit: an aborted transaction's COMMIT is a rollback. The statement fails
            // by design; its error is not news.
            let _ = conn
                .execute(sqlx::raw_sql(
                    "DO $$BEGIN RAISE EXCEPTION 'fencelock refused this fenced write; the transaction is rolled back'; END$$",
                ))
                .await;
        }
        result
    }

    /// The last token the database accepted for `resource` (committed, or recorded earlier in
    /// the transaction `executor` belongs to), or `None` if it never accepted one.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the query fails or the stored token is negative (not written by
    /// fencelock).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn last_token<'e, E>(&self, executor: E, resource: &str) -> Result<Option<u64>>
    where
        E: Executor<'e, Database = Postgres>,
    {
        let stored: Option<i64> = sqlx::query(&self.sql.select_token)
            .bind(resource)
            .fetch_optional(executor)
            .await
            .and_then(|row| row.map(|row| row.try_get(0)).transpose())
            .map_err(|e| Error::storage(format!("reading the fence token of {resource:?}"), e))?;
        stored
            .map(|stored| token_from_sql(&self.table, resource, stored))
            .transpose()
    }
}

async fn check_and_record(
    fence: &SqlxPostgresFence,
    conn: &mut PgConnection,
    resource: &str,
    token: &FencingToken,
) -> Result<()> {
    let presented = Presented::new(resource, token)?;
    let mut rows = SqlxRows { fence, conn };
    let admitted = logic::check(&mut rows, resource, &presented).await?;
    logic::finish(&mut rows, resource, &presented, admitted).await
}

impl fmt::Debug for SqlxPostgresFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlxPostgresFence")
            .field("table", &self.table)
            .finish()
    }
}

/// The sqlx adapter of the fence logic, on the caller's transaction. Its statements go through
/// the `Executor` methods of `&mut PgConnection`, which return boxed `Send` futures: sqlx's
/// `Query::execute` is generic over the executor, and rustc cannot prove such a future `Send`
/// for every lifetime (rust-lang/rust#102211), which a `tokio::spawn` of a task calling `admit`
/// needs (`concurrent_writers_never_apply_an_older_token_after_a_newer_one` spawns them).
struct SqlxRows<'a> {
    fence: &'a SqlxPostgresFence,
    conn: &'a mut PgConnection,
}

impl SqlxRows<'_> {
    fn failed(resource: &str, step: &str, e: sqlx::Error) -> Error {
        Error::storage(format!("{step} of the fenced write on {resource:?}"), e)
    }
}

impl FenceRow for SqlxRows<'_> {
    const STORAGE: &'static str = "sqlx-postgres";

    async fn lock_row(&mut self, resource: &str, presented: &Presented<'_>) -> Result<Option<Row>> {
        let sql = &self.fence.sql;
        let insert = sqlx::query(&sql.insert_row)
            .bind(resource)
            .bind(presented.stored)
            .bind(presented.token.issuer());
        (&mut *self.conn)
            .execute(insert)
            .await
            .map_err(|e| Self::failed(resource, "creating the fence row", e))?;
        let lock = sqlx::query(&sql.lock_row).bind(resource);
        let (current, bound): (i64, Option<String>) = (&mut *self.conn)
            .fetch_one(lock)
            .await
            .and_then(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .map_err(|e| Self::failed(resource, "locking the fence row", e))?;
        Ok(Some(Row {
            token: token_from_sql(&self.fence.table, resource, current)?,
            issuer: bound,
        }))
    }

    async fn record(&mut self, resource: &str, presented: &Presented<'_>) -> Result<()> {
        let update = sqlx::query(&self.fence.sql.update_token)
            .bind(resource)
            .bind(presented.stored)
            .bind(presented.token.issuer());
        (&mut *self.conn)
            .execute(update)
            .await
            .map(drop)
            .map_err(|e| Self::failed(resource, "recording the token", e))
    }
}
