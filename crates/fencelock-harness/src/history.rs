//! What a run records: client events (JSON lines, one file per client), the storage's own
//! history table (commit order), and the faults the nemesis injected.

use serde::{Deserialize, Serialize};

use crate::mode::FaultKind;

/// The record a storage row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Record {
    /// Written through the fenced storage (a token check in fenced modes).
    Fenced,
    /// Written with plain reads and writes: only the lock protects it.
    Counter,
}

impl Record {
    /// The record's name in the storage.
    pub fn name(self) -> &'static str {
        match self {
            Record::Fenced => "fenced",
            Record::Counter => "counter",
        }
    }
}

/// A read or a write in the storage's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// A (fenced) read: recorded so that interleavings show in the commit order.
    Read,
    /// A write of `value_read + 1`.
    Write,
}

/// One committed row of the storage's history table. Rows are appended in the same transaction
/// as the operation they describe, so their order (`seq`) is the storage's commit order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageRow {
    /// Position in the commit order.
    pub seq: i64,
    /// The record.
    pub record: Record,
    /// Read or write.
    pub op: Op,
    /// The client process.
    pub client: u32,
    /// The client's acquisition number: (client, acq) names one critical section.
    pub acq: u64,
    /// The fencing token carried, in fenced modes.
    pub token: Option<u64>,
    /// The value the operation's critical section read (for a write: the read it is based on).
    pub value_read: i64,
    /// The value written (writes only).
    pub value_written: Option<i64>,
    /// Nanoseconds since the run's epoch, taken inside the transaction.
    pub mono_ns: u64,
    /// Semaphore modes: the slot whose fenced record this row is of (each slot has its own,
    /// fenced by the slot's tokens); `None` for the records above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
}

/// One step of a client, as a JSON line in its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientEvent {
    /// The client process.
    pub client: u32,
    /// The acquisition this step belongs to.
    pub acq: u64,
    /// Nanoseconds since the run's epoch (`CLOCK_MONOTONIC`, comparable across processes).
    pub mono_ns: u64,
    /// Wall-clock milliseconds since the Unix epoch.
    pub wall_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What a client step was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum EventKind {
    /// `acquire` was called.
    AcquireStart,
    /// The lock was granted.
    AcquireOk {
        /// The fencing token, in fenced modes.
        token: Option<u64>,
        /// The validity deadline, in nanoseconds since the epoch.
        deadline_ns: u64,
        /// When the granted acquisition attempt started (`deadline - (ttl - drift)`), in
        /// nanoseconds since the epoch: a bound on the grant taken inside the library, which a
        /// pause between the grant and this log line does not move (the event's own stamp does).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt_ns: Option<u64>,
    },
    /// Semaphore modes: the grant of this acquisition (logged just before) is a permit in this
    /// slot.
    Slot {
        /// The slot.
        slot: u32,
    },
    /// `redlock-rwlock` mode: a read lock was granted (its client logged `acquire_start`).
    ReadOk {
        /// The validity deadline, in nanoseconds since the epoch.
        deadline_ns: u64,
        /// When the granted attempt started, as for [`EventKind::AcquireOk`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt_ns: Option<u64>,
        /// The last writer's fencing token the read lock reported.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_writer: Option<u64>,
    },
    /// `acquire` gave up.
    AcquireFail {
        /// The error kind (`contention`, `unavailable`, `too_slow`, `timeout/<last>`...).
        cause: String,
        /// The error as the library words it (which nodes refused or did not answer, and why).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A fenced read was refused (its token is older than one the storage accepted).
    ReadRejected {
        /// The record.
        record: Record,
        /// The token presented.
        presented: u64,
        /// The newest token the storage had accepted.
        current: u64,
    },
    /// A write committed.
    WriteAccepted {
        /// The record.
        record: Record,
        /// The value written.
        value: i64,
    },
    /// A fenced write was refused as stale.
    WriteRejected {
        /// The record.
        record: Record,
        /// The token presented.
        presented: u64,
        /// The newest token the storage had accepted.
        current: u64,
    },
    /// The storage failed (not a fencing refusal).
    StorageError {
        /// The error.
        message: String,
    },
    /// The client stops itself (SIGSTOP) right after its reads, as the nemesis asked.
    SelfPause,
    /// The client holds this lock for a long time (still within validity), as the nemesis asked.
    LongHold,
    /// `release` was called (the end of the critical section as the client sees it).
    ReleaseStart,
    /// `release` returned.
    Release {
        /// Whether a quorum still held our key.
        ok: bool,
        /// The error kind when not.
        cause: Option<String>,
    },
    /// `run` mode: a process of the command started (stamped by the process itself).
    ProcStart {
        /// Which of the command's processes (`main`, `bg`, `setsid`).
        proc: String,
        /// Its pid.
        pid: u32,
    },
    /// `run` mode: the process is still alive.
    ProcBeat {
        /// Its pid.
        pid: u32,
    },
    /// `run` mode: the process finished its work and exits.
    ProcEnd {
        /// Its pid.
        pid: u32,
    },
    /// `run` mode: `fencelock run` exited.
    RunExit {
        /// Its exit code, when it exited.
        code: Option<i32>,
        /// The signal that killed it, when one did (9: the nemesis's SIGKILL).
        signal: Option<i32>,
    },
}

/// One fault the nemesis injected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// The kind.
    pub kind: FaultKind,
    /// Node indexes affected.
    pub nodes: Vec<usize>,
    /// Client ids affected.
    pub clients: Vec<u32>,
    /// Start, nanoseconds since the epoch.
    pub start_ns: u64,
    /// End (when everything was restored), nanoseconds since the epoch.
    pub end_ns: u64,
    /// What was done, for people.
    pub detail: String,
}

#[cfg(test)]
impl FaultEvent {
    /// One event of each kind, affecting nothing and lasting no time: for tests that only ask
    /// which kinds fired.
    pub(crate) fn of_kinds(kinds: &[FaultKind]) -> Vec<FaultEvent> {
        kinds
            .iter()
            .map(|&kind| FaultEvent {
                kind,
                nodes: vec![],
                clients: vec![],
                start_ns: 0,
                end_ns: 0,
                detail: String::new(),
            })
            .collect()
    }
}

/// Everything the checker reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The storage's history table, in commit order.
    pub rows: Vec<StorageRow>,
    /// All clients' events (any order; the checker sorts what it needs).
    pub events: Vec<ClientEvent>,
    /// The fenced record's final value.
    pub final_fenced: i64,
    /// The counter's final value.
    pub final_counter: i64,
    /// Semaphore modes: each slot's fenced record's final value.
    #[serde(default)]
    pub final_slots: Vec<i64>,
}
