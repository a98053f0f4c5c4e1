/* check.c — the test harness of check.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "check.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int sl_test_failures;
int sl_test_checks;
int sl_test_rank = -1;

void sl_test_fail(const char *file, int line, const char *fmt, ...) {
  sl_test_failures++;
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (sl_test_rank >= 0)
    fprintf(stderr, "[rank %d] FAIL %s:%d: %s\n", sl_test_rank, file, line, msg);
  else
    fprintf(stderr, "FAIL %s:%d: %s\n", file, line, msg);
}

int sl_test_finish(void) {
  fprintf(stderr, "%d checks, %d failures\n", sl_test_checks, sl_test_failures);
  return sl_test_failures == 0 ? 0 : 1;
}

int sl_test_finish_mpi(MPI_Comm comm) {
  int mine = sl_test_failures;
  int total = 0;
  int checks = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, comm);
  MPI_Allreduce(&sl_test_checks, &checks, 1, MPI_INT, MPI_SUM, comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0)
    fprintf(stderr, "%d checks on all ranks, %d failures\n", checks, total);
  return total == 0 ? 0 : 1;
}

char *sl_test_mkdtemp(const char *tag) {
  const char *base = getenv("TMPDIR");
  if (base == NULL || *base == '\0')
    base = "/tmp";
  char *path = NULL;
  if (asprintf(&path, "%s/sl-%s-XXXXXX", base, tag) < 0)
    return NULL;
  if (mkdtemp(path) == NULL) {
    free(path);
    return NULL;
  }
  return path;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void sl_test_rmtree(const char *path) {
  if (path != NULL)
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void mkparents(const char *path) {
  char *copy = strdup(path);
  if (copy == NULL)
    return;
  for (char *p = copy + 1; *p != '\0'; p++) {
    if (*p == '/') {
      *p = '\0';
      mkdir(copy, 0777);
      *p = '/';
    }
  }
  free(copy);
}

int sl_test_write_file(const char *path, const void *data, size_t n) {
  mkparents(path);
  FILE *f = fopen(path, "wb");
  if (f == NULL)
    return -1;
  size_t w = n > 0 ? fwrite(data, 1, n, f) : 0;
  int rc = fclose(f);
  return (w == n && rc == 0) ? 0 : -1;
}

char *sl_test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  char *buf = NULL;
  size_t cap = 0;
  size_t n = 0;
  for (;;) {
    if (n == cap) {
      size_t ncap = cap != 0 ? cap * 2 : 65536;
      char *b = realloc(buf, ncap + 1);
      if (b == NULL) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = b;
      cap = ncap;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0)
      break;
  }
  fclose(f);
  buf[n] = '\0';
  if (len != NULL)
    *len = n;
  return buf;
}

const char *sl_test_env(const char *name, const char *fallback) {
  const char *v = getenv(name);
  return (v != NULL && *v != '\0') ? v : fallback;
}
