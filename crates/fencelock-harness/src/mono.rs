//! The monotonic clock every process of a run stamps its events with.
//!
//! `CLOCK_MONOTONIC` is one clock for the whole machine on Linux, so readings taken in different
//! processes compare directly; the harness passes its own reading at start (the epoch) to each
//! client, and every event is stored as nanoseconds since that epoch. `std::time::Instant` uses
//! the same clock but does not expose its value, hence the direct call.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds on `CLOCK_MONOTONIC` (an arbitrary but machine-wide origin).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds of wall-clock time since the Unix epoch (for people reading the logs).
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
