/* A wall clock that can be stepped while the process runs, as an NTP
 * correction steps the clock of a Redis host (LD_PRELOADed into the real
 * redis-server by scrapy_walsh_research.sandbox.redis_server).
 *
 * CLOCK_REALTIME (and gettimeofday, time) read the real clock plus an offset
 * in nanoseconds kept in the file named by WALSH_CLOCK_OFFSET_FILE (8 bytes,
 * native int64, mapped shared: a write by the test is seen at once).
 * CLOCK_MONOTONIC is left alone, as a step leaves it. The real clock is read
 * with the system call itself, so nothing here looks a symbol up or
 * allocates: libfaketime 0.9.10 (Debian's, and the copy python-libfaketime
 * ships) recursed into clock_gettime through redis-server's jemalloc and
 * killed it the moment its offset file changed. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *offset_ns;

__attribute__((constructor)) static void map_offset(void) {
    const char *path = getenv("WALSH_CLOCK_OFFSET_FILE");
    if (path == NULL) return;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED) offset_ns = p;
}

static int real_clock(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = real_clock(id, ts);
    if (rc == 0 && offset_ns != NULL &&
        (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *offset_ns;
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
