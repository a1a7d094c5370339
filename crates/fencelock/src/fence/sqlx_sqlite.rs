//! Fenced writes inside the caller's own sqlx transaction, on SQLite.

use std::fmt;

use sqlx::{Acquire, Executor, Row as _, Sqlite, SqliteConnection, Transaction};

use super::logic::{self, FenceRow, Presented};
use super::{token_from_sql, FenceOptions, Row};
use crate::error::{Error, Result};
use crate::FencingToken;

/// The fence check inside **your** sqlx transaction on SQLite (feature `sqlx-sqlite`): you keep
/// your pool and your transaction, and the token check commits or rolls back with your
/// statements (see the [module docs](super) for the rule).
///
/// [`admit`](Self::admit) first writes the resource's fence row (creating it if missing), which
/// takes the database's write lock for the rest of the transaction, then reads it, refuses a
/// token older than the row's last (or from another lock), and records the token; other fenced
/// writers wait until your transaction ends. Call it before your own statements, so that the
/// transaction's first statement is a write (a deferred transaction that read first may find
/// its snapshot stale when it writes, and fail with `SQLITE_BUSY`).
///
/// SQLite has no aborted-transaction state, so a refused [`admit`](Self::admit) dooms the
/// transaction instead: it adds a row that breaks a deferred foreign key of the fence table,
/// so that its `COMMIT` fails and applies nothing, whatever ran in it before or after. This
/// needs foreign keys on for the connection (sqlx's default: `SqliteConnectOptions::foreign_keys`);
/// `admit` refuses a connection where they are off.
///
/// ```no_run
/// # async fn demo(pool: sqlx::SqlitePool, lock: fencelock::Lock) -> Result<(), Box<dyn std::error::Error>> {
/// use fencelock::fence::{FenceOptions, SqlxSqliteFence};
///
/// let fence = SqlxSqliteFence::setup(&pool, &FenceOptions::default()).await?;
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
pub struct SqlxSqliteFence {
    table: String,
    sql: SqliteSql,
}

/// The statements, with the checked table name spliced in.
#[derive(Clone)]
struct SqliteSql {
    create_table: String,
    columns: String,
    add_issuer: String,
    add_doomed: String,
    insert_row: String,
    lock_row: String,
    update_token: String,
    select_token: String,
    doom: String,
}

impl SqliteSql {
    fn new(table: &str) -> SqliteSql {
        let doomed =
            format!("doomed TEXT REFERENCES {table}(resource) DEFERRABLE INITIALLY DEFERRED");
        SqliteSql {
            // The table of `SqliteFence`, plus `doomed` (NULL in every committed row).
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                     resource TEXT PRIMARY KEY,
                     token INTEGER NOT NULL,
                     issuer TEXT,
                     {doomed}
                 )"
            ),
            columns: format!("SELECT name FROM pragma_table_info('{table}')"),
            add_issuer: format!("ALTER TABLE {table} ADD COLUMN issuer TEXT"),
            add_doomed: format!("ALTER TABLE {table} ADD COLUMN {doomed}"),
            insert_row: format!(
                "INSERT INTO {table} (resource, token, issuer) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (resource) DO NOTHING"
            ),
            lock_row: format!("SELECT token, issuer FROM {table} WHERE resource = ?1"),
            update_token: format!(
                "UPDATE {table} SET token = ?2, issuer = COALESCE(issuer, ?3) WHERE resource = ?1"
            ),
            select_token: format!("SELECT token FROM {table} WHERE resource = ?1"),
            // A row that refers to a resource no row has: the deferred key fails the COMMIT.
            doom: format!("INSERT INTO {table} (resource, token, doomed) VALUES (?1, 0, ?2)"),
        }
    }
}

impl SqlxSqliteFence {
    /// Creates the fence table if it is missing (and adds the columns an older table lacks),
    /// on a connection taken from `conn` (a `&SqlitePool`, a `&mut SqliteConnection`, ...),
    /// and returns the fence. The table is the one [`SqliteFence`](super::SqliteFence) uses,
    /// with one more column, `doomed` (see the type's docs).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is not a plain identifier (before any I/O);
    /// [`Error::Storage`] if the table cannot be created.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it runs in one transaction, rolled back if the future is dropped.
    pub async fn setup<'a, A>(conn: A, options: &FenceOptions) -> Result<SqlxSqliteFence>
    where
        A: Acquire<'a, Database = Sqlite>,
    {
        let fence = SqlxSqliteFence::new(options)?;
        let table = fence.table.as_str();
        let failed = |e| Error::storage(format!("setting up the fence table {table}"), e);
        let mut tx = conn.begin().await.map_err(failed)?;
        (&mut *tx)
            .execute(sqlx::raw_sql(&fence.sql.create_table))
            .await
            .map_err(failed)?;
        let columns: Vec<String> = sqlx::query_scalar(&fence.sql.columns)
            .fetch_all(&mut *tx)
            .await
            .map_err(failed)?;
        for (column, add) in [
            ("issuer", &fence.sql.add_issuer),
            ("doomed", &fence.sql.add_doomed),
        ] {
            if !columns.iter().any(|c| c == column) {
                (&mut *tx)
                    .execute(sqlx::raw_sql(add))
                    .await
                    .map_err(failed)?;
            }
        }
        tx.commit().await.map_err(failed)?;
        Ok(fence)
    }

    /// The fence without any I/O, for a table that already exists (made by
    /// [`setup`](Self::setup) or your migrations).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is not a plain identifier.
    pub fn new(options: &FenceOptions) -> Result<SqlxSqliteFence> {
        let table = options.checked_table()?.to_owned();
        Ok(SqlxSqliteFence {
            sql: SqliteSql::new(&table),
            table,
        })
    }

    /// The fence table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Admits `token` for a fenced write of `resource` in the open transaction `tx`: takes the
    /// database's write lock until `tx` ends, checks the token, and records it. Call it first
    /// in the transaction, run your statements, then commit.
    ///
    /// # Errors
    ///
    /// Every error dooms `tx`: its `COMMIT` fails and applies nothing. Do not use it further.
    ///
    /// - [`Error::StaleToken`] if the database already accepted a newer token for `resource`;
    ///   [`Error::CounterReset`] instead if `token`'s lock is still valid (see there).
    /// - [`Error::InvalidConfig`] if `token` is above `i64::MAX`, or comes from another lock
    ///   than the row is bound to, or is a bare number and the row is bound; or if the
    ///   connection has foreign keys off (nothing is done then, and the transaction is left as
    ///   it was: roll it back).
    /// - [`Error::Storage`] if SQLite failed (`SQLITE_BUSY` when another writer held the
    ///   database longer than the busy timeout).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future mid-way leaves `tx` in an unknown state: roll it back (dropping it
    /// does). Nothing commits without your `commit`.
    pub async fn admit(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        resource: &str,
        token: impl Into<FencingToken>,
    ) -> Result<()> {
        let token: FencingToken = token.into();
        let conn: &mut SqliteConnection = tx;
        let keys_on: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| Error::storage("reading PRAGMA foreign_keys", e))?;
        if keys_on != 1 {
            return Err(Error::config(
                "fence",
                "SqlxSqliteFence needs foreign keys on for the connection (sqlx's default; SqliteConnectOptions::foreign_keys(true)): it dooms a refused transaction through a deferred foreign key",
            ));
        }
        let result = match Presented::new(resource, &token) {
            Ok(presented) => {
                let mut rows = SqlxRows {
                    fence: self,
                    conn: &mut *conn,
                };
                match logic::check(&mut rows, resource, &presented).await {
                    Ok(admitted) => logic::finish(&mut rows, resource, &presented, admitted).await,
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        if result.is_err() {
            // Whatever the caller does next, this transaction must not commit. The names only
            // need to be rows no resource has: a NUL never appears in a resource name the
            // command or the lock accepts, and the random part keeps two dooms apart.
            let marker = format!("\u{0}fencelock refused {:016x}", fastrand::u64(..));
            let doom = sqlx::query(&self.sql.doom)
                .bind(&marker)
                .bind(format!("{marker} (no such row)"));
            let _ = (&mut *conn).execute(doom).await;
        }
        result
    }

    /// The last token the database accepted for `resource` (committed, or recorded earlier in
    /// the transaction `executor` belongs to), or `None` if it never accepted one.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the query fails or the stored token is negative.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn last_token<'e, E>(&self, executor: E, resource: &str) -> Result<Option<u64>>
    where
        E: Executor<'e, Database = Sqlite>,
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

impl fmt::Debug for SqlxSqliteFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlxSqliteFence")
            .field("table", &self.table)
            .finish()
    }
}

/// The sqlx adapter of the fence logic on SQLite, on the caller's transaction (the `Executor`
/// methods of `&mut SqliteConnection`, for `Send` futures as in `sqlx_postgres.rs`).
struct SqlxRows<'a> {
    fence: &'a SqlxSqliteFence,
    conn: &'a mut SqliteConnection,
}

fn failed(resource: &str, step: &str, e: sqlx::Error) -> Error {
    Error::storage(format!("{step} of the fenced write on {resource:?}"), e)
}

impl FenceRow for SqlxRows<'_> {
    const STORAGE: &'static str = "sqlx-sqlite";

    async fn lock_row(&mut self, resource: &str, presented: &Presented<'_>) -> Result<Option<Row>> {
        let sql = &self.fence.sql;
        // The write first: from here on the transaction holds the database's write lock, and
        // the read below sees the last committed token.
        let insert = sqlx::query(&sql.insert_row)
            .bind(resource)
            .bind(presented.stored)
            .bind(presented.token.issuer());
        (&mut *self.conn)
            .execute(insert)
            .await
            .map_err(|e| failed(resource, "creating the fence row", e))?;
        let read = sqlx::query(&sql.lock_row).bind(resource);
        let (current, bound): (i64, Option<String>) = (&mut *self.conn)
            .fetch_one(read)
            .await
            .and_then(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .map_err(|e| failed(resource, "reading the fence row", e))?;
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
            .map_err(|e| failed(resource, "recording the token", e))
    }
}
