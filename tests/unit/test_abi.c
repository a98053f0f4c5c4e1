/*
 * test_abi.c — the version and the ABI of shardload/core.h section 0, no MPI:
 *   version   sl_version and sl_version_hex are the values of the header the library was built
 *             with (this test is built with the same), the hex packed 0x00MMmmpp;
 *   sl_abi    the size of every public struct and the value of every listed constant; 0 for a
 *             name it does not know and for NULL;
 *   sizes     the three structs the caller allocates, through their public calls on the llama
 *             fixture (sl_model_tensor, sl_dryrun_rank_stats, and sl_loader_param_source over a
 *             one-rank table of sl_comm_ops): a caller whose .size is the first version's gets
 *             exactly those bytes, equal to a full-size caller's, and the guard bytes after them
 *             stay untouched; a caller with a larger .size gets zeros past the library's struct,
 *             nothing beyond its .size; .size 0 or one byte short of the first version is
 *             SL_STATUS_INVALID_ARGUMENT with nothing written and a message naming the struct and
 *             both sizes (sl_loader_error for the loader, the error log for the other two).
 */
#include "check.h"
#include "solo_comm.h"

#include "api/abi.h"
#include "shardload/core.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTE 0xA5
#define GUARD_BYTES 64

/* ---------------------------------------------------------------------------------------------
 * Version and sl_abi
 * ------------------------------------------------------------------------------------------- */

static void check_version(void) {
  CHECK_STR(sl_version(), SL_VERSION_STRING);
  CHECK_EQ_U64(sl_version_hex(), SL_VERSION_HEX);
  CHECK_EQ_U64(SL_VERSION_HEX, ((uint32_t)SL_VERSION_MAJOR << 16) | ((uint32_t)SL_VERSION_MINOR << 8) |
                                   (uint32_t)SL_VERSION_PATCH);
  char text[32];
  snprintf(text, sizeof text, "%d.%d.%d", SL_VERSION_MAJOR, SL_VERSION_MINOR, SL_VERSION_PATCH);
  CHECK_STR(SL_VERSION_STRING, text);
#if SL_VERSION_HEX < 0x000100
#error SL_VERSION_HEX is usable in #if, and no version before the first minor one has this header
#endif
}

static void check_abi_table(void) {
  CHECK_EQ_U64(sl_abi("sl_param"), sizeof(sl_param));
  CHECK_EQ_U64(sl_abi("sl_param_source"), sizeof(sl_param_source));
  CHECK_EQ_U64(sl_abi("sl_rank_stats"), sizeof(sl_rank_stats));
  CHECK_EQ_U64(sl_abi("sl_tensor_info"), sizeof(sl_tensor_info));
  CHECK_EQ_U64(sl_abi("sl_comm_ops"), sizeof(sl_comm_ops));
  CHECK_EQ_U64(sl_abi("SL_MAX_DIMS"), SL_MAX_DIMS);
  CHECK_EQ_U64(sl_abi("SL_COMM_OPS_VERSION"), SL_COMM_OPS_VERSION);
  CHECK_EQ_U64(sl_abi("SL_VERSION_HEX"), SL_VERSION_HEX);
  CHECK_EQ_U64(sl_abi("SL_DTYPE_COUNT"), SL_DTYPE_COUNT);
  CHECK_EQ_U64(sl_abi("SL_STATUS_COUNT"), SL_STATUS_COUNT);
  CHECK_EQ_U64(sl_abi("sl_no_such_struct"), 0);
  CHECK_EQ_U64(sl_abi(""), 0);
  CHECK_EQ_U64(sl_abi(NULL), 0);
  /* The first versions: the struct's fields today, up to its tail padding. */
  CHECK(SL__PARAM_SOURCE_SIZE_V1 <= sizeof(sl_param_source) &&
        SL__PARAM_SOURCE_SIZE_V1 + 8 > sizeof(sl_param_source));
  CHECK(SL__RANK_STATS_SIZE_V1 <= sizeof(sl_rank_stats) &&
        SL__RANK_STATS_SIZE_V1 + 8 > sizeof(sl_rank_stats));
  CHECK(SL__TENSOR_INFO_SIZE_V1 <= sizeof(sl_tensor_info) &&
        SL__TENSOR_INFO_SIZE_V1 + 8 > sizeof(sl_tensor_info));
}

/* ---------------------------------------------------------------------------------------------
 * The size rule, for one struct through its public call
 * ------------------------------------------------------------------------------------------- */

/* One public call that fills a caller's struct. */
typedef struct sized_call {
  const char *type; /* "sl_tensor_info" */
  size_t size;      /* sizeof the struct in this header */
  size_t v1_size;   /* its first version's */
  sl_status (*fill)(void *ctx, void *out);
  const char *(*message)(void *ctx); /* where the refusal is said */
  bool first_wins;                   /* the message is the handle's first error (a loader's) */
  void *ctx;
} sized_call;

/* The message of the last error-level log line (the calls whose handle keeps no message). */
static char last_log[4096];

static void capture_log(sl_log_level level, int rank, const char *line, void *user) {
  (void)rank;
  (void)user;
  if (level == SL_LOG_ERROR)
    snprintf(last_log, sizeof last_log, "%s", line);
}

static const char *log_message(void *ctx) {
  (void)ctx;
  return last_log;
}

/* A caller's buffer: .size, then guard bytes everywhere up to the end of the buffer. */
static unsigned char *guarded(size_t n, size_t size) {
  unsigned char *b = malloc(n);
  if (b != NULL) {
    memset(b, GUARD_BYTE, n);
    memcpy(b, &size, sizeof size);
  }
  return b;
}

static bool guard_intact(const unsigned char *b, size_t from, size_t to) {
  for (size_t i = from; i < to; i++)
    if (b[i] != GUARD_BYTE)
      return false;
  return true;
}

/* A caller of the first version, with guard bytes after its struct: exactly its bytes. */
static void check_first_version(const sized_call *c, const unsigned char *full) {
  size_t n = c->size + GUARD_BYTES;
  unsigned char *b = guarded(n, c->v1_size);
  if (b == NULL)
    return;
  CHECKF(c->fill(c->ctx, b) == SL_STATUS_OK, "%s: a first-version caller is served", c->type);
  size_t size;
  memcpy(&size, b, sizeof size);
  CHECKF(size == c->v1_size, "%s: .size stays the caller's (%zu, not %zu)", c->type, c->v1_size, size);
  CHECKF(memcmp(b + sizeof size, full + sizeof size, c->v1_size - sizeof size) == 0,
         "%s: a first-version caller gets the fields a full-size caller gets", c->type);
  CHECKF(guard_intact(b, c->v1_size, n), "%s: nothing written past a first-version caller's %zu bytes",
         c->type, c->v1_size);
  free(b);
}

/* A caller newer than the library: the library's fields, zeros up to its .size, nothing after. */
static void check_newer_caller(const sized_call *c, const unsigned char *full) {
  size_t size = c->size + 16, n = size + GUARD_BYTES;
  unsigned char *b = guarded(n, size);
  if (b == NULL)
    return;
  CHECKF(c->fill(c->ctx, b) == SL_STATUS_OK, "%s: a newer caller is served", c->type);
  CHECKF(memcmp(b + sizeof size, full + sizeof size, c->size - sizeof size) == 0,
         "%s: a newer caller gets the library's fields", c->type);
  bool zeros = true;
  for (size_t i = c->size; i < size; i++)
    zeros = zeros && b[i] == 0;
  CHECKF(zeros, "%s: the bytes the library does not know are zero", c->type);
  CHECKF(guard_intact(b, size, n), "%s: nothing written past a newer caller's .size", c->type);
  free(b);
}

/* .size too small: refused, nothing written, the message names the struct and both sizes (for a
 * handle whose first error wins, the first refusal's: .size 0). */
static void check_refused(const sized_call *c, size_t size) {
  size_t n = c->size + GUARD_BYTES;
  unsigned char *b = guarded(n, size);
  if (b == NULL)
    return;
  last_log[0] = '\0';
  CHECKF(c->fill(c->ctx, b) == SL_STATUS_INVALID_ARGUMENT, "%s: .size %zu is refused", c->type, size);
  CHECKF(guard_intact(b, sizeof size, n), "%s: nothing written for .size %zu", c->type, size);
  if (c->first_wins && size != 0) {
    free(b);
    return;
  }
  const char *msg = c->message(c->ctx);
  char want[128];
  snprintf(want, sizeof want, "%s.size is %zu bytes", c->type, size);
  CHECK_CONTAINS(msg, want);
  snprintf(want, sizeof want, "first version's %zu", c->v1_size);
  CHECK_CONTAINS(msg, want);
  snprintf(want, sizeof want, "sizeof(%s) (%zu bytes in this library)", c->type, c->size);
  CHECK_CONTAINS(msg, want);
  free(b);
}

static void check_sized(const sized_call *c) {
  unsigned char *full = guarded(c->size, c->size);
  if (full == NULL)
    return;
  CHECKF(c->fill(c->ctx, full) == SL_STATUS_OK, "%s: a full-size caller is served", c->type);
  check_first_version(c, full);
  check_newer_caller(c, full);
  free(full);
  /* The refusals last: the loader's message is its first error. */
  check_refused(c, 0);
  check_refused(c, c->v1_size - 1);
  check_refused(c, (size_t)1 << 40); /* an uninitialized .size: nothing zeroed past the struct */
}

/* ---------------------------------------------------------------------------------------------
 * The three public calls
 * ------------------------------------------------------------------------------------------- */

static sl_status fill_tensor(void *ctx, void *out) {
  return sl_model_tensor(ctx, 1, out);
}

static sl_status fill_rank_stats(void *ctx, void *out) {
  return sl_dryrun_rank_stats(ctx, 1, out);
}

typedef struct source_ctx {
  sl_loader *l;
  size_t index; /* a parameter with a source */
} source_ctx;

static sl_status fill_source(void *ctx, void *out) {
  source_ctx *s = ctx;
  return sl_loader_param_source(s->l, s->index, 0, out);
}

static const char *loader_message(void *ctx) {
  return sl_loader_error(((source_ctx *)ctx)->l);
}

static void check_param_source(const char *llama) {
  static uint64_t raised;
  sl_comm_ops ops;
  sl_config *cfg;
  sl_loader *l;
  sl_status st = solo_planned_loader(llama, &raised, &ops, &cfg, &l);
  source_ctx s = {.l = l};
  while (st == SL_STATUS_OK && s.index < sl_loader_param_count(l) &&
         sl_loader_param_source_count(l, s.index) == 0)
    s.index++;
  if (st == SL_STATUS_OK && s.index < sl_loader_param_count(l)) {
    sized_call c = {"sl_param_source",
                    sizeof(sl_param_source),
                    SL__PARAM_SOURCE_SIZE_V1,
                    fill_source,
                    loader_message,
                    true,
                    &s};
    check_sized(&c);
    sl_param_source src = SL_PARAM_SOURCE_INIT;
    CHECK(sl_loader_param_source(l, s.index, 0, &src) == SL_STATUS_OK && src.tensor != NULL && src.rows > 0);
  }
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
}

static void check_rank_stats(const char *llama) {
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", llama);
  sl_config_set(cfg, "tp", "2");
  sl_dryrun *d = NULL;
  sl_status st = sl_dryrun_create(cfg, 2, &d);
  CHECKF(st == SL_STATUS_OK, "sl_dryrun_create: %s", sl_config_error(cfg));
  if (st == SL_STATUS_OK) {
    sized_call c = {"sl_rank_stats",
                    sizeof(sl_rank_stats),
                    SL__RANK_STATS_SIZE_V1,
                    fill_rank_stats,
                    log_message,
                    false,
                    d};
    check_sized(&c);
    sl_rank_stats s = SL_RANK_STATS_INIT;
    CHECK(sl_dryrun_rank_stats(d, 1, &s) == SL_STATUS_OK && s.bytes_needed > 0 && s.params > 0);
  }
  sl_dryrun_destroy(d);
  sl_config_destroy(cfg);
}

static void check_tensor_info(const char *llama) {
  sl_model *m = NULL;
  char *error = NULL;
  sl_status st = sl_model_open(llama, NULL, &m, &error);
  CHECKF(st == SL_STATUS_OK, "sl_model_open(%s): %s", llama, error != NULL ? error : "?");
  free(error);
  if (st == SL_STATUS_OK) {
    sized_call c = {"sl_tensor_info",
                    sizeof(sl_tensor_info),
                    SL__TENSOR_INFO_SIZE_V1,
                    fill_tensor,
                    log_message,
                    false,
                    m};
    check_sized(&c);
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    CHECK(sl_model_tensor(m, 1, &t) == SL_STATUS_OK && t.name != NULL && t.nbytes > 0);
  }
  sl_model_close(m);
}

int main(void) {
  check_version();
  check_abi_table();
  char llama[4096];
  snprintf(llama, sizeof llama, "%s/llama", sl_test_env("SL_FIXTURES", ".fixtures"));
  sl_log_set_callback(capture_log, NULL);
  check_tensor_info(llama);
  check_rank_stats(llama);
  check_param_source(llama);
  sl_log_set_callback(NULL, NULL);
  return sl_test_finish();
}
