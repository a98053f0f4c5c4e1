/*
 * test_coverage.c — engine/coverage.c, missing and unexpected weight tracking (docs/spec/TRACKING.md §1–§3),
 * on hand-built models, catalogs, schedules and rank plans:
 *   - the pre-check from the schedule's bitmaps: missing units (sorted by name), unexpected
 *     tensors (sorted by name), ignored biases, the skipped count;
 *   - the collective reduction at the world size it runs with: each rank sets only what its own
 *     plan feeds and its own pieces read, so the verdict is right only if the bitmaps really are
 *     OR-reduced; a copy that delivered fewer bytes than planned makes its unit missing; copies of
 *     no unit are ignored; bitmaps crossing byte boundaries;
 *   - the message (counts, plural, "unit (→ parameter)", at most 20 names then "… and N more",
 *     the status) and the JSON arrays, compared with literal expectations.
 * Every rank checks; sl_test_finish_mpi sums the failures so that all ranks agree on the result,
 * and the ranks also compare a digest of their verdicts.
 */
#include "check.h"
#include "engine/coverage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a hand-built world ---- */

typedef struct world {
  sl__model m;
  sl__catalog cat;
  char *unit_names[64];
  char *param_names[64];
  sl__mparam params[64];
  uint32_t unit_param[64];
  char **units;
  sl__cat_tensor tensors[64];
  uint8_t fate[64];
} world;

static void world_init(world *w, size_t n_units, const char *const *units, const uint32_t *unit_param,
                       size_t n_params, const char *const *params, size_t n_tensors,
                       const char *const *tensors, const uint8_t *fate) {
  memset(w, 0, sizeof *w);
  for (size_t i = 0; i < n_units; i++) {
    w->unit_names[i] = (char *)units[i];
    w->unit_param[i] = unit_param[i];
  }
  for (size_t p = 0; p < n_params; p++)
    w->params[p].name = (char *)params[p];
  for (size_t t = 0; t < n_tensors; t++) {
    w->tensors[t].name = (char *)tensors[t];
    w->fate[t] = fate[t];
  }
  w->m.n_units = n_units;
  w->m.units = w->unit_names;
  w->m.unit_param = w->unit_param;
  w->m.n_params = n_params;
  w->m.params = w->params;
  w->m.tensor_fate = w->fate;
  w->cat.n_tensors = n_tensors;
  w->cat.tensors = w->tensors;
}

static void set_bit(uint8_t *b, size_t i) {
  b[i / 8] |= (uint8_t)(1u << (i % 8));
}

static void check_list(const char *what, const uint32_t *got, size_t n_got, const uint32_t *want,
                       size_t n_want) {
  CHECKF(n_got == n_want, "%s: %zu entries, want %zu", what, n_got, n_want);
  for (size_t i = 0; i < n_got && i < n_want; i++)
    CHECKF(got[i] == want[i], "%s[%zu] = %u, want %u", what, i, got[i], want[i]);
}

/* The small world: 4 units feeding 3 parameters, 8 tensors of every fate. */
static const char *const k_units[] = {"a.weight", "b.weight", "c.weight", "d.weight"};
static const uint32_t k_unit_param[] = {0, 0, 1, 2};
static const char *const k_params[] = {"ab_fused", "c.weight", "d.weight"};
static const char *const k_tensors[] = {"a.weight", "b.weight",        "c.weight", "d.weight",
                                        "zz.extra", "rotary.inv_freq", "c.bias",   "aa.unused"};
static const uint8_t k_fate[] = {SL_FATE_CONSUMED, SL_FATE_CONSUMED, SL_FATE_CONSUMED, SL_FATE_CONSUMED,
                                 SL_FATE_NONE,     SL_FATE_SKIPPED,  SL_FATE_IGNORED,  SL_FATE_CONSUMED};

static void test_precheck(void) {
  world w;
  world_init(&w, 4, k_units, k_unit_param, 3, k_params, 8, k_tensors, k_fate);
  uint8_t need[1] = {0}, used[1] = {0};
  set_bit(need, 0);
  set_bit(need, 1);
  set_bit(need, 2); /* d.weight fed by no plan */
  for (int t = 0; t < 4; t++)
    set_bit(used, (size_t)t);
  set_bit(used, 6); /* an ignored bias that is read anyway stays "ignored" */
  sl__schedule s = {.unit_needed = need, .tensor_used = used};
  sl__track tr;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__track_precheck(&w.m, &w.cat, &s, &tr, &err) == SL_STATUS_OK);
  check_list("missing", tr.missing, tr.n_missing, (const uint32_t[]){3}, 1);
  /* Sorted by name: "aa.unused" (7) before "zz.extra" (4). */
  check_list("unexpected", tr.unexpected, tr.n_unexpected, (const uint32_t[]){7, 4}, 2);
  check_list("ignored", tr.ignored, tr.n_ignored, (const uint32_t[]){6}, 1);
  CHECK_EQ_U64(tr.n_skipped, 1);
  char msg[1024];
  sl_status st = SL_STATUS_OK;
  CHECK(sl__track_message(&w.m, &w.cat, &tr, msg, sizeof msg, &st));
  CHECK_STR(msg, "1 weight not initialized from checkpoint: d.weight; "
                 "2 checkpoint tensors consumed by no rank: aa.unused, zz.extra");
  CHECK(st == SL_STATUS_MISSING_WEIGHTS);
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__track_json(&w.m, &w.cat, &tr, &b);
  CHECK_STR(sl__buf_str(&b), "\"missing\":[{\"tensor\":\"d.weight\",\"param\":\"d.weight\"}],"
                             "\"unexpected\":[\"aa.unused\",\"zz.extra\"],\"ignored\":[\"c.bias\"],"
                             "\"skipped_count\":1");
  sl__buf_free(&b);
  sl__track_free(&tr);
  CHECK(tr.missing == NULL && tr.n_missing == 0);
  sl__track_free(NULL);

  /* Units of a fused parameter name the parameter; unexpected only → UNEXPECTED_WEIGHTS. */
  need[0] = 0x0c; /* c, d */
  used[0] = 0xff;
  sl__err_clear(&err);
  CHECK(sl__track_precheck(&w.m, &w.cat, &s, &tr, &err) == SL_STATUS_OK);
  check_list("missing", tr.missing, tr.n_missing, (const uint32_t[]){0, 1}, 2);
  CHECK_EQ_U64(tr.n_unexpected, 0);
  st = SL_STATUS_OK;
  CHECK(sl__track_message(&w.m, &w.cat, &tr, msg, sizeof msg, &st));
  CHECK_STR(msg, "2 weights not initialized from checkpoint: a.weight (→ ab_fused), b.weight (→ ab_fused)");
  CHECK(st == SL_STATUS_MISSING_WEIGHTS);
  sl__buf_init(&b, 0);
  sl__track_json(&w.m, &w.cat, &tr, &b);
  CHECK_STR(sl__buf_str(&b), "\"missing\":[{\"tensor\":\"a.weight\",\"param\":\"ab_fused\"},"
                             "{\"tensor\":\"b.weight\",\"param\":\"ab_fused\"}],"
                             "\"unexpected\":[],\"ignored\":[\"c.bias\"],\"skipped_count\":1");
  sl__buf_free(&b);
  sl__track_free(&tr);

  need[0] = 0x0f;
  used[0] = 0x0f; /* zz.extra (NONE) and aa.unused (CONSUMED) unread */
  CHECK(sl__track_precheck(&w.m, &w.cat, &s, &tr, &err) == SL_STATUS_OK);
  st = SL_STATUS_OK;
  CHECK(sl__track_message(&w.m, &w.cat, &tr, msg, sizeof msg, &st));
  CHECK_STR(msg, "2 checkpoint tensors consumed by no rank: aa.unused, zz.extra");
  CHECK(st == SL_STATUS_UNEXPECTED_WEIGHTS);
  sl__track_free(&tr);

  /* Everything fed and read: no message, status untouched. */
  used[0] = 0x9f;
  w.fate[4] = SL_FATE_SKIPPED;
  CHECK(sl__track_precheck(&w.m, &w.cat, &s, &tr, &err) == SL_STATUS_OK);
  CHECK(tr.n_missing == 0 && tr.n_unexpected == 0 && tr.n_skipped == 2);
  st = SL_STATUS_OK;
  CHECK(!sl__track_message(&w.m, &w.cat, &tr, msg, sizeof msg, &st));
  CHECK(st == SL_STATUS_OK);
  sl__track_free(&tr);
}

static void test_long_lists(void) {
  /* 25 missing units: 20 names, then "… and 5 more"; the message is cut to the buffer. */
  static char names[25][16];
  const char *units[25];
  uint32_t up[25];
  for (int i = 0; i < 25; i++) {
    snprintf(names[i], sizeof names[i], "u.%02d", i);
    units[i] = names[i];
    up[i] = (uint32_t)i;
  }
  world w;
  world_init(&w, 25, units, up, 25, units, 0, NULL, NULL);
  uint8_t need[4] = {0}, used[1] = {0};
  sl__schedule s = {.unit_needed = need, .tensor_used = used};
  sl__track tr;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__track_precheck(&w.m, &w.cat, &s, &tr, &err) == SL_STATUS_OK);
  CHECK_EQ_U64(tr.n_missing, 25);
  char want[1024] = "25 weights not initialized from checkpoint: ";
  for (int i = 0; i < 20; i++)
    snprintf(want + strlen(want), sizeof want - strlen(want), "%su.%02d", i > 0 ? ", " : "", i);
  strcat(want, ", … and 5 more");
  char msg[1024];
  sl_status st = SL_STATUS_OK;
  CHECK(sl__track_message(&w.m, &w.cat, &tr, msg, sizeof msg, &st));
  CHECK_STR(msg, want);
  char small[16];
  CHECK(sl__track_message(&w.m, &w.cat, &tr, small, sizeof small, &st));
  CHECK_STR(small, "25 weights not ");
  /* JSON lists all 25. */
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__track_json(&w.m, &w.cat, &tr, &b);
  CHECK_CONTAINS(sl__buf_str(&b), "{\"tensor\":\"u.24\",\"param\":\"u.24\"}]");
  sl__buf_free(&b);
  sl__track_free(&tr);
}

/* The reduction: rank r's plan feeds units u with u % W == r and reads tensors t with t % W == r. */
static uint64_t test_reduce_small(sl__comm *c) {
  uint32_t W = (uint32_t)c->size, me = (uint32_t)c->rank;
  world w;
  world_init(&w, 4, k_units, k_unit_param, 3, k_params, 8, k_tensors, k_fate);
  /* Pieces: tensors 0..3, reader t % W (every rank holds the same schedule). */
  sl__piece pieces[4];
  memset(pieces, 0, sizeof pieces);
  for (uint32_t t = 0; t < 4; t++) {
    pieces[t].tensor = t;
    pieces[t].reader = t % W;
  }
  sl__schedule s = {.world = W, .n_pieces = 4, .pieces = pieces};
  /* Copies of units 0..2 (unit 3 fed by nobody), plus one copy of no unit. Unit 1's copy
   * delivers only half its bytes. */
  sl__copy copies[4];
  _Atomic uint64_t done[4];
  size_t n = 0;
  for (uint32_t u = 0; u < 3; u++) {
    if (u % W != me)
      continue;
    copies[n] = (sl__copy){.unit = u, .tensor = u, .rows = 2, .row_bytes = 8};
    atomic_store(&done[n], u == 1 ? 8 : 16);
    n++;
  }
  copies[n] = (sl__copy){.unit = SL_NONE, .tensor = 0, .rows = 1, .row_bytes = 4};
  atomic_store(&done[n], 0); /* not counted: no unit */
  n++;
  sl__rank_plan plan = {.n_copies = n, .copies = copies};
  sl__track tr;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__track_reduce(c, &w.m, &w.cat, &s, &plan, done, &tr, &err);
  CHECKF(st == SL_STATUS_OK, "reduce: %s", err.msg);
  if (st != SL_STATUS_OK)
    return 0;
  check_list("missing", tr.missing, tr.n_missing, (const uint32_t[]){1, 3}, 2);
  check_list("unexpected", tr.unexpected, tr.n_unexpected, (const uint32_t[]){7, 4}, 2);
  check_list("ignored", tr.ignored, tr.n_ignored, (const uint32_t[]){6}, 1);
  CHECK_EQ_U64(tr.n_skipped, 1);
  char msg[512];
  sl_status ms = SL_STATUS_OK;
  CHECK(sl__track_message(&w.m, &w.cat, &tr, msg, sizeof msg, &ms));
  CHECK_STR(msg, "2 weights not initialized from checkpoint: b.weight (→ ab_fused), d.weight; "
                 "2 checkpoint tensors consumed by no rank: aa.unused, zz.extra");
  uint64_t digest = tr.n_missing * 1000 + tr.n_unexpected * 100 + tr.n_ignored * 10 + tr.n_skipped;
  for (size_t i = 0; i < tr.n_missing; i++)
    digest = digest * 31 + tr.missing[i];
  sl__track_free(&tr);
  return digest;
}

/* Bitmaps over several bytes: 19 units, 17 tensors. Units 8 and 18 fed by nobody; tensor 16 read
 * by nobody; unit 11's copy on its rank incomplete. */
static uint64_t test_reduce_wide(sl__comm *c) {
  uint32_t W = (uint32_t)c->size, me = (uint32_t)c->rank;
  static char un[19][16], tn[17][16];
  const char *units[19], *tensors[17];
  uint32_t up[19];
  uint8_t fate[17];
  for (int i = 0; i < 19; i++) {
    snprintf(un[i], sizeof un[i], "u.%02d", i);
    units[i] = un[i];
    up[i] = (uint32_t)i;
  }
  for (int t = 0; t < 17; t++) {
    snprintf(tn[t], sizeof tn[t], "t.%02d", t);
    tensors[t] = tn[t];
    fate[t] = SL_FATE_CONSUMED;
  }
  world w;
  world_init(&w, 19, units, up, 19, units, 17, tensors, fate);
  sl__piece pieces[16];
  memset(pieces, 0, sizeof pieces);
  for (uint32_t t = 0; t < 16; t++) {
    pieces[t].tensor = t;
    pieces[t].reader = (t * 7) % W;
  }
  sl__schedule s = {.world = W, .n_pieces = 16, .pieces = pieces};
  sl__copy copies[19];
  _Atomic uint64_t done[19];
  size_t n = 0;
  for (uint32_t u = 0; u < 19; u++) {
    if (u == 8 || u == 18 || (u * 3) % W != me)
      continue;
    copies[n] = (sl__copy){.unit = u, .tensor = u % 17, .rows = 3, .row_bytes = 5};
    atomic_store(&done[n], u == 11 ? 14 : 15);
    n++;
  }
  sl__rank_plan plan = {.n_copies = n, .copies = copies};
  sl__track tr;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__track_reduce(c, &w.m, &w.cat, &s, &plan, done, &tr, &err);
  CHECKF(st == SL_STATUS_OK, "reduce: %s", err.msg);
  if (st != SL_STATUS_OK)
    return 0;
  check_list("missing", tr.missing, tr.n_missing, (const uint32_t[]){8, 11, 18}, 3);
  check_list("unexpected", tr.unexpected, tr.n_unexpected, (const uint32_t[]){16}, 1);
  CHECK_EQ_U64(tr.n_ignored, 0);
  uint64_t digest = 0;
  for (size_t i = 0; i < tr.n_missing; i++)
    digest = digest * 31 + tr.missing[i];
  for (size_t i = 0; i < tr.n_unexpected; i++)
    digest = digest * 37 + tr.unexpected[i];
  sl__track_free(&tr);
  return digest;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl__comm c;
  sl__err err;
  sl__err_clear(&err);
  if (sl__comm_init_mpi(&c, &(MPI_Comm){MPI_COMM_WORLD}, &err) != SL_STATUS_OK) {
    fprintf(stderr, "comm init: %s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  sl_test_rank = c.rank;
  test_precheck();
  test_long_lists();
  uint64_t d[2] = {test_reduce_small(&c), test_reduce_wide(&c)};
  /* The ranks agree: every rank's digest equals rank 0's. */
  uint64_t d0[2] = {d[0], d[1]};
  MPI_Bcast(d0, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  CHECK(d[0] == d0[0] && d[1] == d0[1]);
  sl__comm_free(&c);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
