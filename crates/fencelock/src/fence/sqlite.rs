//! Fenced writes to SQLite.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};

use super::logic::{self, ready, FenceRow, Presented};
use super::{closure_failed, token_from_sql, BoxError, FenceOptions, Row};
use crate::error::{Error, Result};
use crate::FencingToken;

/// Fenced writes to an SQLite database: a write applies only if its fencing token is not older
/// than the last one the database accepted for the resource (see the [module docs](super)).
///
/// One `SqliteFence` is one connection. Clones share it, and their writes take turns. Worker
/// processes or threads that write in parallel open a fence each on the same file: a fenced
/// write starts with `BEGIN IMMEDIATE`, which takes the database's write lock before the token
/// is read, so the check and the write are serialized across connections and processes. A
/// writer that finds the lock taken waits up to the busy timeout
/// ([`FenceOptions::with_busy_timeout`]) instead of failing at once.
///
/// [`write`](Self::write) blocks the calling thread. In async code use
/// [`write_async`](Self::write_async), which runs it on tokio's blocking pool.
///
/// # Example
///
/// ```
/// use fencelock::fence::SqliteFence;
/// use fencelock::ErrorKind;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("shop.db");
/// let fence = SqliteFence::open(&path)?;
/// fence.unfenced(|conn| {
///     conn.execute_batch(
///         "CREATE TABLE IF NOT EXISTS inventory (sku TEXT PRIMARY KEY, stock INTEGER NOT NULL);
///          INSERT OR IGNORE INTO inventory VALUES ('apple', 10);",
///     )
/// })?;
///
/// // The holder of token 34 takes 3 apples; the closure may run any statements it needs.
/// let left: i64 = fence.write("sku:apple", 34, |tx| {
///     tx.execute("UPDATE inventory SET stock = stock - 3 WHERE sku = 'apple'", [])?;
///     Ok(tx.query_row("SELECT stock FROM inventory WHERE sku = 'apple'", [], |row| row.get(0))?)
/// })?;
/// assert_eq!(left, 7);
///
/// // A paused former holder wakes up with token 33: refused, and nothing changes.
/// let err = fence
///     .write("sku:apple", 33, |tx| {
///         tx.execute("UPDATE inventory SET stock = 0 WHERE sku = 'apple'", [])?;
///         Ok(())
///     })
///     .unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::StaleToken);
/// assert_eq!(fence.last_token("sku:apple")?, Some(34));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SqliteFence {
    shared: Arc<Shared>,
}

struct Shared {
    conn: Mutex<Connection>,
    /// The database file, kept for `Debug` and error messages (`None`: in-memory).
    path: Option<String>,
    table: String,
    select_token: String,
    upsert_token: String,
}

impl SqliteFence {
    /// Opens (creating it if missing) the database file at `path` with the default
    /// [`FenceOptions`]; see [`open_with`](Self::open_with).
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the file cannot be opened or the fence table cannot be created.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteFence> {
        SqliteFence::open_with(path, &FenceOptions::default())
    }

    /// Opens (creating it if missing) the database file at `path`, switches it to WAL mode (so
    /// that readers are not blocked while a fenced write holds the write lock), sets the busy
    /// timeout, and creates the fence table if missing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is not a plain identifier; [`Error::Storage`]
    /// if the file cannot be opened, WAL mode cannot be set or the table cannot be created.
    pub fn open_with(path: impl AsRef<Path>, options: &FenceOptions) -> Result<SqliteFence> {
        let path = path.as_ref();
        options.checked_table()?;
        let failed = |e| Error::storage(format!("opening SQLite database {}", path.display()), e);
        let conn = Connection::open(path).map_err(failed)?;
        // The busy timeout first: switching to WAL needs a lock that another process may hold.
        conn.busy_timeout(options.busy_timeout()).map_err(failed)?;
        let _mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(failed)?;
        SqliteFence::from_connection(conn, options)
    }

    /// Uses an existing connection: sets its busy timeout from `options` and creates the fence
    /// table if missing. Its journal mode and other settings are left as they are.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is not a plain identifier; [`Error::Storage`]
    /// if the busy timeout cannot be set or the table cannot be created.
    pub fn from_connection(conn: Connection, options: &FenceOptions) -> Result<SqliteFence> {
        let table = options.checked_table()?.to_owned();
        let path = conn.path().filter(|p| !p.is_empty()).map(str::to_owned);
        let shown = path.as_deref().unwrap_or(":memory:");
        let failed =
            |e| Error::storage(format!("setting up the fence table {table} in {shown}"), e);
        conn.busy_timeout(options.busy_timeout()).map_err(failed)?;
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                 resource TEXT PRIMARY KEY NOT NULL,
                 token INTEGER NOT NULL,
                 issuer TEXT
             )"
        ))
        .map_err(failed)?;
        // A table made before fence rows were bound to their lock gets the column; its rows
        // are bound by their next bound token. Checked and added under the write lock, so that
        // two processes opening an old table at once do not both add it.
        let (schema, name) = table.split_once('.').unwrap_or(("main", &table));
        let tx =
            Transaction::new_unchecked(&conn, TransactionBehavior::Immediate).map_err(failed)?;
        let has_issuer: bool = tx
            .query_row(
                "SELECT COUNT(*) > 0 FROM pragma_table_info(?1, ?2) WHERE name = 'issuer'",
                [name, schema],
                |row| row.get(0),
            )
            .map_err(failed)?;
        if !has_issuer {
            tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN issuer TEXT"))
                .map_err(failed)?;
        }
        tx.commit().map_err(failed)?;
        Ok(SqliteFence {
            shared: Arc::new(Shared {
                conn: Mutex::new(conn),
                path,
                select_token: format!("SELECT token, issuer FROM {table} WHERE resource = ?1"),
                upsert_token: format!(
                    "INSERT INTO {table} (resource, token, issuer) VALUES (?1, ?2, ?3)
                     ON CONFLICT (resource) DO UPDATE SET token = excluded.token,
                         issuer = COALESCE({table}.issuer, excluded.issuer)"
                ),
                table,
            }),
        })
    }

    /// The fence table's name.
    pub fn table(&self) -> &str {
        &self.shared.table
    }

    /// Runs the caller's statements `f` as a fenced write of `resource` with `token`, in one
    /// `BEGIN IMMEDIATE` transaction, and returns `f`'s value.
    ///
    /// In order: start the transaction (taking the database's write lock, waiting up to the
    /// busy timeout for it); read the last accepted token of `resource` and the lock the row is
    /// bound to; if `token` comes from another lock, or is older, roll back without calling
    /// `f`; else call `f` with the open transaction, record `token` as the last accepted one
    /// (and its lock, on the row's first bound token), and commit. `f` must not commit or roll
    /// back by itself.
    ///
    /// `token` is a [`FencingToken`] (from [`Lock::fencing_token`](crate::Lock::fencing_token)),
    /// which binds the row to its lock, or a bare `u64`, which a bound row refuses.
    ///
    /// This blocks the calling thread for the whole transaction, including any wait for another
    /// writer; from async code call [`write_async`](Self::write_async) instead.
    ///
    /// # Errors
    ///
    /// - [`Error::StaleToken`] if the database already accepted a newer token for `resource`;
    ///   nothing was changed and `f` was not called.
    /// - [`Error::InvalidConfig`] if `token` is above `i64::MAX` (checked before any I/O), or
    ///   if the row is bound to another lock than `token`'s, or `token` is a bare number and
    ///   the row is bound; nothing was changed and `f` was not called.
    /// - [`Error::Storage`] whose `source()` is `f`'s error, if `f` failed; the transaction,
    ///   including `f`'s statements, was rolled back. A [`fencelock::Error`](Error) returned by
    ///   `f` is passed through unwrapped.
    /// - [`Error::Storage`] if SQLite failed (for example, the write lock stayed busy for longer
    ///   than the busy timeout); nothing was changed.
    pub fn write<T, F>(&self, resource: &str, token: impl Into<FencingToken>, f: F) -> Result<T>
    where
        F: FnOnce(&Transaction<'_>) -> std::result::Result<T, BoxError>,
    {
        let token: FencingToken = token.into();
        let presented = Presented::new(resource, &token)?;
        let mut conn = self.lock();
        let failed = |step: &str, e| {
            Error::storage(format!("{step} of the fenced write on {resource:?}"), e)
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| failed("BEGIN IMMEDIATE", e))?;
        let mut rows = SqliteRows {
            fence: self,
            tx: &tx,
        };
        // An early return drops `tx`, which rolls the transaction back.
        let admitted = ready(logic::check(&mut rows, resource, &presented))?;
        let value = match f(&tx) {
            Ok(value) => value,
            Err(error) => {
                // A failed rollback leaves nothing to add: the closure's error is the news, and
                // rusqlite's drop of `tx` tries once more.
                let _ = tx.rollback();
                return Err(closure_failed(resource, error));
            }
        };
        ready(logic::finish(&mut rows, resource, &presented, admitted))?;
        tx.commit().map_err(|e| failed("COMMIT", e))?;
        Ok(value)
    }

    /// [`write`](Self::write) for async code: runs it on tokio's blocking pool, so the
    /// runtime's threads do not wait for SQLite's write lock. `f` therefore must be `Send` and
    /// `'static` (move what it needs into it). A panic in `f` is resumed in the caller.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future does not stop the write: it still runs to its end (commit or
    /// rollback) on the blocking pool, and only its result is lost.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write); also [`Error::Storage`] if the runtime shut down before the
    /// blocking task ran.
    pub async fn write_async<T, F>(
        &self,
        resource: &str,
        token: impl Into<FencingToken>,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(&Transaction<'_>) -> std::result::Result<T, BoxError> + Send + 'static,
        T: Send + 'static,
    {
        let token: FencingToken = token.into();
        let fence = self.clone();
        let owned = resource.to_owned();
        match tokio::task::spawn_blocking(move || fence.write(&owned, token, f)).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(Error::storage(
                format!("running the fenced write on {resource:?}"),
                e,
            )),
        }
    }

    /// The last token the database accepted for `resource`, or `None` if it never accepted one.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the query fails or the stored token is negative (not written by
    /// fencelock).
    pub fn last_token(&self, resource: &str) -> Result<Option<u64>> {
        let conn = self.lock();
        Ok(self.read_row(&conn, resource)?.map(|row| row.token))
    }

    /// Runs `f` with the connection outside any fenced write: for setup (creating the
    /// application's tables) and for reads. Writes made here are **not** fenced. Waits while a
    /// write of this fence (or a clone) is in progress.
    pub fn unfenced<R>(&self, f: impl FnOnce(&Connection) -> R) -> R {
        f(&self.lock())
    }

    fn read_row(&self, conn: &Connection, resource: &str) -> Result<Option<Row>> {
        let stored: Option<(i64, Option<String>)> = conn
            .prepare_cached(&self.shared.select_token)
            .and_then(|mut stmt| {
                stmt.query_row([resource], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .map_err(|e| Error::storage(format!("reading the fence token of {resource:?}"), e))?;
        stored
            .map(|(stored, issuer)| {
                Ok(Row {
                    token: token_from_sql(&self.shared.table, resource, stored)?,
                    issuer,
                })
            })
            .transpose()
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a write's closure poisons the mutex, but the transaction was rolled
        // back when it unwound, so the connection is fine to use.
        self.shared
            .conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The rusqlite adapter of the fence logic: its statements run at once, so its futures never
/// wait. The database's write lock, taken by `BEGIN IMMEDIATE`, keeps other writers out.
struct SqliteRows<'a> {
    fence: &'a SqliteFence,
    tx: &'a Transaction<'a>,
}

impl FenceRow for SqliteRows<'_> {
    const STORAGE: &'static str = "sqlite";

    async fn lock_row(&mut self, resource: &str, _: &Presented<'_>) -> Result<Option<Row>> {
        self.fence.read_row(self.tx, resource)
    }

    async fn record(&mut self, resource: &str, presented: &Presented<'_>) -> Result<()> {
        self.tx
            .prepare_cached(&self.fence.shared.upsert_token)
            .and_then(|mut stmt| {
                stmt.execute(rusqlite::params![
                    resource,
                    presented.stored,
                    presented.token.issuer()
                ])
            })
            .map(drop)
            .map_err(|e| {
                Error::storage(
                    format!("recording the token of the fenced write on {resource:?}"),
                    e,
                )
            })
    }
}

impl fmt::Debug for SqliteFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteFence")
            .field("path", &self.shared.path.as_deref().unwrap_or(":memory:"))
            .field("table", &self.shared.table)
            .finish()
    }
}
