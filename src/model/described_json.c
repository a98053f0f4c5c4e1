/*
 * model/described_json.c — the JSON form of a caller-described plan (shardload/core.h section 12):
 *   {"params": [{"name", "dtype", "shape", "transposed", "fill", "regions": [{"tensor", "start",
 *     "count", "dst_start", "dst_count"} | {"zeros": true, "dst_start", "dst_count"}]}], "skip": [..]}
 * Read through base/json.h's bounds (a plan file is untrusted), every key checked (an unknown one
 * is an error naming it and where), every number a non-negative integer JSON represents exactly;
 * the builder (model/described.c) then checks what it checks for any caller. Written back with the
 * regions under their parameter, in the order added.
 */
#include "model/described.h"

#include "base/json.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest exactly representable integer of a JSON number (a double). */
#define MAX_EXACT 9007199254740992.0

typedef struct jctx {
  struct sl_plan *p;
  sl__err *err;
} jctx;

static sl_status jerr(jctx *c, const char *where, const char *what) {
  return sl__err_set(c->err, SL_STATUS_PLAN, "plan JSON: %s: %s", where, what);
}

static sl_status check_keys(jctx *c, const cJSON *obj, const char *where, const char *const *allowed) {
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, obj) {
    bool ok = false;
    for (const char *const *a = allowed; *a != NULL && !ok; a++)
      ok = item->string != NULL && strcmp(*a, item->string) == 0;
    if (!ok) {
      char q[SL_QUOTE_BUF], msg[SL_QUOTE_BUF + 64];
      snprintf(msg, sizeof msg, "unknown key '%s'",
               sl__quote(item->string != NULL ? item->string : "", q, sizeof q));
      return jerr(c, where, msg);
    }
  }
  return SL_STATUS_OK;
}

/* An array of at most SL_MAX_DIMS non-negative integers; *n its length. Absent: n = 0 when optional. */
static sl_status dims(jctx *c, const cJSON *obj, const char *key, const char *where, bool required,
                      uint64_t *out, uint32_t *n) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
  char w[384];
  snprintf(w, sizeof w, "%s.%s", where, key);
  *n = 0;
  if (a == NULL && !required)
    return SL_STATUS_OK;
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > SL_MAX_DIMS)
    return jerr(c, w, "expected an array of at most 8 non-negative integers");
  const cJSON *v = NULL;
  cJSON_ArrayForEach(v, a) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > MAX_EXACT ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
      return jerr(c, w, "expected non-negative integers (at most 2^53)");
    out[(*n)++] = (uint64_t)v->valuedouble;
  }
  return SL_STATUS_OK;
}

static sl_status region(jctx *c, const cJSON *g, uint32_t param, const char *where) {
  static const char *const keys[] = {"tensor", "zeros", "start", "count", "dst_start", "dst_count", NULL};
  if (!cJSON_IsObject(g))
    return jerr(c, where, "a region must be an object");
  sl_status st = check_keys(c, g, where, keys);
  if (st != SL_STATUS_OK)
    return st;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(g, "tensor");
  const cJSON *z = cJSON_GetObjectItemCaseSensitive(g, "zeros");
  bool zeros = cJSON_IsTrue(z);
  if ((z != NULL && !cJSON_IsBool(z)) || (zeros == (t != NULL)) || (t != NULL && !cJSON_IsString(t)))
    return jerr(c, where, "a region has either \"tensor\": NAME or \"zeros\": true");
  uint64_t v[4][SL_MAX_DIMS];
  uint32_t n[4];
  static const char *const names[4] = {"start", "count", "dst_start", "dst_count"};
  for (int k = 0; k < 4 && st == SL_STATUS_OK; k++)
    st = dims(c, g, names[k], where, k >= 2 || !zeros, v[k], &n[k]);
  if (st == SL_STATUS_OK && (n[0] != n[1] || n[2] != n[3] || (zeros && n[0] != 0)))
    st = jerr(c, where,
              "start and count (dst_start and dst_count) must have one entry per dimension; a zeros "
              "region has no start or count");
  if (st != SL_STATUS_OK)
    return st;
  st = sl__plan_region(c->p, param, zeros ? NULL : t->valuestring, n[0], v[0], v[1], n[2], v[2], v[3]);
  if (st != SL_STATUS_OK)
    sl__err_copy(c->err, &c->p->err);
  return st;
}

static sl_status param(jctx *c, const cJSON *o, const char *where) {
  static const char *const keys[] = {"name", "dtype", "shape", "transposed", "fill", "regions", NULL};
  if (!cJSON_IsObject(o))
    return jerr(c, where, "a parameter must be an object");
  sl_status st = check_keys(c, o, where, keys);
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(o, "dtype");
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(o, "transposed");
  const cJSON *fill = cJSON_GetObjectItemCaseSensitive(o, "fill");
  const cJSON *regions = cJSON_GetObjectItemCaseSensitive(o, "regions");
  sl__dtype dt = SL_DT_COUNT;
  if (st == SL_STATUS_OK && !cJSON_IsString(name))
    st = jerr(c, where, "\"name\" must be a string");
  if (st == SL_STATUS_OK &&
      (!cJSON_IsString(dtype) || !sl__dtype_parse(dtype->valuestring, strlen(dtype->valuestring), &dt)))
    st = jerr(c, where, "\"dtype\" must be a safetensors dtype name (\"BF16\", \"F32\", ...)");
  if (st == SL_STATUS_OK && tr != NULL && !cJSON_IsBool(tr))
    st = jerr(c, where, "\"transposed\" must be true or false");
  bool fallback = cJSON_IsString(fill) && strcmp(fill->valuestring, "fallback") == 0;
  if (st == SL_STATUS_OK && fill != NULL && !fallback &&
      !(cJSON_IsString(fill) && strcmp(fill->valuestring, "recorded") == 0))
    st = jerr(c, where, "\"fill\" must be \"recorded\" or \"fallback\"");
  if (st == SL_STATUS_OK && regions != NULL && !cJSON_IsArray(regions))
    st = jerr(c, where, "\"regions\" must be an array");
  uint64_t shape[SL_MAX_DIMS];
  uint32_t ndim = 0;
  if (st == SL_STATUS_OK)
    st = dims(c, o, "shape", where, true, shape, &ndim);
  uint32_t index = 0;
  if (st == SL_STATUS_OK) {
    st = sl__plan_param(c->p, name->valuestring, dt, ndim, shape, cJSON_IsTrue(tr),
                        fallback ? SL_FILL_FALLBACK : SL_FILL_RECORDED, &index);
    if (st != SL_STATUS_OK)
      sl__err_copy(c->err, &c->p->err);
  }
  int i = 0;
  const cJSON *g = NULL;
  cJSON_ArrayForEach(g, regions) {
    if (st != SL_STATUS_OK)
      break;
    char w[320];
    snprintf(w, sizeof w, "%s.regions[%d]", where, i++);
    st = region(c, g, index, w);
  }
  return st;
}

/* One plan's object into out (initialized). */
static sl_status plan_node(const cJSON *root, const char *top, struct sl_plan *out, sl__err *err) {
  jctx c = {.p = out, .err = err};
  static const char *const keys[] = {"params", "skip", NULL};
  sl_status st = SL_STATUS_OK;
  if (!cJSON_IsObject(root))
    st = jerr(&c, top, "expected an object {\"params\": [...], \"skip\": [...]}");
  if (st == SL_STATUS_OK)
    st = check_keys(&c, root, top, keys);
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "params");
  const cJSON *skip = cJSON_GetObjectItemCaseSensitive(root, "skip");
  if (st == SL_STATUS_OK && (!cJSON_IsArray(params) || (skip != NULL && !cJSON_IsArray(skip))))
    st = jerr(&c, top, "\"params\" must be an array (and \"skip\", when present, an array)");
  int i = 0;
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, params) {
    if (st != SL_STATUS_OK)
      break;
    char w[128];
    snprintf(w, sizeof w, "%s.params[%d]", top, i++);
    st = param(&c, item, w);
  }
  i = 0;
  cJSON_ArrayForEach(item, skip) {
    if (st != SL_STATUS_OK)
      break;
    char w[128];
    snprintf(w, sizeof w, "%s.skip[%d]", top, i++);
    st = cJSON_IsString(item) ? sl__plan_skip(out, item->valuestring) : jerr(&c, w, "expected a tensor name");
    if (st != SL_STATUS_OK && out->err.status != SL_STATUS_OK)
      sl__err_copy(err, &out->err);
  }
  return st;
}

sl_status sl__plan_from_json(const char *text, size_t len, struct sl_plan *out, sl__err *err) {
  sl__plan_init(out);
  cJSON *root = NULL;
  sl_status st = sl__json_parse(text, len, "plan JSON", SL_STATUS_PLAN, &root, err);
  if (st == SL_STATUS_OK)
    st = plan_node(root, "plan", out, err);
  cJSON_Delete(root);
  if (st != SL_STATUS_OK)
    sl__plan_release(out);
  return st;
}

/* One plan of a file of every rank's, malloc'd and parsed. */
static sl_status new_plan(const cJSON *node, const char *top, struct sl_plan **out, sl__err *err) {
  *out = malloc(sizeof **out);
  if (*out == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  sl__plan_init(*out);
  sl_status st = plan_node(node, top, *out, err);
  if (st != SL_STATUS_OK) {
    sl__plan_release(*out);
    free(*out);
    *out = NULL;
  }
  return st;
}

/* {"classes": [{"ranks": [..], "plan": {..}}]}: every rank in exactly one class. */
static sl_status classes_node(const cJSON *classes, uint32_t world, struct sl_plan **plans, sl__err *err) {
  jctx c = {.err = err};
  static const char *const keys[] = {"ranks", "plan", NULL};
  int k = 0;
  const cJSON *cl = NULL;
  sl_status st = SL_STATUS_OK;
  cJSON_ArrayForEach(cl, classes) {
    char w[64];
    snprintf(w, sizeof w, "classes[%d]", k++);
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(cl, "ranks");
    if (!cJSON_IsObject(cl) || check_keys(&c, cl, w, keys) != SL_STATUS_OK || !cJSON_IsArray(ranks))
      return err->status != SL_STATUS_OK ? err->status
                                         : jerr(&c, w, "expected {\"ranks\": [..], \"plan\": {..}}");
    struct sl_plan *p = NULL;
    char top[96];
    snprintf(top, sizeof top, "%s.plan", w);
    if ((st = new_plan(cJSON_GetObjectItemCaseSensitive(cl, "plan"), top, &p, err)) != SL_STATUS_OK)
      return st;
    bool owned = false;
    const cJSON *r = NULL;
    cJSON_ArrayForEach(r, ranks) {
      if (!cJSON_IsNumber(r) || r->valuedouble < 0 || r->valuedouble >= world ||
          r->valuedouble != (double)(uint32_t)r->valuedouble || plans[(uint32_t)r->valuedouble] != NULL) {
        st = jerr(&c, w, "a rank out of the world, not an integer, or in two classes");
        break;
      }
      plans[(uint32_t)r->valuedouble] = p;
      owned = true;
    }
    if (!owned) {
      sl__plan_release(p);
      free(p);
      if (st == SL_STATUS_OK)
        st = jerr(&c, w, "a class of no rank");
    }
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

void sl__plans_free(struct sl_plan **plans, uint32_t world) {
  for (uint32_t r = 0; plans != NULL && r < world; r++) {
    if (plans[r] == NULL)
      continue;
    struct sl_plan *p = plans[r];
    for (uint32_t q = r; q < world; q++) /* a class's plan is shared by its ranks */
      if (plans[q] == p)
        plans[q] = NULL;
    sl__plan_release(p);
    free(p);
  }
}

sl_status sl__plans_from_json(const char *text, size_t len, uint32_t world, struct sl_plan **plans,
                              sl__err *err) {
  memset(plans, 0, world * sizeof *plans);
  cJSON *root = NULL;
  sl_status st = sl__json_parse(text, len, "plan file", SL_STATUS_PLAN, &root, err);
  jctx c = {.err = err};
  static const char *const keys[] = {"ranks", "classes", NULL};
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(root, "ranks");
  const cJSON *classes = cJSON_GetObjectItemCaseSensitive(root, "classes");
  if (st == SL_STATUS_OK &&
      (!cJSON_IsObject(root) || check_keys(&c, root, "top level", keys) != SL_STATUS_OK ||
       (ranks == NULL) == (classes == NULL)))
    st = err->status != SL_STATUS_OK ? err->status
                                     : jerr(&c, "top level",
                                            "expected {\"ranks\": [PLAN, ...]} or "
                                            "{\"classes\": [{\"ranks\": [..], \"plan\": PLAN}]}");
  if (st == SL_STATUS_OK && ranks != NULL &&
      (!cJSON_IsArray(ranks) || (uint32_t)cJSON_GetArraySize(ranks) != world)) {
    char msg[128];
    snprintf(msg, sizeof msg, "\"ranks\" must hold one plan per rank (%u)", world);
    st = jerr(&c, "top level", msg);
  }
  if (st == SL_STATUS_OK && classes != NULL && !cJSON_IsArray(classes))
    st = jerr(&c, "top level", "\"classes\" must be an array");
  uint32_t r = 0;
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, ranks) {
    if (st != SL_STATUS_OK)
      break;
    char top[64];
    snprintf(top, sizeof top, "ranks[%u]", r);
    st = new_plan(item, top, &plans[r++], err);
  }
  if (st == SL_STATUS_OK && classes != NULL)
    st = classes_node(classes, world, plans, err);
  for (r = 0; st == SL_STATUS_OK && r < world; r++)
    if (plans[r] == NULL) {
      char msg[96];
      snprintf(msg, sizeof msg, "rank %u is in no class", r);
      st = jerr(&c, "classes", msg);
    }
  cJSON_Delete(root);
  if (st != SL_STATUS_OK)
    sl__plans_free(plans, world);
  return st;
}

static void put_dims(sl__buf *b, const char *key, const uint64_t *v, uint32_t n) {
  sl__buf_appendf(b, ",\"%s\":[", key); /* v may be NULL when n is 0 */
  for (uint32_t j = 0; j < n; j++)
    sl__buf_appendf(b, "%s%llu", j > 0 ? "," : "", (unsigned long long)v[j]);
  sl__buf_putc(b, ']');
}

static void put_region(sl__buf *b, const struct sl_plan *p, const sl__dregion *r) {
  const uint64_t *n = sl__plan_nums(p, r->nums);
  if (r->tensor == SL_PLAN_ZEROS) {
    sl__buf_appendf(b, "{\"zeros\":true");
  } else {
    sl__buf_appendf(b, "{\"tensor\":");
    sl__buf_json_str(b, SL_VEC_AT(&p->strings, char *, r->tensor));
    put_dims(b, "start", n, r->ndim);
    put_dims(b, "count", n + r->ndim, r->ndim);
  }
  put_dims(b, "dst_start", n + 2 * r->ndim, r->dst_ndim);
  put_dims(b, "dst_count", n + 2 * r->ndim + r->dst_ndim, r->dst_ndim);
  sl__buf_putc(b, '}');
}

char *sl__plan_to_json(const struct sl_plan *p) {
  size_t np = p->params.len;
  /* each parameter's regions, in the order added (a list per parameter, linked by index) */
  uint64_t *head = malloc((np + 1) * sizeof *head);
  uint64_t *tail = malloc((np + 1) * sizeof *tail);
  uint64_t *next = malloc((p->regions.len + 1) * sizeof *next);
  sl__buf b;
  sl__buf_init(&b, 0);
  if (head == NULL || tail == NULL || next == NULL)
    b.failed = true;
  for (size_t k = 0; !b.failed && k < np; k++)
    head[k] = tail[k] = UINT64_MAX;
  for (size_t i = 0; !b.failed && i < p->regions.len; i++) {
    uint32_t k = SL_VEC_AT(&p->regions, sl__dregion, i).param;
    next[i] = UINT64_MAX;
    if (head[k] == UINT64_MAX)
      head[k] = i;
    else
      next[tail[k]] = i;
    tail[k] = i;
  }
  sl__buf_appendf(&b, "{\"params\":[");
  for (size_t k = 0; !b.failed && k < np; k++) {
    const sl__dparam *d = &SL_VEC_AT(&p->params, sl__dparam, k);
    sl__buf_appendf(&b, "%s{\"name\":", k > 0 ? ",\n" : "\n");
    sl__buf_json_str(&b, SL_VEC_AT(&p->strings, char *, d->name));
    sl__buf_appendf(&b, ",\"dtype\":\"%s\"", sl__dtype_name(d->dtype));
    put_dims(&b, "shape", d->shape, d->ndim);
    sl__buf_appendf(&b, ",\"transposed\":%s,\"fill\":\"%s\",\"regions\":[", d->transposed ? "true" : "false",
                    d->fill == SL_FILL_FALLBACK ? "fallback" : "recorded");
    for (uint64_t i = head[k], first = 1; i != UINT64_MAX; i = next[i], first = 0) {
      if (!first)
        sl__buf_putc(&b, ',');
      put_region(&b, p, &SL_VEC_AT(&p->regions, sl__dregion, i));
    }
    sl__buf_appendf(&b, "]}");
  }
  sl__buf_appendf(&b, "],\n\"skip\":[");
  for (size_t i = 0; i < p->skips.len; i++) {
    if (i > 0)
      sl__buf_putc(&b, ',');
    sl__buf_json_str(&b, SL_VEC_AT(&p->strings, char *, SL_VEC_AT(&p->skips, uint32_t, i)));
  }
  sl__buf_appendf(&b, "]}\n");
  free(head);
  free(tail);
  free(next);
  if (b.failed) {
    sl__buf_free(&b);
    return NULL;
  }
  return sl__buf_take(&b);
}
