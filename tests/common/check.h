/*
 * check.h — tiny test harness. CHECK records a failure (file:line and message) and goes on, so
 * one run shows every broken case; sl_test_finish() prints the count and returns the exit code.
 * In MPI tests, sl_test_finish_mpi() sums failures over all ranks so that every rank agrees.
 */
#ifndef SL_TEST_CHECK_H
#define SL_TEST_CHECK_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern int sl_test_failures;
extern int sl_test_checks;
extern int sl_test_rank; /* -1 outside MPI */

void sl_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define CHECK(cond)                                                                                          \
  do {                                                                                                       \
    sl_test_checks++;                                                                                        \
    if (!(cond))                                                                                             \
      sl_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                                                  \
  } while (0)

#define CHECKF(cond, ...)                                                                                    \
  do {                                                                                                       \
    sl_test_checks++;                                                                                        \
    if (!(cond))                                                                                             \
      sl_test_fail(__FILE__, __LINE__, __VA_ARGS__);                                                         \
  } while (0)

#define CHECK_EQ_U64(a, b)                                                                                   \
  do {                                                                                                       \
    uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                                         \
    sl_test_checks++;                                                                                        \
    if (a_ != b_)                                                                                            \
      sl_test_fail(__FILE__, __LINE__, "%s == %s: %llu != %llu", #a, #b, (unsigned long long)a_,             \
                   (unsigned long long)b_);                                                                  \
  } while (0)

#define CHECK_STR(a, b)                                                                                      \
  do {                                                                                                       \
    const char *a_ = (a), *b_ = (b);                                                                         \
    sl_test_checks++;                                                                                        \
    if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                                                     \
      sl_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",             \
                   b_ ? b_ : "(null)");                                                                      \
  } while (0)

/* Checks that haystack contains needle. */
#define CHECK_CONTAINS(haystack, needle)                                                                     \
  do {                                                                                                       \
    const char *h_ = (haystack), *n_ = (needle);                                                             \
    sl_test_checks++;                                                                                        \
    if (h_ == NULL || strstr(h_, n_) == NULL)                                                                \
      sl_test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);            \
  } while (0)

int sl_test_finish(void);
/* Collective over comm: sums failures; every rank returns the same exit code. */
int sl_test_finish_mpi(MPI_Comm comm);

/* A fresh temporary directory (removed by sl_test_rmtree). Caller frees. */
char *sl_test_mkdtemp(const char *tag);
void sl_test_rmtree(const char *path);
/* Writes bytes to path (creating parents). Returns 0 on success. */
int sl_test_write_file(const char *path, const void *data, size_t n);
/* The whole file, NUL-terminated (not counted in *len; len may be NULL), or NULL. Caller frees. */
char *sl_test_read_file(const char *path, size_t *len);
/* Environment variable or a default. */
const char *sl_test_env(const char *name, const char *fallback);

#endif
