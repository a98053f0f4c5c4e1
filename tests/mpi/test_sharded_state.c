/*
 * test_sharded_state.c — pre-sharded checkpoints back in (docs/spec/FILES.md §1.4) at the MPI world
 * size it runs with (1, 2, 3 and 4 ranks).
 *
 * Each case loads a fixture in one layout (checked byte for byte against the independent
 * reference by the shared driver), saves it with sl_loader_save_sharded, then loads the saved
 * folder with load_format sharded_state and no layout flags. On every rank the second table must
 * hold exactly the saved entries (the first table less zero-size entries and aliases) with the same
 * dtype, local shape and bytes; no rank may read a byte another rank saved (nothing is broadcast:
 * amplification 1.00, and the bytes read equal the bytes held). Then the world-size errors: a
 * folder that gains a model-rank-{world} file is refused on every rank with a message naming both
 * sizes, and with more than one rank a load on MPI_COMM_SELF (world 1) of the saved folder too.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sl_config *sharded_config(const char *dir) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return NULL;
  CHECK(sl_config_set(cfg, "model", dir) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "load_format", "sharded_state") == SL_STATUS_OK);
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

/* Amplification 1.00 and no broadcast: the cluster read exactly the bytes it holds. */
static void check_no_sharing(const char *label, sl_loader *b) {
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
  cJSON_Delete(r);
}

/* COLLECTIVE. A load of dir on comm must fail with SL_STATUS_LAYOUT naming both world sizes. */
static void expect_world_error(const char *label, const char *dir, MPI_Comm comm, int saved_world,
                               int world) {
  sl_config *cfg = sharded_config(dir);
  sl_loader *l = NULL;
  sl_status st = cfg != NULL ? sl_loader_create(cfg, comm, &l) : SL_STATUS_NOMEM;
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", l != NULL ? sl_loader_error(l) : sl_config_error(cfg));
  CHECKF(st == SL_STATUS_LAYOUT, "%s: wrong world size gave %s: %s", label, sl_status_name(st), msg);
  char want[128];
  snprintf(want, sizeof want, "saved by %d ranks", saved_world);
  CHECK_CONTAINS(msg, want);
  snprintf(want, sizeof want, "this job has %d ranks", world);
  CHECK_CONTAINS(msg, want);
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
  sl_config *cfg = sharded_config(dir);
  sl_loader *b = NULL;
  st = cfg != NULL ? sl_loader_create(cfg, MPI_COMM_WORLD, &b) : SL_STATUS_NOMEM;
  if (st == SL_STATUS_OK)
    st = sl_loader_load(b);
  CHECKF(st == SL_STATUS_OK, "%s: sharded_state load: %s: %s", label, sl_status_name(st),
         b != NULL ? sl_loader_error(b) : sl_config_error(cfg));
  if (st == SL_STATUS_OK) {
    compare_tables(label, a.loader, b);
    check_no_sharing(label, b);
  }
  sl_loader_destroy(b);
  sl_config_destroy(cfg);
  lc_result_free(&a);
  int world = lc_world();
  if (world > 1)
    expect_world_error(label, dir, MPI_COMM_SELF, world, 1);
  MPI_Barrier(MPI_COMM_WORLD); /* every rank is done with the folder before it gains a file */
  if (lc_rank() == 0) {
    char from[1200];
    char to[1200];
    snprintf(from, sizeof from, "%s/model-rank-0-part-0.safetensors", dir);
    snprintf(to, sizeof to, "%s/model-rank-%d-part-0.safetensors", dir, world);
    copy_file(from, to);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect_world_error(label, dir, MPI_COMM_WORLD, world + 1, world);
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
