//! The statements of the PostgreSQL backend, defined once (each is prepared once per
//! connection), and what their answers mean. No I/O.
//!
//! Every time in these statements is the database's `clock_timestamp()`: the client's clock
//! never reaches the table. The client counts its own validity from before it sent the request
//! (`mod.rs`).

/// Creates the lock table, the line, both sequences and the functions if missing. The look
/// comes first: `CREATE TABLE IF NOT EXISTS` checks the right to create in the schema even when
/// the table exists, and since PostgreSQL 15 an ordinary user has no such right on `public`, so a
/// user an administrator granted the objects to would fail on every connection. The creation runs
/// under a transaction-level advisory lock, so that two clients starting together on an empty
/// database do not both try to create them (`IF NOT EXISTS` is not safe against that race: the
/// loser fails on the catalog's unique index).
///
/// The functions carry the protocol's version in their names (`_v1`): a later protocol adds
/// functions of its own instead of replacing these under clients that still call them.
///
/// Every function that writes a resource's rows first takes the transaction-level advisory
/// lock of each resource (`fencelock_serialize_v1`, in the order of their hashes, so that two
/// callers with overlapping sets never wait on each other in a cycle), and inside a plpgsql
/// function each statement reads a fresh snapshot: the function sees every commit of the
/// caller before it on these resources.
pub(super) const SETUP: &str = "
DO $$
BEGIN
    IF to_regclass('fencelock_locks') IS NULL OR to_regclass('fencelock_tokens') IS NULL
       OR to_regclass('fencelock_waiters') IS NULL OR to_regclass('fencelock_line') IS NULL
       OR to_regclass('fencelock_readers') IS NULL OR to_regclass('fencelock_leaders') IS NULL
       OR to_regprocedure('fencelock_announce_v1(text,text,bigint,text)') IS NULL
       OR to_regprocedure('fencelock_read_v1(text,text,bigint,bigint)') IS NULL
       OR to_regprocedure('fencelock_leave_v1(text[],bigint)') IS NULL
       OR to_regprocedure('fencelock_take_permit_v1(text,text[],text,bigint,bigint)') IS NULL
       OR to_regprocedure('fencelock_take_v2(text[],text,bigint,bigint)') IS NULL
       OR to_regprocedure('fencelock_release_v2(text[],text)') IS NULL THEN
        PERFORM pg_advisory_xact_lock(7269105834512867432);
        CREATE TABLE IF NOT EXISTS fencelock_locks (
            resource   text        PRIMARY KEY,
            owner      text        NOT NULL,
            token      bigint      NOT NULL,
            expires_at timestamptz NOT NULL
        );
        CREATE SEQUENCE IF NOT EXISTS fencelock_tokens AS bigint MINVALUE 1;
        CREATE TABLE IF NOT EXISTS fencelock_waiters (
            resource   text        NOT NULL,
            seq        bigint      NOT NULL,
            owner      text        NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (resource, seq)
        );
        CREATE SEQUENCE IF NOT EXISTS fencelock_line AS bigint MINVALUE 1;
        CREATE TABLE IF NOT EXISTS fencelock_leaders (
            election text   NOT NULL,
            term     bigint NOT NULL,
            value    text   NOT NULL,
            PRIMARY KEY (election, term)
        );
        CREATE TABLE IF NOT EXISTS fencelock_readers (
            resource   text        NOT NULL,
            owner      text        NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (resource, owner)
        );

        CREATE OR REPLACE FUNCTION fencelock_channel_v1(p_resource text) RETURNS text
        LANGUAGE sql IMMUTABLE AS $f$ SELECT 'fencelock_' || md5(p_resource) $f$;

        CREATE OR REPLACE FUNCTION fencelock_serialize_v1(p_resources text[]) RETURNS void
        LANGUAGE plpgsql AS $f$
        DECLARE k bigint;
        BEGIN
            FOR k IN SELECT DISTINCT hashtextextended(r, 0) FROM unnest(p_resources) r ORDER BY 1
            LOOP
                PERFORM pg_advisory_xact_lock(k);
            END LOOP;
        END $f$;

        CREATE OR REPLACE FUNCTION fencelock_enter_v1(p_resources text[], p_owner text,
                                                      p_ttl_ms bigint) RETURNS bigint
        LANGUAGE plpgsql AS $f$
        DECLARE s bigint;
        BEGIN
            PERFORM fencelock_serialize_v1(p_resources);
            s := nextval('fencelock_line');
            INSERT INTO fencelock_waiters (resource, seq, owner, expires_at)
            SELECT DISTINCT r, s, p_owner,
                   clock_timestamp() + p_ttl_ms::float8 * interval '1 millisecond'
            FROM unnest(p_resources) r;
            RETURN s;
        END $f$;

        -- Version 2 of the take: a try (no place) neither cleans the line nor counts places
        -- that expired; it takes the lock of a single resource without a loop.
        CREATE OR REPLACE FUNCTION fencelock_take_v2(p_resources text[], p_owner text,
                                                     p_ttl_ms bigint, p_seq bigint,
                                                     OUT o_token bigint, OUT o_wait_ms bigint,
                                                     OUT o_in_line boolean)
        LANGUAGE plpgsql AS $f$
        DECLARE t timestamptz; blocked_until timestamptz; n bigint; want bigint := 1;
        BEGIN
            IF cardinality(p_resources) = 1 THEN
                PERFORM pg_advisory_xact_lock(hashtextextended(p_resources[1], 0));
            ELSE
                PERFORM fencelock_serialize_v1(p_resources);
                want := (SELECT count(DISTINCT r) FROM unnest(p_resources) r);
            END IF;
            t := clock_timestamp();
            o_in_line := true;
            IF p_seq IS NOT NULL THEN
                DELETE FROM fencelock_waiters w
                WHERE w.resource = ANY(p_resources) AND w.expires_at <= t;
                UPDATE fencelock_waiters w
                SET expires_at = t + p_ttl_ms::float8 * interval '1 millisecond'
                WHERE w.resource = ANY(p_resources) AND w.seq = p_seq AND w.owner = p_owner;
                GET DIAGNOSTICS n = ROW_COUNT;
                IF n <> want THEN
                    -- A place expired in some line: out of every line, to enter again.
                    DELETE FROM fencelock_waiters w
                    WHERE w.resource = ANY(p_resources) AND w.seq = p_seq;
                    o_in_line := false;
                    RETURN;
                END IF;
            END IF;
            SELECT min(b.e) INTO blocked_until FROM (
                SELECT l.expires_at AS e FROM fencelock_locks l
                WHERE l.resource = ANY(p_resources) AND l.expires_at > t
                UNION ALL
                SELECT r.expires_at FROM fencelock_readers r
                WHERE r.resource = ANY(p_resources) AND r.expires_at > t
                UNION ALL
                SELECT w.expires_at FROM fencelock_waiters w
                WHERE w.resource = ANY(p_resources) AND w.expires_at > t
                  AND (p_seq IS NULL OR w.seq < p_seq)
            ) b;
            IF blocked_until IS NOT NULL THEN
                o_wait_ms := ceil(extract(epoch FROM blocked_until - t) * 1000)::bigint;
                RETURN;
            END IF;
            o_token := nextval('fencelock_tokens');
            INSERT INTO fencelock_locks AS l (resource, owner, token, expires_at)
            SELECT DISTINCT r, p_owner, o_token,
                   clock_timestamp() + p_ttl_ms::float8 * interval '1 millisecond'
            FROM unnest(p_resources) r
            ON CONFLICT (resource) DO UPDATE
                SET owner = EXCLUDED.owner, token = EXCLUDED.token,
                    expires_at = EXCLUDED.expires_at
                WHERE l.expires_at <= clock_timestamp();
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n <> want THEN
                RAISE EXCEPTION 'fencelock: a resource was taken while serialized';
            END IF;
            IF p_seq IS NOT NULL THEN
                DELETE FROM fencelock_waiters w
                WHERE w.resource = ANY(p_resources) AND w.seq = p_seq;
            END IF;
        END $f$;

        -- The line of the semaphore whose slot is `p_resource` (`<name>:permit:<i>`), or null.
        CREATE OR REPLACE FUNCTION fencelock_permit_line_v2(p_resource text) RETURNS text
        LANGUAGE sql IMMUTABLE AS
        $f$ SELECT 'fencelock:permits:' || substring(p_resource FROM '^(.*):permit:[0-9]+$') $f$;

        -- Version 2 of the release: under the advisory locks of the resources (and of the line
        -- of a semaphore's slot), it wakes a line only when a place stands in it.
        CREATE OR REPLACE FUNCTION fencelock_release_v2(p_resources text[], p_owner text)
        RETURNS boolean
        LANGUAGE plpgsql AS $f$
        DECLARE d record; n bigint := 0; live boolean := true;
        BEGIN
            IF cardinality(p_resources) = 1 AND strpos(p_resources[1], ':permit:') = 0 THEN
                PERFORM pg_advisory_xact_lock(hashtextextended(p_resources[1], 0));
            ELSE
                PERFORM fencelock_serialize_v1(p_resources || ARRAY(
                    SELECT fencelock_permit_line_v2(r) FROM unnest(p_resources) r
                    WHERE fencelock_permit_line_v2(r) IS NOT NULL));
            END IF;
            -- Each statement below reads a snapshot taken after the locks: it sees every place
            -- entered before them, and a place entered after them waits for this commit.
            FOR d IN
                DELETE FROM fencelock_locks l
                WHERE l.resource = ANY(p_resources) AND l.owner = p_owner
                RETURNING l.resource, l.expires_at > clock_timestamp() AS live
            LOOP
                n := n + 1;
                live := live AND d.live;
                IF EXISTS (SELECT 1 FROM fencelock_waiters w
                           WHERE w.resource IN (d.resource, fencelock_permit_line_v2(d.resource)))
                THEN
                    PERFORM pg_notify(fencelock_channel_v1(d.resource), '');
                END IF;
            END LOOP;
            IF n = 0 THEN
                RETURN NULL;
            END IF;
            IF cardinality(p_resources) = 1 THEN
                RETURN live;
            END IF;
            RETURN live AND n = (SELECT count(DISTINCT r) FROM unnest(p_resources) r);
        END $f$;

        CREATE OR REPLACE FUNCTION fencelock_take_permit_v1(p_line text, p_slots text[],
                                                            p_owner text, p_ttl_ms bigint,
                                                            p_seq bigint,
                                                            OUT o_slot integer,
                                                            OUT o_token bigint,
                                                            OUT o_wait_ms bigint,
                                                            OUT o_in_line boolean)
        LANGUAGE plpgsql AS $f$
        DECLARE t timestamptz; blocked_until timestamptz; n bigint; free integer;
        BEGIN
            PERFORM fencelock_serialize_v1(ARRAY[p_line]);
            t := clock_timestamp();
            DELETE FROM fencelock_waiters w WHERE w.resource = p_line AND w.expires_at <= t;
            IF p_seq IS NOT NULL THEN
                UPDATE fencelock_waiters w
                SET expires_at = t + p_ttl_ms::float8 * interval '1 millisecond'
                WHERE w.resource = p_line AND w.seq = p_seq AND w.owner = p_owner;
                GET DIAGNOSTICS n = ROW_COUNT;
                IF n = 0 THEN
                    o_in_line := false;
                    RETURN;
                END IF;
            END IF;
            o_in_line := true;
            SELECT min(w.expires_at) INTO blocked_until FROM fencelock_waiters w
            WHERE w.resource = p_line AND (p_seq IS NULL OR w.seq < p_seq);
            IF blocked_until IS NULL THEN
                SELECT s.i INTO free FROM unnest(p_slots) WITH ORDINALITY AS s(r, i)
                WHERE NOT EXISTS (SELECT 1 FROM fencelock_locks l
                                  WHERE l.resource = s.r AND l.expires_at > t)
                ORDER BY s.i LIMIT 1;
                IF free IS NULL THEN
                    SELECT min(l.expires_at) INTO blocked_until FROM fencelock_locks l
                    WHERE l.resource = ANY(p_slots) AND l.expires_at > t;
                END IF;
            END IF;
            IF free IS NULL THEN
                o_wait_ms := ceil(extract(epoch FROM coalesce(blocked_until, t) - t) * 1000)::bigint;
                RETURN;
            END IF;
            o_token := nextval('fencelock_tokens');
            INSERT INTO fencelock_locks AS l (resource, owner, token, expires_at)
            VALUES (p_slots[free], p_owner, o_token,
                    clock_timestamp() + p_ttl_ms::float8 * interval '1 millisecond')
            ON CONFLICT (resource) DO UPDATE
                SET owner = EXCLUDED.owner, token = EXCLUDED.token,
                    expires_at = EXCLUDED.expires_at
                WHERE l.expires_at <= clock_timestamp();
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n <> 1 THEN
                RAISE EXCEPTION 'fencelock: a permit was taken while serialized';
            END IF;
            IF p_seq IS NOT NULL THEN
                DELETE FROM fencelock_waiters w WHERE w.resource = p_line AND w.seq = p_seq;
                -- The next in line may find another permit free: wake it.
                PERFORM pg_notify(fencelock_channel_v1(p_line), '');
            END IF;
            o_slot := free - 1;
        END $f$;

        CREATE OR REPLACE FUNCTION fencelock_read_v1(p_resource text, p_owner text,
                                                     p_ttl_ms bigint, p_seq bigint,
                                                     OUT o_last bigint, OUT o_wait_ms bigint,
                                                     OUT o_in_line boolean)
        LANGUAGE plpgsql AS $f$
        DECLARE t timestamptz; blocked_until timestamptz; n bigint;
        BEGIN
            PERFORM fencelock_serialize_v1(ARRAY[p_resource]);
            t := clock_timestamp();
            DELETE FROM fencelock_waiters w
            WHERE w.resource = p_resource AND w.expires_at <= t;
            IF p_seq IS NOT NULL THEN
                UPDATE fencelock_waiters w
                SET expires_at = t + p_ttl_ms::float8 * interval '1 millisecond'
                WHERE w.resource = p_resource AND w.seq = p_seq AND w.owner = p_owner;
                GET DIAGNOSTICS n = ROW_COUNT;
                IF n = 0 THEN
                    o_in_line := false;
                    RETURN;
                END IF;
            END IF;
            o_in_line := true;
            SELECT min(b.e) INTO blocked_until FROM (
                SELECT l.expires_at AS e FROM fencelock_locks l
                WHERE l.resource = p_resource AND l.expires_at > t
                UNION ALL
                SELECT w.expires_at FROM fencelock_waiters w
                WHERE w.resource = p_resource AND (p_seq IS NULL OR w.seq < p_seq)
            ) b;
            IF blocked_until IS NOT NULL THEN
                o_wait_ms := ceil(extract(epoch FROM blocked_until - t) * 1000)::bigint;
                RETURN;
            END IF;
            DELETE FROM fencelock_readers r
            WHERE r.resource = p_resource AND r.expires_at <= t;
            INSERT INTO fencelock_readers (resource, owner, expires_at)
            VALUES (p_resource, p_owner,
                    clock_timestamp() + p_ttl_ms::float8 * interval '1 millisecond');
            IF p_seq IS NOT NULL THEN
                DELETE FROM fencelock_waiters w
                WHERE w.resource = p_resource AND w.seq = p_seq;
                -- The next in line may be a reader too: wake it.
                PERFORM pg_notify(fencelock_channel_v1(p_resource), '');
            END IF;
            -- At least every token issued so far: every writer granted before this reader.
            SELECT last_value INTO o_last FROM fencelock_tokens;
        END $f$;

        CREATE OR REPLACE FUNCTION fencelock_unread_v1(p_resource text, p_owner text)
        RETURNS boolean
        LANGUAGE plpgsql AS $f$
        DECLARE live boolean;
        BEGIN
            DELETE FROM fencelock_readers r
            WHERE r.resource = p_resource AND r.owner = p_owner
            RETURNING r.expires_at > clock_timestamp() INTO live;
            IF live IS NOT NULL THEN
                PERFORM pg_notify(fencelock_channel_v1(p_resource), '');
            END IF;
            RETURN live;
        END $f$;

        CREATE OR REPLACE FUNCTION fencelock_announce_v1(p_key text, p_owner text,
                                                         p_term bigint, p_value text)
        RETURNS boolean
        LANGUAGE plpgsql AS $f$
        DECLARE n bigint;
        BEGIN
            PERFORM fencelock_serialize_v1(ARRAY[p_key]);
            INSERT INTO fencelock_leaders (election, term, value)
            SELECT p_key, p_term, p_value
            WHERE EXISTS (SELECT 1 FROM fencelock_locks l
                          WHERE l.resource = p_key AND l.owner = p_owner AND l.token = p_term
                            AND l.expires_at > clock_timestamp())
            ON CONFLICT DO NOTHING;
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n = 0 THEN
                RETURN false;
            END IF;
            DELETE FROM fencelock_leaders d
            WHERE d.election = p_key AND d.term < (
                SELECT min(k.term) FROM (
                    SELECT x.term FROM fencelock_leaders x WHERE x.election = p_key
                    ORDER BY x.term DESC LIMIT 64
                ) k);
            PERFORM pg_notify(fencelock_channel_v1(p_key), '');
            RETURN true;
        END $f$;

        CREATE OR REPLACE FUNCTION fencelock_leave_v1(p_resources text[], p_seq bigint)
        RETURNS bigint
        LANGUAGE plpgsql AS $f$
        DECLARE d record; n bigint := 0;
        BEGIN
            FOR d IN
                DELETE FROM fencelock_waiters w
                WHERE w.resource = ANY(p_resources) AND w.seq = p_seq
                RETURNING w.resource
            LOOP
                n := n + 1;
                PERFORM pg_notify(fencelock_channel_v1(d.resource), '');
            END LOOP;
            RETURN n;
        END $f$;

        -- Version 1 of the take and the release, unchanged, for clients of version 1 that
        -- still run against this database (their setup does not look for these two).
        CREATE OR REPLACE FUNCTION fencelock_take_v1(p_resources text[], p_owner text,
                                                     p_ttl_ms bigint, p_seq bigint,
                                                     OUT o_token bigint, OUT o_wait_ms bigint,
                                                     OUT o_in_line boolean)
        LANGUAGE plpgsql AS $f$
        DECLARE t timestamptz; blocked_until timestamptz; n bigint;
        BEGIN
            PERFORM fencelock_serialize_v1(p_resources);
            t := clock_timestamp();
            DELETE FROM fencelock_waiters w
            WHERE w.resource = ANY(p_resources) AND w.expires_at <= t;
            IF p_seq IS NOT NULL THEN
                UPDATE fencelock_waiters w
                SET expires_at = t + p_ttl_ms::float8 * interval '1 millisecond'
                WHERE w.resource = ANY(p_resources) AND w.seq = p_seq AND w.owner = p_owner;
                GET DIAGNOSTICS n = ROW_COUNT;
                IF n <> (SELECT count(DISTINCT r) FROM unnest(p_resources) r) THEN
                    -- A place expired in some line: out of every line, to enter again.
                    DELETE FROM fencelock_waiters w
                    WHERE w.resource = ANY(p_resources) AND w.seq = p_seq;
                    o_in_line := false;
                    RETURN;
                END IF;
            END IF;
            o_in_line := true;
            SELECT min(b.e) INTO blocked_until FROM (
                SELECT l.expires_at AS e FROM fencelock_locks l
                WHERE l.resource = ANY(p_resources) AND l.expires_at > t
                UNION ALL
                SELECT r.expires_at FROM fencelock_readers r
                WHERE r.resource = ANY(p_resources) AND r.expires_at > t
                UNION ALL
                SELECT w.expires_at FROM fencelock_waiters w
                WHERE w.resource = ANY(p_resources) AND (p_seq IS NULL OR w.seq < p_seq)
            ) b;
            IF blocked_until IS NOT NULL THEN
                o_wait_ms := ceil(extract(epoch FROM blocked_until - t) * 1000)::bigint;
                RETURN;
            END IF;
            o_token := nextval('fencelock_tokens');
            INSERT INTO fencelock_locks AS l (resource, owner, token, expires_at)
            SELECT DISTINCT r, p_owner, o_token,
                   clock_timestamp() + p_ttl_ms::float8 * interval '1 millisecond'
            FROM unnest(p_resources) r
            ON CONFLICT (resource) DO UPDATE
                SET owner = EXCLUDED.owner, token = EXCLUDED.token,
                    expires_at = EXCLUDED.expires_at
                WHERE l.expires_at <= clock_timestamp();
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n <> (SELECT count(DISTINCT r) FROM unnest(p_resources) r) THEN
                RAISE EXCEPTION 'fencelock: a resource was taken while serialized';
            END IF;
            IF p_seq IS NOT NULL THEN
                DELETE FROM fencelock_waiters w
                WHERE w.resource = ANY(p_resources) AND w.seq = p_seq;
            END IF;
        END $f$;

        CREATE OR REPLACE FUNCTION fencelock_release_v1(p_resources text[], p_owner text)
        RETURNS boolean
        LANGUAGE plpgsql AS $f$
        DECLARE d record; n bigint := 0; live boolean := true;
        BEGIN
            FOR d IN
                DELETE FROM fencelock_locks l
                WHERE l.resource = ANY(p_resources) AND l.owner = p_owner
                RETURNING l.resource, l.expires_at > clock_timestamp() AS live
            LOOP
                n := n + 1;
                live := live AND d.live;
                PERFORM pg_notify(fencelock_channel_v1(d.resource), '');
            END LOOP;
            IF n = 0 THEN
                RETURN NULL;
            END IF;
            RETURN live AND n = (SELECT count(DISTINCT r) FROM unnest(p_resources) r);
        END $f$;
    END IF;
END
$$";

/// The session's settings besides the statement timeout. The functions' statements take
/// arrays (`resource = ANY(p_resources)`), whose custom plan is estimated cheaper than the
/// generic one, so PostgreSQL would plan them again on every call: planning was most of a
/// take's and a release's time (docs/performance.md). A generic plan is planned once per
/// connection. Needs PostgreSQL 12 or later.
pub(super) const SESSION: &str = "SET plan_cache_mode = force_generic_plan";

/// One attempt to take the resources `$1` for owner `$2` for `$3` milliseconds: a try
/// (`$4` null), which any live waiter in line refuses, or the attempt of the waiter whose place
/// in line is `$4`, which only the waiters ahead of it refuse (and which refreshes its place's
/// expiry). Returns `(token, wait_ms, in_line)`: the token when granted (for every resource, in
/// one transaction); else, while blocked, the milliseconds until the first blocking row expires
/// by itself; `in_line` false when the waiter's place had expired (it must enter again).
pub(super) const TAKE: &str =
    "SELECT o_token, o_wait_ms, o_in_line FROM fencelock_take_v2($1, $2, $3, $4)";

/// One attempt to take a permit of the semaphore whose line is `$1` and whose slots are `$2`
/// (one lease row each), for owner `$3`, for `$4` milliseconds: a try (`$5` null), which any live
/// waiter refuses, or the attempt of the waiter at place `$5` in the line of `$1`. Under the
/// line's advisory lock it counts the live leases of the slots and takes the first free one, so
/// no two takes ever count the same free slot. Returns `(slot, token, wait_ms, in_line)` as
/// [`TAKE`], with the slot's index when granted.
pub(super) const TAKE_PERMIT: &str =
    "SELECT o_slot, o_token, o_wait_ms, o_in_line FROM fencelock_take_permit_v1($1, $2, $3, $4, $5)";

/// One attempt to take a read lock of `$1` for owner `$2` for `$3` milliseconds: a try (`$4`
/// null) or the attempt of the waiter at place `$4`. Refused while a writer (a lease row of
/// `$1`) holds it or a waiter (writer or reader) is ahead in line: a waiting writer keeps the
/// readers that came after it out. Returns `(last, wait_ms, in_line)` as [`TAKE`], `last` (the
/// sequence's last value, at least every writer's token so far) when granted.
pub(super) const READ: &str =
    "SELECT o_last, o_wait_ms, o_in_line FROM fencelock_read_v1($1, $2, $3, $4)";

/// Moves the expiry of reader `$2`'s entry of `$1` to `$3` milliseconds from now, if live.
pub(super) const EXTEND_READER: &str = "
UPDATE fencelock_readers
SET expires_at = clock_timestamp() + $3::bigint::float8 * interval '1 millisecond'
WHERE resource = $1 AND owner = $2 AND expires_at > clock_timestamp()
RETURNING 1";

/// Deletes reader `$2`'s entry of `$1` and wakes the line; returns whether it was live, or null
/// when there was none.
pub(super) const RELEASE_READER: &str = "SELECT fencelock_unread_v1($1, $2)";

/// Announces owner `$2`, holding the election's lock `$1` with token `$3`, as the leader of
/// term `$3` with value `$4`, under the lock's advisory lock: only while the lease row is still
/// that holder's and live, so announcements commit in term order (a later term's take waits for
/// the earlier holder's announcement, or overwrote its row first and refuses it). Keeps the last
/// 64 terms and wakes the observers (the lock's channel). Returns whether it announced.
pub(super) const ANNOUNCE: &str = "SELECT fencelock_announce_v1($1, $2, $3, $4)";

/// Takes back the announcement of term `$2` with value `$3` of the election `$1`.
pub(super) const WITHDRAW: &str =
    "DELETE FROM fencelock_leaders WHERE election = $1 AND term = $2 AND value = $3";

/// The leaders of the election `$1` after term `$2`, newest first; with `$2` null, the latest
/// only.
pub(super) const LEADERS: &str = "
SELECT term, value FROM fencelock_leaders
WHERE election = $1 AND ($2::bigint IS NULL OR term > $2)
ORDER BY term DESC
LIMIT CASE WHEN $2::bigint IS NULL THEN 1 END";

/// Enters the line of every resource `$1` for owner `$2`, the place expiring after `$3`
/// milliseconds unless refreshed; returns the place (one number for all the resources).
pub(super) const ENTER: &str = "SELECT fencelock_enter_v1($1, $2, $3)";

/// Leaves the line: deletes the place `$2` in the lines of `$1` and wakes the waiters behind.
pub(super) const LEAVE: &str = "SELECT fencelock_leave_v1($1, $2)";

/// The channel names the releases of `$1` are announced on, one row per resource.
pub(super) const CHANNELS: &str = "SELECT fencelock_channel_v1(r) FROM unnest($1::text[]) r";

/// Moves the expiry of the rows of `$1` to `$3` milliseconds from now, where owner `$2` holds
/// them and they have not expired; returns one token per row moved (fewer rows than resources:
/// the lock is not, or no longer, wholly ours). An expired row is never revived: another client
/// may already have seen it expired.
pub(super) const EXTEND: &str = "
UPDATE fencelock_locks
SET expires_at = clock_timestamp() + $3::bigint::float8 * interval '1 millisecond'
WHERE resource = ANY($1) AND owner = $2 AND expires_at > clock_timestamp()
RETURNING token";

/// Deletes the rows of `$1` that owner `$2` holds and wakes their lines (the notification is
/// sent when the statement's transaction commits); returns whether every resource was still
/// held and live, or null when none was ours (another owner's, or gone).
pub(super) const RELEASE: &str = "SELECT fencelock_release_v2($1, $2)";

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
        assert!(EXTEND.contains("clock_timestamp()"));
        assert!(!SETUP.contains("now()"));
        assert!(!EXTEND.contains("now()"));
    }
}
