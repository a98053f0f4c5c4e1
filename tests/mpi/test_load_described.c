/*
 * test_load_described.c — loads from caller-described plans (docs/spec/DESIGN.md §12) at 1-4 ranks.
 * Each rank describes its own parameters from the independent reference's table of its rank
 * (tests/mpi/described_ref.c: the reference's byte segments as boxes, padding as zeros, what it
 * does not read skipped), so the plans say what docs/spec/LAYOUTS.md says without the library's
 * slicing. Checked on every rank:
 *   - llama at every layout of the world, mixtral with expert parallelism and deepseek_v3 (MLA,
 *     shared experts; tied head none) at tp = world: every parameter byte-exact against the
 *     reference (dtype, local shape, size), its fill "recorded"; rank 0's report: amplification
 *     1.00, each rank's bytes read equal to its planned bytes, no missing or unexpected weight;
 *   - llama's rotary inv_freq as a fallback parameter: filled whole, fill "fallback";
 *   - an architecture no spec knows (llama with config.json's architectures renamed): it loads,
 *     byte-exact, where the spec's load is refused;
 *   - the last rank's plan naming an absent tensor, and another overlapping two regions: every
 *     rank fails with SL_STATUS_PLAN naming it before any byte is read (the progress callback
 *     sees none);
 *   - the ranks' skips left out: UNEXPECTED_WEIGHTS on every rank naming the tensor; with
 *     strict false the load goes on and the report lists it;
 *   - a load from peers refuses a loader with a plan, on every rank; a rank that could not make its
 *     plan (sl_loader_set_plan(NULL)) fails every rank's load;
 *   - a reload of a described load agrees on the plans again and writes the same bytes.
 */
#include "check.h"
#include "described_ref.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sl_loader *create(const char *folder, int tp, int pp, int dp, bool ep, bool strict) {
  char v[16];
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", folder);
  snprintf(v, sizeof v, "%d", tp);
  sl_config_set(cfg, "tp", v);
  snprintf(v, sizeof v, "%d", pp);
  sl_config_set(cfg, "pp", v);
  snprintf(v, sizeof v, "%d", dp);
  sl_config_set(cfg, "dp", v);
  sl_config_set(cfg, "enable_expert_parallel", ep ? "true" : "false");
  sl_config_set(cfg, "strict", strict ? "true" : "false");
  sl_config_set(cfg, "quiet", "true");
  sl_loader *l = NULL;
  CHECKF(sl_loader_create(cfg, MPI_COMM_WORLD, &l) == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  return l;
}

static void count_bytes(uint64_t done, uint64_t total, void *user) {
  (void)total;
  if (done > *(uint64_t *)user)
    *(uint64_t *)user = done;
}

/* The loader's table against the reference's: names, dtypes, local shapes, sizes, bytes, fills. */
static void check_against(const char *label, const sl_ref_model *m, const sl_loader *l,
                          const sl_ref_table *ref) {
  CHECKF(sl_loader_param_count(l) >= ref->count, "%s: %zu parameters, the reference %zu", label,
         sl_loader_param_count(l), ref->count);
  for (size_t i = 0; i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    const sl_ref_param *e = sl_ref_table_find(ref, p->name);
    if (e == NULL)
      continue; /* the fallback parameter, checked by the caller */
    CHECK(sl_loader_param_fill(l, i) == SL_FILL_RECORDED);
    CHECKF(strcmp(p->dtype, e->dtype) == 0 && p->nbytes == e->nbytes && p->ndim == e->ndim &&
               memcmp(p->local_shape, e->local_shape, e->ndim * sizeof *e->local_shape) == 0,
           "%s: %s: dtype, shape or size", label, p->name);
    uint8_t *want = malloc(e->nbytes + 1);
    sl_ref_param_fill(m, e, want);
    CHECKF(p->data != NULL && memcmp(p->data, want, e->nbytes) == 0, "%s: %s differs from the reference",
           label, p->name);
    free(want);
  }
  for (size_t i = 0; i < ref->count; i++)
    CHECKF(sl_loader_find(l, ref->params[i].name) != NULL, "%s: %s missing", label, ref->params[i].name);
}

/* Rank 0: amplification 1.00, reads as planned, no missing or unexpected weight. */
static void check_report(const char *label, sl_loader *l) {
  if (lc_rank() != 0)
    return;
  cJSON *doc = cJSON_Parse(sl_loader_report_json(l));
  CHECKF(doc != NULL, "%s: no report", label);
  if (doc == NULL)
    return;
  const cJSON *amp = cJSON_GetObjectItem(doc, "read_amplification");
  CHECKF(cJSON_IsNumber(amp) && amp->valuedouble == 1.0, "%s: amplification %g", label,
         cJSON_IsNumber(amp) ? amp->valuedouble : -1);
  const cJSON *r = NULL;
  cJSON_ArrayForEach(r, cJSON_GetObjectItem(doc, "ranks")) {
    double got = cJSON_GetObjectItem(r, "bytes_read")->valuedouble;
    double planned = cJSON_GetObjectItem(r, "bytes_read_planned")->valuedouble;
    CHECKF(got == planned, "%s: a rank read %.0f bytes, %.0f planned", label, got, planned);
  }
  CHECKF(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "missing")) == 0 &&
             cJSON_GetArraySize(cJSON_GetObjectItem(doc, "unexpected")) == 0,
         "%s: missing or unexpected weights", label);
  cJSON_Delete(doc);
}

/* One layout of one fixture (folder: where to load from; the reference's fixture otherwise). */
static void one(const char *fixture, const char *folder, int tp, int pp, int dp, bool ep, bool fallback) {
  sl_ref_model *m = lc_model(fixture, NULL);
  sl_ref_layout lay = {.tp = tp, .pp = pp, .dp = dp, .rank = lc_rank(), .expert_parallel = ep};
  sl_ref_table *ref = NULL;
  char msg[512], label[96], path[1024];
  if (m == NULL || sl_ref_table_build(m, &lay, &ref, msg, sizeof msg) != SL_STATUS_OK)
    return; /* a layout the fixture does not fit */
  lc_fixture_path(fixture, path, sizeof path);
  snprintf(label, sizeof label, "%s tp%d pp%d dp%d%s", folder != NULL ? folder : fixture, tp, pp, dp,
           ep ? " ep" : "");
  sl_plan *plan = dr_plan(path, m, ref);
  const char *inv = "model.layers.0.self_attn.rotary_emb.inv_freq";
  if (fallback) { /* whole, as stored, for the caller's own loader */
    uint32_t i = 0;
    sl_plan_add_param(plan, inv, SL_DTYPE_F32, 1, (uint64_t[]){4}, 0, SL_FILL_FALLBACK, &i);
    sl_plan_add_region(plan, i, inv, 1, (uint64_t[]){0}, (uint64_t[]){4}, 1, (uint64_t[]){0},
                       (uint64_t[]){4});
  }
  sl_loader *l = create(folder != NULL ? folder : path, tp, pp, dp, ep, true);
  if (l != NULL && plan != NULL) {
    CHECKF(sl_loader_set_plan(l, plan) == SL_STATUS_OK, "%s: %s", label, sl_loader_error(l));
    CHECKF(sl_loader_load(l) == SL_STATUS_OK, "%s: %s", label, sl_loader_error(l));
    check_against(label, m, l, ref);
    check_report(label, l);
    if (fallback) { /* a reload agrees on the plans again and writes the same memory */
      CHECKF(sl_loader_reload(l, NULL, NULL) == SL_STATUS_OK, "%s: reload: %s", label, sl_loader_error(l));
      check_against(label, m, l, ref);
    }
    const sl_param *p = fallback ? sl_loader_find(l, inv) : NULL;
    for (size_t i = 0; p != NULL && i < sl_loader_param_count(l); i++)
      if (sl_loader_param(l, i) == p)
        CHECK(sl_loader_param_fill(l, i) == SL_FILL_FALLBACK);
    if (fallback) { /* the checkpoint's F32 values, from the value function through the reference */
      for (size_t t = 0; t < sl_ref_tensor_count(m); t++)
        if (strcmp(sl_ref_tensor_name(m, (int)t), inv) == 0) {
          sl_ref_param whole = {
              .nbytes = 16, .n_segs = 1, .segs = &(sl_ref_seg){.len = 16, .tensor = (int)t}};
          uint8_t want[16];
          sl_ref_param_fill(m, &whole, want);
          CHECKF(p != NULL && p->nbytes == 16 && memcmp(p->data, want, 16) == 0, "%s: the fallback differs",
                 label);
        }
    }
  }
  sl_loader_destroy(l);
  sl_plan_destroy(plan);
  sl_ref_table_free(ref);
}

/* The llama plan of this rank at tp = world, edited by `edit` on the last rank; the load must fail
 * on every rank with `want` (the cause) naming `text`, before any byte is read. */
static void refused(const char *label, void (*edit)(sl_plan *), bool skips, sl_status want, const char *text,
                    bool strict) {
  sl_ref_model *m = lc_model("llama", NULL);
  int w = lc_world();
  sl_ref_layout lay = {.tp = w == 3 ? 1 : w, .pp = 1, .dp = w == 3 ? 3 : 1, .rank = lc_rank()};
  sl_ref_table *ref = NULL;
  char msg[512], path[1024];
  if (m == NULL || sl_ref_table_build(m, &lay, &ref, msg, sizeof msg) != SL_STATUS_OK)
    return;
  lc_fixture_path("llama", path, sizeof path);
  sl_plan *plan = NULL;
  if (skips) {
    plan = dr_plan(path, m, ref);
  } else { /* the same parameters, no skip: a JSON round trip without its "skip" list */
    sl_plan *full = dr_plan(path, m, ref);
    char *text_json = sl_plan_to_json(full);
    char *cut = text_json != NULL ? strstr(text_json, "\"skip\":[") : NULL;
    if (cut != NULL)
      strcpy(cut, "\"skip\":[]}");
    CHECK(text_json != NULL && sl_plan_from_json(text_json, strlen(text_json), &plan, NULL) == SL_STATUS_OK);
    free(text_json);
    sl_plan_destroy(full);
  }
  if (edit != NULL && lc_rank() == w - 1 && plan != NULL)
    edit(plan);
  sl_loader *l = create(path, lay.tp, 1, lay.dp, false, strict);
  uint64_t seen = 0;
  if (l != NULL && plan != NULL) {
    sl_loader_set_progress(l, count_bytes, &seen);
    sl_status st = sl_loader_set_plan(l, plan);
    if (st == SL_STATUS_OK)
      st = sl_loader_load(l);
    int cause_rank = -1;
    sl_status cause = st == SL_STATUS_OK ? SL_STATUS_OK : sl_loader_error_cause(l, &cause_rank);
    CHECKF(cause == want, "%s: status %d, cause %d (%s), expected %d", label, st, cause, sl_loader_error(l),
           want);
    CHECKF(want == SL_STATUS_OK || strstr(sl_loader_error(l), text) != NULL, "%s: \"%s\" lacks \"%s\"", label,
           sl_loader_error(l), text);
    if (want != SL_STATUS_OK)
      CHECKF(seen == 0, "%s: %llu bytes delivered before the refusal", label, (unsigned long long)seen);
    if (want == SL_STATUS_OK && lc_rank() == 0) { /* strict false: loaded, the report names it */
      const char *json = sl_loader_report_json(l);
      CHECKF(json != NULL && strstr(json, text) != NULL, "%s: the report does not list %s", label, text);
    }
  }
  sl_loader_destroy(l);
  sl_plan_destroy(plan);
  sl_ref_table_free(ref);
}

static void absent_tensor(sl_plan *p) {
  uint32_t i = 0;
  sl_plan_add_param(p, "extra.weight", SL_DTYPE_BF16, 1, (uint64_t[]){8}, 0, SL_FILL_RECORDED, &i);
  sl_plan_add_region(p, i, "model.layers.7.nope.weight", 1, (uint64_t[]){0}, (uint64_t[]){8}, 1,
                     (uint64_t[]){0}, (uint64_t[]){8});
}

static void overlap(sl_plan *p) {
  uint32_t i = 0;
  sl_plan_add_param(p, "extra.weight", SL_DTYPE_BF16, 1, (uint64_t[]){64}, 0, SL_FILL_RECORDED, &i);
  sl_plan_add_region(p, i, "model.norm.weight", 1, (uint64_t[]){0}, (uint64_t[]){64}, 1, (uint64_t[]){0},
                     (uint64_t[]){64});
  sl_plan_add_region(p, i, "model.norm.weight", 1, (uint64_t[]){0}, (uint64_t[]){8}, 1, (uint64_t[]){56},
                     (uint64_t[]){8});
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  int w = lc_world();
  int lays[16][3];
  int n = lc_layouts(w, lays, 16);
  for (int i = 0; i < n; i++)
    one("llama", NULL, lays[i][0], lays[i][1], lays[i][2], false, i == 0);
  one("mixtral", NULL, w == 3 ? 1 : w, 1, w == 3 ? 3 : 1, true, false);
  one("deepseek_v3", NULL, w == 3 ? 1 : w, 1, w == 3 ? 3 : 1, false, false);
  /* an architecture no spec knows: the plan is all it takes */
  char *dir = lc_tmpdir("described_nospec");
  char variant[1200];
  snprintf(variant, sizeof variant, "%s/nospec", dir != NULL ? dir : "/nonexistent");
  if (lc_make_variant("llama", variant, "--set-config 'architectures=[\"NoSpecLlamaForCausalLM\"]'")) {
    sl_loader *spec = create(variant, w == 3 ? 1 : w, 1, w == 3 ? 3 : 1, false, true);
    CHECK(spec != NULL && sl_loader_plan(spec) != SL_STATUS_OK &&
          sl_loader_error_cause(spec, NULL) == SL_STATUS_ARCH);
    sl_loader_destroy(spec);
    one("llama", variant, w == 3 ? 1 : w, 1, w == 3 ? 3 : 1, false, false);
  }
  lc_tmpdir_remove(dir);
  /* a load from peers plans from the donors' spec: a loader with a plan takes no part */
  char path[1024];
  lc_fixture_path("llama", path, sizeof path);
  sl_loader *peer = create(path, 1, 1, w, false, true);
  sl_plan *empty = NULL;
  sl_plan_create(&empty);
  CHECK(peer != NULL && sl_loader_set_plan(peer, empty) == SL_STATUS_OK);
  CHECK(peer != NULL && sl_loader_load_from_peers(peer, MPI_COMM_WORLD) != SL_STATUS_OK &&
        sl_loader_error_cause(peer, NULL) == SL_STATUS_UNSUPPORTED);
  CHECK(peer != NULL && strstr(sl_loader_error(peer), "described plan") != NULL);
  sl_loader_destroy(peer);
  /* the last rank could not make its plan: nobody loads without it */
  sl_loader *none = create(path, 1, 1, w, false, true);
  sl_status st = sl_loader_set_plan(none, lc_rank() == w - 1 ? NULL : empty);
  CHECK(st == (lc_rank() == w - 1 ? SL_STATUS_INVALID_ARGUMENT : SL_STATUS_OK));
  CHECK(sl_loader_load(none) != SL_STATUS_OK && sl_loader_error_cause(none, NULL) == SL_STATUS_PLAN);
  char who[64];
  snprintf(who, sizeof who, "rank %d could not set its plan", w - 1);
  CHECK(strstr(sl_loader_error(none), who) != NULL);
  sl_loader_destroy(none);
  sl_plan_destroy(empty);
  refused("absent tensor", absent_tensor, true, SL_STATUS_PLAN, "model.layers.7.nope.weight", true);
  refused("overlap", overlap, true, SL_STATUS_PLAN, "writes element [56]", true);
  refused("no skips", NULL, false, SL_STATUS_UNEXPECTED_WEIGHTS, "rotary_emb.inv_freq", true);
  refused("no skips, not strict", NULL, false, SL_STATUS_OK, "rotary_emb.inv_freq", false);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
