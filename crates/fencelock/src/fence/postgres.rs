//! Fenced writes to PostgreSQL.

use std::fmt;
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls, Statement, Transaction};

use super::logic::{self, FenceRow, Presented};
use super::pg_sql::{advisory_key, PgSql};
use super::{closure_failed, token_from_sql, BoxError, FenceOptions, Row};
use crate::error::{Error, Result};
use crate::FencingToken;

/// How long [`PostgresFence::connect`] waits for the server unless the URL sets
/// `connect_timeout`.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Fenced writes to a PostgreSQL database: a write applies only if its fencing token is not
/// older than the last one the database accepted for the resource (see the
/// [module docs](super)).
///
/// One `PostgresFence` is one connection, and one fenced write at a time (`write` takes
/// `&mut self`); open one per concurrent writer. Concurrent fenced writes of one resource
/// queue on the fence row's lock (`SELECT ... FOR UPDATE`), held from the token check to the
/// commit.
///
/// The connection is plain TCP or a Unix socket (no TLS).
///
/// # Example
///
/// ```no_run
/// use fencelock::fence::PostgresFence;
///
/// # async fn example(token: u64) -> fencelock::Result<()> {
/// let mut fence = PostgresFence::connect("postgres://app:secret@127.0.0.1:5432/shop").await?;
///
/// // Any statements may run in the fenced transaction; they commit only with a current token.
/// let left: Option<i64> = fence
///     .write("sku:apple", token, async |tx| {
///         let row = tx
///             .query_opt(
///                 "UPDATE inventory SET stock = stock - $2 \
///                  WHERE sku = $1 AND stock >= $2 RETURNING stock",
///                 &[&"apple", &3_i64],
///             )
///             .await?;
///         Ok(row.map(|row| row.get(0)))
///     })
///     .await?;
/// println!("apples left: {left:?}");
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
    pub async fn connect(url: &str) -> Result<PostgresFence> {
        PostgresFence::connect_with(url, &FenceOptions::default()).await
    }

    /// Connects to `url` (a `postgres://user:password@host:port/dbname` URL, or a
    /// `host=... user=...` keyword string), spawns the connection's task on the current tokio
    /// runtime, and creates the fence table if missing. Unless the URL sets `connect_timeout`,
    /// connecting gives up after 10 seconds.
    ///
    /// Must be called within a tokio runtime. Errors and logs name the URL with its password
    /// redacted.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future drops the connection; a fence table it may have created
    /// is harmless.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the URL or the table name is invalid; [`Error::Storage`] if
    /// the server cannot be reached, refuses the login, or the table cannot be created.
    pub async fn connect_with(url: &str, options: &FenceOptions) -> Result<PostgresFence> {
        let target = redact(url);
        options.checked_table()?;
        let mut config: Config = url
            .parse()
            .map_err(|e| Error::config("PostgreSQL URL", format!("cannot parse {target}: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| Error::storage(format!("connecting to PostgreSQL at {target}"), e))?;
        let logged = target.clone();
        // The connection object does the actual I/O; it ends when the client is dropped.
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(target = %logged, %error, "PostgreSQL connection of a fence failed");
            }
        });
        PostgresFence::setup(client, target, options).await
    }

    /// Uses a client the caller connected (with TLS, say): creates the fence table if missing.
    /// The caller keeps driving the client's connection task.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in effect: the client is dropped with the future.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] if the table name is invalid; [`Error::Storage`] if the table
    /// cannot be created.
    pub async fn from_client(client: Client, options: &FenceOptions) -> Result<PostgresFence> {
        PostgresFence::setup(client, "PostgreSQL (caller's client)".to_owned(), options).await
    }

    async fn setup(
        mut client: Client,
        target: String,
        options: &FenceOptions,
    ) -> Result<PostgresFence> {
        let table = options.checked_table()?.to_owned();
        let failed =
            |e| Error::storage(format!("setting up the fence table {table} at {target}"), e);
        // `CREATE TABLE IF NOT EXISTS` races with itself: two sessions can both find the table
        // missing and one then fails on the catalog's unique index. Workers that start together
        // do exactly that, so creators take turns on an advisory lock.
        let sql = PgSql::new(&table);
        let tx = client.transaction().await.map_err(failed)?;
        tx.execute(sql.advisory_lock, &[&advisory_key(&table)])
            .await
            .map_err(failed)?;
        tx.batch_execute(&sql.create_table).await.map_err(failed)?;
        // A table made before rows were bound gets the column. Looked up first: ALTER TABLE
        // takes an exclusive lock on the table, which would wait for every fenced write in
        // progress, at every connect.
        let has_issuer: bool = tx
            .query_one(sql.has_issuer, &[&table])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(failed)?;
        if !has_issuer {
            tx.batch_execute(&sql.add_issuer).await.map_err(failed)?;
        }
        tx.commit().await.map_err(failed)?;

        // Prepared once, so that a fenced write costs no parse round trips.
        let prepared = Prepared {
            insert_row: client.prepare(&sql.insert_row).await.map_err(failed)?,
            lock_row: client.prepare(&sql.lock_row).await.map_err(failed)?,
            update_token: client.prepare(&sql.update_token).await.map_err(failed)?,
            select_token: client.prepare(&sql.select_token).await.map_err(failed)?,
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
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs the caller's statements `f` as a fenced write of `resource` with `token`, in one
    /// transaction, and returns `f`'s value.
    ///
    /// In order: `BEGIN`; make sure the resource has a fence row (`INSERT ... ON CONFLICT DO
    /// NOTHING`); lock it and read the last accepted token and the lock the row is bound to
    /// (`SELECT ... FOR UPDATE`, which waits while another fenced write of the resource is in
    /// progress); if `token` comes from another lock, or is older, roll back without calling
    /// `f`; else run `f` with the open transaction, record `token` (and its lock, on the row's
    /// first bound token), and `COMMIT`. `f` is an async closure (`async |tx| { ... }`) and
    /// must not commit or roll back by itself.
    ///
    /// `token` is a [`FencingToken`] (from [`Lock::fencing_token`](crate::Lock::fencing_token)),
    /// which binds the row to its lock, or a bare `u64`, which a bound row refuses.
    ///
    /// # Cancel safety
    ///
    /// The write is atomic whenever the future is dropped: before `COMMIT` is sent, the
    /// transaction is rolled back (tokio-postgres rolls back a dropped transaction). If it is
    /// dropped while the `COMMIT` is in flight, whether the write applied is unknown;
    /// [`last_token`](Self::last_token) tells.
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
    /// - [`Error::Storage`] if PostgreSQL failed (connection lost, serialization failure under
    ///   a stricter default isolation level, ...); nothing was changed, unless the connection
    ///   broke during `COMMIT`, in which case it is unknown.
    pub async fn write<T, F>(
        &mut self,
        resource: &str,
        token: impl Into<FencingToken>,
        f: F,
    ) -> Result<T>
    where
        F: AsyncFnOnce(&Transaction<'_>) -> std::result::Result<T, BoxError>,
    {
        let token: FencingToken = token.into();
        let presented = Presented::new(resource, &token)?;
        let statements = &self.prepared;
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| statements.failed(resource, "BEGIN", e))?;
        let mut rows = PostgresRows {
            statements,
            tx: &tx,
        };
        let admitted = match logic::check(&mut rows, resource, &presented).await {
            Ok(admitted) => admitted,
            Err(refused) => {
                // Nothing was written but the fence row, which rolls back with the transaction.
                let _ = tx.rollback().await;
                return Err(refused);
            }
        };
        let value = match f(&tx).await {
            Ok(value) => value,
            Err(error) => {
                // A failed rollback adds nothing: the closure's error is the news, and a dropped
                // transaction is rolled back anyway.
                let _ = tx.rollback().await;
                return Err(closure_failed(resource, error));
            }
        };
        logic::finish(&mut rows, resource, &presented, admitted).await?;
        tx.commit()
            .await
            .map_err(|e| statements.failed(resource, "COMMIT", e))?;
        Ok(value)
    }

    /// The last token the database accepted for `resource`, or `None` if it never accepted one.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if the query fails or the stored token is negative (not written by
    /// fencelock).
    pub async fn last_token(&self, resource: &str) -> Result<Option<u64>> {
        let row = self
            .client
            .query_opt(&self.prepared.select_token, &[&resource])
            .await;
        self.prepared.last_token(resource, row)
    }
}

/// What a PostgreSQL fence keeps besides its connection, for both drivers' fences (this one
/// and `blocking::PostgresFence`, whose `Statement` is tokio-postgres's).
pub(crate) struct Prepared {
    /// The connection target with its password redacted, for `Debug` and error messages.
    pub(crate) target: String,
    pub(crate) table: String,
    pub(crate) insert_row: Statement,
    pub(crate) lock_row: Statement,
    pub(crate) update_token: Statement,
    pub(crate) select_token: Statement,
}

impl Prepared {
    /// The token `select_token` read for `resource`.
    pub(crate) fn last_token(
        &self,
        resource: &str,
        row: std::result::Result<Option<tokio_postgres::Row>, tokio_postgres::Error>,
    ) -> Result<Option<u64>> {
        let stored: Option<i64> = row
            .and_then(|row| row.map(|row| row.try_get(0)).transpose())
            .map_err(|e| {
                Error::storage(
                    format!("reading the fence token of {resource:?} at {}", self.target),
                    e,
                )
            })?;
        stored
            .map(|stored| token_from_sql(&self.table, resource, stored))
            .transpose()
    }

    /// The fence row `lock_row` read for `resource` (its token and issuer), for both adapters:
    /// tokio-postgres here and the blocking `postgres` crate, whose rows and errors are the same
    /// types.
    pub(crate) fn locked_row(
        &self,
        resource: &str,
        read: std::result::Result<tokio_postgres::Row, tokio_postgres::Error>,
    ) -> Result<Option<Row>> {
        let (current, bound): (i64, Option<String>) = read
            .and_then(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .map_err(|e| self.failed(resource, "locking the fence row", e))?;
        Ok(Some(Row {
            token: token_from_sql(&self.table, resource, current)?,
            issuer: bound,
        }))
    }

    /// The fields a fence's `Debug` shows.
    pub(crate) fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresFence")
            .field("target", &self.target)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }

    /// The error of a failed step of a fenced write, naming the resource and the server.
    pub(crate) fn failed(&self, resource: &str, step: &str, e: tokio_postgres::Error) -> Error {
        Error::storage(
            format!(
                "{step} of the fenced write on {resource:?} at {}",
                self.target
            ),
            e,
        )
    }
}

/// The tokio-postgres adapter of the fence logic.
struct PostgresRows<'a> {
    statements: &'a Prepared,
    tx: &'a Transaction<'a>,
}

impl FenceRow for PostgresRows<'_> {
    const STORAGE: &'static str = "postgres";

    async fn lock_row(&mut self, resource: &str, presented: &Presented<'_>) -> Result<Option<Row>> {
        let s = self.statements;
        let issuer = presented.token.issuer();
        self.tx
            .execute(&s.insert_row, &[&resource, &presented.stored, &issuer])
            .await
            .map_err(|e| s.failed(resource, "creating the fence row", e))?;
        let read = self.tx.query_one(&s.lock_row, &[&resource]).await;
        s.locked_row(resource, read)
    }

    async fn record(&mut self, resource: &str, presented: &Presented<'_>) -> Result<()> {
        let s = self.statements;
        let issuer = presented.token.issuer();
        self.tx
            .execute(&s.update_token, &[&resource, &presented.stored, &issuer])
            .await
            .map(drop)
            .map_err(|e| s.failed(resource, "recording the token", e))
    }
}

impl fmt::Debug for PostgresFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.prepared.debug(f)
    }
}

/// A PostgreSQL connection string with its passwords hidden, for errors and logs. Handles both
/// forms tokio-postgres accepts, and never fails: an unparsable string still loses its secrets.
pub(crate) fn redact(conn: &str) -> String {
    match conn.split_once("://") {
        Some((scheme, rest)) => redact_url(scheme, rest),
        None => redact_keywords(conn),
    }
}

/// `scheme://user:password@host/db?password=...`: the userinfo's password and any `password`
/// query parameter.
fn redact_url(scheme: &str, rest: &str) -> String {
    let (main, query) = match rest.split_once('?') {
        Some((main, query)) => (main, Some(query)),
        None => (rest, None),
    };
    // The last '@' ends the userinfo, even if the password holds an unescaped '/'.
    let main = match main.rsplit_once('@') {
        Some((info, host)) => match info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("{info}@{host}"),
        },
        None => main.to_owned(),
    };
    let mut out = format!("{scheme}://{main}");
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some(("password", _)) => "password=***".to_owned(),
                _ => param.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

/// `host=h user=u password='s3 cret'`: the `password` value, quoted or not.
fn redact_keywords(conn: &str) -> String {
    let mut out = Vec::new();
    let mut rest = conn.trim_start();
    while !rest.is_empty() {
        let key_end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        let after_key = rest[key_end..].trim_start();
        let Some(after_eq) = after_key.strip_prefix('=') else {
            // Not `key=value`: keep the word and go on; it holds no secret we can recognize.
            out.push(key.to_owned());
            rest = after_key;
            continue;
        };
        let value_start = after_eq.trim_start();
        let value_len = value_len(value_start);
        if key == "password" {
            out.push("password=***".to_owned());
        } else {
            out.push(format!("{key}={}", &value_start[..value_len]));
        }
        rest = value_start[value_len..].trim_start();
    }
    out.join(" ")
}

/// The byte length of a keyword value: up to the closing quote if it is quoted, else up to the
/// next whitespace; a backslash escapes the next character in both.
fn value_len(value: &str) -> usize {
    let quoted = value.starts_with('\'');
    let mut escaped = false;
    for (i, c) in value.char_indices().skip(usize::from(quoted)) {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if quoted && c == '\'' {
            return i + 1;
        } else if !quoted && c.is_whitespace() {
            return i;
        }
    }
    value.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_url_passwords() {
        assert_eq!(
            redact("postgres://app:s3cret@db.internal:5432/shop"),
            "postgres://app:***@db.internal:5432/shop"
        );
        assert_eq!(
            redact("postgresql://app@h/db?sslmode=disable&password=s3cret&x=1"),
            "postgresql://app@h/db?sslmode=disable&password=***&x=1"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1:5433/postgres"),
            "postgres://postgres@127.0.0.1:5433/postgres"
        );
        // An unescaped '/' or '@' in the password must not leak the rest of it.
        let shown = redact("postgres://app:pa/ss@w0rd@h/db");
        assert!(
            !shown.contains("pa/ss") && !shown.contains("w0rd"),
            "{shown}"
        );
    }

    #[test]
    fn redacts_keyword_passwords() {
        assert_eq!(
            redact("host=h user=app password=s3cret dbname=shop"),
            "host=h user=app password=*** dbname=shop"
        );
        assert_eq!(
            redact("host=h password = 'it\\'s a secret' port=5432"),
            "host=h password=*** port=5432"
        );
        let shown = redact("password='unterminated s3cret");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(redact(""), "");
        assert_eq!(redact("   "), "");
        assert_eq!(redact("garbage"), "garbage");
    }
}
