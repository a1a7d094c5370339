//! The statements of the PostgreSQL backend, defined once (each is prepared once per
//! connection), and what their answers mean. No I/O.
//!
//! Every time in these statements is the database's `clock_timestamp()`: the client's clock
//! never reaches the table. The client counts its own validity from before it sent the request
//! (`mod.rs`).

/// Creates the lock table and the token sequence if missing. The look comes first: `CREATE
/// TABLE IF NOT EXISTS` checks the right to create in the schema even when the table exists, and
/// since PostgreSQL 15 an ordinary user has no such right on `public`, so a user an administrator
/// granted the table and sequence to would fail on every connection. The creation runs under a
/// transaction-level advisory lock, so that two clients starting together on an empty database
/// do not both try to create them (`IF NOT EXISTS` is not safe against that race: the loser
/// fails on the catalog's unique index).
pub(super) const SETUP: &str = "
DO $$
BEGIN
    IF to_regclass('fencelock_locks') IS NULL OR to_regclass('fencelock_tokens') IS NULL THEN
        PERFORM pg_advisory_xact_lock(7269105834512867432);
        CREATE TABLE IF NOT EXISTS fencelock_locks (
            resource   text        PRIMARY KEY,
            owner      text        NOT NULL,
            token      bigint      NOT NULL,
            expires_at timestamptz NOT NULL
        );
        CREATE SEQUENCE IF NOT EXISTS fencelock_tokens AS bigint MINVALUE 1;
    END IF;
END
$$";

/// Takes `$1` for owner `$2` for `$3` milliseconds, if the row is missing or expired by the
/// database's clock; returns the new token, or no row when another owner holds it.
///
/// `nextval` is called for every attempt, granted or not (a refused attempt leaves a gap in
/// the sequence, which is harmless: tokens must grow, not be dense). It runs in the statement's
/// own transaction, after any earlier holder's commit was visible to the `WHERE` below, so a
/// later holder's token is always larger.
pub(super) const ACQUIRE: &str = "
INSERT INTO fencelock_locks AS l (resource, owner, token, expires_at)
VALUES ($1, $2, nextval('fencelock_tokens'),
        clock_timestamp() + $3::bigint::float8 * interval '1 millisecond')
ON CONFLICT (resource) DO UPDATE
    SET owner = EXCLUDED.owner, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
    WHERE l.expires_at <= clock_timestamp()
RETURNING token";

/// Moves the expiry of `$1` to `$3` milliseconds from now, if owner `$2` holds it and it has
/// not expired; returns the token, or no row when the lock is not (or no longer) ours. An
/// expired row is never revived: another client may already have seen it expired.
pub(super) const EXTEND: &str = "
UPDATE fencelock_locks
SET expires_at = clock_timestamp() + $3::bigint::float8 * interval '1 millisecond'
WHERE resource = $1 AND owner = $2 AND expires_at > clock_timestamp()
RETURNING token";

/// Deletes `$1` if owner `$2` holds it; returns whether it was still live, or no row when it
/// was not ours (another owner's, or gone).
pub(super) const RELEASE: &str = "
DELETE FROM fencelock_locks
WHERE resource = $1 AND owner = $2
RETURNING expires_at > clock_timestamp()";

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Released {
    /// Deleted while still live: the lock was held until the release.
    Live,
    /// Deleted, but it had expired by the database's clock: work done since was unprotected.
    Expired,
    /// Not ours: gone, or another owner's.
    NotOurs,
}

impl Released {
    /// Reads the release's answer: its one row (`live`), or none.
    pub(super) fn from_row(live: Option<bool>) -> Released {
        match live {
            Some(true) => Released::Live,
            Some(false) => Released::Expired,
            None => Released::NotOurs,
        }
    }
}

/// A token as the database stores it (`bigint`) to a fencing token. The sequence starts at 1
/// and only grows, so a value below 1 is a broken table, reported as such.
pub(super) fn token(stored: i64) -> Option<u64> {
    u64::try_from(stored).ok().filter(|t| *t > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_tells_a_live_row_from_an_expired_one_and_from_none() {
        assert_eq!(Released::from_row(Some(true)), Released::Live);
        assert_eq!(Released::from_row(Some(false)), Released::Expired);
        assert_eq!(Released::from_row(None), Released::NotOurs);
    }

    #[test]
    fn tokens_below_one_are_refused() {
        assert_eq!(token(1), Some(1));
        assert_eq!(token(0), None);
        assert_eq!(token(-5), None);
    }

    #[test]
    fn every_statement_reads_the_databases_clock_only() {
        for sql in [ACQUIRE, EXTEND, RELEASE] {
            assert!(sql.contains("clock_timestamp()"), "{sql}");
            assert!(!sql.contains("now()"), "{sql}");
        }
    }
}
