//! Fenced writes to PostgreSQL from blocking code.

use std::fmt;

use postgres::{Client, Config, NoTls, Transaction};

use super::outside_async;
use crate::error::{Error, Result};
use crate::fence::logic::{self, ready, FenceRow, Presented};
use crate::fence::pg_sql::{advisory_key, PgSql};
use crate::fence::postgres::{redact, Prepared, DEFAULT_CONNECT_TIMEOUT};
use crate::fence::{closure_failed, BoxError, FenceOptions, Row};
use crate::FencingToken;

/// What the blocking fence's calls name as their async counterpart, when refused inside a
/// runtime.
const ASYNC_FENCE: &str = "fencelock::fence::PostgresFence";

/// [`crate::fence::PostgresFence`] for blocking code: the same fence table, checks and errors,
/// with blocking calls and a closure that gets a [`postgres::Transaction`] (the `postgres`
/// crate, tokio-postgres's synchronous client, re-exported as `fencelock::postgres`), so the
/// caller's code has no tokio in it. A write applies only if its fencing token is not older than
/// the last one the database accepted for the resource (see [`crate::fence`]). It uses the
/// async fence's table and SQL (`fence/pg_sql.rs`) and its one implementation of the check
/// (`fence/logic.rs`).
///
/// One `PostgresFence` is one connection with a small runtime of its own (the `postgres`
/// crate's, driven by the calling thread during each call: no extra thread), and one fenced
/// write at a time (`write` takes `&mut self`); open one per thread that writes. Writers of one
/// resource queue on its fence row's lock (`SELECT ... FOR UPDATE`) from the token check to the
/// commit.
///
/// Calls made from inside an async runtime are refused with [`Error::InvalidConfig`] (blocking
/// would stall that runtime's thread): use [`crate::fence::PostgresFence`] there.
///
/// # Example
///
/// ```no_run
/// use fencelock::blocking::{Client, PostgresFence};
/// use fencelock::Config;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::new(Config::new(["redis://127.0.0.1:6379/0"]).with_fencing(true))?;
/// let mut fence = PostgresFence::connect("postgres://app:secret@127.0.0.1:5432/shop")?;
///
/// let lock = client.acquire("sku:apple")?;
/// let left: Option<i64> = fence.write("sku:apple", lock.fencing_token().unwrap(), |tx| {
///     let row = tx.query_opt(
///         "UPDATE inventory SET stock = stock - $2 WHERE sku = $1 AND stock >= $2 RETURNING stock",
///         &[&"apple", &3_i64],
///     )?;
///     Ok(row.map(|row| row.get(0)))
/// })?;
/// println!("apples left: {left:?}");
/// lock.release()?;
/// # Ok(())
/// # }
/// ```
pub struct PostgresFence {
    client: Client,
    prepared: Prepared,
}

impl PostgresFence {
    /// Connects to `url` with the default [`FenceOptions`]; see
    /// [`connect_with`](Self::connect_with).
    ///
    /// # Errors
    ///
    /// As [`connect_with`](Self::connect_with).
    pub fn connect(url: &str) -> Result<PostgresFence> {
        PostgresFence::connect_with(url, &FenceOptions::default())
    }

    /// Connects to `url` (a `postgres://user:password@host:port/dbname` URL, or a
    /// `host=... user=...` keyword string) and creates the fence table if missing, as
    /// [`crate::fence::PostgresFence::connect_with`]. Unless the URL sets `connect_timeout`,
    /// connecting gives up after 10 seconds. Errors name the URL with its password redacted.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the URL or the table name is invalid, or when called from
    /// inside an async runtime; [`Error::Storage`] if the server cannot be reached, refuses the
    /// login, or the table cannot be created.
    pub fn connect_with(url: &str, options: &FenceOptions) -> Result<PostgresFence> {
        outside_async(ASYNC_FENCE)?;
        let target = redact(url);
        options.checked_table()?;
        let mut config: Config = url
            .parse()
            .map_err(|e| Error::config("PostgreSQL URL", format!("cannot parse {target}: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let client = config
            .connect(NoTls)
            .map_err(|e| Error::storage(format!("connecting to PostgreSQL at {target}"), e))?;
        PostgresFence::setup(client, target, options)
    }

    /// Uses a client the caller connected (with TLS, say): creates the fence table if missing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is invalid, or when called from inside an
    /// async runtime; [`Error::Storage`] if the table cannot be created.
    pub fn from_client(client: Client, options: &FenceOptions) -> Result<PostgresFence> {
        outside_async(ASYNC_FENCE)?;
        PostgresFence::setup(client, "PostgreSQL (caller's client)".to_owned(), options)
    }

    /// The table and the prepared statements, as the async fence's setup does (see there why
    /// creators take turns on an advisory lock and look the column up before altering).
    fn setup(mut client: Client, target: String, options: &FenceOptions) -> Result<PostgresFence> {
        let table = options.checked_table()?.to_owned();
        let failed =
            |e| Error::storage(format!("setting up the fence table {table} at {target}"), e);
        let sql = PgSql::new(&table);
        let mut tx = client.transaction().map_err(failed)?;
        tx.execute(sql.advisory_lock, &[&advisory_key(&table)])
            .map_err(failed)?;
        tx.batch_execute(&sql.create_table).map_err(failed)?;
        let has_issuer: bool = tx
            .query_one(sql.has_issuer, &[&table])
            .and_then(|row| row.try_get(0))
            .map_err(failed)?;
        if !has_issuer {
            tx.batch_execute(&sql.add_issuer).map_err(failed)?;
        }
        tx.commit().map_err(failed)?;

        let prepared = Prepared {
            insert_row: client.prepare(&sql.insert_row).map_err(failed)?,
            lock_row: client.prepare(&sql.lock_row).map_err(failed)?,
            update_token: client.prepare(&sql.update_token).map_err(failed)?,
            select_token: client.prepare(&sql.select_token).map_err(failed)?,
            target,
            table,
        };
        Ok(PostgresFence { client, prepared })
    }

    /// The fence table's name.
    pub fn table(&self) -> &str {
        &self.prepared.table
    }

    /// The client, for setup (creating the application's tables) and reads outside fenced
    /// writes. Writes made through it are **not** fenced.
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Runs the caller's statements `f` as a fenced write of `resource` with `token`, in one
    /// transaction, and returns `f`'s value: the steps of
    /// [`crate::fence::PostgresFence::write`] (lock the fence row, refuse a token from another
    /// lock or an older one without calling `f`, run `f`, record the token, `COMMIT`), on the
    /// calling thread. `f` must not commit or roll back by itself.
    ///
    /// `token` is a [`FencingToken`] (from [`Lock::fencing_token`](super::Lock::fencing_token)),
    /// which binds the row to its lock, or a bare `u64`, which a bound row refuses.
    ///
    /// # Errors
    ///
    /// - [`Error::StaleToken`] if the database already accepted a newer token for `resource`
    ///   ([`Error::CounterReset`] instead if `token`'s lock is still valid); nothing was changed
    ///   and `f` was not called.
    /// - [`Error::InvalidConfig`] if `token` is above `i64::MAX` (checked before any I/O), or
    ///   comes from another lock than the row is bound to, or is a bare number and the row is
    ///   bound; or when called from inside an async runtime. Nothing was changed and `f` was
    ///   not called.
    /// - [`Error::Storage`] whose `source()` is `f`'s error, if `f` failed; the transaction,
    ///   including `f`'s statements, was rolled back. A [`fencelock::Error`](Error) returned by
    ///   `f` is passed through unwrapped.
    /// - [`Error::Storage`] if PostgreSQL failed; nothing was changed, unless the connection
    ///   broke during `COMMIT`, in which case it is unknown ([`last_token`](Self::last_token)
    ///   tells).
    pub fn write<T, F>(&mut self, resource: &str, token: impl Into<FencingToken>, f: F) -> Result<T>
    where
        F: FnOnce(&mut Transaction<'_>) -> std::result::Result<T, BoxError>,
    {
        outside_async(ASYNC_FENCE)?;
        let token: FencingToken = token.into();
        let presented = Presented::new(resource, &token)?;
        let statements = &self.prepared;
        let mut tx = self
            .client
            .transaction()
            .map_err(|e| statements.failed(resource, "BEGIN", e))?;
        let mut rows = BlockingRows {
            statements,
            tx: &mut tx,
        };
        // Dropping `tx` on any early return rolls it back (the postgres crate's `Drop`).
        let admitted = ready(logic::check(&mut rows, resource, &presented))?;
        let value = f(&mut *rows.tx).map_err(|error| closure_failed(resource, error))?;
        ready(logic::finish(&mut rows, resource, &presented, admitted))?;
        tx.commit()
            .map_err(|e| statements.failed(resource, "COMMIT", e))?;
        Ok(value)
    }

    /// The last token the database accepted for `resource`, or `None` if it never accepted one.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the query fails or the stored token is negative (not written by
    /// fencelock); [`Error::InvalidConfig`] when called from inside an async runtime.
    pub fn last_token(&mut self, resource: &str) -> Result<Option<u64>> {
        outside_async(ASYNC_FENCE)?;
        let row = self
            .client
            .query_opt(&self.prepared.select_token, &[&resource]);
        self.prepared.last_token(resource, row)
    }
}

/// The `postgres` crate's adapter of the fence logic: its calls block inside `poll`, so the
/// logic's futures never wait ([`ready`]).
struct BlockingRows<'a, 't> {
    statements: &'a Prepared,
    tx: &'a mut Transaction<'t>,
}

impl FenceRow for BlockingRows<'_, '_> {
    const STORAGE: &'static str = "postgres";

    async fn lock_row(&mut self, resource: &str, presented: &Presented<'_>) -> Result<Option<Row>> {
        let s = self.statements;
        let issuer = presented.token.issuer();
        self.tx
            .execute(&s.insert_row, &[&resource, &presented.stored, &issuer])
            .map_err(|e| s.failed(resource, "creating the fence row", e))?;
        let read = self.tx.query_one(&s.lock_row, &[&resource]);
        s.locked_row(resource, read)
    }

    async fn record(&mut self, resource: &str, presented: &Presented<'_>) -> Result<()> {
        let s = self.statements;
        let issuer = presented.token.issuer();
        self.tx
            .execute(&s.update_token, &[&resource, &presented.stored, &issuer])
            .map(drop)
            .map_err(|e| s.failed(resource, "recording the token", e))
    }
}

impl fmt::Debug for PostgresFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.prepared.debug(f)
    }
}
