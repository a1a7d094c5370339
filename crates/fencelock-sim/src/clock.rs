//! Virtual time for the whole client: `std::time::Instant` and `SystemTime` read
//! `clock_gettime`, and a simulation binary defines that symbol itself ([`crate::virtual_clock!`]),
//! which the linker then binds every caller in the executable to (the library's, tokio's, the
//! redis crate's). On a thread where a run is active, it answers from tokio's paused clock; on
//! every other thread, and for other clocks, it passes the call on to the C library. So the
//! library needs no time seam of its own, and a run's times are a function of its seed.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What the clocks read when a run activates.
#[derive(Clone, Copy)]
struct Anchor {
    real: std::time::Instant,
    mono: libc::timespec,
    /// The wall clock's reading at the anchor, and the client's wall offset (ms).
    wall_ms: i64,
    wall_offset_ms: i64,
}

thread_local! {
    static ACTIVE: Cell<Option<Anchor>> = const { Cell::new(None) };
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// The wall offset (ms) of the client whose task is being polled (see [`WallOffset`]).
    static CLIENT_WALL: Cell<i64> = const { Cell::new(0) };
    /// A monotonic reading the next `clock_gettime` returns as it is (see [`activate`]).
    static PROBE: Cell<Option<libc::timespec>> = const { Cell::new(None) };
}

fn add(t: libc::timespec, d: Duration) -> libc::timespec {
    let nanos = t.tv_nsec as u64 + u64::from(d.subsec_nanos());
    libc::timespec {
        tv_sec: t.tv_sec + d.as_secs() as libc::time_t + (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    }
}

fn sub(t: libc::timespec, d: Duration) -> libc::timespec {
    let total = t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128 - d.as_nanos() as i128;
    libc::timespec {
        tv_sec: total.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: total.rem_euclid(1_000_000_000) as libc::c_long,
    }
}

/// One client's own wall clock: while `inner` is polled, `SystemTime::now` on this thread reads
/// `offset` ms more than the run's wall clock, plus its drift (`with_drift`: so many millionths
/// of the virtual time since the wrapper was made). It covers what the client does in its own
/// task (an acquisition's token proposal among it); tasks the library spawns (the connection
/// drivers, the extenders) read the run's wall clock. A fault moves `offset`.
#[derive(Debug)]
pub struct WallOffset<F> {
    offset: std::rc::Rc<Cell<i64>>,
    drift_ppm: i64,
    since: tokio::time::Instant,
    inner: std::pin::Pin<Box<F>>,
}

impl<F: std::future::Future> WallOffset<F> {
    pub fn new(offset: std::rc::Rc<Cell<i64>>, inner: F) -> WallOffset<F> {
        WallOffset {
            offset,
            drift_ppm: 0,
            since: tokio::time::Instant::now(),
            inner: Box::pin(inner),
        }
    }

    /// The clock runs `ppm` millionths fast (negative: slow) from now on.
    pub fn with_drift(mut self, ppm: i64) -> WallOffset<F> {
        self.drift_ppm = ppm;
        self.since = tokio::time::Instant::now();
        self
    }

    /// The offset now (ms): the set offset and what the drift added since.
    fn now_offset(&self) -> i64 {
        if self.drift_ppm == 0 {
            return self.offset.get();
        }
        let ms = self.since.elapsed().as_millis() as i64;
        self.offset.get() + ms * self.drift_ppm / 1_000_000
    }
}

impl<F: std::future::Future> std::future::Future for WallOffset<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let offset = self.now_offset();
        let before = CLIENT_WALL.with(|w| w.replace(offset));
        let out = self.inner.as_mut().poll(cx);
        CLIENT_WALL.with(|w| w.set(before));
        out
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

type ClockFn = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int;

unsafe fn next_clock_gettime() -> ClockFn {
    let mut f = NEXT.load(Ordering::Acquire);
    if f == 0 {
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"clock_gettime".as_ptr()) } as usize;
        assert!(f != 0, "no clock_gettime in the C library");
        NEXT.store(f, Ordering::Release);
    }
    unsafe { std::mem::transmute::<usize, ClockFn>(f) }
}

/// Makes this thread's clocks virtual (tokio's paused clock, which must be running on it), the
/// wall clock starting at `wall_ms`. Ends with the guard.
pub fn activate(wall_ms: i64) -> Active {
    let mut probe_at = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { next_clock_gettime()(libc::CLOCK_MONOTONIC, &mut probe_at) };
    // `std`'s Instant for the reading `probe_at` (the interposed function returns it once).
    PROBE.with(|p| p.set(Some(probe_at)));
    let probe = std::time::Instant::now();
    PROBE.with(|p| p.set(None));
    BUSY.with(|b| b.set(true));
    let real = tokio::time::Instant::now().into_std();
    BUSY.with(|b| b.set(false));
    // The monotonic reading of tokio's paused "now" itself, so that `std`'s Instant and tokio's
    // agree to the nanosecond. Anchored at a fresh reading instead, the two would differ by the
    // real time between the runtime's start and this call (more on a loaded machine), and a
    // deadline taken from one and slept on with the other would round to another millisecond
    // of tokio's timer wheel: a run would no longer be a function of its seed alone.
    let mono = if real >= probe {
        add(probe_at, real - probe)
    } else {
        sub(probe_at, probe - real)
    };
    ACTIVE.with(|a| {
        a.set(Some(Anchor {
            real,
            mono,
            wall_ms,
            wall_offset_ms: 0,
        }))
    });
    Active(())
}

/// Moves this thread's wall clock (`SystemTime::now`) by `ms` more (a client's clock jump).
pub fn jump_wall(ms: i64) {
    ACTIVE.with(|a| {
        if let Some(mut anchor) = a.get() {
            anchor.wall_offset_ms += ms;
            a.set(Some(anchor));
        }
    });
}

/// Ends a run's virtual clocks on this thread.
#[derive(Debug)]
pub struct Active(());

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(None));
    }
}

fn write(tp: *mut libc::timespec, d: Duration, base: libc::timespec) {
    unsafe { tp.write(add(base, d)) };
}

/// The body of the interposed `clock_gettime`.
///
/// # Safety
/// `tp` must be valid for a write, as for the C function.
pub unsafe fn clock_gettime(clk: libc::clockid_t, tp: *mut libc::timespec) -> libc::c_int {
    let virtual_clock = matches!(
        clk,
        libc::CLOCK_MONOTONIC | libc::CLOCK_REALTIME | libc::CLOCK_BOOTTIME
    );
    if clk == libc::CLOCK_MONOTONIC && !tp.is_null() {
        if let Some(at) = PROBE.try_with(|p| p.take()).ok().flatten() {
            unsafe { tp.write(at) };
            return 0;
        }
    }
    if virtual_clock && !tp.is_null() {
        let anchor = ACTIVE.try_with(|a| a.get()).ok().flatten();
        let busy = BUSY.try_with(|b| b.get()).unwrap_or(true);
        if let (Some(anchor), false) = (anchor, busy) {
            BUSY.with(|b| b.set(true));
            let now = tokio::time::Instant::now().into_std();
            BUSY.with(|b| b.set(false));
            let d = now.saturating_duration_since(anchor.real);
            if clk == libc::CLOCK_REALTIME {
                let client = CLIENT_WALL.try_with(|w| w.get()).unwrap_or(0);
                let ms = anchor.wall_ms + anchor.wall_offset_ms + client;
                let base = libc::timespec {
                    tv_sec: ms.div_euclid(1000) as libc::time_t,
                    tv_nsec: (ms.rem_euclid(1000) * 1_000_000) as libc::c_long,
                };
                write(tp, d, base);
            } else {
                write(tp, d, anchor.mono);
            }
            return 0;
        }
    }
    unsafe { next_clock_gettime()(clk, tp) }
}

/// Defines `clock_gettime` in the simulation binary (see the module's doc). Use once, in the
/// binary or test crate that runs simulations.
#[macro_export]
macro_rules! virtual_clock {
    () => {
        /// Interposed: the simulation's virtual clocks (`fencelock_sim::clock`).
        ///
        /// # Safety
        /// As the C function's.
        #[no_mangle]
        pub unsafe extern "C" fn clock_gettime(
            clk: $crate::clock::ClockId,
            tp: *mut $crate::clock::Timespec,
        ) -> ::std::os::raw::c_int {
            unsafe { $crate::clock::clock_gettime(clk, tp) }
        }
    };
}

pub type ClockId = libc::clockid_t;
pub type Timespec = libc::timespec;
