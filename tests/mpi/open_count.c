/*
 * open_count.c — a test-only counter of open calls, for tests/mpi/test_startup.py where strace is
 * not installed: a shared object put in front of the C library (LD_PRELOAD) that passes every
 * open, open64, openat and openat64 on, and records the path of each call whose path contains
 * $SL_OPEN_COUNT_MATCH. At exit it writes one line per recorded call, `open("PATH")`, to
 * $SL_OPEN_COUNT_FILE (the same quoting strace uses, so the script reads both alike). It knows
 * nothing of the library: it sees the calls the process makes, as strace would.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEEN_MAX 4096
#define PATH_CAP 1024

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char seen[SEEN_MAX][PATH_CAP];
static int n_seen;
static int dropped;

static void note(const char *path) {
  const char *match = getenv("SL_OPEN_COUNT_MATCH");
  if (path == NULL || match == NULL || match[0] == '\0' || strstr(path, match) == NULL)
    return;
  pthread_mutex_lock(&mu);
  if (n_seen < SEEN_MAX)
    snprintf(seen[n_seen++], PATH_CAP, "%s", path);
  else
    dropped++;
  pthread_mutex_unlock(&mu);
}

static mode_t mode_of(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);

#define PASS_OPEN(name)                                                                                      \
  int name(const char *path, int flags, ...) {                                                               \
    va_list ap;                                                                                              \
    va_start(ap, flags);                                                                                     \
    mode_t m = mode_of(flags, ap);                                                                           \
    va_end(ap);                                                                                              \
    note(path);                                                                                              \
    open_fn real = (open_fn)dlsym(RTLD_NEXT, #name);                                                         \
    return real(path, flags, m);                                                                             \
  }
#define PASS_OPENAT(name)                                                                                    \
  int name(int dir, const char *path, int flags, ...) {                                                      \
    va_list ap;                                                                                              \
    va_start(ap, flags);                                                                                     \
    mode_t m = mode_of(flags, ap);                                                                           \
    va_end(ap);                                                                                              \
    note(path);                                                                                              \
    openat_fn real = (openat_fn)dlsym(RTLD_NEXT, #name);                                                     \
    return real(dir, path, flags, m);                                                                        \
  }

PASS_OPEN(open)
PASS_OPEN(open64)
PASS_OPENAT(openat)
PASS_OPENAT(openat64)

/* What _FORTIFY_SOURCE makes of an open whose flags the compiler cannot see. */
int __open_2(const char *path, int flags) {
  return open(path, flags);
}
int __open64_2(const char *path, int flags) {
  return open64(path, flags);
}
int __openat_2(int dir, const char *path, int flags) {
  return openat(dir, path, flags);
}

__attribute__((destructor)) static void write_out(void) {
  const char *out = getenv("SL_OPEN_COUNT_FILE");
  if (out == NULL || out[0] == '\0')
    return;
  FILE *f = fopen(out, "w"); /* its own path does not match */
  if (f == NULL)
    return;
  for (int i = 0; i < n_seen; i++)
    fprintf(f, "open(\"%s\")\n", seen[i]);
  if (dropped > 0)
    fprintf(f, "dropped %d\n", dropped);
  fclose(f);
}
