/*
 * base/clock.h — the one owner of time arithmetic: the monotonic clock every deadline is measured
 * on, naps between polls, and the absolute times pthread_cond_timedwait wants. Deadlines
 * themselves are plain doubles (sl__now() + seconds); the conversions to struct timespec, and
 * the carry of nanoseconds into seconds, are written only here.
 */
#ifndef SL_CLOCK_H
#define SL_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock (deadlines, durations). */
double sl__now(void);

/* Sleeps for `seconds` (a nap between polls; negative or zero: returns at once). */
void sl__sleep_s(double seconds);

/* The CLOCK_REALTIME time `seconds` from now, as pthread_cond_timedwait takes it (condition
 * variables made with default attributes measure on the real-time clock). */
struct timespec sl__realtime_in(double seconds);

#endif
