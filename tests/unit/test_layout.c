/*
 * test_layout.c — the goldens of docs/spec/LAYOUTS.md §1–§2 (ranks, pipeline split, partitions) and
 * docs/spec/EXPERTS.md (expert placement, maps, effective placement, EPLB, expert ids, the skip predicate).
 */
#include "check.h"
#include "model/layout.h"

#include <stdlib.h>
#include <string.h>

static void check_split(uint32_t L, uint32_t P, const uint32_t *want) {
  uint32_t starts[16];
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__pp_split_auto(L, P, starts, &err) == SL_STATUS_OK, "split %u/%u: %s", L, P, err.msg);
  for (uint32_t p = 0; p <= P; p++)
    CHECKF(starts[p] == want[p], "split %u/%u boundary %u: %u != %u", L, P, p, starts[p], want[p]);
}

static void check_partition(const char *s, uint32_t L, uint32_t P, const uint32_t *want, const char *error) {
  uint32_t starts[16];
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__pp_split_explicit(s, L, P, starts, &err);
  if (want != NULL) {
    CHECKF(st == SL_STATUS_OK, "partition '%s': %s", s, err.msg);
    for (uint32_t p = 0; st == SL_STATUS_OK && p <= P; p++)
      CHECKF(starts[p] == want[p], "partition '%s' boundary %u: %u != %u", s, p, starts[p], want[p]);
  } else {
    CHECKF(st == SL_STATUS_LAYOUT, "partition '%s' must fail", s);
    CHECK_CONTAINS(err.msg, error);
  }
}

static void test_ranks(void) {
  sl__layout l;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__layout_init(&l, 2, 2, 2, 8, &err) == SL_STATUS_OK);
  /* g = q*(P*T) + p*T + r, TP fastest */
  for (uint32_t g = 0; g < 8; g++) {
    sl__coords c = sl__layout_coords(&l, g);
    CHECK_EQ_U64(c.tp_rank, g % 2);
    CHECK_EQ_U64(c.pp_rank, (g / 2) % 2);
    CHECK_EQ_U64(c.dp_rank, g / 4);
    CHECK_EQ_U64(sl__layout_rank(&l, c), g);
  }
  sl__err_clear(&err);
  CHECK(sl__layout_init(&l, 2, 2, 2, 6, &err) == SL_STATUS_LAYOUT);
  CHECK_CONTAINS(err.msg, "world size is 6");
  sl__err_clear(&err);
  CHECK(sl__layout_init(&l, 0, 1, 1, 1, &err) == SL_STATUS_LAYOUT);
}

static void test_pipeline(void) {
  check_split(3, 2, (const uint32_t[]){0, 2, 3});
  check_split(4, 3, (const uint32_t[]){0, 1, 3, 4});
  check_split(5, 3, (const uint32_t[]){0, 2, 4, 5});
  check_split(2, 2, (const uint32_t[]){0, 1, 2});
  check_split(22, 4, (const uint32_t[]){0, 5, 11, 17, 22});
  check_split(7, 1, (const uint32_t[]){0, 7});
  uint32_t starts[8];
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__pp_split_auto(2, 3, starts, &err) == SL_STATUS_LAYOUT);
  check_partition("4,6,6,4", 20, 4, (const uint32_t[]){0, 4, 10, 16, 20}, NULL);
  check_partition("5,5,5,5", 20, 4, (const uint32_t[]){0, 5, 10, 15, 20}, NULL);
  check_partition("5,6,5,6", 22, 4, (const uint32_t[]){0, 5, 11, 16, 22}, NULL);
  check_partition(" 5 , 6,5 ,6 ", 22, 4, (const uint32_t[]){0, 5, 11, 16, 22}, NULL);
  check_partition("5,5,5,5,", 20, 4, NULL, "invalid partition string '5,5,5,5,'");
  check_partition("5,5,5,a", 20, 4, NULL, "invalid partition string");
  check_partition("5,5,5", 20, 4, NULL, "partition has 3 entries, pipeline size is 4");
  check_partition("5,5,5,5", 21, 4, NULL, "partition sums to 20, model has 21 layers");
  check_partition("0,10,5,5", 20, 4, NULL, "invalid partition string");
  check_partition("-1,11,5,5", 20, 4, NULL, "invalid partition string");
  check_partition("+5,5,5,5", 20, 4, NULL, "invalid partition string");
  check_partition("", 20, 4, NULL, "invalid partition string");
  uint32_t st4[] = {0, 5, 11, 17, 22};
  CHECK_EQ_U64(sl__pp_stage_of(st4, 4, 0), 0);
  CHECK_EQ_U64(sl__pp_stage_of(st4, 4, 5), 1);
  CHECK_EQ_U64(sl__pp_stage_of(st4, 4, 16), 2);
  CHECK_EQ_U64(sl__pp_stage_of(st4, 4, 21), 3);
}

/* The local set of rank e as a list. */
static void local_set(uint64_t E, uint32_t ep, uint32_t e, sl__placement p, uint64_t *out, uint64_t *n) {
  *n = sl__ep_count(E, ep, e, p);
  for (uint64_t k = 0; k < *n; k++)
    out[k] = sl__ep_expert(E, ep, e, p, k);
}

static void check_sets(uint64_t E, uint32_t ep, sl__placement p) {
  /* disjoint, union all, slot maps consistent */
  uint8_t *seen = calloc(E, 1);
  uint64_t *list = calloc(E, sizeof *list);
  for (uint32_t e = 0; e < ep; e++) {
    uint64_t n = 0;
    local_set(E, ep, e, p, list, &n);
    CHECK_EQ_U64(n, E / ep + (e < E % ep));
    for (uint64_t k = 0; k < n; k++) {
      CHECKF(list[k] < E && !seen[list[k]], "E=%llu ep=%u expert %llu twice", (unsigned long long)E, ep,
             (unsigned long long)list[k]);
      if (list[k] < E)
        seen[list[k]] = 1;
      CHECK(sl__ep_slot(E, ep, e, p, list[k]) == (int64_t)k);
      if (k > 0)
        CHECK(list[k] > list[k - 1]);
    }
  }
  for (uint64_t x = 0; x < E; x++)
    CHECKF(seen[x], "E=%llu ep=%u: expert %llu on no rank", (unsigned long long)E, ep, (unsigned long long)x);
  free(seen);
  free(list);
}

static void check_map(uint64_t E, uint32_t ep, uint32_t e, sl__placement p, const int64_t *want) {
  for (uint64_t x = 0; x < E; x++)
    CHECKF(sl__ep_slot(E, ep, e, p, x) == want[x], "map E=%llu ep=%u rank %u expert %llu: %lld != %lld",
           (unsigned long long)E, ep, e, (unsigned long long)x, (long long)sl__ep_slot(E, ep, e, p, x),
           (long long)want[x]);
}

static void test_experts(void) {
  uint64_t list[512];
  uint64_t n = 0;
  local_set(64, 8, 0, SL_PLACEMENT_LINEAR, list, &n);
  CHECK(n == 8 && list[0] == 0 && list[7] == 7);
  local_set(64, 8, 7, SL_PLACEMENT_LINEAR, list, &n);
  CHECK(n == 8 && list[0] == 56 && list[7] == 63);
  local_set(10, 3, 0, SL_PLACEMENT_LINEAR, list, &n);
  CHECK(n == 4 && list[0] == 0 && list[3] == 3);
  local_set(10, 3, 1, SL_PLACEMENT_LINEAR, list, &n);
  CHECK(n == 3 && list[0] == 4 && list[2] == 6);
  local_set(10, 3, 2, SL_PLACEMENT_LINEAR, list, &n);
  CHECK(n == 3 && list[0] == 7 && list[2] == 9);
  for (uint32_t ep = 8; ep <= 24; ep += 8) {
    check_sets(384, ep, SL_PLACEMENT_LINEAR);
    local_set(384, ep, 0, SL_PLACEMENT_LINEAR, list, &n);
    CHECK_EQ_U64(n, 384 / ep);
  }
  local_set(8, 2, 0, SL_PLACEMENT_ROUND_ROBIN, list, &n);
  CHECK(n == 4 && list[0] == 0 && list[1] == 2 && list[2] == 4 && list[3] == 6);
  local_set(8, 2, 1, SL_PLACEMENT_ROUND_ROBIN, list, &n);
  CHECK(n == 4 && list[0] == 1 && list[3] == 7);
  local_set(10, 3, 0, SL_PLACEMENT_ROUND_ROBIN, list, &n);
  CHECK(n == 4 && list[0] == 0 && list[1] == 3 && list[2] == 6 && list[3] == 9);
  local_set(10, 3, 1, SL_PLACEMENT_ROUND_ROBIN, list, &n);
  CHECK(n == 3 && list[0] == 1 && list[1] == 4 && list[2] == 7);
  local_set(10, 3, 2, SL_PLACEMENT_ROUND_ROBIN, list, &n);
  CHECK(n == 3 && list[0] == 2 && list[1] == 5 && list[2] == 8);
  check_sets(384, 8, SL_PLACEMENT_ROUND_ROBIN);
  check_sets(10, 3, SL_PLACEMENT_ROUND_ROBIN);
  check_sets(9, 2, SL_PLACEMENT_ROUND_ROBIN);
  check_sets(7, 16, SL_PLACEMENT_LINEAR); /* more ranks than experts: some hold none */
  /* maps */
  check_map(8, 2, 0, SL_PLACEMENT_ROUND_ROBIN, (const int64_t[]){0, -1, 1, -1, 2, -1, 3, -1});
  check_map(8, 2, 1, SL_PLACEMENT_ROUND_ROBIN, (const int64_t[]){-1, 0, -1, 1, -1, 2, -1, 3});
  check_map(9, 2, 0, SL_PLACEMENT_ROUND_ROBIN, (const int64_t[]){0, -1, 1, -1, 2, -1, 3, -1, 4});
  check_map(9, 2, 1, SL_PLACEMENT_ROUND_ROBIN, (const int64_t[]){-1, 0, -1, 1, -1, 2, -1, 3, -1});
  check_map(8, 4, 0, SL_PLACEMENT_ROUND_ROBIN, (const int64_t[]){0, -1, -1, -1, 1, -1, -1, -1});
  check_map(8, 4, 1, SL_PLACEMENT_ROUND_ROBIN, (const int64_t[]){-1, 0, -1, -1, -1, 1, -1, -1});
  check_map(8, 4, 2, SL_PLACEMENT_ROUND_ROBIN, (const int64_t[]){-1, -1, 0, -1, -1, -1, 1, -1});
  check_map(8, 4, 3, SL_PLACEMENT_ROUND_ROBIN, (const int64_t[]){-1, -1, -1, 0, -1, -1, -1, 1});
  check_map(10, 3, 0, SL_PLACEMENT_LINEAR, (const int64_t[]){0, 1, 2, 3, -1, -1, -1, -1, -1, -1});
  check_map(10, 3, 1, SL_PLACEMENT_LINEAR, (const int64_t[]){-1, -1, -1, -1, 0, 1, 2, -1, -1, -1});
  check_map(10, 3, 2, SL_PLACEMENT_LINEAR, (const int64_t[]){-1, -1, -1, -1, -1, -1, -1, 0, 1, 2});
  /* ep <= 1: everything local */
  CHECK_EQ_U64(sl__ep_count(8, 1, 0, SL_PLACEMENT_LINEAR), 8);
  CHECK(sl__ep_slot(8, 1, 0, SL_PLACEMENT_LINEAR, 5) == 5);
  /* effective placement (docs/spec/EXPERTS.md §3) */
  CHECK(sl__placement_effective(SL_PLACEMENT_ROUND_ROBIN, 1, 0, false) == SL_PLACEMENT_LINEAR); /* Mixtral */
  CHECK(sl__placement_effective(SL_PLACEMENT_ROUND_ROBIN, 8, 0, false) == SL_PLACEMENT_ROUND_ROBIN);
  CHECK(sl__placement_effective(SL_PLACEMENT_ROUND_ROBIN, 8, 2, false) == SL_PLACEMENT_LINEAR);
  CHECK(sl__placement_effective(SL_PLACEMENT_ROUND_ROBIN, 8, 0, true) == SL_PLACEMENT_LINEAR);
  CHECK(sl__placement_effective(SL_PLACEMENT_LINEAR, 8, 0, false) == SL_PLACEMENT_LINEAR);
  local_set(8, 2, 0, sl__placement_effective(SL_PLACEMENT_ROUND_ROBIN, 1, 0, false), list, &n);
  CHECK(n == 4 && list[0] == 0 && list[3] == 3);
  local_set(256, 16, 0, sl__placement_effective(SL_PLACEMENT_ROUND_ROBIN, 8, 0, false), list, &n);
  CHECK(n == 16);
  for (uint64_t k = 0; k < n; k++)
    CHECK_EQ_U64(list[k], 16 * k);
  /* EPLB */
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__eplb_check(8, 0, 2, &err) == SL_STATUS_OK);
  CHECK(sl__eplb_check(8, 1, 2, &err) == SL_STATUS_LAYOUT);
  CHECK_CONTAINS(err.msg, "9 slots");
  CHECK_EQ_U64(sl__eplb_slot_expert(8, 3), 3);
  CHECK_EQ_U64(sl__eplb_slot_expert(8, 8), 0);
  CHECK_EQ_U64(sl__eplb_slot_expert(8, 9), 1);
  sl__placement pl;
  sl__err_clear(&err);
  CHECK(sl__placement_parse("round_robin", &pl, &err) == SL_STATUS_OK && pl == SL_PLACEMENT_ROUND_ROBIN);
  CHECK(sl__placement_parse("striped", &pl, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "accepted: linear, round_robin");
}

static void check_id(const char *name, bool has, uint64_t want) {
  uint64_t id = 12345;
  bool got = sl__expert_id(name, &id);
  CHECKF(got == has, "expert_id(%s) presence", name);
  if (has && got)
    CHECKF(id == want, "expert_id(%s) = %llu, want %llu", name, (unsigned long long)id,
           (unsigned long long)want);
}

static void test_ids_and_skip(void) {
  check_id("model.layers.0.mlp.experts.42.gate_proj.weight", true, 42);
  check_id("model.layers.60.mlp.experts.383.down_proj.weight", true, 383);
  check_id("model.layers.0.mlp.experts.0.up_proj.weight", true, 0);
  check_id("model.layers.0.mlp.experts.100.gate_proj.weight_scale", true, 100);
  check_id("model.layers.0.mlp.shared_experts.gate_proj.weight", false, 0);
  check_id("model.layers.0.self_attn.q_proj.weight", false, 0);
  check_id("model.embed_tokens.weight", false, 0);
  check_id("model.layers.0.input_layernorm.weight", false, 0);
  check_id("model.layers.0.mlp.experts.gate_proj.weight", false, 0);
  check_id("model.layers.10.mlp.experts.down_proj.weight", false, 0);
  check_id("model.layers.0.block_sparse_moe.experts.3.w1.weight", true, 3);
  check_id("x.experts.5gate.weight", false, 0);
  check_id("xexperts.5.w1.weight", false, 0);
  check_id("a.experts.1.b.experts.2.weight", true, 1);
  check_id("a.experts.x.b.experts.2.weight", true, 2);
  sl__expert_set local = {.all = false, .experts = 384, .ep = 8, .e = 0, .placement = SL_PLACEMENT_LINEAR};
  CHECK(!sl__expert_skip("model.layers.0.mlp.experts.10.gate_proj.weight", &local));
  CHECK(!sl__expert_skip("model.layers.0.mlp.experts.47.gate_proj.weight", &local));
  CHECK(sl__expert_skip("model.layers.0.mlp.experts.48.gate_proj.weight", &local));
  CHECK(sl__expert_skip("model.layers.0.mlp.experts.200.down_proj.weight", &local));
  CHECK(!sl__expert_skip("model.layers.0.mlp.experts.200.down_proj.weight_scale", &local));
  CHECK(!sl__expert_skip("model.layers.0.mlp.experts.200.down_proj.bias", &local));
  CHECK(!sl__expert_skip("model.layers.0.mlp.shared_experts.gate_proj.weight", &local));
  CHECK(!sl__expert_skip("model.embed_tokens.weight", &local));
  CHECK(!sl__expert_skip("model.layers.0.mlp.experts.gate_proj.weight", &local));
  local.all = true;
  CHECK(!sl__expert_skip("model.layers.0.mlp.experts.200.down_proj.weight", &local));
  local.all = false;
  local.ep = 1;
  CHECK(!sl__expert_skip("model.layers.0.mlp.experts.200.down_proj.weight", &local));
}

int main(void) {
  test_ranks();
  test_pipeline();
  test_experts();
  test_ids_and_skip();
  return sl_test_finish();
}
