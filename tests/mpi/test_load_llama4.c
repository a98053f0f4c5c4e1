/*
 * test_load_llama4.c — byte-exact loads of the Llama-4 fixtures at the MPI world size it runs with
 * (ctest runs it at 1, 2, 3 and 4 ranks), against the independent reference.
 *
 *   test_text_layouts   llama4_text (sizes under text_config, MoE on layers 1 and 3 with fused
 *                       experts kept in the checkpoint's orientation, shared expert, dense
 *                       feed_forward on layers 0 and 2): every (tp, pp, dp) of the world size, both
 *                       layouts, without and with expert parallelism (coalescing off with it, so
 *                       that no rank reads a byte it does not hold).
 *   test_vision         llama4 (vision tower + projector in the checkpoint): refused without
 *                       skip_vision, naming a vision tensor and the option; with skip_vision the
 *                       text model loads byte-exact at tp = world, with and without EP.
 *   golden_experts      docs/spec/LAYOUTS.md §3.10 through the loader: at tp 2, rank r's
 *                       gate_up_proj [4, 64, 32] row h of expert e is gate columns [16r, +16) then
 *                       up columns 32 + [16r, +16) of source row h; down_proj [4, 16, 64] is source
 *                       rows [16r, +16) of each expert.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <string.h>

static void test_text_layouts(void) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (int i = 0; i < n; i++) {
    for (int ep = 0; ep < 2; ep++) {
      for (int ckpt = 0; ckpt < 2; ckpt++) {
        lc_case c = {.fixture = "llama4_text",
                     .tp = lays[i][0],
                     .pp = lays[i][1],
                     .dp = lays[i][2],
                     .ep = ep == 1,
                     .checkpoint = ckpt == 1,
                     .no_coalesce = ep == 1};
        lc_run(&c, NULL);
      }
    }
  }
}

static void test_vision(void) {
  int w = lc_world();
  lc_case refused = {
      .fixture = "llama4", .tp = w, .pp = 1, .dp = 1, .expect = SL_STATUS_ARCH, .expect_text = "skip_vision"};
  lc_run(&refused, NULL);
  lc_case named = refused;
  named.expect_text = "vision_model.class_embedding";
  lc_run(&named, NULL);
  for (int ep = 0; ep < 2; ep++) {
    lc_case c = {.fixture = "llama4",
                 .tp = w,
                 .pp = 1,
                 .dp = 1,
                 .ep = ep == 1,
                 .no_coalesce = ep == 1,
                 .extra = {"skip_vision", "true", NULL}};
    lc_run(&c, NULL);
  }
}

static void golden_experts(void) {
  if (lc_world() != 2)
    return;
  lc_case c = {.fixture = "llama4_text", .tp = 2, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  const char *gu = "language_model.model.layers.1.feed_forward.experts.gate_up_proj";
  const char *dn = "language_model.model.layers.1.feed_forward.experts.down_proj";
  const sl_param *g = res.status == SL_STATUS_OK ? sl_loader_find(res.loader, gu) : NULL;
  const sl_param *d = res.status == SL_STATUS_OK ? sl_loader_find(res.loader, dn) : NULL;
  CHECK(g != NULL && d != NULL);
  if (g != NULL && d != NULL) {
    CHECK_EQ_U64(g->local_shape[0], 4);
    CHECK_EQ_U64(g->local_shape[1], 64);
    CHECK_EQ_U64(g->local_shape[2], 32);
    CHECK_EQ_U64(d->local_shape[1], 16);
    uint64_t r = (uint64_t)lc_rank();
    const uint8_t *gd = g->data;
    const uint8_t *dd = d->data;
    for (uint64_t e = 0; e < 4; e++) {
      for (uint64_t h = 0; h < 64; h += 21) {
        uint64_t src = (e * 64 + h) * 64 * 4;
        const uint8_t *row = gd + (e * 64 + h) * 32 * 4;
        CHECKF(sl_value_mismatch(gu, src + 16 * r * 4, row, 64) == 64, "gate e %llu h %llu",
               (unsigned long long)e, (unsigned long long)h);
        CHECKF(sl_value_mismatch(gu, src + (32 + 16 * r) * 4, row + 64, 64) == 64, "up e %llu h %llu",
               (unsigned long long)e, (unsigned long long)h);
      }
      size_t len = 16 * 64 * 4;
      CHECKF(sl_value_mismatch(dn, (e * 32 + 16 * r) * 64 * 4, dd + e * len, len) == len, "down e %llu",
             (unsigned long long)e);
    }
  }
  lc_result_free(&res);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  golden_experts();
  test_vision();
  test_text_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
