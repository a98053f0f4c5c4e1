/*
 * test_sharded_state.c — pre-sharded checkpoints back in (docs/spec/FILES.md §1.4) at the MPI world
 * size it runs with (1, 2, 3 and 4 ranks).
 *
 * Each case loads a fixture in one layout (checked byte for byte against the independent
 * reference by the shared driver), saves it with sl_loader_save_sharded, then loads the saved
 * folder three ways: with load format auto and no layout flags (auto recognises the folder, the
 * saved layout is taken: the report says the case's tp/pp/dp), with sharded_state and no flags, and
 * with sharded_state and the saved tp/pp/dp given. On every rank each table must hold exactly the
 * saved entries (the first table less zero-size entries and aliases) with the same dtype, local
 * shape and bytes; no rank may read a byte another rank saved (nothing is broadcast: amplification
 * 1.00, and the bytes read equal the bytes held). Then the errors, each on every rank: another
 * layout of the same world size (auto, flags given) names the saved tp/pp/dp; a load on
 * MPI_COMM_SELF (world 1, with more than one rank) names both world sizes and the saved layout; a
 * folder that gains a model-rank-{world} file (a copy of rank 0's, which says the save's layout)
 * is refused naming the layout and the stray rank.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* format NULL: the default (auto); sizes[3] NULL: no --tp/--pp/--dp. */
static sl_config *sharded_config(const char *dir, const char *format, const int *sizes) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return NULL;
  CHECK(sl_config_set(cfg, "model", dir) == SL_STATUS_OK);
  if (format != NULL)
    CHECK(sl_config_set(cfg, "load_format", format) == SL_STATUS_OK);
  static const char *const keys[3] = {"tp", "pp", "dp"};
  for (int k = 0; sizes != NULL && k < 3; k++) {
    char v[16];
    snprintf(v, sizeof v, "%d", sizes[k]);
    CHECK(sl_config_set(cfg, keys[k], v) == SL_STATUS_OK);
  }
  CHECK(sl_config_set(cfg, "quiet", "true") == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "threads", "2") == SL_STATUS_OK);
  return cfg;
}

/* Whether the first table's entry p was saved: not empty, and not an alias dropped by the saver. */
static bool saved(const sl_loader *l, const sl_param *p) {
  if (p->nbytes == 0)
    return false;
  size_t n = sl_loader_param_count(l);
  for (size_t j = 0; j < n; j++) {
    const sl_param *o = sl_loader_param(l, j);
    if (o != p && o->data == p->data && o->nbytes > 0 && strcmp(o->name, p->name) < 0)
      return false;
  }
  return true;
}

static void compare_tables(const char *label, const sl_loader *a, const sl_loader *b) {
  size_t na = sl_loader_param_count(a);
  size_t expected = 0;
  for (size_t i = 0; i < na; i++) {
    const sl_param *p = sl_loader_param(a, i);
    if (!saved(a, p))
      continue;
    expected++;
    const sl_param *q = sl_loader_find(b, p->name);
    CHECKF(q != NULL, "%s: %s missing after the sharded_state load", label, p->name);
    if (q == NULL)
      continue;
    CHECKF(strcmp(p->dtype, q->dtype) == 0, "%s: %s dtype %s, expected %s", label, p->name, q->dtype,
           p->dtype);
    CHECKF(p->ndim == q->ndim &&
               memcmp(p->local_shape, q->local_shape, sizeof p->local_shape[0] * p->ndim) == 0,
           "%s: %s local shape differs", label, p->name);
    CHECKF(p->nbytes == q->nbytes && memcmp(p->data, q->data, (size_t)p->nbytes) == 0,
           "%s: %s bytes differ after the round trip", label, p->name);
  }
  CHECKF(sl_loader_param_count(b) == expected, "%s: sharded_state table has %zu entries, expected %zu", label,
         sl_loader_param_count(b), expected);
}

/* Amplification 1.00 and no broadcast: the cluster read exactly the bytes it holds; the layout the
 * report states is the saved one. */
static void check_report(const char *label, sl_loader *b, const lc_case *c) {
  const char *json = sl_loader_report_json(b);
  if (lc_rank() != 0 || json == NULL)
    return;
  cJSON *r = cJSON_Parse(json);
  const cJSON *amp = cJSON_GetObjectItemCaseSensitive(r, "read_amplification");
  CHECKF(cJSON_IsNumber(amp) && amp->valuedouble > 0.9999 && amp->valuedouble < 1.0001,
         "%s: sharded_state read_amplification %g, expected 1.00", label,
         cJSON_IsNumber(amp) ? amp->valuedouble : -1.0);
  const cJSON *bc = cJSON_GetObjectItemCaseSensitive(r, "bytes_broadcast");
  CHECKF(cJSON_IsNumber(bc) && bc->valuedouble == 0, "%s: sharded_state broadcast bytes", label);
  static const char *const keys[3] = {"tp", "pp", "dp"};
  const int want[3] = {c->tp, c->pp, c->dp};
  for (int k = 0; k < 3; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, keys[k]);
    CHECKF(cJSON_IsNumber(v) && v->valueint == want[k], "%s: the report's %s is %d, the saved layout's %d",
           label, keys[k], cJSON_IsNumber(v) ? v->valueint : -1, want[k]);
  }
  cJSON_Delete(r);
}

/* COLLECTIVE. Loads dir on MPI_COMM_WORLD (format, sizes as sharded_config takes them) and compares
 * its table with the saved loader's. */
static void load_back(const char *label, const char *dir, const char *format, const int *sizes,
                      const lc_case *c, const sl_loader *a) {
  char what[320];
  snprintf(what, sizeof what, "%s, load format %s%s", label, format != NULL ? format : "auto (default)",
           sizes != NULL ? ", sizes given" : "");
  sl_config *cfg = sharded_config(dir, format, sizes);
  sl_loader *b = NULL;
  sl_status st = cfg != NULL ? sl_loader_create(cfg, MPI_COMM_WORLD, &b) : SL_STATUS_NOMEM;
  if (st == SL_STATUS_OK)
    st = sl_loader_load(b);
  CHECKF(st == SL_STATUS_OK, "%s: %s: %s", what, sl_status_name(st),
         b != NULL ? sl_loader_error(b) : sl_config_error(cfg));
  if (st == SL_STATUS_OK) {
    compare_tables(what, a, b);
    check_report(what, b, c);
  }
  sl_loader_destroy(b);
  sl_config_destroy(cfg);
}

/* COLLECTIVE. A load of dir on comm (format, sizes as sharded_config takes them) must fail on every
 * rank with SL_STATUS_LAYOUT, its message holding each of want (NULL-terminated). */
static void expect_layout_error(const char *label, const char *dir, MPI_Comm comm, const char *format,
                                const int *sizes, const char *const *want) {
  sl_config *cfg = sharded_config(dir, format, sizes);
  sl_loader *l = NULL;
  sl_status st = cfg != NULL ? sl_loader_create(cfg, comm, &l) : SL_STATUS_NOMEM;
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", l != NULL ? sl_loader_error(l) : sl_config_error(cfg));
  CHECKF(st == SL_STATUS_LAYOUT, "%s: gave %s, expected LAYOUT: %s", label, sl_status_name(st), msg);
  for (size_t i = 0; want[i] != NULL; i++)
    CHECK_CONTAINS(msg, want[i]);
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
}

static void copy_file(const char *from, const char *to) {
  size_t len = 0;
  char *buf = sl_test_read_file(from, &len);
  FILE *f = buf != NULL ? fopen(to, "wb") : NULL;
  CHECKF(f != NULL && fwrite(buf, 1, len, f) == len, "cannot copy %s to %s", from, to);
  if (f != NULL)
    fclose(f);
  free(buf);
}

/* Another layout of the same world size than the case's, or false when the world has one only. */
static bool other_layout(const lc_case *c, int sizes[3]) {
  int world = c->tp * c->pp * c->dp;
  if (world == 1)
    return false;
  sizes[0] = c->tp == world ? 1 : world;
  sizes[1] = 1;
  sizes[2] = c->tp == world ? world : 1;
  return true;
}

/* COLLECTIVE. The errors of a saved folder: another layout, another world, a stray rank's file. */
static void layout_errors(const char *label, const lc_case *c, const char *dir) {
  int world = lc_world();
  char saved_at[96];
  snprintf(saved_at, sizeof saved_at, "saved at tp=%d pp=%d dp=%d", c->tp, c->pp, c->dp);
  int other[3];
  if (other_layout(c, other)) {
    char asks[96];
    snprintf(asks, sizeof asks, "asks for tp=%d pp=%d dp=%d", other[0], other[1], other[2]);
    const char *want[] = {saved_at, asks, NULL};
    expect_layout_error(label, dir, MPI_COMM_WORLD, NULL, other, want);
  }
  char by[64];
  char has[64];
  if (world > 1) {
    snprintf(by, sizeof by, "saved by %d ranks", world);
    snprintf(has, sizeof has, "this job has %d ranks", 1);
    const char *want[] = {by, has, saved_at + strlen("saved "), NULL};
    expect_layout_error(label, dir, MPI_COMM_SELF, "sharded_state", NULL, want);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* every rank is done with the folder before it gains a file */
  if (lc_rank() == 0) {
    char from[1200];
    char to[1200];
    snprintf(from, sizeof from, "%s/model-rank-0-part-0.safetensors", dir);
    snprintf(to, sizeof to, "%s/model-rank-%d-part-0.safetensors", dir, world);
    copy_file(from, to);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  snprintf(by, sizeof by, "(%d ranks), but it holds files of rank %d", world, world);
  const char *want[] = {saved_at + strlen("saved "), by, NULL};
  expect_layout_error(label, dir, MPI_COMM_WORLD, NULL, NULL, want);
}

static void round_trip(const lc_case *c) {
  char label[256];
  lc_label(c, label, sizeof label);
  lc_result a;
  lc_run(c, &a);
  char *dir = lc_tmpdir("sharded-state");
  if (a.status != SL_STATUS_OK || dir == NULL) {
    lc_result_free(&a);
    lc_tmpdir_remove(dir);
    return;
  }
  sl_status st = sl_loader_save_sharded(a.loader, dir);
  CHECKF(st == SL_STATUS_OK, "%s: save: %s", label, sl_loader_error(a.loader));
  const int saved[3] = {c->tp, c->pp, c->dp};
  if (st == SL_STATUS_OK) {
    load_back(label, dir, NULL, NULL, c, a.loader);
    load_back(label, dir, "sharded_state", NULL, c, a.loader);
    load_back(label, dir, "sharded_state", saved, c, a.loader);
  }
  lc_result_free(&a);
  if (st == SL_STATUS_OK)
    layout_errors(label, c, dir);
  lc_tmpdir_remove(dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  static const char *const dense[] = {"llama", "qwen3"};
  for (size_t f = 0; f < 2; f++) {
    for (int i = 0; i < n; i++) {
      lc_case c = {.fixture = dense[f], .tp = lays[i][0], .pp = lays[i][1], .dp = lays[i][2]};
      round_trip(&c);
    }
  }
  /* Experts: expert parallelism over the whole world, and the checkpoint layout. */
  lc_case moe = {.fixture = "mixtral", .tp = lc_world(), .pp = 1, .dp = 1, .ep = true};
  round_trip(&moe);
  lc_case ckpt = {.fixture = "qwen2_moe", .tp = 1, .pp = 1, .dp = lc_world(), .checkpoint = true};
  round_trip(&ckpt);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
