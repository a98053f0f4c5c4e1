/*
 * model/described_model.c — the model of a load from caller-described plans (see model/described.h):
 * every rank's plan checked against the catalog, then an sl__model as the rest of the library
 * expects one:
 *   parameters  the union of the parameter names of every plan (style replicated, no sources: the
 *               planner takes each rank's copies from its plan, plan/slicing_described.c); a name
 *               on several ranks must have one held dtype, one source dtype and one fill there;
 *               its shape is the first plan's (the table's global shape: a plan has no global view)
 *   units       the checkpoint tensors some plan reads, sorted by name: the expected set
 *   fates       read: consumed; read by no plan but skipped by some: skipped; else none
 *               (unexpected unless a rank reads it, as for a spec's)
 * The checks here need only the catalog (each failure names the ranks, the parameter, the region and
 * its tensor): a tensor the checkpoint lacks, a box outside its tensor or its parameter, boxes of
 * different element counts, regions of different dtypes or of one that cannot be converted to the
 * parameter's, a transposed parameter of fewer than 2 dimensions or of sub-byte elements, a
 * parameter no region reads into, a fallback parameter that is not one whole tensor. Overlaps and
 * bytes no region writes are checked on the copies (plan/slicing_described.c). Pure.
 */
#include "model/described.h"

#include "format/cast.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The checks of one plan's regions, with the context of its messages. */
typedef struct checker {
  const sl__described *d;
  const sl__catalog *cat;
  uint32_t c;
  const sl__dplan *p;
  char who[96];
  sl__err *err;
} checker;

/* "described plan of rank 3: parameter X" then what. */
static sl_status fail_param(checker *k, const sl__dparam *dp, const char *fmt, const char *what) {
  char q[SL_QUOTE_BUF];
  return sl__err_set(k->err, SL_STATUS_PLAN, "described plan of %s: parameter %s: %s%s", k->who,
                     sl__quote(k->p->strings[dp->name], q, sizeof q), fmt, what);
}

/* "... region i (tensor T): " then what. */
static sl_status fail_region(checker *k, const sl__dregion *g, uint64_t i, const char *what) {
  char q[SL_QUOTE_BUF], msg[SL_ERR_MSG_MAX];
  const sl__dparam *dp = &k->p->params[g->param];
  if (g->tensor == SL_PLAN_ZEROS)
    snprintf(msg, sizeof msg, "region %llu (zeros): ", (unsigned long long)(i - dp->first_region));
  else
    snprintf(msg, sizeof msg, "region %llu (tensor %s): ", (unsigned long long)(i - dp->first_region),
             sl__quote(k->p->strings[g->tensor], q, sizeof q));
  return fail_param(k, dp, msg, what);
}

/* Elements of a box (counts), overflow-checked. */
static bool box_elems(const uint64_t *count, uint32_t n, uint64_t *out) {
  uint64_t e = 1;
  for (uint32_t j = 0; j < n; j++)
    if (sl__mul_overflow(e, count[j], &e))
      return false;
  *out = e;
  return true;
}

/* Whether box start/count lies in shape (n dimensions), no count 0; else a message in why. */
static bool box_inside(const uint64_t *start, const uint64_t *count, const uint64_t *shape, uint32_t n,
                       char *why, size_t cap) {
  for (uint32_t j = 0; j < n; j++) {
    uint64_t end = 0;
    if (count[j] == 0 || sl__add_overflow(start[j], count[j], &end) || end > shape[j]) {
      snprintf(why, cap, "dimension %u: start %llu + count %llu, of %llu", j, (unsigned long long)start[j],
               (unsigned long long)count[j], (unsigned long long)shape[j]);
      return false;
    }
  }
  return true;
}

/* The shape region boxes address in parameter dp: its own, the last two swapped when transposed. */
static void addressed(const sl__dparam *dp, uint64_t *shape) {
  memcpy(shape, dp->shape, sizeof dp->shape);
  if (dp->transposed && dp->ndim >= 2) {
    shape[dp->ndim - 2] = dp->shape[dp->ndim - 1];
    shape[dp->ndim - 1] = dp->shape[dp->ndim - 2];
  }
}

static sl_status check_region(checker *k, uint64_t i, sl__dtype *src_dtype) {
  sl__dregion *g = &k->p->regions[i];
  const sl__dparam *dp = &k->p->params[g->param];
  const uint64_t *n = sl__dregion_nums(k->p, g);
  char why[256], msg[512];
  uint64_t shape[SL_MAX_DIMS], src_elems = 0, dst_elems = 0;
  addressed(dp, shape);
  if (g->dst_ndim != dp->ndim) {
    snprintf(msg, sizeof msg, "its destination box has %u dimensions, the parameter %u", g->dst_ndim,
             dp->ndim);
    return fail_region(k, g, i, msg);
  }
  if (!box_inside(n + 2 * g->ndim, n + 2 * g->ndim + g->dst_ndim, shape, dp->ndim, why, sizeof why)) {
    snprintf(msg, sizeof msg, "its destination box is outside the parameter%s: %s",
             dp->transposed ? " (addressed transposed)" : "", why);
    return fail_region(k, g, i, msg);
  }
  if (g->tensor == SL_PLAN_ZEROS)
    return SL_STATUS_OK;
  g->cat = sl__catalog_find(k->cat, k->p->strings[g->tensor]);
  if (g->cat == SL_NONE)
    return fail_region(k, g, i, "the checkpoint has no such tensor");
  const sl__cat_tensor *t = &k->cat->tensors[g->cat];
  if (g->ndim != t->ndim) {
    snprintf(msg, sizeof msg, "its box has %u dimensions, the tensor %u", g->ndim, t->ndim);
    return fail_region(k, g, i, msg);
  }
  if (!box_inside(n, n + g->ndim, t->shape, t->ndim, why, sizeof why)) {
    snprintf(msg, sizeof msg, "its box is outside the tensor: %s", why);
    return fail_region(k, g, i, msg);
  }
  if (!box_elems(n + g->ndim, g->ndim, &src_elems) ||
      !box_elems(n + 2 * g->ndim + g->dst_ndim, g->dst_ndim, &dst_elems) || src_elems != dst_elems) {
    snprintf(msg, sizeof msg,
             "its tensor box holds %llu elements, its destination box %llu: they must be equal",
             (unsigned long long)src_elems, (unsigned long long)dst_elems);
    return fail_region(k, g, i, msg);
  }
  if (*src_dtype != SL_DT_COUNT && t->dtype != *src_dtype) {
    snprintf(msg, sizeof msg,
             "the tensor is %s, an earlier region's %s: a parameter's regions share one dtype",
             sl__dtype_name(t->dtype), sl__dtype_name(*src_dtype));
    return fail_region(k, g, i, msg);
  }
  *src_dtype = t->dtype;
  if (t->dtype != dp->dtype && !sl__cast_supported(t->dtype, dp->dtype)) {
    snprintf(msg, sizeof msg,
             "the tensor is %s, the parameter %s: no conversion between them (conversions are among "
             "F32, F16, BF16 and F64)",
             sl__dtype_name(t->dtype), sl__dtype_name(dp->dtype));
    return fail_region(k, g, i, msg);
  }
  return SL_STATUS_OK;
}

/* A fallback parameter: one region, one whole tensor into the whole parameter, as stored. */
static sl_status check_fallback(checker *k, const sl__dparam *dp) {
  const sl__dregion *g = dp->n_regions == 1 ? &k->p->regions[dp->first_region] : NULL;
  const sl__cat_tensor *t = g != NULL && g->cat != SL_NONE ? &k->cat->tensors[g->cat] : NULL;
  bool whole = t != NULL && !dp->transposed && t->dtype == dp->dtype && t->ndim == dp->ndim &&
               memcmp(t->shape, dp->shape, t->ndim * sizeof *t->shape) == 0;
  const uint64_t *n = g != NULL ? sl__dregion_nums(k->p, g) : NULL;
  for (uint32_t j = 0; whole && j < t->ndim; j++)
    whole = n[j] == 0 && n[t->ndim + j] == t->shape[j] && n[2 * t->ndim + j] == 0;
  return whole
             ? SL_STATUS_OK
             : fail_param(k, dp, "",
                          "a fallback parameter is one whole checkpoint tensor as stored: one region of the "
                          "whole tensor into the whole parameter, of its shape and dtype, not transposed");
}

static sl_status check_param(checker *k, sl__dparam *dp) {
  uint64_t elems = 0, bits = 0;
  char msg[256];
  if (!box_elems(dp->shape, dp->ndim, &elems) || sl__mul_overflow(elems, sl__dtype_bits(dp->dtype), &bits) ||
      bits % 8 != 0) {
    snprintf(msg, sizeof msg, "its size overflows or is not a whole number of bytes (%s)",
             sl__dtype_name(dp->dtype));
    return fail_param(k, dp, "", msg);
  }
  if (dp->transposed && (dp->ndim < 2 || sl__dtype_bits(dp->dtype) % 8 != 0))
    return fail_param(k, dp, "", "a transposed parameter needs 2 or more dimensions of whole-byte elements");
  sl__dtype src = SL_DT_COUNT;
  uint64_t reads = 0;
  for (uint64_t i = dp->first_region; i < dp->first_region + dp->n_regions; i++) {
    sl_status st = check_region(k, i, &src);
    if (st != SL_STATUS_OK)
      return st;
    reads += k->p->regions[i].tensor != SL_PLAN_ZEROS;
  }
  if (reads == 0 && elems > 0)
    return fail_param(k, dp, "", "no region reads into it (a parameter is filled from the checkpoint)");
  dp->src_dtype = src != SL_DT_COUNT ? src : dp->dtype;
  if (dp->transposed && sl__dtype_bits(dp->src_dtype) % 8 != 0)
    return fail_param(k, dp, "", "a transposed parameter needs whole-byte elements");
  return dp->fill == SL_FILL_FALLBACK ? check_fallback(k, dp) : SL_STATUS_OK;
}

/* Every plan's own checks, then its parameters' names unique. */
static sl_status check_plans(sl__described *d, const sl__catalog *cat, sl__err *err) {
  sl_status st = SL_STATUS_OK;
  for (uint32_t c = 0; c < d->n_classes && st == SL_STATUS_OK; c++) {
    checker k = {.d = d, .cat = cat, .c = c, .p = &d->plans[c], .err = err};
    sl__described_who(d, c, k.who, sizeof k.who);
    sl__hashmap names;
    sl__hashmap_init(&names, SL_HASHMAP_BORROW);
    for (uint32_t i = 0; i < k.p->n_params && st == SL_STATUS_OK; i++) {
      sl__dparam *dp = &k.p->params[i];
      const char *name = k.p->strings[dp->name];
      bool oom = false;
      if (!sl__hashmap_put(&names, name, strlen(name), i, NULL, &oom))
        st = oom ? sl__err_set(err, SL_STATUS_NOMEM, "out of memory")
                 : fail_param(&k, dp, "", "described twice (names are unique on a rank)");
      if (st == SL_STATUS_OK)
        st = check_param(&k, dp);
    }
    sl__hashmap_free(&names);
  }
  return st;
}

/* The union of the plans' parameters (first appearance order), each plan parameter's mparam set. */
static sl_status union_params(sl__described *d, sl__model *m, sl__err *err) {
  sl__hashmap of;
  sl__hashmap_init(&of, SL_HASHMAP_BORROW);
  sl__vec params;
  sl__vec_init(&params, sizeof(sl__mparam));
  sl_status st = SL_STATUS_OK;
  for (uint32_t c = 0; c < d->n_classes && st == SL_STATUS_OK; c++) {
    sl__dplan *p = &d->plans[c];
    for (uint32_t i = 0; i < p->n_params && st == SL_STATUS_OK; i++) {
      sl__dparam *dp = &p->params[i];
      const char *name = p->strings[dp->name];
      bool added = false;
      sl__hashval *v = sl__hashmap_slot(&of, name, strlen(name), &added);
      sl__mparam *mp = v == NULL ? NULL
                       : added   ? sl__vec_push(&params)
                                 : &SL_VEC_AT(&params, sl__mparam, v->u64);
      if (mp == NULL) {
        st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
        break;
      }
      if (added) {
        v->u64 = params.len - 1;
        *mp = (sl__mparam){.name = sl__strdup(name),
                           .style = SL_STYLE_REPLICATED,
                           .place = SL_PLACE_LAYER,
                           .layer = -1,
                           .dtype = dp->src_dtype,
                           .held_dtype = dp->dtype,
                           .ndim = dp->ndim,
                           .transposed = dp->transposed,
                           .fill = dp->fill,
                           .alias_of = SL_NONE,
                           .only_expert = SL_NONE};
        memcpy(mp->shape, dp->shape, sizeof mp->shape);
        if (mp->name == NULL)
          st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
      } else if (mp->dtype != dp->src_dtype || mp->held_dtype != dp->dtype || mp->fill != dp->fill ||
                 mp->transposed != dp->transposed) {
        char who[96], q[SL_QUOTE_BUF];
        sl__described_who(d, c, who, sizeof who);
        st = sl__err_set(
            err, SL_STATUS_PLAN,
            "described plan of %s: parameter %s: held in %s from %s (%s%s) there, in %s from %s "
            "(%s%s) on a lower rank: a parameter name has one dtype, one fill and one orientation "
            "on every rank",
            who, sl__quote(name, q, sizeof q), sl__dtype_name(dp->dtype), sl__dtype_name(dp->src_dtype),
            dp->fill == SL_FILL_FALLBACK ? "fallback" : "recorded", dp->transposed ? ", transposed" : "",
            sl__dtype_name(mp->held_dtype), sl__dtype_name(mp->dtype),
            mp->fill == SL_FILL_FALLBACK ? "fallback" : "recorded", mp->transposed ? ", transposed" : "");
      }
      dp->mparam = (uint32_t)v->u64;
    }
  }
  sl__hashmap_free(&of);
  m->params = params.data;
  m->n_params = params.len;
  return st;
}

static int cmp_by_name(const void *a, const void *b, void *ctx) {
  const sl__catalog *cat = ctx;
  return strcmp(cat->tensors[*(const uint32_t *)a].name, cat->tensors[*(const uint32_t *)b].name);
}

/* Units (tensors some plan reads, by name), their parameters, each tensor's fate. */
static sl_status units_and_fates(sl__described *d, const sl__catalog *cat, sl__model *m, sl__err *err) {
  size_t nt = cat->n_tensors;
  uint32_t *reader = malloc((nt + 1) * sizeof *reader); /* the first mparam reading it, or SL_NONE */
  uint8_t *skipped = calloc(nt + 1, 1);
  uint32_t *order = malloc((nt + 1) * sizeof *order);
  d->unit_of = malloc((nt + 1) * sizeof *d->unit_of);
  m->tensor_fate = calloc(nt + 1, 1);
  if (reader == NULL || skipped == NULL || order == NULL || d->unit_of == NULL || m->tensor_fate == NULL) {
    free(reader);
    free(skipped);
    free(order);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  for (size_t t = 0; t < nt; t++)
    reader[t] = d->unit_of[t] = SL_NONE;
  for (uint32_t c = 0; c < d->n_classes; c++) {
    const sl__dplan *p = &d->plans[c];
    for (uint64_t i = 0; i < p->n_regions; i++)
      if (p->regions[i].cat != SL_NONE && reader[p->regions[i].cat] == SL_NONE)
        reader[p->regions[i].cat] = p->params[p->regions[i].param].mparam;
    for (uint32_t i = 0; i < p->n_skips; i++) {
      uint32_t t = sl__catalog_find(cat, p->strings[p->skips[i]]); /* a name the checkpoint lacks: nothing */
      if (t != SL_NONE)
        skipped[t] = 1;
    }
  }
  size_t n = 0;
  for (size_t t = 0; t < nt; t++) {
    m->tensor_fate[t] = reader[t] != SL_NONE ? SL_FATE_CONSUMED : skipped[t] ? SL_FATE_SKIPPED : SL_FATE_NONE;
    if (reader[t] != SL_NONE)
      order[n++] = (uint32_t)t;
  }
  qsort_r(order, n, sizeof *order, cmp_by_name, (void *)cat);
  m->units = calloc(n + 1, sizeof *m->units);
  m->unit_param = calloc(n + 1, sizeof *m->unit_param);
  sl_status st = m->units != NULL && m->unit_param != NULL
                     ? SL_STATUS_OK
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t u = 0; u < n && st == SL_STATUS_OK; u++) {
    m->units[u] = sl__strdup(cat->tensors[order[u]].name);
    m->unit_param[u] = reader[order[u]];
    d->unit_of[order[u]] = (uint32_t)u;
    m->n_units = u + 1;
    if (m->units[u] == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  free(reader);
  free(skipped);
  free(order);
  return st;
}

/* config.json's architecture (when it names one) and layer count (a stand-in for the pipeline split,
 * which a described plan does not use: at least pp). */
static void from_config(const sl__catalog *cat, uint32_t pp, sl__model *m) {
  cJSON *config = NULL;
  const char *arch = NULL;
  uint32_t layers = pp > 0 ? pp : 1;
  if (sl__model_parse_config(cat, &config, NULL) == SL_STATUS_OK) {
    if (sl__model_architecture(config, &arch, NULL) == SL_STATUS_OK)
      m->architecture = sl__strdup(arch);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(config, "text_config");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(config, "num_hidden_layers");
    if (!cJSON_IsNumber(l) && cJSON_IsObject(text))
      l = cJSON_GetObjectItemCaseSensitive(text, "num_hidden_layers");
    if (cJSON_IsNumber(l) && l->valuedouble >= layers && l->valuedouble <= 1000000)
      layers = (uint32_t)l->valuedouble;
  }
  cJSON_Delete(config);
  m->n_layers = layers;
}

sl_status sl__described_model_build(sl__described *d, const sl__catalog *cat, uint32_t pp, sl__model *m,
                                    sl__err *err) {
  memset(m, 0, sizeof *m);
  m->described = d;
  m->family = sl__strdup("described");
  sl_status st = m->family != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = check_plans(d, cat, err);
  if (st == SL_STATUS_OK)
    st = union_params(d, m, err);
  if (st == SL_STATUS_OK)
    st = units_and_fates(d, cat, m, err);
  if (st == SL_STATUS_OK)
    from_config(cat, pp, m);
  if (st != SL_STATUS_OK)
    sl__model_free(m);
  return st;
}
