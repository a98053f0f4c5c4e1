/*
 * test_load_families.c — byte-exact loads of the fixtures of the later families at the MPI world
 * size it runs with (ctest runs it at 1, 2, 3 and 4 ranks).
 *
 *   test_all_layouts   phi3 (fused qkv_proj / gate_up_proj), gemma3 (tied, four norms), glm4_moe
 *                      (dense layer 0, routed + shared experts, MTP layer skipped) and gpt_oss
 *                      (sinks, MXFP4 experts with interleaved gate/up, expert biases): every
 *                      (tp, pp, dp) of the world size, in both layouts, and for the MoE families
 *                      without and with expert parallelism (coalescing off, so that no rank reads
 *                      a byte it does not hold); every rank's bytes against the reference and rank
 *                      0's report against its figures. Invalid layouts must fail with the
 *                      reference's status.
 *   test_goldens       docs/spec/LAYOUTS.md §3.8–§3.9 through the loader: phi3 at tp 2 holds q rows
 *                      [32r, +32) then k and v rows of its kv heads; gpt_oss's down bias is whole
 *                      on MoE rank 0 and zero elsewhere without expert parallelism.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct family_fixture {
  const char *name;
  bool moe;
} family_fixture;

static const family_fixture fixtures[] = {
    {"phi3", false}, {"gemma3", false}, {"glm4_moe", true}, {"gpt_oss", true}};

static void test_all_layouts(void) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    for (int i = 0; i < n; i++) {
      for (int ep = 0; ep < (fixtures[f].moe ? 2 : 1); ep++) {
        for (int ckpt = 0; ckpt < 2; ckpt++) {
          lc_case c = {.fixture = fixtures[f].name,
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
}

/* phi3 (Hq 8, Hkv 4, d 8, H 64) at tp 2: local qkv_proj [64, 64] = q rows [32r, +32), k rows
 * 64 + [16r, +16), v rows 96 + [16r, +16) of the fused tensor. */
static void golden_phi3(void) {
  if (lc_world() != 2)
    return;
  lc_case c = {.fixture = "phi3", .tp = 2, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    const sl_param *p = sl_loader_find(res.loader, "model.layers.1.self_attn.qkv_proj.weight");
    CHECK(p != NULL);
    if (p != NULL) {
      CHECK_EQ_U64(p->local_shape[0], 64);
      const char *src = "model.layers.1.self_attn.qkv_proj.weight";
      uint64_t rb = 64 * 4;
      uint64_t r = (uint64_t)lc_rank();
      const uint8_t *d = p->data;
      uint64_t starts[3] = {32 * r, 64 + 16 * r, 96 + 16 * r};
      uint64_t rows[3] = {32, 16, 16};
      uint64_t at = 0;
      for (int k = 0; k < 3; k++) {
        size_t len = (size_t)(rows[k] * rb);
        CHECKF(sl_value_mismatch(src, starts[k] * rb, d + at, len) == len, "phi3 tp 2 rank %d: part %d",
               lc_rank(), k);
        at += len;
      }
    }
  }
  lc_result_free(&res);
}

/* gpt_oss without expert parallelism: w2_bias [4, 64] F32 equals down_proj_bias on MoE rank 0
 * and is zero on the others (vLLM adds it once, after the all-reduce). */
static void golden_gpt_oss_bias(void) {
  int world = lc_world();
  if (world != 2 && world != 4)
    return;
  lc_case c = {.fixture = "gpt_oss", .tp = world, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    const sl_param *p = sl_loader_find(res.loader, "model.layers.0.mlp.experts.w2_bias");
    CHECK(p != NULL);
    if (p != NULL) {
      size_t len = 4 * 64 * 4;
      const uint8_t *d = p->data;
      if (lc_rank() == 0) {
        CHECK(sl_value_mismatch("model.layers.0.mlp.experts.down_proj_bias", 0, d, len) == len);
      } else {
        bool zero = true;
        for (size_t i = 0; i < len; i++)
          zero = zero && d[i] == 0;
        CHECKF(zero, "gpt_oss w2_bias on rank %d is not zero", lc_rank());
      }
    }
  }
  lc_result_free(&res);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  golden_phi3();
  golden_gpt_oss_bias();
  test_all_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
