/*
 * test_local_plan.c — a loading rank's schedule (sl__plan_opts.local, plan/plan.h) is the same rank's
 * part of the whole schedule: for several models and layouts and every rank, its own plan and its
 * copies' pieces, every piece (reader, group, exchange), the group numbers and sizes, the members
 * of its own groups (the others unlisted), the buckets and their items, the exchanges, the classes,
 * its figures, every rank's plan figures and the totals; the broadcast groups handed to the
 * communication layer; and every group's members once listed (sl__schedule_listed, the report's).
 * A pipeline moved to other memory plans as before (it holds no pointer into itself); a driver that
 * is not a dry run must name a rank of the job.
 *
 * With --time MODEL WORLD TP PP DP EP RANK REPS it times the plan stage of one loading rank instead
 * (scripts/bench-plan's "a loading rank" series): the catalog and the model are built once, then
 * the schedule with that own rank, whole (what every rank planned before) and local, REPS times
 * each; it prints the median CPU seconds of each.
 */
#include "api/prepare.h"
#include "check.h"
#include "plan/twophase.h"
#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The pipeline up to the model for a layout (the plan stage's options set, its schedule not built). */
static bool prepare(sl__pipeline *pl, const char *model, uint32_t world, const char *tp, const char *pp,
                    const char *dp, bool ep, uint32_t rank) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return false;
  sl_config_set(cfg, "model", model);
  sl_config_set(cfg, "tp", tp);
  sl_config_set(cfg, "pp", pp);
  sl_config_set(cfg, "dp", dp);
  sl_config_set(cfg, "enable_expert_parallel", ep ? "true" : "false");
  sl_config_set(cfg, "storage", "shared");
  sl__err err;
  sl__err_clear(&err);
  memset(pl, 0, sizeof *pl);
  sl__prep_driver d = {.cfg = cfg, .world = world, .rank = rank, .builds_catalog = true};
  sl_status st = sl__pipeline_run(pl, &d, SL_PREP_PLAN, &err);
  CHECKF(st == SL_STATUS_OK, "%s world %u tp %s pp %s dp %s: %s", model, world, tp, pp, dp, err.msg);
  sl_config_destroy(cfg);
  /* The loading rank's own schedule is rebuilt by the callers, whole and local. */
  sl__schedule_free(&pl->sched);
  sl__rank_plan_free(&pl->plan);
  return st == SL_STATUS_OK;
}

static bool build(sl__pipeline *pl, bool local, uint32_t rank, sl__rank_plan *own, sl__schedule *s) {
  sl__err err;
  sl__err_clear(&err);
  sl__plan_opts o;
  sl__pipeline_plan_opts(pl, local, &o);
  sl_status st = sl__schedule_build(&pl->prep.model, &pl->prep.cat, &o, rank, own, s, &err);
  CHECKF(st == SL_STATUS_OK, "schedule of rank %u: %s", rank, err.msg);
  return st == SL_STATUS_OK;
}

static bool same_piece(const sl__piece *a, const sl__piece *b) {
  return a->tensor == b->tensor && a->reader == b->reader && a->group == b->group &&
         a->n_members == b->n_members && a->src_off == b->src_off && a->src_stride == b->src_stride &&
         a->row_bytes == b->row_bytes && a->rows == b->rows && a->nbytes == b->nbytes &&
         a->n_classes == b->n_classes && a->xchg == b->xchg && a->lent == b->lent;
}

static bool same_bucket(const sl__bucket *a, const sl__bucket *b) {
  return a->group == b->group && a->reader == b->reader && a->xchg == b->xchg && a->round == b->round &&
         a->nbytes == b->nbytes && a->first_item == b->first_item && a->n_items == b->n_items;
}

static bool same_xchg(const sl__xchg *a, const sl__xchg *b) {
  return a->tensor == b->tensor && a->group == b->group && a->first_piece == b->first_piece &&
         a->n_cols == b->n_cols && a->src_off == b->src_off && a->rows == b->rows &&
         a->row_bytes == b->row_bytes && a->col_bytes == b->col_bytes &&
         a->rows_per_round == b->rows_per_round && a->rounds == b->rounds;
}

static bool same_plan(const sl__rank_plan *a, const sl__rank_plan *b) {
  if (a->n_copies != b->n_copies || a->n_lparams != b->n_lparams || a->bytes_needed != b->bytes_needed)
    return false;
  for (size_t i = 0; i < a->n_copies; i++) {
    const sl__copy *x = &a->copies[i], *y = &b->copies[i];
    if (x->tensor != y->tensor || x->piece != y->piece || x->src_off != y->src_off || x->rows != y->rows ||
        x->lparam != y->lparam || x->dst_off != y->dst_off)
      return false;
  }
  return true;
}

static bool same_plan_figures(const sl_rank_stats *a, const sl_rank_stats *b) {
  return a->bytes_needed == b->bytes_needed && a->bytes_local == b->bytes_local &&
         a->bytes_naive == b->bytes_naive && a->params == b->params && a->experts_local == b->experts_local;
}

static bool same_figures(const sl_rank_stats *a, const sl_rank_stats *b) {
  return same_plan_figures(a, b) && a->bytes_read == b->bytes_read &&
         a->bytes_covering == b->bytes_covering && a->bytes_received == b->bytes_received &&
         a->bytes_sent == b->bytes_sent && a->files_opened == b->files_opened;
}

static bool has(const uint32_t *m, uint32_t n, uint32_t rank) {
  for (uint32_t j = 0; j < n; j++)
    if (m[j] == rank)
      return true;
  return false;
}

/* Group members of w and l (l listed, or listed and w's member) alike. */
static void check_groups(const sl__schedule *w, const sl__schedule *l, uint32_t r, bool all,
                         const char *what) {
  CHECKF(w->n_groups == l->n_groups, "%s: %zu groups, whole %zu", what, l->n_groups, w->n_groups);
  for (size_t g = 0; g < w->n_groups && w->n_groups == l->n_groups; g++) {
    const uint32_t *wm = &w->group_members[w->groups[g].off];
    bool member = has(wm, w->groups[g].n, r);
    CHECKF(w->groups[g].n == l->groups[g].n, "%s: group %zu has %u ranks, whole %u", what, g, l->groups[g].n,
           w->groups[g].n);
    CHECKF(sl__group_listed(l, (uint32_t)g) == (member || all), "%s: group %zu listed %d, member %d", what, g,
           sl__group_listed(l, (uint32_t)g), member);
    if (sl__group_listed(l, (uint32_t)g) && w->groups[g].n == l->groups[g].n)
      CHECKF(memcmp(wm, &l->group_members[l->groups[g].off], w->groups[g].n * sizeof *wm) == 0,
             "%s: group %zu's members", what, g);
    CHECKF(sl__group_lowest(w, (uint32_t)g) == sl__group_lowest(l, (uint32_t)g), "%s: group %zu's lowest",
           what, g);
  }
}

/* The communication layer's groups: the same number and broadcasting flags; this rank's members. */
static void check_comm_groups(const sl__schedule *w, const sl__schedule *l, uint32_t r, const char *what) {
  sl__comm_groups a = {0}, b = {0};
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__prepare_groups(w, &a, &err) == SL_STATUS_OK);
  CHECK(sl__prepare_groups(l, &b, &err) == SL_STATUS_OK);
  CHECKF(a.n == b.n, "%s: %zu communication groups, whole %zu", what, b.n, a.n);
  for (size_t g = 0; g < a.n && a.n == b.n; g++) {
    bool member = has(a.group[g].members, a.group[g].n, r);
    CHECKF(a.group[g].broadcasts == b.group[g].broadcasts, "%s: group %zu broadcasts", what, g);
    CHECKF(member == has(b.group[g].members, b.group[g].n, r), "%s: membership of group %zu", what, g);
    if (member)
      CHECKF(a.group[g].n == b.group[g].n && memcmp(a.group[g].members, b.group[g].members,
                                                    a.group[g].n * sizeof *a.group[g].members) == 0,
             "%s: members of group %zu", what, g);
  }
  sl__prepare_groups_free(&a);
  sl__prepare_groups_free(&b);
}

static void compare(const sl__schedule *w, const sl__rank_plan *wo, const sl__schedule *l,
                    const sl__rank_plan *lo, uint32_t r, const char *what) {
  CHECKF(l->local && l->local_rank == r, "%s: not a loading rank's schedule", what);
  CHECKF(same_plan(wo, lo), "%s: own plan", what);
  CHECKF(w->n_pieces == l->n_pieces && w->n_buckets == l->n_buckets && w->n_items == l->n_items &&
             w->n_xchgs == l->n_xchgs && w->n_classes == l->n_classes,
         "%s: %zu pieces %zu buckets %zu items %zu exchanges %u classes, whole %zu %zu %zu %zu %u", what,
         l->n_pieces, l->n_buckets, l->n_items, l->n_xchgs, l->n_classes, w->n_pieces, w->n_buckets,
         w->n_items, w->n_xchgs, w->n_classes);
  if (w->n_pieces != l->n_pieces || w->n_buckets != l->n_buckets || w->n_items != l->n_items ||
      w->n_xchgs != l->n_xchgs || w->n_classes != l->n_classes)
    return;
  for (size_t k = 0; k < w->n_pieces; k++)
    CHECKF(same_piece(&w->pieces[k], &l->pieces[k]), "%s: piece %zu", what, k);
  for (size_t b = 0; b < w->n_buckets; b++)
    CHECKF(same_bucket(&w->buckets[b], &l->buckets[b]), "%s: bucket %zu", what, b);
  for (size_t i = 0; i < w->n_items; i++)
    CHECKF(memcmp(&w->items[i], &l->items[i], sizeof w->items[i]) == 0, "%s: bucket item %zu", what, i);
  for (size_t x = 0; x < w->n_xchgs; x++)
    CHECKF(same_xchg(&w->xchgs[x], &l->xchgs[x]), "%s: exchange %zu", what, x);
  CHECKF(memcmp(w->class_of, l->class_of, w->world * sizeof *w->class_of) == 0, "%s: classes", what);
  check_groups(w, l, r, false, what);
  CHECKF(same_figures(&w->stats[r], &l->stats[r]), "%s: own figures", what);
  for (uint32_t q = 0; q < w->world; q++)
    CHECKF(same_plan_figures(&w->stats[q], &l->stats[q]), "%s: rank %u's plan figures", what, q);
  CHECKF(w->unique_bytes == l->unique_bytes && w->naive_bytes == l->naive_bytes &&
             w->checkpoint_bytes == l->checkpoint_bytes && w->bytes_exchanged == l->bytes_exchanged &&
             w->bytes_read_for_others == l->bytes_read_for_others && w->tensors_read == l->tensors_read &&
             w->tensors_one_reader == l->tensors_one_reader && w->expert_tensors == l->expert_tensors &&
             w->expert_tensors_one_reader == l->expert_tensors_one_reader,
         "%s: totals", what);
  check_comm_groups(w, l, r, what);
  sl__schedule listed;
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__schedule_listed(l, &listed, &err) == SL_STATUS_OK, "%s: %s", what, err.msg);
  check_groups(w, &listed, r, true, what);
  sl__schedule_listed_free(&listed);
}

static void check_layout(const char *fixtures, const char *name, uint32_t world, const char *tp,
                         const char *pp, const char *dp, bool ep) {
  char model[4096];
  snprintf(model, sizeof model, "%s/%s", fixtures, name);
  sl__pipeline pl;
  if (!prepare(&pl, model, world, tp, pp, dp, ep, 0)) {
    sl__pipeline_free(&pl);
    return;
  }
  size_t xchgs = 0;
  for (uint32_t r = 0; r < world; r++) {
    char what[256];
    snprintf(what, sizeof what, "%s world %u tp %s pp %s dp %s%s rank %u", name, world, tp, pp, dp,
             ep ? " EP" : "", r);
    sl__schedule w, l;
    sl__rank_plan wo, lo;
    if (build(&pl, false, r, &wo, &w) && build(&pl, true, r, &lo, &l)) {
      compare(&w, &wo, &l, &lo, r, what);
      xchgs = w.n_xchgs;
      sl__schedule_free(&l);
      sl__rank_plan_free(&lo);
      sl__schedule_free(&w);
      sl__rank_plan_free(&wo);
    }
  }
  printf("%s world %u tp %s pp %s dp %s%s: %u ranks alike (%zu exchanges)\n", name, world, tp, pp, dp,
         ep ? " EP" : "", world, xchgs);
  sl__pipeline_free(&pl);
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : (x > y ? 1 : 0);
}

/* Median CPU seconds of reps schedules of rank r, whole or local. */
static double time_build(sl__pipeline *pl, bool local, uint32_t r, int reps) {
  double *t = calloc((size_t)reps, sizeof *t);
  for (int i = 0; t != NULL && i < reps; i++) {
    sl__schedule s;
    sl__rank_plan own;
    double t0 = cpu_now();
    bool ok = build(pl, local, r, &own, &s);
    t[i] = cpu_now() - t0;
    if (ok) {
      sl__schedule_free(&s);
      sl__rank_plan_free(&own);
    }
  }
  if (t == NULL)
    return -1;
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  double m = t[reps / 2];
  free(t);
  return m;
}

static int time_main(char **argv) {
  uint32_t world = (uint32_t)strtoul(argv[2], NULL, 10);
  uint32_t rank = (uint32_t)strtoul(argv[7], NULL, 10);
  int reps = atoi(argv[8]);
  sl__pipeline pl;
  if (reps < 1 || rank >= world ||
      !prepare(&pl, argv[1], world, argv[3], argv[4], argv[5], strcmp(argv[6], "1") == 0, rank))
    return 2;
  double whole = time_build(&pl, false, rank, reps);
  double local = time_build(&pl, true, rank, reps);
  printf("whole %.6f local %.6f\n", whole, local);
  sl__pipeline_free(&pl);
  return sl_test_finish();
}

/* The pipeline holds no pointer into itself: a dry run's (storage local: the files on the first
 * node of 4 ranks, its visibility and nodes read by the planner) moved to other memory, its old
 * bytes scribbled over, plans every rank as before. A driver that is not a dry run names a rank of
 * the job (a dry run says dry_run, no longer rank SL_NONE). */
static void check_moved(const char *fixtures) {
  char model[4096];
  snprintf(model, sizeof model, "%s/llama", fixtures);
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  const char *kv[] = {"model",          model, "tp", "2", "pp", "2", "dp", "3", "storage", "local",
                      "ranks_per_node", "4"};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i += 2)
    sl_config_set(cfg, kv[i], kv[i + 1]);
  sl__err err;
  sl__err_clear(&err);
  sl__pipeline pl;
  memset(&pl, 0, sizeof pl);
  sl__prep_driver dry = {.cfg = cfg, .world = 12, .dry_run = true, .builds_catalog = true};
  sl_status st = sl__pipeline_run(&pl, &dry, SL_PREP_PLAN, &err);
  CHECKF(st == SL_STATUS_OK && pl.vis.sees != NULL, "dry run, storage local: %s", err.msg);
  sl__pipeline *moved = malloc(sizeof *moved);
  sl__schedule before[12], after;
  sl__rank_plan own_before[12], own_after;
  bool built[12] = {false};
  for (uint32_t r = 0; r < 12 && st == SL_STATUS_OK; r++)
    built[r] = build(&pl, false, r, &own_before[r], &before[r]);
  *moved = pl;
  memset(&pl, 0xA5, sizeof pl);
  for (uint32_t r = 0; r < 12; r++) {
    if (built[r] && build(moved, false, r, &own_after, &after)) {
      bool same = same_plan(&own_before[r], &own_after) && after.n_pieces == before[r].n_pieces;
      for (size_t k = 0; same && k < after.n_pieces; k++)
        same = same_piece(&after.pieces[k], &before[r].pieces[k]);
      CHECKF(same, "rank %u planned differently by the moved pipeline", r);
      sl__schedule_free(&after);
      sl__rank_plan_free(&own_after);
    }
    if (built[r]) {
      sl__schedule_free(&before[r]);
      sl__rank_plan_free(&own_before[r]);
    }
  }
  sl__pipeline_free(moved);
  free(moved);

  memset(&pl, 0, sizeof pl);
  sl__err_clear(&err);
  sl__prep_driver d = {.cfg = cfg, .world = 2, .rank = SL_NONE, .builds_catalog = true};
  CHECK(sl__pipeline_run(&pl, &d, SL_PREP_PLAN, &err) == SL_STATUS_INTERNAL && pl.done == SL_PREP_NONE);
  CHECK_CONTAINS(err.msg, "a dry run sets dry_run");
  sl__pipeline_free(&pl);
  sl_config_destroy(cfg);
  printf("a moved pipeline plans as before; rank SL_NONE is refused outside a dry run\n");
}

int main(int argc, char **argv) {
  if (argc == 10 && strcmp(argv[1], "--time") == 0)
    return time_main(argv + 1);
  const char *fixtures = sl_test_env("SL_FIXTURES", NULL);
  CHECKF(fixtures != NULL, "SL_FIXTURES is not set");
  if (fixtures == NULL)
    return sl_test_finish();
  check_layout(fixtures, "llama", 12, "2", "2", "3", false);
  check_layout(fixtures, "llama", 8, "1", "1", "8", false);
  check_layout(fixtures, "mixtral", 16, "2", "1", "8", true);
  check_layout(fixtures, "mixtral", 8, "4", "1", "2", false);
  check_layout(fixtures, "deepseek_v3", 32, "2", "2", "8", true);
  check_layout(fixtures, "deepseek_v3", 16, "4", "1", "4", false);
  check_layout(fixtures, "qwen3_moe", 16, "2", "2", "4", true);
  check_moved(fixtures);
  return sl_test_finish();
}
