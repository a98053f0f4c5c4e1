/*
 * test_load_failures.c — how a load fails, on every rank, at the MPI world size it runs with.
 * Broken checkpoints are variants of the fixtures written by rank 0 with scripts/make-fixture into
 * a temporary folder (the value function depends on the tensor name only, so what remains of a
 * variant still matches the reference of the original fixture).
 *
 *   test_missing        (a) one k_proj removed: every rank returns MISSING_WEIGHTS and its message
 *                       names model.layers.1.self_attn.k_proj.weight and the vllm parameter it
 *                       feeds; a tied model without its embedding: model.embed_tokens.weight missing
 *   test_unexpected     (b) an extra tensor foo.weight: UNEXPECTED_WEIGHTS naming it
 *   test_not_strict     (c) the same two with strict=false (and with the extra config
 *                       enable_weights_track false): the load succeeds, the report lists them, and
 *                       every other byte is still exact
 *   test_indivisible    (d) indivisible layouts (tp 3 on 8 heads / vocabulary 256, DeepSeek tp 3 on 4
 *                       heads, fp8 blocks at tp 4, more stages than layers) are refused by the plan,
 *                       before any byte is read: DIVISIBILITY / LAYOUT naming the size, no report
 *   test_world_mismatch (e) tp*pp*dp != world: sl_loader_create fails with LAYOUT naming the sizes
 *   test_read_error     (f) SHARDLOAD_INJECT_READ_ERROR=<rank>: that rank's first read fails (with
 *                       each load strategy); every rank returns within 30 s, the failing one IO,
 *                       the others PEER_FAILED
 *   test_many_missing   (g) 25 missing tensors: the message shows 20 names then "… and 5 more"
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *tmp;

/* The dense layout used by most cases: tp = world (dp 3 at 3 ranks: llama has 8 heads). */
static void dense_layout(int *tp, int *dp) {
  int world = lc_world();
  *tp = world == 3 ? 1 : world;
  *dp = world == 3 ? 3 : 1;
}

typedef struct run {
  sl_config *cfg;
  sl_loader *loader;
  sl_status create_status;
  sl_status plan_status;
  sl_status status; /* of the last phase run */
  char message[4096];
  double seconds; /* wall time of sl_loader_load */
} run;

/* Creates a loader for folder with the layout and extra key/value pairs (NULL-terminated), then
 * plans (when plan_only) or loads. */
static void run_load(run *r, const char *folder, int tp, int pp, int dp, const char *const *kv,
                     bool plan_only) {
  memset(r, 0, sizeof *r);
  if (sl_config_create(&r->cfg) != SL_STATUS_OK)
    return;
  char num[3][16];
  snprintf(num[0], sizeof num[0], "%d", tp);
  snprintf(num[1], sizeof num[1], "%d", pp);
  snprintf(num[2], sizeof num[2], "%d", dp);
  CHECK(sl_config_set(r->cfg, "model", folder) == SL_STATUS_OK);
  CHECK(sl_config_set(r->cfg, "tp", num[0]) == SL_STATUS_OK);
  CHECK(sl_config_set(r->cfg, "pp", num[1]) == SL_STATUS_OK);
  CHECK(sl_config_set(r->cfg, "dp", num[2]) == SL_STATUS_OK);
  CHECK(sl_config_set(r->cfg, "quiet", "true") == SL_STATUS_OK);
  for (int i = 0; kv != NULL && kv[i] != NULL && kv[i + 1] != NULL; i += 2)
    CHECKF(sl_config_set(r->cfg, kv[i], kv[i + 1]) == SL_STATUS_OK, "sl_config_set(%s, %s): %s", kv[i],
           kv[i + 1], sl_config_error(r->cfg));
  r->create_status = sl_loader_create(r->cfg, MPI_COMM_WORLD, &r->loader);
  r->status = r->create_status;
  if (r->create_status != SL_STATUS_OK) {
    snprintf(r->message, sizeof r->message, "%s", sl_config_error(r->cfg));
    return;
  }
  r->plan_status = sl_loader_plan(r->loader);
  r->status = r->plan_status;
  if (r->plan_status == SL_STATUS_OK && !plan_only) {
    double t0 = MPI_Wtime();
    r->status = sl_loader_load(r->loader);
    r->seconds = MPI_Wtime() - t0;
  }
  if (r->status != SL_STATUS_OK)
    snprintf(r->message, sizeof r->message, "%s", sl_loader_error(r->loader));
}

static void run_free(run *r) {
  sl_loader_destroy(r->loader);
  sl_config_destroy(r->cfg);
  r->loader = NULL;
  r->cfg = NULL;
}

static int count_of(const char *haystack, const char *needle) {
  int n = 0;
  const char *p = strstr(haystack, needle);
  while (p != NULL) {
    n++;
    p = strstr(p + strlen(needle), needle);
  }
  return n;
}

static char *variant(const char *fixture, const char *name, const char *args) {
  char *dir = NULL;
  if (asprintf(&dir, "%s/%s", tmp, name) < 0)
    return NULL;
  if (!lc_make_variant(fixture, dir, args)) {
    free(dir);
    return NULL;
  }
  return dir;
}

/* (a) */
static void test_missing(void) {
  char *dir = variant("llama", "nok", "--drop model.layers.1.self_attn.k_proj.weight");
  if (dir == NULL)
    return;
  int tp = 1;
  int dp = 1;
  dense_layout(&tp, &dp);
  run r;
  run_load(&r, dir, tp, 1, dp, NULL, false);
  CHECKF(r.status == SL_STATUS_MISSING_WEIGHTS, "missing k_proj: %s (%s)", sl_status_name(r.status),
         r.message);
  CHECK_CONTAINS(r.message, "1 weight not initialized from checkpoint");
  CHECK_CONTAINS(r.message, "model.layers.1.self_attn.k_proj.weight");
  CHECK_CONTAINS(r.message, "model.layers.1.self_attn.qkv_proj.weight");
  run_free(&r);
  /* The same in the checkpoint layout, with pipeline stages when the world allows. */
  const char *kv[] = {"layout", "checkpoint", NULL};
  int world = lc_world();
  run_load(&r, dir, world == 4 ? 2 : 1, world == 3 || world == 2 ? world : (world == 4 ? 2 : 1), 1, kv,
           false);
  CHECKF(r.status == SL_STATUS_MISSING_WEIGHTS, "missing k_proj, checkpoint layout: %s (%s)",
         sl_status_name(r.status), r.message);
  CHECK_CONTAINS(r.message, "model.layers.1.self_attn.k_proj.weight");
  run_free(&r);
  free(dir);
  /* docs/spec/TRACKING.md §5: a tied checkpoint with lm_head.weight but no embedding → the embedding is
   * missing. */
  dir = variant("qwen3", "noembed", "--drop model.embed_tokens.weight");
  if (dir == NULL)
    return;
  run_load(&r, dir, world == 3 ? 1 : world, 1, world == 3 ? 3 : 1, NULL, false);
  CHECKF(r.status == SL_STATUS_MISSING_WEIGHTS, "tied without embedding: %s (%s)", sl_status_name(r.status),
         r.message);
  CHECK_CONTAINS(r.message, "model.embed_tokens.weight");
  run_free(&r);
  free(dir);
}

/* (b) */
static void test_unexpected(void) {
  char *dir = variant("llama", "extra", "--extra foo.weight:BF16:4,4");
  if (dir == NULL)
    return;
  int tp = 1;
  int dp = 1;
  dense_layout(&tp, &dp);
  run r;
  run_load(&r, dir, tp, 1, dp, NULL, false);
  CHECKF(r.status == SL_STATUS_UNEXPECTED_WEIGHTS, "extra foo.weight: %s (%s)", sl_status_name(r.status),
         r.message);
  CHECK_CONTAINS(r.message, "1 checkpoint tensor consumed by no rank");
  CHECK_CONTAINS(r.message, "foo.weight");
  run_free(&r);
  free(dir);
}

/* The report's lists: missing [{tensor, param}], unexpected [names]. */
static void check_report_lists(const char *what, const char *json, const char *missing_tensor,
                               const char *missing_param, const char *unexpected) {
  cJSON *rep = json != NULL ? cJSON_Parse(json) : NULL;
  CHECKF(rep != NULL, "%s: no report", what);
  if (rep == NULL)
    return;
  const cJSON *mis = cJSON_GetObjectItemCaseSensitive(rep, "missing");
  const cJSON *unx = cJSON_GetObjectItemCaseSensitive(rep, "unexpected");
  CHECKF(cJSON_GetArraySize(mis) == (missing_tensor != NULL ? 1 : 0), "%s: %d missing in the report", what,
         cJSON_GetArraySize(mis));
  CHECKF(cJSON_GetArraySize(unx) == (unexpected != NULL ? 1 : 0), "%s: %d unexpected in the report", what,
         cJSON_GetArraySize(unx));
  if (missing_tensor != NULL && cJSON_GetArraySize(mis) == 1) {
    const cJSON *m0 = cJSON_GetArrayItem(mis, 0);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m0, "tensor");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(m0, "param");
    CHECK_STR(cJSON_IsString(t) ? t->valuestring : NULL, missing_tensor);
    CHECK_STR(cJSON_IsString(p) ? p->valuestring : NULL, missing_param);
  }
  if (unexpected != NULL && cJSON_GetArraySize(unx) == 1) {
    const cJSON *u0 = cJSON_GetArrayItem(unx, 0);
    CHECK_STR(cJSON_IsString(u0) ? u0->valuestring : NULL, unexpected);
  }
  cJSON_Delete(rep);
}

/* Every byte of the loaded table against the reference of the original llama, except the bytes
 * that come from the tensor `absent` (they have no source in the variant). */
static void check_bytes_except(const char *what, const sl_loader *l, int tp, int dp, const char *absent) {
  sl_ref_model *m = lc_model("llama", NULL);
  if (m == NULL)
    return;
  sl_ref_layout lay = {.tp = tp, .pp = 1, .dp = dp, .rank = lc_rank()};
  sl_ref_table *ref = NULL;
  char msg[256];
  CHECK(sl_ref_table_build(m, &lay, &ref, msg, sizeof msg) == SL_STATUS_OK);
  if (ref == NULL)
    return;
  if (absent == NULL) {
    lc_check_table(what, m, l, ref);
    sl_ref_table_free(ref);
    return;
  }
  CHECK_EQ_U64(sl_loader_param_count(l), ref->count);
  for (size_t i = 0; i < ref->count; i++) {
    const sl_ref_param *e = &ref->params[i];
    const sl_param *p = sl_loader_find(l, e->name);
    CHECKF(p != NULL, "%s: %s missing", what, e->name);
    if (p == NULL || p->nbytes != e->nbytes || p->data == NULL)
      continue;
    uint8_t *want = malloc(e->nbytes + 1);
    if (want == NULL)
      continue;
    sl_ref_param_fill(m, e, want);
    for (size_t k = 0; k < e->n_segs; k++) {
      const sl_ref_seg *s = &e->segs[k];
      if (s->tensor >= 0 && strcmp(sl_ref_tensor_name(m, s->tensor), absent) == 0)
        continue;
      CHECKF(memcmp((const uint8_t *)p->data + s->dst, want + s->dst, s->len) == 0,
             "%s: %s bytes [%llu, +%llu) from %s differ", what, e->name, (unsigned long long)s->dst,
             (unsigned long long)s->len, sl_ref_tensor_name(m, s->tensor));
    }
    free(want);
  }
  sl_ref_table_free(ref);
}

/* (c) */
static void test_not_strict(void) {
  char nok[1024];
  char extra[1024];
  snprintf(nok, sizeof nok, "%s/nok", tmp);
  snprintf(extra, sizeof extra, "%s/extra", tmp);
  int tp = 1;
  int dp = 1;
  dense_layout(&tp, &dp);
  const char *strict_off[] = {"strict", "false", NULL};
  const char *track_off[] = {"extra_config", "{\"enable_weights_track\": false}", NULL};
  const char *const *ways[2] = {strict_off, track_off};
  for (int w = 0; w < 2; w++) {
    run r;
    run_load(&r, nok, tp, 1, dp, ways[w], false);
    CHECKF(r.status == SL_STATUS_OK, "missing k_proj, %s=%s: %s (%s)", ways[w][0], ways[w][1],
           sl_status_name(r.status), r.message);
    if (r.status == SL_STATUS_OK) {
      if (lc_rank() == 0)
        check_report_lists("missing k_proj, not strict", sl_loader_report_json(r.loader),
                           "model.layers.1.self_attn.k_proj.weight",
                           "model.layers.1.self_attn.qkv_proj.weight", NULL);
      check_bytes_except("missing k_proj, not strict", r.loader, tp, dp,
                         "model.layers.1.self_attn.k_proj.weight");
    }
    run_free(&r);
    run_load(&r, extra, tp, 1, dp, ways[w], false);
    CHECKF(r.status == SL_STATUS_OK, "extra foo.weight, %s=%s: %s (%s)", ways[w][0], ways[w][1],
           sl_status_name(r.status), r.message);
    if (r.status == SL_STATUS_OK) {
      if (lc_rank() == 0)
        check_report_lists("extra foo.weight, not strict", sl_loader_report_json(r.loader), NULL, NULL,
                           "foo.weight");
      check_bytes_except("extra foo.weight, not strict", r.loader, tp, dp, NULL);
    }
    run_free(&r);
  }
}

/* (d): refused by sl_loader_plan, before any read; every rank agrees. */
static void expect_refused(const char *fixture, int tp, int pp, int dp, const char *const *kv, sl_status want,
                           const char *needle1, const char *needle2) {
  char folder[1024];
  lc_fixture_path(fixture, folder, sizeof folder);
  run r;
  run_load(&r, folder, tp, pp, dp, kv, true);
  CHECKF(r.create_status == SL_STATUS_OK, "%s tp%d pp%d dp%d: create failed: %s", fixture, tp, pp, dp,
         r.message);
  CHECKF(r.plan_status == want, "%s tp%d pp%d dp%d: plan returned %s (%s), expected %s", fixture, tp, pp, dp,
         sl_status_name(r.plan_status), r.message, sl_status_name(want));
  CHECK_CONTAINS(r.message, needle1);
  if (needle2 != NULL)
    CHECK_CONTAINS(r.message, needle2);
  if (r.loader != NULL) {
    CHECKF(sl_loader_report_json(r.loader) == NULL, "%s tp%d: a report exists, so data was loaded", fixture,
           tp);
    /* load after a refused plan fails again, reading nothing */
    sl_status again = sl_loader_load(r.loader);
    CHECKF(again != SL_STATUS_OK, "%s tp%d: load after a refused plan succeeded", fixture, tp);
    CHECK(sl_loader_report_json(r.loader) == NULL);
  }
  run_free(&r);
}

static void test_indivisible(void) {
  int world = lc_world();
  if (world == 3) {
    /* The heads first, as vLLM says it, before the padded vocabulary (256) that 3 does not divide. */
    expect_refused("llama", 3, 1, 1, NULL, SL_STATUS_DIVISIBILITY,
                   "Total number of attention heads (8) must be divisible by tensor parallel size (3)",
                   "tp must be one of 1, 2, 4, 8");
    expect_refused("deepseek_v2_lite", 3, 1, 1, NULL, SL_STATUS_DIVISIBILITY,
                   "Total number of attention heads (4) must be divisible by tensor parallel size (3)",
                   "model.layers.0.self_attn.q_proj.weight");
    expect_refused("mixtral", 1, 1, 3, NULL, SL_STATUS_DIVISIBILITY, "not divisible by 3", "size 64");
    expect_refused("qwen2", 1, 3, 1, NULL, SL_STATUS_LAYOUT, "2 layers", "3 pipeline stages");
  }
  if (world == 4) {
    expect_refused("deepseek_v3_fp8", 4, 1, 1, NULL, SL_STATUS_DIVISIBILITY, "block", "24 rows");
    expect_refused("llama", 1, 4, 1, NULL, SL_STATUS_LAYOUT, "3 layers", "4 pipeline stages");
  }
  /* docs/spec/EXPERTS.md §6: --enable-eplb requires --enable-expert-parallel. */
  const char *eplb[] = {"enable_eplb", "true", NULL};
  char folder[1024];
  lc_fixture_path("mixtral", folder, sizeof folder);
  run r;
  run_load(&r, folder, 1, 1, world, eplb, true);
  CHECKF(r.status != SL_STATUS_OK, "enable_eplb without expert parallelism was accepted");
  CHECK_CONTAINS(r.message, "enable_eplb (--enable-eplb) requires enable_expert_parallel");
  run_free(&r);
  if (world == 2) {
    /* pp 2 with a pp_layer_partition that does not sum to L. */
    const char *kv[] = {"pp_layer_partition", "2,2", NULL};
    expect_refused("llama", 1, 2, 1, kv, SL_STATUS_LAYOUT, "partition sums to 4", "3 layers");
  }
}

/* (e) */
static void test_world_mismatch(void) {
  int world = lc_world();
  char folder[1024];
  lc_fixture_path("llama", folder, sizeof folder);
  run r;
  run_load(&r, folder, world + 1, 1, 1, NULL, false);
  CHECKF(r.create_status == SL_STATUS_LAYOUT, "tp %d on %d ranks: %s (%s)", world + 1, world,
         sl_status_name(r.create_status), r.message);
  CHECK(r.loader == NULL);
  char want[64];
  snprintf(want, sizeof want, "world size is %d", world);
  CHECK_CONTAINS(r.message, want);
  snprintf(want, sizeof want, "%d * 1 * 1", world + 1);
  CHECK_CONTAINS(r.message, want);
  run_free(&r);
  run_load(&r, folder, 1, 2, world, NULL, false);
  CHECKF(r.create_status == SL_STATUS_LAYOUT, "pp 2 dp %d on %d ranks: %s", world, world,
         sl_status_name(r.create_status));
  snprintf(want, sizeof want, "1 * 2 * %d = %d", world, 2 * world);
  CHECK_CONTAINS(r.message, want);
  run_free(&r);
}

/* (f) */
static void test_read_error(void) {
  int world = lc_world();
  int tp = 1;
  int dp = 1;
  dense_layout(&tp, &dp);
  char folder[1024];
  lc_fixture_path("llama", folder, sizeof folder);
  int failing[2] = {world - 1, 0};
  /* Every strategy, so that the first read of a rank is a pread, an io_uring read or (mmap) the
   * population of a mapped parameter. */
  static const char *const strategies[4] = {"auto", "direct", "io_uring", "mmap"};
  for (int i = 0; i < 4 * (world > 1 ? 2 : 1); i++) {
    char val[16];
    snprintf(val, sizeof val, "%d", failing[i / 4]);
    setenv("SHARDLOAD_INJECT_READ_ERROR", val, 1);
    run r;
    const char *kv[] = {"load_strategy", strategies[i % 4], NULL, NULL};
    run_load(&r, folder, tp, 1, dp, kv, false);
    unsetenv("SHARDLOAD_INJECT_READ_ERROR");
    if (lc_rank() == failing[i / 4]) {
      CHECKF(r.status == SL_STATUS_IO, "%s: injected read error on this rank: %s (%s)", strategies[i % 4],
             sl_status_name(r.status), r.message);
      CHECK_CONTAINS(r.message, "llama");
    } else {
      CHECKF(r.status == SL_STATUS_PEER_FAILED, "read error on rank %d: this rank returned %s (%s)",
             failing[i / 4], sl_status_name(r.status), r.message);
      CHECK_CONTAINS(r.message, "another rank failed");
    }
    CHECKF(r.seconds < 30.0, "read error on rank %d: load took %.1f s to fail", failing[i / 4], r.seconds);
    CHECK(r.loader == NULL || sl_loader_report_json(r.loader) == NULL || r.status == SL_STATUS_OK);
    run_free(&r);
  }
}

/* (g) */
static void test_many_missing(void) {
  char args[4096] = "";
  size_t n = 0;
  static const char *const w[3] = {"w1", "w2", "w3"};
  for (int x = 0; x < 8; x++) {
    for (int k = 0; k < 3; k++)
      n += (size_t)snprintf(args + n, sizeof args - n,
                            "--drop model.layers.0.block_sparse_moe.experts.%d.%s.weight ", x, w[k]);
  }
  snprintf(args + n, sizeof args - n, "--drop model.layers.1.block_sparse_moe.experts.0.w1.weight");
  char *dir = variant("mixtral", "many", args);
  if (dir == NULL)
    return;
  const char *kv[] = {"enable_expert_parallel", "true", NULL};
  run r;
  run_load(&r, dir, 1, 1, lc_world(), kv, false);
  CHECKF(r.status == SL_STATUS_MISSING_WEIGHTS, "25 missing: %s (%s)", sl_status_name(r.status), r.message);
  CHECK_CONTAINS(r.message, "25 weights not initialized from checkpoint");
  CHECK_CONTAINS(r.message, "\xe2\x80\xa6 and 5 more");
  CHECKF(count_of(r.message, "(\xe2\x86\x92 ") == 20, "25 missing: %d names shown, expected 20: %s",
         count_of(r.message, "(\xe2\x86\x92 "), r.message);
  /* sorted bytewise: the first is expert 0's w1 of layer 0, layer 1 is among the 5 not shown */
  CHECK_CONTAINS(r.message, "model.layers.0.block_sparse_moe.experts.0.w1.weight");
  CHECK(strstr(r.message, "model.layers.1.block_sparse_moe.experts.0.w1.weight") == NULL);
  run_free(&r);
  free(dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  tmp = lc_tmpdir("failures");
  if (tmp != NULL) {
    test_missing();
    test_unexpected();
    test_not_strict();
    test_many_missing();
  }
  test_indivisible();
  test_world_mismatch();
  test_read_error();
  lc_tmpdir_remove(tmp);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
