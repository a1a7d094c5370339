//! Fenced writes inside the caller's own sqlx transaction, on MySQL and MariaDB (InnoDB).

use std::fmt;

use sqlx::{Acquire, Executor, MySql, MySqlConnection, Row as _, Transaction};

use super::logic::{self, FenceRow, Presented};
use super::{token_from_sql, FenceOptions, Row};
use crate::error::{Error, Result};
use crate::FencingToken;

/// The fence check inside **your** sqlx transaction on MySQL or MariaDB (feature
/// `sqlx-mysql`): you keep your pool and your transaction, and the token check commits or rolls
/// back with your statements (see the [module docs](super) for the rule). The table must be
/// InnoDB (transactions and row locks), which [`setup`](Self::setup) creates.
///
/// [`admit`](Self::admit) locks the resource's fence row in the transaction (`SELECT ... FOR
/// UPDATE`), refuses a token older than the row's last (or from another lock), and records the
/// token. Your statements then run in the same transaction, and your `commit` makes them and
/// the token durable together; a rollback (or dropping the transaction) undoes both. Other
/// fenced writers of the resource wait on the row's lock until your transaction ends.
///
/// MySQL has no aborted-transaction state: a refused [`admit`](Self::admit) rolls the
/// transaction back itself (your statements before it are undone) and leaves a **read-only**
/// transaction in its place until your `commit` or rollback, so that a write you run after
/// ignoring the error fails instead of committing.
///
/// ```no_run
/// # async fn demo(pool: sqlx::MySqlPool, lock: fencelock::Lock) -> Result<(), Box<dyn std::error::Error>> {
/// use fencelock::fence::{FenceOptions, SqlxMySqlFence};
///
/// let fence = SqlxMySqlFence::setup(&pool, &FenceOptions::default()).await?;
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
pub struct SqlxMySqlFence {
    table: String,
    sql: MySqlSql,
}

/// The statements, with the checked table name spliced in.
#[derive(Clone)]
struct MySqlSql {
    create_table: String,
    insert_row: String,
    lock_row: String,
    update_token: String,
    select_token: String,
}

impl MySqlSql {
    fn new(table: &str) -> MySqlSql {
        MySqlSql {
            // Binary collation: resource names compare exactly ('A' is not 'a'), as on the
            // other fences. 700 characters of utf8mb4 fit InnoDB's key limit.
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                     resource VARCHAR(700) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,
                     token BIGINT NOT NULL,
                     issuer TEXT
                 ) ENGINE=InnoDB"
            ),
            // A no-op update on a duplicate: unlike INSERT IGNORE, it hides no other error.
            insert_row: format!(
                "INSERT INTO {table} (resource, token, issuer) VALUES (?, ?, ?) \
                 ON DUPLICATE KEY UPDATE resource = resource"
            ),
            lock_row: format!("SELECT token, issuer FROM {table} WHERE resource = ? FOR UPDATE"),
            update_token: format!(
                "UPDATE {table} SET token = ?, issuer = COALESCE(issuer, ?) WHERE resource = ?"
            ),
            select_token: format!("SELECT token FROM {table} WHERE resource = ?"),
        }
    }
}

impl SqlxMySqlFence {
    /// Creates the fence table if it is missing, on a connection taken from `conn` (a
    /// `&MySqlPool`, a `&mut MySqlConnection`, ...), and returns the fence.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is not a plain identifier (before any I/O);
    /// [`Error::Storage`] if the table cannot be created.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: `CREATE TABLE IF NOT EXISTS` is one statement.
    pub async fn setup<'a, A>(conn: A, options: &FenceOptions) -> Result<SqlxMySqlFence>
    where
        A: Acquire<'a, Database = MySql>,
    {
        let fence = SqlxMySqlFence::new(options)?;
        let table = fence.table.as_str();
        let failed = |e| Error::storage(format!("setting up the fence table {table}"), e);
        let mut conn = conn.acquire().await.map_err(failed)?;
        (&mut *conn)
            .execute(sqlx::raw_sql(&fence.sql.create_table))
            .await
            .map_err(failed)?;
        Ok(fence)
    }

    /// The fence without any I/O, for a table that already exists (created by
    /// [`setup`](Self::setup) or your migrations: `resource VARCHAR(700) ... COLLATE
    /// utf8mb4_bin PRIMARY KEY, token BIGINT NOT NULL, issuer TEXT`, InnoDB).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is not a plain identifier.
    pub fn new(options: &FenceOptions) -> Result<SqlxMySqlFence> {
        let table = options.checked_table()?.to_owned();
        Ok(SqlxMySqlFence {
            sql: MySqlSql::new(&table),
            table,
        })
    }

    /// The fence table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Admits `token` for a fenced write of `resource` in the open transaction `tx`: locks the
    /// resource's fence row until `tx` ends, checks the token, and records it. Run your
    /// statements in `tx` before or after it, then commit.
    ///
    /// # Errors
    ///
    /// Every error rolls `tx` back and leaves a read-only transaction in it (writes fail, a
    /// `commit` applies nothing): do not use it further.
    ///
    /// - [`Error::StaleToken`] if the database already accepted a newer token for `resource`;
    ///   [`Error::CounterReset`] instead if `token`'s lock is still valid (see there).
    /// - [`Error::InvalidConfig`] if `token` is above `i64::MAX`, or comes from another lock
    ///   than the row is bound to, or is a bare number and the row is bound.
    /// - [`Error::Storage`] if the database failed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future mid-way leaves `tx` in an unknown state: roll it back (dropping it
    /// does). Nothing commits without your `commit`.
    pub async fn admit(
        &self,
        tx: &mut Transaction<'_, MySql>,
        resource: &str,
        token: impl Into<FencingToken>,
    ) -> Result<()> {
        let token: FencingToken = token.into();
        let conn: &mut MySqlConnection = tx;
        let presented = Presented::new(resource, &token);
        let result = match presented {
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
            // Undo what ran in the transaction, and keep the caller's later writes from
            // committing: a read-only transaction until the caller ends it. Failures here are
            // not news (the connection may be gone); the error returned is the refusal.
            let _ = (&mut *conn).execute(sqlx::raw_sql("ROLLBACK")).await;
            let _ = (&mut *conn)
                .execute(sqlx::raw_sql("START TRANSACTION READ ONLY"))
                .await;
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
        E: Executor<'e, Database = MySql>,
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

impl fmt::Debug for SqlxMySqlFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlxMySqlFence")
            .field("table", &self.table)
            .finish()
    }
}

/// The sqlx adapter of the fence logic on MySQL, on the caller's transaction (the `Executor`
/// methods of `&mut MySqlConnection`, for `Send` futures as in `sqlx_postgres.rs`).
struct SqlxRows<'a> {
    fence: &'a SqlxMySqlFence,
    conn: &'a mut MySqlConnection,
}

fn failed(resource: &str, step: &str, e: sqlx::Error) -> Error {
    Error::storage(format!("{step} of the fenced write on {resource:?}"), e)
}

impl FenceRow for SqlxRows<'_> {
    const STORAGE: &'static str = "sqlx-mysql";

    async fn lock_row(&mut self, resource: &str, presented: &Presented<'_>) -> Result<Option<Row>> {
        let sql = &self.fence.sql;
        let insert = sqlx::query(&sql.insert_row)
            .bind(resource)
            .bind(presented.stored)
            .bind(presented.token.issuer());
        (&mut *self.conn)
            .execute(insert)
            .await
            .map_err(|e| failed(resource, "creating the fence row", e))?;
        let lock = sqlx::query(&sql.lock_row).bind(resource);
        let (current, bound): (i64, Option<String>) = (&mut *self.conn)
            .fetch_one(lock)
            .await
            .and_then(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .map_err(|e| failed(resource, "locking the fence row", e))?;
        Ok(Some(Row {
            token: token_from_sql(&self.fence.table, resource, current)?,
            issuer: bound,
        }))
    }

    async fn record(&mut self, resource: &str, presented: &Presented<'_>) -> Result<()> {
        let update = sqlx::query(&self.fence.sql.update_token)
            .bind(presented.stored)
            .bind(presented.token.issuer())
            .bind(resource);
        (&mut *self.conn)
            .execute(update)
            .await
            .map(drop)
            .map_err(|e| failed(resource, "recording the token", e))
    }
}
