/*
 * test_plan_visibility.c — the schedule when some ranks cannot open some checkpoint files
 * (plan/visibility.h, docs/spec/STORAGE.md): on the three-file Llama and Mixtral fixtures, at 4 and
 * 6 ranks in several layouts, with the files on rank 0 only, on a subset of ranks, one file on one
 * rank only, and the files on the first node of two:
 *   - every piece is read by a rank that sees its file, and a rank that sees none reads nothing;
 *   - each byte is read once (reads without covering gaps = the distinct bytes);
 *   - every rank that needs a piece and does not read it is in the piece's broadcast group with its
 *     reader, and receives exactly the bytes of those pieces (the per-rank figure);
 *   - two-phase exchanges only for files every rank sees;
 *   - a lent reader is on the node of the piece's first member whenever a rank there sees the file;
 *   - a file that no rank sees is an error naming it.
 */
#include "check.h"
#include "model/catalog.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/spec.h"
#include "plan/plan.h"
#include "plan/stats.h"
#include "plan/twophase.h"
#include "plan/visibility.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
  sl__catalog cat;
  sl__spec *spec;
  sl__model model;
} fixture;

static bool open_fixture(const char *name, fixture *f) {
  memset(f, 0, sizeof *f);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", sl_test_env("SL_FIXTURES", "fixtures"), name);
  sl__err err;
  sl__err_clear(&err);
  sl__catalog_opts co = {
      .folder = dir, .what = dir, .select = {.format = SL_FORMAT_AUTO}, .require_config = true};
  if (sl__catalog_build(&co, &f->cat, &err) != SL_STATUS_OK) {
    CHECKF(false, "%s: %s", name, err.msg);
    return false;
  }
  cJSON *cfg = cJSON_ParseWithLength(f->cat.config_json, f->cat.config_len);
  const char *arch = NULL;
  bool ok = cfg != NULL && sl__model_architecture(cfg, &arch, &err) == SL_STATUS_OK &&
            sl__spec_find(arch, &f->spec, &err) == SL_STATUS_OK &&
            sl__model_build(f->spec, &f->cat, SL_LAYOUT_VLLM, &f->model, &err) == SL_STATUS_OK;
  cJSON_Delete(cfg);
  CHECKF(ok, "%s: %s", name, err.msg);
  return ok;
}

static void close_fixture(fixture *f) {
  sl__model_free(&f->model);
  sl__spec_free(f->spec);
  sl__catalog_free(&f->cat);
}

/* Who sees what in a scenario. */
typedef enum scenario { ONLY_RANK0, EVEN_RANKS, FILE1_ON_LAST, FIRST_NODE, NOBODY_FILE2 } scenario;

static const char *scenario_name[] = {"rank 0 only", "even ranks", "file 1 on the last rank only",
                                      "first node of two", "file 2 nowhere"};

static void fill(sl__visibility *v, scenario sc, uint32_t world, uint32_t n_files,
                 const sl__node_layout *nodes) {
  if (sc == FIRST_NODE) {
    CHECK(sl__visibility_first_node(v, world, n_files, nodes));
    return;
  }
  CHECK(sl__visibility_alloc(v, world, n_files));
  for (uint32_t r = 0; r < world; r++)
    for (uint32_t f = 0; f < n_files; f++) {
      bool sees = sc == ONLY_RANK0      ? r == 0
                  : sc == EVEN_RANKS    ? r % 2 == 0
                  : sc == FILE1_ON_LAST ? (f != 1 || r == world - 1)
                                        : f != 2;
      if (sees)
        sl__visibility_set(v, r, f);
    }
  sl__visibility_count(v);
}

static bool in_group(const sl__schedule *s, uint32_t g, uint32_t rank) {
  for (uint32_t j = 0; j < s->groups[g].n; j++)
    if (s->group_members[s->groups[g].off + j] == rank)
      return true;
  return false;
}

/* Every check of the header on one schedule. */
static void check_schedule(const char *label, const fixture *fx, const sl__schedule *s,
                           const sl__visibility *v, const sl__node_layout *nodes, bool per_row) {
  uint32_t world = s->world;
  uint64_t *recv = calloc(world, sizeof *recv);
  uint64_t read = 0, cover = 0;
  for (size_t k = 0; k < s->n_pieces; k++) {
    const sl__piece *p = &s->pieces[k];
    uint32_t f = fx->cat.tensors[p->tensor].file;
    if (p->xchg != SL_NONE) {
      CHECKF(v->seers[f] == world, "%s: a two-phase exchange of %s, which not every rank sees", label,
             fx->cat.files[f].name);
      continue;
    }
    CHECKF(sl__visibility_sees(v, p->reader, f), "%s: rank %u reads %s from %s, which it cannot see", label,
           p->reader, fx->cat.tensors[p->tensor].name, fx->cat.files[f].name);
    CHECKF(p->lent == !sl__piece_member(s, p, p->reader), "%s: piece %zu lent flag", label, k);
    if (p->lent && nodes != NULL) {
      uint32_t node = sl__node_layout_of(nodes, sl__piece_lowest_member(s, p));
      bool seer_there = false;
      for (uint32_t r = 0; r < world; r++)
        seer_there = seer_there || (sl__node_layout_of(nodes, r) == node && sl__visibility_sees(v, r, f));
      CHECKF(!seer_there || sl__node_layout_of(nodes, p->reader) == node,
             "%s: %s read on node %u for node %u, where a rank sees it", label,
             fx->cat.tensors[p->tensor].name, sl__node_layout_of(nodes, p->reader), node);
    }
    for (uint32_t r = 0; r < world; r++) {
      if (!sl__piece_member(s, p, r) || r == p->reader)
        continue;
      recv[r] += p->nbytes;
      CHECKF(p->group != SL_NONE && in_group(s, p->group, r) && in_group(s, p->group, p->reader),
             "%s: rank %u needs %s but is not in a group with its reader %u", label, r,
             fx->cat.tensors[p->tensor].name, p->reader);
    }
  }
  for (uint32_t r = 0; r < world; r++) {
    read += s->stats[r].bytes_read;
    cover += s->stats[r].bytes_covering;
    bool sees_any = false;
    for (uint32_t f = 0; f < v->n_files; f++)
      sees_any = sees_any || sl__visibility_sees(v, r, f);
    if (!sees_any)
      CHECKF(s->stats[r].bytes_read == 0, "%s: rank %u sees no file but reads %llu bytes", label, r,
             (unsigned long long)s->stats[r].bytes_read);
    if (per_row)
      CHECKF(s->stats[r].bytes_received == recv[r], "%s: rank %u receives %llu bytes, its pieces %llu", label,
             r, (unsigned long long)s->stats[r].bytes_received, (unsigned long long)recv[r]);
  }
  CHECKF(read - cover == s->unique_bytes, "%s: %llu bytes read, %llu distinct", label,
         (unsigned long long)(read - cover), (unsigned long long)s->unique_bytes);
  free(recv);
}

static void run(const char *fixture_name, fixture *fx, uint32_t tp, uint32_t pp, uint32_t dp, scenario sc,
                bool per_row) {
  bool ep = fx->model.experts > 0; /* experts over every rank: the ranks' plans all differ */
  uint32_t world = tp * pp * dp;
  uint32_t n_layers = fx->model.n_layers;
  uint32_t starts[3] = {0, pp == 2 ? n_layers / 2 : n_layers, n_layers};
  sl__node_layout nodes = {.ranks_per_node = world / 2};
  sl__plan_opts o = {.pp_starts = starts,
                     .coalesce_gap = 4096,
                     .bucket_bytes = 1 << 16,
                     .read_chunk = 1 << 20,
                     .per_row_reads = per_row,
                     .enable_ep = ep,
                     .nodes = &nodes};
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__layout_init(&o.layout, tp, pp, dp, world, &err) == SL_STATUS_OK);
  sl__visibility v;
  fill(&v, sc, world, (uint32_t)fx->cat.n_files, &nodes);
  o.vis = &v;
  char label[256];
  snprintf(label, sizeof label, "%s tp%u pp%u dp%u%s, %s%s", fixture_name, tp, pp, dp, ep ? " ep" : "",
           scenario_name[sc], per_row ? ", per row" : "");
  sl__schedule s;
  sl_status st = sl__schedule_build(&fx->model, &fx->cat, &o, SL_NONE, NULL, &s, &err);
  if (sc == NOBODY_FILE2) {
    CHECKF(st == SL_STATUS_IO, "%s: status %d", label, (int)st);
    CHECK_CONTAINS(err.msg, fx->cat.files[2].path);
    CHECK_CONTAINS(err.msg, "no rank can open");
  } else {
    CHECKF(st == SL_STATUS_OK, "%s: %s", label, err.msg);
    if (st == SL_STATUS_OK)
      check_schedule(label, fx, &s, &v, &nodes, per_row);
    sl__schedule_free(&s);
  }
  sl__visibility_free(&v);
}

int main(void) {
  static const char *const names[] = {"llama", "mixtral"};
  static const uint32_t layouts[][3] = {{4, 1, 1}, {2, 1, 2}, {2, 2, 1}, {1, 1, 4}, {2, 1, 3}};
  for (size_t i = 0; i < 2; i++) {
    fixture fx;
    if (!open_fixture(names[i], &fx))
      continue;
    CHECKF(fx.cat.n_files >= 3, "%s has %zu files, the test needs three", names[i], fx.cat.n_files);
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0] && fx.cat.n_files >= 3; l++)
      for (int sc = ONLY_RANK0; sc <= NOBODY_FILE2; sc++)
        for (int per_row = 0; per_row < 2; per_row++)
          run(names[i], &fx, layouts[l][0], layouts[l][1], layouts[l][2], (scenario)sc, per_row == 1);
    close_fixture(&fx);
  }
  return sl_test_finish();
}
