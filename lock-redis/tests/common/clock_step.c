/* Preloaded into a server to step its wall clock, as an NTP step or an operator's
 * `date -s` would: CLOCK_REALTIME, gettimeofday() and time() read the kernel's clock
 * plus the milliseconds written in the file named by $CLOCK_STEP_FILE, read again on
 * every call. Monotonic clocks are left alone, as a real step leaves them.
 *
 * It calls the kernel directly and never dlsym() or malloc(), so it also works in
 * servers whose allocator reads the clock while it starts (Debian's redis-server is
 * built with jemalloc, which makes libfaketime recurse and fail). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long step_ms(void) {
  const char *path = getenv("CLOCK_STEP_FILE");
  if (path == NULL) return 0;
  long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[32];
  long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return strtoll(buf, NULL, 10);
}

static int is_wall_clock(clockid_t id) {
  return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  long rc = syscall(SYS_clock_gettime, id, ts);
  if (rc == 0 && is_wall_clock(id)) {
    long long step = step_ms();
    long long ns = (long long)ts->tv_nsec + step % 1000 * 1000000LL;
    ts->tv_sec += step / 1000 + ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    if (ts->tv_nsec < 0) {
      ts->tv_nsec += 1000000000LL;
      ts->tv_sec -= 1;
    }
  }
  return (int)rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
  (void)tz;
  struct timespec ts;
  int rc = clock_gettime(CLOCK_REALTIME, &ts);
  if (rc == 0) {
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
