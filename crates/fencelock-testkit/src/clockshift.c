/*
 * fencelock-testkit clock shift shim.
 *
 * LD_PRELOADed into a child process (redis-server, a lock client) to move its
 * wall clock by a signed number of milliseconds read from the file named by
 * FENCELOCK_CLOCK_OFFSET_FILE. Only wall-clock readings move (CLOCK_REALTIME,
 * CLOCK_REALTIME_COARSE, gettimeofday, time); monotonic clocks pass through, as
 * a real NTP step or a wrong wall clock would leave them.
 *
 * Why it is written this way:
 * - redis-server links jemalloc, which may read the clock while it initialises.
 *   A shim that calls malloc or stdio (libfaketime does) can recurse into the
 *   allocator and hang. This file never allocates: the hot path uses only
 *   getenv (reads environ), open, read, close and a stack buffer.
 * - The real functions are resolved with dlsym(RTLD_NEXT) in a constructor.
 *   Until then (a clock read from another library's constructor) the raw
 *   syscall stands in, so dlsym is never called from inside an allocator.
 * - The offset file's path is copied at load time: some programs (redis's
 *   setproctitle) overwrite the original environment strings later.
 * - The file is re-read on every call, so a new offset takes effect at once.
 *   The writer replaces the file by rename, so a reader never sees half a value.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);

static clock_gettime_fn real_clock_gettime;
static gettimeofday_fn real_gettimeofday;
/*
 * A copy, not the pointer getenv returns: redis-server (setproctitle) moves
 * environ and overwrites the original strings with its process title.
 */
static char offset_path[4096];
static int offset_path_set;

__attribute__((constructor)) static void fencelock_clockshift_init(void) {
    const char *path = getenv("FENCELOCK_CLOCK_OFFSET_FILE");
    if (path != NULL) {
        size_t len = strlen(path);
        if (len < sizeof(offset_path)) {
            memcpy(offset_path, path, len + 1);
            offset_path_set = 1;
        }
    }
    real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    real_gettimeofday = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");
}

static int raw_clock_gettime(clockid_t clk, struct timespec *ts) {
    clock_gettime_fn f = real_clock_gettime;
    if (f != NULL) {
        return f(clk, ts);
    }
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

/* Offset in milliseconds; 0 when the file is missing, empty or malformed. */
static long long read_offset_ms(void) {
    const char *path = offset_path_set ? offset_path : NULL;
    if (path == NULL) {
        path = getenv("FENCELOCK_CLOCK_OFFSET_FILE");
        if (path == NULL) {
            return 0;
        }
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    char buf[64];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    const char *p = buf;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
        p++;
    }
    int negative = 0;
    if (*p == '-') {
        negative = 1;
        p++;
    } else if (*p == '+') {
        p++;
    }
    long long value = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 18) {
        value = value * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (digits == 0) {
        return 0;
    }
    return negative ? -value : value;
}

static void shift_timespec(struct timespec *ts, long long offset_ms) {
    long long nsec = (long long)ts->tv_nsec + (offset_ms % 1000) * 1000000LL;
    long long sec = (long long)ts->tv_sec + offset_ms / 1000;
    if (nsec >= 1000000000LL) {
        nsec -= 1000000000LL;
        sec += 1;
    } else if (nsec < 0) {
        nsec += 1000000000LL;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)nsec;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int rc = raw_clock_gettime(clk, ts);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) {
        long long off = read_offset_ms();
        if (off != 0) {
            shift_timespec(ts, off);
        }
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    int rc;
    gettimeofday_fn f = real_gettimeofday;
    if (f != NULL) {
        rc = f(tv, tz);
    } else {
        rc = (int)syscall(SYS_gettimeofday, tv, tz);
    }
    if (rc == 0) {
        long long off = read_offset_ms();
        if (off != 0) {
            struct timespec ts;
            ts.tv_sec = tv->tv_sec;
            ts.tv_nsec = (long)tv->tv_usec * 1000L;
            shift_timespec(&ts, off);
            tv->tv_sec = ts.tv_sec;
            tv->tv_usec = (suseconds_t)(ts.tv_nsec / 1000L);
        }
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
