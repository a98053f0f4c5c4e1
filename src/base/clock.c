/*
 * base/clock.c — time arithmetic in one place (see base/clock.h).
 */
#include "base/clock.h"

#include <errno.h>

double sl__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct timespec from_seconds(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  if (ts.tv_nsec >= 1000000000L) { /* rounding of the fraction */
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

void sl__sleep_s(double seconds) {
  if (!(seconds > 0))
    return;
  struct timespec ts = from_seconds(seconds);
  /* A signal (the Hub's interrupt handler, a profiler) cuts a nap short; the caller's poll
   * loop does not care, so the rest is not slept. */
  nanosleep(&ts, NULL);
}

struct timespec sl__realtime_in(double seconds) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct timespec add = from_seconds(seconds > 0 ? seconds : 0);
  now.tv_sec += add.tv_sec;
  now.tv_nsec += add.tv_nsec;
  if (now.tv_nsec >= 1000000000L) {
    now.tv_sec++;
    now.tv_nsec -= 1000000000L;
  }
  return now;
}
