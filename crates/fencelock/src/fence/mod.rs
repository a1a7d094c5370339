//! Fenced storage: the storage side of fencing tokens, in SQLite and PostgreSQL.
//!
//! A lock with a TTL cannot stop a paused holder from writing after its lock expired: a GC pause,
//! a page fault or a slow network can strike right after any check the holder makes. Fencing
//! moves the safety check into the storage. Each lock grant comes with a token that grows from
//! one holder to the next, every write carries its holder's token, and the storage refuses a
//! write whose token is older than one it already accepted for the same resource:
//!
//! ```text
//! A gets token 33, pauses ...           B gets token 34, writes (storage: last = 34)
//! ... A wakes up, writes with token 33  -> refused: 33 < 34, B's data stays intact
//! ```
//!
//! # The rule: `presented >= last`, checked in the write's own transaction
//!
//! The fence table keeps, per resource, the newest token the storage accepted. A fenced write
//! applies only if its token is **not older** than that one:
//!
//! - `presented > last`: a newer holder; the write applies and `last` becomes `presented`.
//! - `presented == last`: the same holder writing again (one grant may do many writes); it
//!   applies. Requiring `>` would refuse a holder's second write.
//! - `presented < last`: a newer holder has written since; the write is refused with
//!   [`Error::StaleToken`] naming both tokens, and **nothing** changes: the caller's statements
//!   are rolled back with the transaction (in fact the caller's closure is not even called).
//!
//! The check, the caller's statements and the update of `last` run in **one** transaction that
//! excludes other fenced writers of the resource from the check to the commit (SQLite:
//! `BEGIN IMMEDIATE` takes the database's write lock; PostgreSQL: `SELECT ... FOR UPDATE` locks
//! the fence row). Checking in a separate step first ("read `last`, compare, then write") is
//! exactly the race fencing exists to close: between the check and the write, the new holder can
//! write its newer token, and the stale write lands on top of it.
//!
//! # The API
//!
//! [`SqliteFence`] (feature `sqlite`, synchronous, with an async wrapper) and [`PostgresFence`]
//! (feature `postgres`, async) each offer `write(resource, token, f)`: they open the transaction,
//! check the token, hand the open transaction to the closure `f` so that it can run **any**
//! statements of its own, record the token and commit. The closure's `Ok` value is returned.
//!
//! With sqlx (features `sqlx-postgres`, `sqlx-mysql`, `sqlx-sqlite`), [`SqlxPostgresFence`],
//! `SqlxMySqlFence` and `SqlxSqliteFence` do the same check inside the caller's own
//! transaction instead: `fence.admit(&mut tx, resource, token)` locks the fence
//! row, checks and records the token, and the caller's `commit` applies it together with its
//! statements (a rollback drops both; a refusal aborts the transaction so that no `commit` can
//! apply them). The caller keeps its pool. The check itself is written once, in `logic.rs`,
//! behind a small trait (lock the row, record the token) that each adapter implements.
//!
//! The closure returns `Result<T, `[`BoxError`]`>`, so `?` works on the backend's errors and on
//! the caller's own error types alike. If it returns `Err`, the transaction is rolled back (the
//! token is not recorded either) and `write` returns [`Error::Storage`] whose
//! [`source()`](std::error::Error::source) is the closure's error, ready for
//! `downcast_ref::<YourError>()`. A closure error that already is a [`fencelock::Error`](Error)
//! is returned as it is instead of being wrapped a second time.
//!
//! Tokens are `u64` but stored in a signed 64-bit column (`INTEGER` / `BIGINT`): a token above
//! `i64::MAX` is refused with [`Error::InvalidConfig`] before any I/O.
//!
//! # One fence row, one lock
//!
//! Tokens are ordered only among the holders of one lock: a token of lock `a` says nothing
//! about one of lock `b`, nor a Redis token about an etcd revision. A fence row written with
//! tokens of two locks would compare numbers that mean nothing to each other and let a stale
//! write through. So the row records the lock that issued its first bound token (pass
//! [`Lock::fencing_token`](crate::Lock::fencing_token), a [`FencingToken`]) and refuses a token
//! from any other lock, or a bare `u64`, with [`Error::InvalidConfig`] naming both locks
//! (tests `a_bound_row_refuses_tokens_of_another_lock_or_of_none` in this module, and
//! `a_fence_row_is_bound_to_the_lock_of_its_first_token` in `tests/fence_sqlite.rs` and
//! `tests/fence_postgres.rs`). A row written only with bare `u64` tokens stays unbound and
//! works as before; its first bound token binds it.
//!
//! The fence table is created if missing: `fencelock_fence(resource TEXT PRIMARY KEY, token
//! BIGINT NOT NULL, issuer TEXT)`; a table from an earlier version gets the `issuer` column. Its name is set with [`FenceOptions::with_table`]. Keep it in the same
//! database as the data it guards: that is what lets one transaction cover both.
//!
//! # One application, either backend
//!
//! The closure receives the backend's own transaction type, because it runs the backend's own
//! SQL. An application that supports both backends therefore keeps a small enum of its own
//! with one `match` per operation, and picks the variant from its configuration (a file path for
//! SQLite, a `postgres://` URL for PostgreSQL). The fencing itself (check, record, commit) stays
//! in this module; only the application's statements are written twice:
//!
//! ```no_run
//! # #[cfg(all(feature = "sqlite", feature = "postgres"))]
//! # mod inventory {
//! use fencelock::fence::{PostgresFence, SqliteFence};
//!
//! /// Where the stock lives.
//! pub enum Stock {
//!     Sqlite(SqliteFence),
//!     Postgres(PostgresFence),
//! }
//!
//! impl Stock {
//!     /// Opens `target`: a `postgres://` URL, else an SQLite file path.
//!     pub async fn open(target: &str) -> fencelock::Result<Stock> {
//!         if target.starts_with("postgres://") || target.starts_with("postgresql://") {
//!             Ok(Stock::Postgres(PostgresFence::connect(target).await?))
//!         } else {
//!             Ok(Stock::Sqlite(SqliteFence::open(target)?))
//!         }
//!     }
//!
//!     /// Takes `quantity` of `sku` under the lock that issued `token`; returns the stock left,
//!     /// or `None` if there was not enough.
//!     pub async fn reserve(
//!         &mut self,
//!         sku: &str,
//!         quantity: i64,
//!         token: u64,
//!     ) -> fencelock::Result<Option<i64>> {
//!         let resource = format!("sku:{sku}");
//!         match self {
//!             Stock::Sqlite(fence) => {
//!                 let sku = sku.to_owned();
//!                 fence
//!                     .write_async(&resource, token, move |tx| {
//!                         let left = tx.execute(
//!                             "UPDATE inventory SET stock = stock - ?2 \
//!                              WHERE sku = ?1 AND stock >= ?2",
//!                             rusqlite::params![sku, quantity],
//!                         )?;
//!                         let stock: i64 = tx.query_row(
//!                             "SELECT stock FROM inventory WHERE sku = ?1",
//!                             [&sku],
//!                             |row| row.get(0),
//!                         )?;
//!                         Ok((left == 1).then_some(stock))
//!                     })
//!                     .await
//!             }
//!             Stock::Postgres(fence) => {
//!                 fence
//!                     .write(&resource, token, async |tx| {
//!                         let row = tx
//!                             .query_opt(
//!                                 "UPDATE inventory SET stock = stock - $2 \
//!                                  WHERE sku = $1 AND stock >= $2 RETURNING stock",
//!                                 &[&sku, &quantity],
//!                             )
//!                             .await?;
//!                         Ok(row.map(|row| row.get::<_, i64>(0)))
//!                     })
//!                     .await
//!             }
//!         }
//!     }
//! }
//! # }
//! ```
//!
//! [`SqliteFence`]: crate::fence::SqliteFence
//! [`PostgresFence`]: crate::fence::PostgresFence
//! [`SqlxPostgresFence`]: crate::fence::SqlxPostgresFence
#![cfg_attr(
    docsrs,
    doc(cfg(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "sqlx-postgres",
        feature = "sqlx-mysql",
        feature = "sqlx-sqlite"
    )))
)]

use std::time::Duration;

use crate::error::{Error, Result};
use crate::FencingToken;

pub(crate) mod logic;
#[cfg(any(feature = "postgres", feature = "sqlx-postgres"))]
pub(crate) mod pg_sql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "sqlx-mysql")]
mod sqlx_mysql;
#[cfg(feature = "sqlx-postgres")]
mod sqlx_postgres;
#[cfg(feature = "sqlx-sqlite")]
mod sqlx_sqlite;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::postgres::PostgresFence;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use self::sqlite::SqliteFence;
#[cfg(feature = "sqlx-mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx-mysql")))]
pub use self::sqlx_mysql::SqlxMySqlFence;
#[cfg(feature = "sqlx-postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx-postgres")))]
pub use self::sqlx_postgres::SqlxPostgresFence;
#[cfg(feature = "sqlx-sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx-sqlite")))]
pub use self::sqlx_sqlite::SqlxSqliteFence;

/// The error a fenced write's closure returns: any error, boxed. `?` converts into it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Settings shared by the fenced storages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceOptions {
    table: String,
    busy_timeout: Duration,
}

impl FenceOptions {
    /// The fence table's name unless set otherwise.
    pub const DEFAULT_TABLE: &'static str = "fencelock_fence";
    /// How long an SQLite write waits for another connection's write lock unless set otherwise.
    pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

    /// The defaults: table [`DEFAULT_TABLE`](Self::DEFAULT_TABLE), busy timeout
    /// [`DEFAULT_BUSY_TIMEOUT`](Self::DEFAULT_BUSY_TIMEOUT).
    pub fn new() -> FenceOptions {
        FenceOptions {
            table: Self::DEFAULT_TABLE.to_owned(),
            busy_timeout: Self::DEFAULT_BUSY_TIMEOUT,
        }
    }

    /// Sets the fence table's name: letters, digits and `_`, not starting with a digit, at most
    /// 63 bytes, optionally qualified by a schema (`schema.table`, PostgreSQL). It is checked
    /// when a fence is opened, which fails with [`Error::InvalidConfig`] if it is not valid.
    pub fn with_table(mut self, table: impl Into<String>) -> FenceOptions {
        self.table = table.into();
        self
    }

    /// Sets how long an SQLite fenced write waits for the database's write lock while another
    /// connection (another process, too) holds it, before failing with [`Error::Storage`].
    /// SQLite only: PostgreSQL writers queue on the fence row's lock (use `lock_timeout` in the
    /// connection options to bound that wait).
    pub fn with_busy_timeout(mut self, timeout: Duration) -> FenceOptions {
        self.busy_timeout = timeout;
        self
    }

    /// The fence table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// How long an SQLite write waits for another connection's write lock.
    pub fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    /// The table name, checked: it is spliced into SQL, so only plain identifiers pass.
    pub(crate) fn checked_table(&self) -> Result<&str> {
        let table = self.table.as_str();
        let parts: Vec<&str> = table.split('.').collect();
        let ok = parts.len() <= 2 && parts.iter().all(|part| is_identifier(part));
        if ok {
            Ok(table)
        } else {
            Err(Error::config(
                "fence table name",
                format!(
                    "{table:?} is not a plain SQL identifier; use letters, digits and '_' (not \
                     starting with a digit, at most 63 bytes), optionally as schema.table"
                ),
            ))
        }
    }
}

impl Default for FenceOptions {
    fn default() -> FenceOptions {
        FenceOptions::new()
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok && s.len() <= 63 && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The token as the signed 64-bit integer the fence table stores; tokens above `i64::MAX` are
/// refused rather than wrapped, since a wrapped token would compare as older than every other.
pub(crate) fn token_to_sql(resource: &str, token: u64) -> Result<i64> {
    i64::try_from(token).map_err(|_| {
        Error::config(
            "fencing token",
            format!(
                "token {token} for {resource:?} is above {}, the largest a fence table can store",
                i64::MAX
            ),
        )
    })
}

/// The stored token back as `u64`. A negative value can only come from someone writing the
/// fence table by hand; refusing it beats guessing what it meant.
pub(crate) fn token_from_sql(table: &str, resource: &str, stored: i64) -> Result<u64> {
    u64::try_from(stored).map_err(|_| {
        Error::storage(
            format!("reading the fence token of {resource:?}"),
            format!(
                "table {table} holds the negative token {stored}; it was not written by fencelock"
            ),
        )
    })
}

/// What a fence row holds: the last accepted token and the lock the row is bound to (`None`
/// for a row written only with unbound tokens, or before fence rows were bound).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) token: u64,
    pub(crate) issuer: Option<String>,
}

/// The fencing rule, one for both storages. A write is admitted if the row takes tokens from
/// the presented token's lock (it is bound to that lock, or to none yet, see [`FencingToken`])
/// and no token was accepted yet or its token is not older than the last accepted one. Equal
/// tokens are the same holder writing again.
pub(crate) fn admit(resource: &str, presented: &FencingToken, current: Option<&Row>) -> Result<()> {
    let Some(row) = current else {
        return Ok(());
    };
    if let Some(bound) = &row.issuer {
        match presented.issuer() {
            Some(issuer) if issuer == bound => {}
            Some(issuer) => {
                return Err(Error::config(
                    "fencing token",
                    format!(
                        "the fence row of {resource:?} is bound to the lock {bound:?}, but token {} comes from the lock {issuer:?}; tokens of different locks are not ordered, so a row takes tokens from one lock only: write under {bound:?}, or fence this data under another resource name",
                        presented.value()
                    ),
                ))
            }
            None => {
                return Err(Error::config(
                    "fencing token",
                    format!(
                        "the fence row of {resource:?} is bound to the lock {bound:?}, but token {} does not say which lock issued it; pass `lock.fencing_token()` instead of the bare number",
                        presented.value()
                    ),
                ))
            }
        }
    }
    if presented.value() < row.token {
        return Err(refused(resource, presented, row.token));
    }
    Ok(())
}

/// The error for a token below the row's last: a stale holder, unless the token knows that its
/// lock is still valid, which only a counter reset explains. The lock's state is read here
/// only, on the refusal path.
fn refused(resource: &str, presented: &FencingToken, current: u64) -> Error {
    if presented.lock_still_valid() == Some(true) {
        Error::CounterReset {
            resource: resource.to_owned(),
            presented: presented.value(),
            current,
            issuer: presented.issuer().map(str::to_owned),
        }
    } else {
        Error::StaleToken {
            resource: resource.to_owned(),
            presented: presented.value(),
            current,
        }
    }
}

/// Whether an admitted write must update the row: a newer token, or the first issuer of a row
/// that had none.
pub(crate) fn must_record(presented: &FencingToken, current: Option<&Row>) -> bool {
    current.is_none_or(|row| {
        row.token != presented.value() || (row.issuer.is_none() && presented.issuer().is_some())
    })
}

/// The error `write` returns when the caller's closure failed (the transaction is rolled back).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn closure_failed(resource: &str, error: BoxError) -> Error {
    // A fencelock error from a nested call already says what happened; wrapping it again
    // would only hide its kind from `Error::kind()`.
    match error.downcast::<Error>() {
        Ok(error) => *error,
        Err(error) => Error::storage(
            format!("running the fenced statements on {resource:?} (rolled back)"),
            error,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn row(token: u64, issuer: Option<&str>) -> Row {
        Row {
            token,
            issuer: issuer.map(str::to_owned),
        }
    }

    #[test]
    fn admits_newer_and_equal_tokens_and_refuses_older_ones() {
        let t = FencingToken::unbound;
        assert!(admit("r", &t(5), None).is_ok());
        assert!(admit("r", &t(0), None).is_ok());
        assert!(
            admit("r", &t(5), Some(&row(5, None))).is_ok(),
            "same holder writing again"
        );
        assert!(admit("r", &t(7), Some(&row(5, None))).is_ok());
        match admit("r", &t(6), Some(&row(7, None))) {
            Err(Error::StaleToken {
                resource,
                presented,
                current,
            }) => assert_eq!((resource.as_str(), presented, current), ("r", 6, 7)),
            other => panic!("expected StaleToken, got {other:?}"),
        }
    }

    #[test]
    fn a_bound_row_refuses_tokens_of_another_lock_or_of_none() {
        let a = |v| FencingToken::new(v, "redis:a");
        let b = |v| FencingToken::new(v, "etcd:a");
        let bound = row(10, Some("redis:a"));
        assert!(admit("r", &a(10), Some(&bound)).is_ok());
        assert!(admit("r", &a(11), Some(&bound)).is_ok());
        assert_eq!(
            admit("r", &a(9), Some(&bound)).unwrap_err().kind(),
            ErrorKind::StaleToken
        );
        // A larger token of another lock is refused too: it is not newer, only different.
        let err = admit("r", &b(99), Some(&bound)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("\"etcd:a\""), "{err}");
        assert!(err.to_string().contains("\"redis:a\""), "{err}");
        let err = admit("r", &FencingToken::unbound(99), Some(&bound)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("fencing_token"), "{err}");
        // An unbound row takes a bound token, and must then record its issuer.
        let unbound = row(10, None);
        assert!(admit("r", &b(10), Some(&unbound)).is_ok());
        assert!(must_record(&b(10), Some(&unbound)));
        assert!(!must_record(&a(10), Some(&bound)));
        assert!(must_record(&a(11), Some(&bound)));
        assert!(must_record(&a(1), None));
    }

    #[test]
    fn a_live_lock_below_the_row_is_a_reset_and_an_expired_or_unknown_one_is_stale() {
        use std::time::{Duration, Instant};
        let bound = row(900, Some("redis:a"));
        let live = FencingToken::new(5, "redis:a")
            .with_valid_until(Instant::now() + Duration::from_secs(3600));
        let err = admit("r", &live, Some(&bound)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CounterReset, "{err}");
        assert!(!err.is_retryable());
        let shown = err.to_string();
        assert!(shown.contains("fencelock reseed --above 900"), "{shown}");
        assert!(!shown.contains('\n'), "{shown}");
        // The lock is over: a stale holder, whatever its token.
        let over = FencingToken::new(5, "redis:a").with_valid_until(Instant::now());
        assert_eq!(
            admit("r", &over, Some(&bound)).unwrap_err().kind(),
            ErrorKind::StaleToken
        );
        // A token that does not know its lock: stale, as before.
        assert_eq!(
            admit("r", &FencingToken::new(5, "redis:a"), Some(&bound))
                .unwrap_err()
                .kind(),
            ErrorKind::StaleToken
        );
        // etcd revisions cannot be reseeded: the message says so instead.
        let etcd = FencingToken::new(5, "etcd:a")
            .with_valid_until(Instant::now() + Duration::from_secs(3600));
        let err = admit("r", &etcd, Some(&row(900, Some("etcd:a")))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CounterReset);
        assert!(!err.to_string().contains("reseed --above"), "{err}");
        // Admitted tokens never look at the lock.
        assert!(admit("r", &live, Some(&row(5, Some("redis:a")))).is_ok());
    }

    #[test]
    fn tokens_above_i64_max_are_refused_not_wrapped() {
        assert_eq!(token_to_sql("r", 0).unwrap(), 0);
        assert_eq!(token_to_sql("r", i64::MAX as u64).unwrap(), i64::MAX);
        let err = token_to_sql("r", i64::MAX as u64 + 1).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("9223372036854775808"), "{err}");
        assert_eq!(
            token_from_sql("t", "r", -1).unwrap_err().kind(),
            ErrorKind::Storage
        );
        assert_eq!(token_from_sql("t", "r", 42).unwrap(), 42);
    }

    #[test]
    fn table_names_must_be_plain_identifiers() {
        for ok in ["fencelock_fence", "_t", "app.fence", "T1"] {
            assert!(
                FenceOptions::new().with_table(ok).checked_table().is_ok(),
                "{ok}"
            );
        }
        let long = "t".repeat(64);
        for bad in [
            "",
            "1t",
            "a.b.c",
            "fence; DROP TABLE x",
            "\"quoted\"",
            "a-b",
            ".t",
            long.as_str(),
        ] {
            let err = FenceOptions::new()
                .with_table(bad)
                .checked_table()
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad}");
        }
    }

    #[test]
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn closure_errors_are_wrapped_unless_they_are_fencelock_errors() {
        let err = closure_failed("r", "out of stock".into());
        assert_eq!(err.kind(), ErrorKind::Storage);
        let source = std::error::Error::source(&err).unwrap();
        assert_eq!(source.to_string(), "out of stock");

        let inner = Error::StaleToken {
            resource: "other".into(),
            presented: 1,
            current: 2,
        };
        let err = closure_failed("r", Box::new(inner));
        assert_eq!(err.kind(), ErrorKind::StaleToken);
    }
}
