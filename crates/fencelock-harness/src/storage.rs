//! The shared records and the storage's history table, in one SQLite file.
//!
//! Every operation appends its history row in the same transaction as the operation itself, so
//! the rows' order (`seq`, an AUTOINCREMENT key, handed out under SQLite's single write lock) is
//! the storage's commit order.

use std::path::Path;

use fencelock::fence::{BoxError, SqliteFence};
use rusqlite::{params, Connection};

use crate::history::{Op, Record, StorageRow};

/// The fence resource of the fenced record.
pub const FENCE_RESOURCE: &str = "record:fenced";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS record (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
INSERT OR IGNORE INTO record VALUES ('fenced', 0), ('counter', 0);
CREATE TABLE IF NOT EXISTS history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record TEXT NOT NULL,
    op TEXT NOT NULL,
    client INTEGER NOT NULL,
    acq INTEGER NOT NULL,
    token INTEGER,
    value_read INTEGER NOT NULL,
    value_written INTEGER,
    mono_ns INTEGER NOT NULL,
    slot INTEGER
);";

/// Creates the records (both 0), the history table and the fence table in `path`.
///
/// # Errors
///
/// When SQLite fails.
pub fn setup(path: &Path) -> fencelock::Result<SqliteFence> {
    let fence = SqliteFence::open(path)?;
    fence
        .unfenced(|c| {
            c.execute_batch(SCHEMA)?;
            // The semaphore modes' records, one per slot.
            for slot in 0..crate::mode::PERMITS {
                c.execute(
                    "INSERT OR IGNORE INTO record VALUES (?1, 0)",
                    [slot_record(slot)],
                )?;
            }
            Ok(())
        })
        .map_err(|e| storage_error("creating the harness tables", e))?;
    Ok(fence)
}

/// The name of slot `slot`'s record, and its fence resource after `record:`.
fn slot_record(slot: u32) -> String {
    format!("fenced:{slot}")
}

/// Opens the storage for one client: durability is not under test (no machine crashes), so
/// commits do not wait for fsync.
///
/// # Errors
///
/// When SQLite fails.
pub fn open(path: &Path) -> fencelock::Result<SqliteFence> {
    let fence = SqliteFence::open(path)?;
    fence
        .unfenced(|c| c.execute_batch("PRAGMA synchronous = NORMAL"))
        .map_err(|e| storage_error("setting synchronous", e))?;
    Ok(fence)
}

fn storage_error(context: &str, e: rusqlite::Error) -> fencelock::Error {
    fencelock::Error::storage(context, e)
}

/// Who is doing an operation.
#[derive(Debug, Clone, Copy)]
pub struct Who {
    /// The client.
    pub client: u32,
    /// Its acquisition number.
    pub acq: u64,
    /// Its fencing token, in fenced modes.
    pub token: Option<u64>,
    /// The run's epoch on `CLOCK_MONOTONIC`.
    pub epoch_ns: u64,
}

fn append(
    conn: &Connection,
    who: Who,
    record: Record,
    op: Op,
    read: i64,
    written: Option<i64>,
) -> rusqlite::Result<()> {
    append_row(conn, who, record.name(), None, op, read, written)
}

fn append_row(
    conn: &Connection,
    who: Who,
    record: &str,
    slot: Option<u32>,
    op: Op,
    read: i64,
    written: Option<i64>,
) -> rusqlite::Result<()> {
    let token = who.token.map(|t| t as i64);
    let mono = crate::mono::now_ns().saturating_sub(who.epoch_ns) as i64;
    conn.prepare_cached(
        "INSERT INTO history (record, op, client, acq, token, value_read, value_written, mono_ns, slot)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        record,
        match op {
            Op::Read => "read",
            Op::Write => "write",
        },
        who.client,
        who.acq as i64,
        token,
        read,
        written,
        mono,
        slot
    ])?;
    Ok(())
}

fn read_value(conn: &Connection, record: Record) -> rusqlite::Result<i64> {
    read_named(conn, record.name())
}

fn read_named(conn: &Connection, name: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT value FROM record WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
}

fn write_value(conn: &Connection, record: Record, value: i64) -> rusqlite::Result<()> {
    write_named(conn, record.name(), value)
}

fn write_named(conn: &Connection, name: &str, value: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE record SET value = ?2 WHERE name = ?1")?
        .execute(params![name, value])?;
    Ok(())
}

/// Runs `f` in a `BEGIN IMMEDIATE` transaction on the unfenced path (no token check).
fn unfenced_tx<T>(
    fence: &SqliteFence,
    f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> fencelock::Result<T> {
    fence
        .unfenced(|conn| {
            // `unfenced` lends a shared connection; a transaction needs `&mut`, so it is spelled out.
            conn.execute_batch("BEGIN IMMEDIATE")?;
            match f(conn) {
                Ok(v) => {
                    conn.execute_batch("COMMIT")?;
                    Ok(v)
                }
                Err(e) => {
                    let _ = conn.execute_batch("ROLLBACK");
                    Err(e)
                }
            }
        })
        .map_err(|e| storage_error("an unfenced transaction", e))
}

/// Reads the fenced record and records the read. In fenced modes (`who.token` set) this is a
/// fenced transaction: it is refused if a newer token was accepted, and it raises the fence to
/// this token, so that an older holder's later write is refused too. Reading under the token is
/// what makes the whole read-modify-write safe, not only the write.
///
/// # Errors
///
/// [`fencelock::Error::StaleToken`] when refused; storage errors.
pub fn fenced_read(fence: &SqliteFence, who: Who) -> fencelock::Result<i64> {
    let body = move |conn: &Connection| -> rusqlite::Result<i64> {
        let v = read_value(conn, Record::Fenced)?;
        append(conn, who, Record::Fenced, Op::Read, v, None)?;
        Ok(v)
    };
    match who.token {
        Some(token) => fence.write(FENCE_RESOURCE, token, |tx| Ok(body(tx)?)),
        None => unfenced_tx(fence, body),
    }
}

/// Writes `read + 1` to the fenced record (checked against the token in fenced modes).
///
/// # Errors
///
/// [`fencelock::Error::StaleToken`] when refused; storage errors.
pub fn fenced_write(fence: &SqliteFence, who: Who, read: i64) -> fencelock::Result<i64> {
    let body = move |conn: &Connection| -> rusqlite::Result<i64> {
        write_value(conn, Record::Fenced, read + 1)?;
        append(conn, who, Record::Fenced, Op::Write, read, Some(read + 1))?;
        Ok(read + 1)
    };
    match who.token {
        Some(token) => fence.write(FENCE_RESOURCE, token, |tx| -> Result<i64, BoxError> {
            Ok(body(tx)?)
        }),
        None => unfenced_tx(fence, body),
    }
}

/// Semaphore modes: reads slot `slot`'s record under the permit's token (the slot's fence,
/// `record:fenced:<slot>`), as [`fenced_read`] does for the mutex's record.
///
/// # Errors
///
/// [`fencelock::Error::StaleToken`] when refused; storage errors.
pub fn slot_read(fence: &SqliteFence, who: Who, slot: u32) -> fencelock::Result<i64> {
    let name = slot_record(slot);
    let body = |conn: &Connection| -> rusqlite::Result<i64> {
        let v = read_named(conn, &name)?;
        append_row(
            conn,
            who,
            Record::Fenced.name(),
            Some(slot),
            Op::Read,
            v,
            None,
        )?;
        Ok(v)
    };
    match who.token {
        Some(token) => fence.write(&format!("record:{name}"), token, |tx| Ok(body(tx)?)),
        None => unfenced_tx(fence, body),
    }
}

/// Semaphore modes: writes `read + 1` to slot `slot`'s record under the permit's token.
///
/// # Errors
///
/// [`fencelock::Error::StaleToken`] when refused; storage errors.
pub fn slot_write(fence: &SqliteFence, who: Who, slot: u32, read: i64) -> fencelock::Result<i64> {
    let name = slot_record(slot);
    let body = |conn: &Connection| -> rusqlite::Result<i64> {
        write_named(conn, &name, read + 1)?;
        let fenced = Record::Fenced.name();
        append_row(
            conn,
            who,
            fenced,
            Some(slot),
            Op::Write,
            read,
            Some(read + 1),
        )?;
        Ok(read + 1)
    };
    match who.token {
        Some(token) => fence.write(
            &format!("record:{name}"),
            token,
            |tx| -> Result<i64, BoxError> { Ok(body(tx)?) },
        ),
        None => unfenced_tx(fence, body),
    }
}

/// A plain read of the counter (no token check), with its history row in the same transaction,
/// so that the checker sees where reads of the counter fall between other critical sections'
/// writes (interleavings) as it does on the fenced record.
///
/// # Errors
///
/// Storage errors.
pub fn counter_read(fence: &SqliteFence, who: Who) -> fencelock::Result<i64> {
    unfenced_tx(fence, move |conn| {
        let v = read_value(conn, Record::Counter)?;
        append(conn, who, Record::Counter, Op::Read, v, None)?;
        Ok(v)
    })
}

/// A plain write of `read + 1` to the counter, with its history row in the same transaction.
///
/// # Errors
///
/// Storage errors.
pub fn counter_write(fence: &SqliteFence, who: Who, read: i64) -> fencelock::Result<i64> {
    unfenced_tx(fence, move |conn| {
        write_value(conn, Record::Counter, read + 1)?;
        append(conn, who, Record::Counter, Op::Write, read, Some(read + 1))?;
        Ok(read + 1)
    })
}

/// What [`load`] reads back: the history table in commit order and the final values.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// The history table, in commit order.
    pub rows: Vec<StorageRow>,
    /// The fenced record's final value.
    pub fenced: i64,
    /// The counter's final value.
    pub counter: i64,
    /// Each semaphore slot's record's final value.
    pub slots: Vec<i64>,
}

/// The history table in commit order, and the final values.
///
/// # Errors
///
/// Storage errors.
pub fn load(path: &Path) -> fencelock::Result<Loaded> {
    let conn = Connection::open(path).map_err(|e| storage_error("opening the history", e))?;
    let load = || -> rusqlite::Result<Loaded> {
        let mut stmt = conn.prepare(
            "SELECT seq, record, op, client, acq, token, value_read, value_written, mono_ns, slot
             FROM history ORDER BY seq",
        )?;
        let rows = stmt
            .query_map([], |r| {
                let record: String = r.get(1)?;
                let op: String = r.get(2)?;
                Ok(StorageRow {
                    seq: r.get(0)?,
                    record: if record == "fenced" {
                        Record::Fenced
                    } else {
                        Record::Counter
                    },
                    op: if op == "read" { Op::Read } else { Op::Write },
                    client: r.get(3)?,
                    acq: r.get::<_, i64>(4)? as u64,
                    token: r.get::<_, Option<i64>>(5)?.map(|t| t as u64),
                    value_read: r.get(6)?,
                    value_written: r.get(7)?,
                    mono_ns: r.get::<_, i64>(8)? as u64,
                    slot: r.get::<_, Option<i64>>(9)?.map(|s| s as u32),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(Loaded {
            rows,
            fenced: read_value(&conn, Record::Fenced)?,
            counter: read_value(&conn, Record::Counter)?,
            slots: (0..crate::mode::PERMITS)
                .map(|s| read_named(&conn, &slot_record(s)))
                .collect::<rusqlite::Result<_>>()?,
        })
    };
    let _ = conn.execute_batch("BEGIN");
    let out = load().map_err(|e| storage_error("reading the history", e));
    let _ = conn.execute_batch("COMMIT");
    out
}
