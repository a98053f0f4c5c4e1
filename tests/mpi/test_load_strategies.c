/*
 * test_load_strategies.c — every load strategy delivers the same bytes, at the MPI world size it
 * runs with (ctest runs it at 1, 2, 3 and 4 ranks).
 *
 *   test_all_layouts   direct, io_uring, mmap, and auto with prefault, on dense and MoE fixtures
 *                      (tied embeddings, the consolidated format, fp8 scales, 3-D experts), every
 *                      (tp, pp, dp) of the world size, both layouts, EP on for the MoE fixtures in
 *                      the checkpoint layout: every rank's bytes against the reference.
 *   test_mmap_maps     mmap really maps: at tp = world (pp = 3 at 3 ranks), rank 0's report has bytes_mapped
 * > 0 on some rank, and below bytes_needed (the fixture also has parameters that must be copied: row-parallel
 * slices, misaligned fused parts); every rank then writes into every parameter it holds (a mapping is
 * private: the write must stay in memory), reads the write back, and a fresh load must still match the
 * reference (the files are unchanged). test_mmap_refused  mmap with device cuda is refused by
 * sl_loader_create (CONFIG, naming mmap); with enable_multithread_load as docs/spec/FILES.md §6 rule 4 says.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
  const char *name;
  const char *family;
  bool moe;
} fixture;

static const fixture fixtures[] = {
    {"llama", NULL, false},  {"qwen3", NULL, false},          {"mistral_consolidated", NULL, false},
    {"mixtral", NULL, true}, {"deepseek_v3_fp8", NULL, true}, {"fused3d", "fused3d", true}};

static void test_all_layouts(void) {
  static const char *const variants[4][4] = {{"load_strategy", "direct", NULL, NULL},
                                             {"load_strategy", "io_uring", NULL, NULL},
                                             {"load_strategy", "mmap", NULL, NULL},
                                             {"load_strategy", "auto", "prefault", "true"}};
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    for (int i = 0; i < n; i++) {
      for (int ckpt = 0; ckpt < 2; ckpt++) {
        for (int v = 0; v < 4; v++) {
          lc_case c = {.fixture = fixtures[f].name,
                       .arch_family = fixtures[f].family,
                       .tp = lays[i][0],
                       .pp = lays[i][1],
                       .dp = lays[i][2],
                       .ep = fixtures[f].moe && ckpt == 1,
                       .checkpoint = ckpt == 1,
                       .extra = {variants[v][0], variants[v][1], variants[v][2], variants[v][3]}};
          lc_run(&c, NULL);
        }
      }
    }
  }
}

/* Sum over the report's "ranks" entries of the number under key (0 when missing). */
static unsigned long long sum_ranks(const char *report, const char *key) {
  cJSON *rep = cJSON_Parse(report);
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rep, "ranks");
  double total = 0;
  const cJSON *r = NULL;
  cJSON_ArrayForEach(r, ranks) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    CHECKF(cJSON_IsNumber(v), "report rank entry without %s", key);
    total += cJSON_IsNumber(v) ? v->valuedouble : 0;
  }
  CHECKF(cJSON_IsArray(ranks), "report without a ranks array");
  cJSON_Delete(rep);
  return (unsigned long long)total;
}

static void test_mmap_maps(void) {
  int world = lc_world();
  lc_case c = {.fixture = "llama", .tp = world, .pp = 1, .dp = 1, .extra = {"load_strategy", "mmap"}};
  if (world == 3) { /* 8 heads do not split 3 ways: one pipeline stage per layer instead */
    c.tp = 1;
    c.pp = 3;
  }
  lc_result res;
  lc_run(&c, &res);
  CHECKF(res.status == SL_STATUS_OK, "mmap load: %s", res.message);
  if (res.status == SL_STATUS_OK) {
    const char *report = sl_loader_report_json(res.loader);
    if (lc_rank() == 0) {
      CHECK(report != NULL);
      if (report != NULL) {
        unsigned long long mapped = sum_ranks(report, "bytes_mapped");
        unsigned long long needed = sum_ranks(report, "bytes_needed");
        CHECKF(mapped > 0 && mapped < needed, "bytes mapped %llu of %llu needed: expected some, not all",
               mapped, needed);
        CHECK_CONTAINS(report, "\"load_strategy\":\"mmap\"");
      }
    }
    /* Private mappings: writes stay in this process. */
    size_t n = sl_loader_param_count(res.loader);
    for (size_t i = 0; i < n; i++) {
      const sl_param *p = sl_loader_param(res.loader, i);
      if (p->alias_of != NULL || p->nbytes == 0)
        continue;
      uint8_t *d = p->data;
      uint8_t flipped = (uint8_t)(d[0] ^ 0xFFu);
      d[0] = flipped;
      d[p->nbytes - 1] ^= 0x55;
      CHECKF(d[0] == flipped, "%s: a write to the parameter did not stick", p->name);
    }
  }
  lc_result_free(&res);
  /* The files are unchanged: a fresh load (auto) still matches the reference. */
  lc_case again = c;
  memset(again.extra, 0, sizeof again.extra);
  lc_run(&again, NULL);
}

static void test_mmap_refused(void) {
  char folder[1024];
  lc_fixture_path("llama", folder, sizeof folder);
  char world[16];
  snprintf(world, sizeof world, "%d", lc_world());
  static const char *const cases[2][4] = {
      {"device", "cuda", "load_strategy", "mmap"},
      {"extra_config", "{\"enable_multithread_load\": true}", "load_strategy", "mmap"}};
  static const char *const expect[2] = {
      "load_strategy 'mmap'", "enable_multithread_load cannot be combined with load strategy 'mmap'"};
  for (int k = 0; k < 2; k++) {
    sl_config *cfg = NULL;
    CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
    CHECK(sl_config_set(cfg, "model", folder) == SL_STATUS_OK);
    CHECK(sl_config_set(cfg, "dp", world) == SL_STATUS_OK);
    for (int j = 0; j < 4; j += 2)
      CHECK(sl_config_set(cfg, cases[k][j], cases[k][j + 1]) == SL_STATUS_OK);
    sl_loader *l = NULL;
    sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
    CHECKF(st == SL_STATUS_CONFIG, "case %d: %s, expected CONFIG", k, sl_status_name(st));
    CHECK_CONTAINS(sl_config_error(cfg), expect[k]);
    sl_loader_destroy(l);
    sl_config_destroy(cfg);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  test_mmap_refused();
  test_mmap_maps();
  test_all_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
