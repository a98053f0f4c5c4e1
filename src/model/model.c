/*
 * model/model.c — instantiation of an architecture spec (see model/model.h).
 *
 * Organisation: the expression environment (spec vars, per-layer vars, config.json fields);
 * building one vllm-layout parameter from a spec parameter (sources resolved in the catalog and
 * shape-checked); fp8 scale companions; derivation of the checkpoint layout; the expected set
 * and the fate of unconsumed catalog tensors.
 */
#include "model/model.h"

#include "base/hashmap.h"
#include "base/log.h"
#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Expression environment
 * ------------------------------------------------------------------------------------------- */

typedef struct env {
  const sl__spec *spec;
  const cJSON *config;
  bool in_layer;
  int64_t layer;
  sl__val *vars;      /* memo of spec vars */
  uint8_t *var_state; /* 0 unknown, 1 evaluating, 2 known */
  sl__val *lvars;     /* memo of layer vars for the current layer */
  uint8_t *lvar_state;
} env;

static bool lookup(void *ctx, const char *name, sl__val *out, sl__err *err);

static bool eval_named(env *e, const sl__named_expr *ne, sl__val *memo, uint8_t *state, sl__val *out,
                       sl__err *err) {
  if (*state == 2) {
    *out = *memo;
    return true;
  }
  if (*state == 1) {
    sl__err_set(err, SL_STATUS_ARCH, "spec %s: variable '%s' depends on itself", e->spec->path, ne->name);
    return false;
  }
  *state = 1;
  /* Spec vars are layer-independent (they are memoized once): evaluate them outside any layer. */
  bool is_var = ne >= e->spec->vars && ne < e->spec->vars + e->spec->n_vars;
  bool saved = e->in_layer;
  if (is_var)
    e->in_layer = false;
  sl_status st = sl__expr_eval(ne->expr, lookup, e, memo, err);
  e->in_layer = saved;
  *state = st == SL_STATUS_OK ? 2 : 0;
  if (st != SL_STATUS_OK)
    return false;
  *out = *memo;
  return true;
}

static bool lookup(void *ctx, const char *name, sl__val *out, sl__err *err) {
  env *e = ctx;
  memset(out, 0, sizeof *out);
  if (strcmp(name, "layer") == 0) {
    if (!e->in_layer) {
      sl__err_set(err, SL_STATUS_ARCH, "spec %s: 'layer' used outside a layer parameter", e->spec->path);
      return false;
    }
    out->kind = SL_VAL_INT;
    out->i = e->layer;
    return true;
  }
  for (size_t i = 0; i < e->spec->n_layer_vars; i++) {
    if (strcmp(e->spec->layer_vars[i].name, name) == 0 && e->lvar_state[i] != 1) {
      if (!e->in_layer) {
        sl__err_set(err, SL_STATUS_ARCH, "spec %s: layer variable '%s' used outside a layer parameter",
                    e->spec->path, name);
        return false;
      }
      return eval_named(e, &e->spec->layer_vars[i], &e->lvars[i], &e->lvar_state[i], out, err);
    }
  }
  for (size_t i = 0; i < e->spec->n_vars; i++) {
    /* Inside its own definition a var's name means the config.json field it shadows
     * ("mlp_bias": "default(mlp_bias, false)"). */
    if (strcmp(e->spec->vars[i].name, name) == 0 && e->var_state[i] != 1)
      return eval_named(e, &e->spec->vars[i], &e->vars[i], &e->var_state[i], out, err);
  }
  /* A config.json field, possibly dotted. */
  const cJSON *node = e->config;
  const char *p = name;
  while (node != NULL) {
    const char *dot = strchr(p, '.');
    size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
    char key[256];
    if (len >= sizeof key) {
      node = NULL;
      break;
    }
    memcpy(key, p, len);
    key[len] = '\0';
    node = cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, key) : NULL;
    if (dot == NULL)
      break;
    p = dot + 1;
  }
  out->origin = name;
  if (node == NULL) {
    out->kind = SL_VAL_MISSING;
  } else if (cJSON_IsNull(node)) {
    out->kind = SL_VAL_NULL;
  } else if (cJSON_IsBool(node)) {
    out->kind = SL_VAL_BOOL;
    out->i = cJSON_IsTrue(node);
  } else if (cJSON_IsNumber(node)) {
    double d = node->valuedouble;
    if (d != (double)(int64_t)d || d > 9.0e18 || d < -9.0e18) {
      sl__err_set(err, SL_STATUS_MODEL_CONFIG, "config.json field '%s' must be an integer (got %g)", name, d);
      return false;
    }
    out->kind = SL_VAL_INT;
    out->i = (int64_t)d;
  } else if (cJSON_IsString(node)) {
    out->kind = SL_VAL_STR;
    out->s = node->valuestring;
  } else if (cJSON_IsArray(node)) {
    out->kind = SL_VAL_LIST;
    out->list = node;
  } else {
    sl__err_set(err, SL_STATUS_MODEL_CONFIG, "config.json field '%s' is an object where a value is expected",
                name);
    return false;
  }
  return true;
}

static void env_enter_layer(env *e, int64_t layer) {
  e->in_layer = layer >= 0;
  e->layer = layer;
  memset(e->lvar_state, 0, e->spec->n_layer_vars + 1);
}

/* Appends the config.json fields an expression depends on (through vars) to buf. */
static void config_fields(const env *e, const sl__expr *x, char *buf, size_t cap, int depth) {
  char ids[512];
  sl__expr_fields(x, ids, sizeof ids);
  char *save = ids;
  while (save != NULL && *save != '\0' && depth < 16) {
    char *comma = strstr(save, ", ");
    if (comma != NULL)
      *comma = '\0';
    const sl__expr *sub = NULL;
    for (size_t i = 0; i < e->spec->n_vars && sub == NULL; i++)
      if (strcmp(e->spec->vars[i].name, save) == 0)
        sub = e->spec->vars[i].expr;
    for (size_t i = 0; i < e->spec->n_layer_vars && sub == NULL; i++)
      if (strcmp(e->spec->layer_vars[i].name, save) == 0)
        sub = e->spec->layer_vars[i].expr;
    if (sub != NULL) {
      config_fields(e, sub, buf, cap, depth + 1);
    } else if (strcmp(save, "layer") != 0 && strstr(buf, save) == NULL) {
      size_t len = strlen(buf);
      snprintf(buf + len, cap > len ? cap - len : 0, "%s%s", len > 0 ? ", " : "", save);
    }
    save = comma != NULL ? comma + 2 : NULL;
  }
}

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static char *render(const char *tmpl, int64_t layer, int64_t expert) {
  sl__buf b;
  sl__buf_init(&b, 0);
  for (const char *p = tmpl; *p != '\0';) {
    if (strncmp(p, "{layer}", 7) == 0 && layer >= 0) {
      sl__buf_appendf(&b, "%lld", (long long)layer);
      p += 7;
    } else if (strncmp(p, "{expert}", 8) == 0 && expert >= 0) {
      sl__buf_appendf(&b, "%lld", (long long)expert);
      p += 8;
    } else {
      sl__buf_putc(&b, *p++);
    }
  }
  if (b.failed) {
    sl__buf_free(&b);
    return NULL;
  }
  return sl__buf_take(&b);
}

static void shape_str(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap) {
  size_t off = 0;
  off += (size_t)snprintf(buf, cap, "[");
  for (uint32_t i = 0; i < ndim && off < cap; i++)
    off += (size_t)snprintf(buf + off, cap - off, "%s%llu", i > 0 ? ", " : "", (unsigned long long)shape[i]);
  if (off < cap)
    snprintf(buf + off, cap - off, "]");
}

static uint32_t part_index(const char *part, size_t order) {
  if (part == NULL)
    return (uint32_t)order;
  if (strcmp(part, "q") == 0 || strcmp(part, "w1") == 0 || strcmp(part, "w13") == 0)
    return 0;
  if (strcmp(part, "k") == 0 || strcmp(part, "w3") == 0)
    return 1;
  if (strcmp(part, "v") == 0)
    return 2;
  return (uint32_t)order;
}

static bool is_per_expert(sl__style s) {
  return s == SL_STYLE_MOE_W13 || s == SL_STYLE_MOE_W2;
}

static bool is_f8(sl__dtype d) {
  return d == SL_DT_F8_E4M3 || d == SL_DT_F8_E5M2 || d == SL_DT_F8_E4M3FNUZ || d == SL_DT_F8_E5M2FNUZ;
}

static void mparam_free(sl__mparam *p) {
  free(p->name);
  for (size_t i = 0; i < p->n_src; i++)
    free(p->src[i].name);
  free(p->src);
  free(p->fields);
}

void sl__model_free(sl__model *m) {
  if (m == NULL)
    return;
  free(m->family);
  free(m->architecture);
  for (size_t i = 0; i < m->n_params; i++)
    mparam_free(&m->params[i]);
  free(m->params);
  for (size_t i = 0; i < m->n_units; i++)
    free(m->units[i]);
  free(m->units);
  free(m->unit_param);
  free(m->tensor_fate);
  memset(m, 0, sizeof *m);
}

typedef struct builder {
  env e;
  const sl__catalog *cat;
  sl__model *m;
  sl__vec params; /* sl__mparam */
  sl__dtype default_dtype;
  sl__err *err;
} builder;

static sl__mparam *push_param(builder *b) {
  sl__mparam *p = sl__vec_push(&b->params);
  if (p == NULL) {
    sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
    return NULL;
  }
  p->alias_of = SL_NONE;
  p->only_expert = SL_NONE;
  p->layer = -1;
  return p;
}

/* Global shape from the sources' shapes (works for weights and their scales alike). */
static sl_status global_shape(builder *b, sl__mparam *p) {
  const sl__msrc *s0 = &p->src[0];
  p->ndim = s0->ndim;
  memcpy(p->shape, s0->shape, sizeof p->shape);
  uint64_t rows = 0;
  switch (p->style) {
  case SL_STYLE_REPLICATED:
  case SL_STYLE_COLUMN:
  case SL_STYLE_ROW:
  case SL_STYLE_MOE3D_W2:
    return SL_STATUS_OK;
  case SL_STYLE_VOCAB:
    if (!p->ckpt)
      p->shape[0] = (p->vocab + 63) / 64 * 64;
    return SL_STATUS_OK;
  case SL_STYLE_MERGED:
  case SL_STYLE_CONCAT:
  case SL_STYLE_QKV:
    for (size_t i = 0; i < p->n_src; i++) {
      if (p->src[i].ndim != s0->ndim || p->src[i].ndim == 0 ||
          memcmp(p->src[i].shape + 1, s0->shape + 1, sizeof(uint64_t) * (s0->ndim - 1)) != 0)
        return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: parts of %s have different trailing dimensions",
                           b->e.spec->path, p->name);
      rows += p->src[i].shape[0];
    }
    if (!p->ckpt)
      p->shape[0] = rows;
    return SL_STATUS_OK;
  case SL_STYLE_MOE_W13:
  case SL_STYLE_MOE_W2:
    if (s0->ndim != 2)
      return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: expert tensor %s must be 2-D", b->e.spec->path,
                         s0->name);
    if (p->ckpt)
      return SL_STATUS_OK;
    p->ndim = 3;
    p->shape[0] = p->experts;
    p->shape[1] = p->style == SL_STYLE_MOE_W13 ? 2 * s0->shape[0] : s0->shape[0];
    p->shape[2] = s0->shape[1];
    return SL_STATUS_OK;
  case SL_STYLE_MOE3D_W13:
    if (s0->ndim != 3)
      return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: fused expert tensor %s must be 3-D",
                         b->e.spec->path, s0->name);
    if (p->n_src == 2 && !p->ckpt)
      p->shape[1] = 2 * s0->shape[1];
    return SL_STATUS_OK;
  case SL_STYLE_COUNT:
    break;
  }
  return sl__err_set(b->err, SL_STATUS_INTERNAL, "unknown style");
}

/* Resolves one source: renders its name, evaluates its expected shape, finds it in the catalog
 * and checks the shape there. */
static sl_status add_source(builder *b, sl__mparam *p, const sl__spec_source *ss, size_t order, int64_t layer,
                            int64_t expert, sl__msrc *out) {
  memset(out, 0, sizeof *out);
  out->tensor = SL_NONE;
  out->unit = SL_NONE;
  out->expert = expert >= 0 ? (uint32_t)expert : SL_NONE;
  out->part = part_index(ss->part, order);
  out->name = render(ss->tensor, layer, expert);
  if (out->name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  out->ndim = (uint32_t)ss->ndim;
  for (size_t d = 0; d < ss->ndim; d++) {
    sl_status st = sl__expr_eval_u64(ss->shape[d], lookup, &b->e, &out->shape[d], b->err);
    if (st != SL_STATUS_OK) {
      sl__err_prefix(b->err, "shape of %s", out->name);
      return st;
    }
  }
  if (ss->rotary_heads != NULL && b->m->mistral_format) {
    sl_status st = sl__expr_eval_u64(ss->rotary_heads, lookup, &b->e, &out->rotary_heads, b->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  out->tensor = sl__catalog_find(b->cat, out->name);
  if (out->tensor == SL_NONE)
    return SL_STATUS_OK;
  const sl__cat_tensor *t = &b->cat->tensors[out->tensor];
  bool same = t->ndim == out->ndim && memcmp(t->shape, out->shape, sizeof(uint64_t) * t->ndim) == 0;
  if (!same) {
    char have[160];
    char want[160];
    char fields[512] = "";
    shape_str(t->shape, t->ndim, have, sizeof have);
    shape_str(out->shape, out->ndim, want, sizeof want);
    for (size_t d = 0; d < ss->ndim; d++)
      config_fields(&b->e, ss->shape[d], fields, sizeof fields, 0);
    return sl__err_set(b->err, SL_STATUS_SHAPE,
                       "tensor '%s' has shape %s in %s, but %s expects %s (from config.json: %s)", out->name,
                       have, b->cat->files[t->file].name, p->name, want,
                       fields[0] != '\0' ? fields : "constants");
  }
  return SL_STATUS_OK;
}

static sl_status eval_opt(builder *b, const sl__expr *x, uint64_t dflt, uint64_t *out) {
  if (x == NULL) {
    *out = dflt;
    return SL_STATUS_OK;
  }
  return sl__expr_eval_u64(x, lookup, &b->e, out, b->err);
}

/* Sets the parameter's dtype from its sources (all present sources must agree). */
static sl_status param_dtype(builder *b, sl__mparam *p) {
  bool have = false;
  for (size_t i = 0; i < p->n_src; i++) {
    if (p->src[i].tensor == SL_NONE)
      continue;
    sl__dtype d = b->cat->tensors[p->src[i].tensor].dtype;
    if (!have) {
      p->dtype = d;
      have = true;
    } else if (d != p->dtype) {
      return sl__err_set(b->err, SL_STATUS_SHAPE,
                         "%s: tensor '%s' is %s but '%s' is %s; fused parts must share a dtype", p->name,
                         p->src[0].name, sl__dtype_name(p->dtype), p->src[i].name, sl__dtype_name(d));
    }
  }
  if (!have)
    p->dtype = b->default_dtype;
  return SL_STATUS_OK;
}

/* fp8: the scale companion of p (which has F8 sources), added right after it. */
static sl_status add_scale_param(builder *b, size_t weight_index) {
  sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, weight_index);
  if (w->style == SL_STYLE_VOCAB || w->style == SL_STYLE_MOE3D_W13 || w->style == SL_STYLE_MOE3D_W2)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "fp8 %s weight %s is not supported (style %s)",
                       sl__dtype_name(w->dtype), w->name, sl__style_name(w->style));
  char *name = sl__asprintf("%s_scale_inv", w->name);
  sl__msrc *src = calloc(w->n_src, sizeof *src);
  if (name == NULL || src == NULL) {
    free(name);
    free(src);
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  }
  size_t n_src = w->n_src;
  for (size_t i = 0; i < n_src; i++) {
    const sl__msrc *ws = &w->src[i];
    sl__msrc *s = &src[i];
    s->tensor = SL_NONE;
    s->unit = SL_NONE;
    s->part = ws->part;
    s->expert = ws->expert;
    s->name = sl__asprintf("%s_scale_inv", ws->name);
    if (s->name == NULL) {
      for (size_t k = 0; k <= i; k++)
        free(src[k].name);
      free(src);
      free(name);
      return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
    }
    uint64_t rows = ws->shape[0];
    uint64_t cols = ws->ndim >= 2 ? ws->shape[1] : 1;
    s->wshape[0] = rows;
    s->wshape[1] = cols;
    s->ndim = 2;
    s->shape[0] = (rows + b->m->block_rows - 1) / b->m->block_rows;
    s->shape[1] = (cols + b->m->block_cols - 1) / b->m->block_cols;
    s->tensor = sl__catalog_find(b->cat, s->name);
  }
  sl__mparam *sp = push_param(b);
  if (sp == NULL) {
    for (size_t k = 0; k < n_src; k++)
      free(src[k].name);
    free(src);
    free(name);
    return SL_STATUS_NOMEM;
  }
  w = &SL_VEC_AT(&b->params, sl__mparam, weight_index); /* the push may have moved it */
  sp->name = name;
  sp->src = src;
  sp->n_src = n_src;
  sp->style = w->style;
  sp->place = w->place;
  sp->layer = w->layer;
  sp->q_heads = w->q_heads;
  sp->kv_heads = w->kv_heads;
  sp->head_dim = w->head_dim;
  sp->v_head_dim = w->v_head_dim;
  sp->experts = w->experts;
  sp->expert_rows = w->expert_rows;
  sp->block_rows = b->m->block_rows;
  sp->block_cols = b->m->block_cols;
  for (size_t i = 0; i < n_src; i++) {
    const sl__msrc *ws = &w->src[i];
    sl__msrc *s = &sp->src[i];
    if (ws->tensor == SL_NONE || !is_f8(b->cat->tensors[ws->tensor].dtype))
      continue;
    if (ws->ndim != 2)
      return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "fp8 weight %s must be 2-D", ws->name);
    if (s->tensor == SL_NONE)
      return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                         "%s weight '%s' has no scale tensor '%s' in the checkpoint",
                         sl__dtype_name(b->cat->tensors[ws->tensor].dtype), ws->name, s->name);
    const sl__cat_tensor *t = &b->cat->tensors[s->tensor];
    if (t->ndim != 2 || t->shape[0] != s->shape[0] || t->shape[1] != s->shape[1]) {
      char have[160];
      char want[160];
      shape_str(t->shape, t->ndim, have, sizeof have);
      shape_str(s->shape, s->ndim, want, sizeof want);
      return sl__err_set(
          b->err, SL_STATUS_SHAPE,
          "scale tensor '%s' has shape %s, but weight %s [%llu, %llu] with blocks [%llu, %llu] needs %s",
          s->name, have, ws->name, (unsigned long long)s->wshape[0], (unsigned long long)s->wshape[1],
          (unsigned long long)b->m->block_rows, (unsigned long long)b->m->block_cols, want);
    }
  }
  sl_status st = param_dtype(b, sp);
  if (st == SL_STATUS_OK && sp->dtype == b->default_dtype) {
    bool any = false;
    for (size_t i = 0; i < n_src; i++)
      any = any || sp->src[i].tensor != SL_NONE;
    if (!any)
      sp->dtype = SL_DT_F32;
  }
  return st == SL_STATUS_OK ? global_shape(b, sp) : st;
}

/* Instantiates spec parameter sp (at layer, or -1) in the vllm layout. */
static sl_status build_param(builder *b, const sl__spec_param *sp, int64_t layer) {
  bool on = true;
  if (sp->when != NULL) {
    sl_status st = sl__expr_eval_bool(sp->when, lookup, &b->e, &on, b->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  if (!on)
    return SL_STATUS_OK;
  size_t index = b->params.len;
  sl__mparam *p = push_param(b);
  if (p == NULL)
    return SL_STATUS_NOMEM;
  p->name = render(sp->name, layer, -1);
  if (p->name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  p->style = sp->style;
  p->place = sp->place;
  p->layer = (int32_t)layer;
  sl_status st = eval_opt(b, sp->q_heads, 0, &p->q_heads);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->kv_heads, 0, &p->kv_heads);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->head_dim, 0, &p->head_dim);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->v_head_dim, p->head_dim, &p->v_head_dim);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->vocab, 0, &p->vocab);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->experts, b->m->experts, &p->experts);
  if (st != SL_STATUS_OK)
    return st;
  bool per_expert = is_per_expert(sp->style);
  if ((per_expert || sp->style == SL_STYLE_MOE3D_W13 || sp->style == SL_STYLE_MOE3D_W2) && p->experts == 0)
    return sl__err_set(b->err, SL_STATUS_MODEL_CONFIG, "%s: expert parameter in a model with 0 experts",
                       p->name);
  if (p->experts > 0x7fffffff)
    return sl__err_set(b->err, SL_STATUS_MODEL_CONFIG, "%s: %llu experts is too many", p->name,
                       (unsigned long long)p->experts);
  size_t copies = per_expert ? (size_t)p->experts : 1;
  p->n_src = copies * sp->n_sources;
  p->src = calloc(p->n_src, sizeof *p->src);
  if (p->src == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t x = 0; x < copies; x++) {
    for (size_t i = 0; i < sp->n_sources; i++) {
      p = &SL_VEC_AT(&b->params, sl__mparam, index);
      st = add_source(b, p, &sp->sources[i], i, layer, per_expert ? (int64_t)x : -1,
                      &p->src[x * sp->n_sources + i]);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  p = &SL_VEC_AT(&b->params, sl__mparam, index);
  if (per_expert)
    p->expert_rows = p->src[0].shape[sp->style == SL_STYLE_MOE_W2 ? 1 : 0];
  if (sp->style == SL_STYLE_MOE3D_W13 || sp->style == SL_STYLE_MOE3D_W2) {
    if (p->src[0].ndim != 3 || p->src[0].shape[0] != p->experts)
      return sl__err_set(b->err, SL_STATUS_ARCH,
                         "spec %s: fused expert tensor %s must be [E, ...] with E = %llu", b->e.spec->path,
                         p->src[0].name, (unsigned long long)p->experts);
    uint64_t r = p->src[0].shape[1];
    p->expert_rows = sp->style == SL_STYLE_MOE3D_W2 ? p->src[0].shape[2] : (p->n_src == 1 ? r / 2 : r);
    if (sp->style == SL_STYLE_MOE3D_W13 && p->n_src == 1 && r % 2 != 0)
      return sl__err_set(b->err, SL_STATUS_SHAPE, "%s: fused gate/up rows %llu are not even", p->src[0].name,
                         (unsigned long long)r);
  }
  char fields[512] = "";
  for (size_t i = 0; i < sp->n_sources; i++)
    for (size_t d = 0; d < sp->sources[i].ndim; d++)
      config_fields(&b->e, sp->sources[i].shape[d], fields, sizeof fields, 0);
  p->fields = sl__strdup(fields);
  st = param_dtype(b, p);
  if (st == SL_STATUS_OK)
    st = global_shape(b, p);
  if (st != SL_STATUS_OK)
    return st;
  if (b->m->fp8) {
    bool any_f8 = false;
    for (size_t i = 0; i < p->n_src; i++)
      any_f8 = any_f8 || (p->src[i].tensor != SL_NONE && is_f8(b->cat->tensors[p->src[i].tensor].dtype));
    if (any_f8)
      return add_scale_param(b, index);
  }
  return SL_STATUS_OK;
}

/* Tied lm_head: an alias of the embedding parameter. */
static sl_status build_alias(builder *b, const sl__spec_param *sp) {
  size_t embed = SL_NONE;
  for (size_t i = 0; i < b->params.len && embed == SL_NONE; i++) {
    const sl__mparam *q = &SL_VEC_AT(&b->params, sl__mparam, i);
    if (q->place == SL_PLACE_EMBED && q->style == sp->style)
      embed = i;
  }
  if (embed == SL_NONE)
    return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: tied %s needs an embed parameter of style %s",
                       b->e.spec->path, sp->name, sl__style_name(sp->style));
  sl__mparam *p = push_param(b);
  if (p == NULL)
    return SL_STATUS_NOMEM;
  const sl__mparam *e = &SL_VEC_AT(&b->params, sl__mparam, embed);
  p->name = render(sp->name, -1, -1);
  if (p->name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  p->style = e->style;
  p->place = SL_PLACE_HEAD;
  p->dtype = e->dtype;
  p->ndim = e->ndim;
  memcpy(p->shape, e->shape, sizeof p->shape);
  p->vocab = e->vocab;
  p->alias_of = (uint32_t)embed;
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Checkpoint layout
 * ------------------------------------------------------------------------------------------- */

static sl_status copy_src(sl__msrc *dst, const sl__msrc *src) {
  *dst = *src;
  dst->name = sl__strdup(src->name);
  return dst->name != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
}

/* Rewrites b->params (vllm layout) into the checkpoint layout: one parameter per source tensor. */
static sl_status to_checkpoint_layout(builder *b) {
  sl__vec out;
  sl__vec_init(&out, sizeof(sl__mparam));
  uint32_t *new_index = calloc(b->params.len + 1, sizeof *new_index);
  sl_status st = new_index != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
  for (size_t i = 0; i < b->params.len && st == SL_STATUS_OK; i++) {
    sl__mparam *v = &SL_VEC_AT(&b->params, sl__mparam, i);
    new_index[i] = (uint32_t)out.len;
    if (v->alias_of != SL_NONE) {
      sl__mparam *p = sl__vec_push(&out);
      if (p == NULL) {
        st = SL_STATUS_NOMEM;
        break;
      }
      *p = *v;
      p->name = sl__strdup(v->name);
      p->src = NULL;
      p->n_src = 0;
      p->fields = NULL;
      p->alias_of = new_index[v->alias_of];
      p->ckpt = true;
      p->shape[0] = v->vocab;
      if (p->name == NULL)
        st = SL_STATUS_NOMEM;
      continue;
    }
    for (size_t k = 0; k < v->n_src && st == SL_STATUS_OK; k++) {
      sl__mparam *p = sl__vec_push(&out);
      if (p == NULL) {
        st = SL_STATUS_NOMEM;
        break;
      }
      *p = *v;
      p->ckpt = true;
      p->name = NULL;
      p->fields = v->fields != NULL ? sl__strdup(v->fields) : NULL;
      p->n_src = 1;
      p->src = calloc(1, sizeof *p->src);
      if (p->src == NULL || copy_src(&p->src[0], &v->src[k]) != SL_STATUS_OK) {
        st = SL_STATUS_NOMEM;
        break;
      }
      p->name = sl__strdup(p->src[0].name);
      if (p->name == NULL) {
        st = SL_STATUS_NOMEM;
        break;
      }
      if (v->style == SL_STYLE_CONCAT)
        p->style = SL_STYLE_REPLICATED;
      if (is_per_expert(v->style))
        p->only_expert = p->src[0].expert;
      if (p->src[0].tensor != SL_NONE)
        p->dtype = b->cat->tensors[p->src[0].tensor].dtype;
      p->ndim = p->src[0].ndim;
      memcpy(p->shape, p->src[0].shape, sizeof p->shape);
      if (v->style == SL_STYLE_MOE3D_W13 && v->n_src == 2)
        p->expert_rows = v->expert_rows;
    }
  }
  if (st != SL_STATUS_OK) {
    for (size_t i = 0; i < out.len; i++)
      mparam_free(&SL_VEC_AT(&out, sl__mparam, i));
    sl__vec_free(&out);
    free(new_index);
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < b->params.len; i++)
    mparam_free(&SL_VEC_AT(&b->params, sl__mparam, i));
  sl__vec_free(&b->params);
  b->params = out;
  free(new_index);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Expected set and tensor fates
 * ------------------------------------------------------------------------------------------- */

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static sl_status build_units(builder *b) {
  sl__model *m = b->m;
  size_t n = 0;
  for (size_t i = 0; i < m->n_params; i++)
    if (m->params[i].block_rows == 0)
      n += m->params[i].n_src;
  m->units = calloc(n + 1, sizeof *m->units);
  m->unit_param = calloc(n + 1, sizeof *m->unit_param);
  if (m->units == NULL || m->unit_param == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < m->n_params; i++) {
    if (m->params[i].block_rows != 0)
      continue;
    for (size_t j = 0; j < m->params[i].n_src; j++) {
      m->units[m->n_units] = sl__strdup(m->params[i].src[j].name);
      if (m->units[m->n_units] == NULL)
        return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
      m->n_units++;
    }
  }
  qsort(m->units, m->n_units, sizeof *m->units, cmp_cstr);
  sl__hashmap map;
  sl__hashmap_init(&map, SL_HASHMAP_BORROW);
  for (size_t i = 0; i < m->n_units; i++) {
    uint64_t prev = 0;
    bool oom = false;
    if (!sl__hashmap_put(&map, m->units[i], strlen(m->units[i]), i, &prev, &oom)) {
      sl__hashmap_free(&map);
      if (oom)
        return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
      return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: checkpoint tensor '%s' feeds two parameters",
                         b->e.spec->path, m->units[i]);
    }
  }
  for (size_t i = 0; i < m->n_params; i++) {
    if (m->params[i].block_rows != 0)
      continue;
    for (size_t j = 0; j < m->params[i].n_src; j++) {
      sl__msrc *s = &m->params[i].src[j];
      uint64_t u = SL_NONE;
      sl__hashmap_get(&map, s->name, strlen(s->name), &u);
      s->unit = (uint32_t)u;
      m->unit_param[u] = (uint32_t)i;
    }
  }
  sl__hashmap_free(&map);
  return SL_STATUS_OK;
}

static const char *const always_skipped[] = {"rotary_emb.inv_freq", "rotary_emb.cos_cached",
                                             "rotary_emb.sin_cached"};

static sl_status build_fates(builder *b) {
  sl__model *m = b->m;
  const sl__catalog *cat = b->cat;
  m->tensor_fate = calloc(cat->n_tensors + 1, 1);
  if (m->tensor_fate == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < m->n_params; i++)
    for (size_t j = 0; j < m->params[i].n_src; j++)
      if (m->params[i].src[j].tensor != SL_NONE)
        m->tensor_fate[m->params[i].src[j].tensor] = SL_FATE_CONSUMED;
  uint64_t mtp_from = 0;
  uint64_t mtp_count = 0;
  env_enter_layer(&b->e, -1);
  if (b->e.spec->skip_layers_from != NULL) {
    sl_status st = sl__expr_eval_u64(b->e.spec->skip_layers_from, lookup, &b->e, &mtp_from, b->err);
    if (st == SL_STATUS_OK)
      st = sl__expr_eval_u64(b->e.spec->skip_layers_count, lookup, &b->e, &mtp_count, b->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  for (size_t t = 0; t < cat->n_tensors; t++) {
    if (m->tensor_fate[t] == SL_FATE_CONSUMED)
      continue;
    const char *name = cat->tensors[t].name;
    bool skip = false;
    for (size_t k = 0; k < sizeof always_skipped / sizeof always_skipped[0]; k++)
      skip = skip || strstr(name, always_skipped[k]) != NULL;
    for (size_t k = 0; k < b->e.spec->n_skip_contains; k++)
      skip = skip || strstr(name, b->e.spec->skip_contains[k]) != NULL;
    if (m->tied && sl__str_starts_with(name, "lm_head."))
      skip = true;
    if (mtp_count > 0 && sl__str_starts_with(name, "model.layers.")) {
      uint64_t k = 0;
      const char *d = name + strlen("model.layers.");
      const char *e = d;
      while (*e >= '0' && *e <= '9') {
        k = k * 10 + (uint64_t)(*e - '0');
        e++;
      }
      if (e > d && e - d < 10 && *e == '.' && k >= mtp_from && k < mtp_from + mtp_count)
        skip = true;
    }
    if (skip) {
      m->tensor_fate[t] = SL_FATE_SKIPPED;
      continue;
    }
    if (sl__str_ends_with(name, ".bias")) {
      size_t len = strlen(name);
      char *w = sl__asprintf("%.*s.weight", (int)(len - 5), name);
      if (w == NULL)
        return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
      uint32_t wt = sl__catalog_find(cat, w);
      free(w);
      if (wt != SL_NONE && m->tensor_fate[wt] == SL_FATE_CONSUMED)
        m->tensor_fate[t] = SL_FATE_IGNORED;
    }
  }
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------------------------- */

sl_status sl__model_parse_config(const sl__catalog *cat, cJSON **out, sl__err *err) {
  *out = NULL;
  if (cat->config_json == NULL)
    return sl__err_set(err, SL_STATUS_MODEL_CONFIG, "%s has no config.json", cat->folder);
  cJSON *cfg = cJSON_ParseWithLength(cat->config_json, cat->config_len);
  if (cfg == NULL || !cJSON_IsObject(cfg)) {
    cJSON_Delete(cfg);
    return sl__err_set(err, SL_STATUS_MODEL_CONFIG, "%s/config.json is not a valid JSON object", cat->folder);
  }
  *out = cfg;
  return SL_STATUS_OK;
}

sl_status sl__model_architecture(const cJSON *config, const char **out, sl__err *err) {
  const cJSON *archs = cJSON_GetObjectItemCaseSensitive(config, "architectures");
  const cJSON *first = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
  if (!cJSON_IsString(first))
    return sl__err_set(
        err, SL_STATUS_MODEL_CONFIG,
        "config.json has no \"architectures\" list of strings (pass --arch FILE.json to choose a spec)");
  *out = first->valuestring;
  return SL_STATUS_OK;
}

static sl__dtype dtype_from_torch(const cJSON *config) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(config, "torch_dtype");
  if (!cJSON_IsString(t))
    t = cJSON_GetObjectItemCaseSensitive(config, "dtype");
  if (cJSON_IsString(t)) {
    if (strcmp(t->valuestring, "float16") == 0)
      return SL_DT_F16;
    if (strcmp(t->valuestring, "float32") == 0)
      return SL_DT_F32;
  }
  return SL_DT_BF16;
}

static sl_status read_quantization(builder *b) {
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(b->e.config, "quantization_config");
  if (q == NULL || cJSON_IsNull(q))
    return SL_STATUS_OK;
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
  const char *mname = cJSON_IsString(method) ? method->valuestring : "(none)";
  if (strcmp(mname, "fp8") != 0)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "unsupported quantization method '%s' (supported: fp8 with "
                       "weight_block_size)",
                       mname);
  const cJSON *bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
  const cJSON *bn = cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 ? cJSON_GetArrayItem(bs, 0) : NULL;
  const cJSON *bk = cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 ? cJSON_GetArrayItem(bs, 1) : NULL;
  if (!cJSON_IsNumber(bn) || !cJSON_IsNumber(bk) || bn->valuedouble < 1 || bk->valuedouble < 1 ||
      bn->valuedouble > 1e9 || bk->valuedouble > 1e9 ||
      bn->valuedouble != (double)(uint64_t)bn->valuedouble ||
      bk->valuedouble != (double)(uint64_t)bk->valuedouble)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "quantization_config.weight_block_size must be [rows, cols] of positive integers "
                       "(per-tensor fp8 scales are not supported)");
  b->m->fp8 = true;
  b->m->block_rows = (uint64_t)bn->valuedouble;
  b->m->block_cols = (uint64_t)bk->valuedouble;
  return SL_STATUS_OK;
}

sl_status sl__model_build(const sl__spec *spec, const sl__catalog *cat, sl__layout_kind layout, sl__model *m,
                          sl__err *err) {
  memset(m, 0, sizeof *m);
  cJSON *config = NULL;
  sl_status st = sl__model_parse_config(cat, &config, err);
  if (st != SL_STATUS_OK)
    return st;
  builder b;
  memset(&b, 0, sizeof b);
  b.e.spec = spec;
  b.e.config = config;
  b.e.vars = calloc(spec->n_vars + 1, sizeof *b.e.vars);
  b.e.var_state = calloc(spec->n_vars + 1, 1);
  b.e.lvars = calloc(spec->n_layer_vars + 1, sizeof *b.e.lvars);
  b.e.lvar_state = calloc(spec->n_layer_vars + 1, 1);
  b.cat = cat;
  b.m = m;
  b.err = err;
  b.default_dtype = dtype_from_torch(config);
  sl__vec_init(&b.params, sizeof(sl__mparam));
  m->layout = layout;
  m->mistral_format = spec->rename_format != NULL && cat->format == SL_FORMAT_MISTRAL;
  const char *arch = NULL;
  if (b.e.vars == NULL || b.e.var_state == NULL || b.e.lvars == NULL || b.e.lvar_state == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK && sl__model_architecture(config, &arch, NULL) == SL_STATUS_OK)
    m->architecture = sl__strdup(arch);
  m->family = sl__strdup(spec->family);
  env_enter_layer(&b.e, -1);
  uint64_t layers = 0;
  if (st == SL_STATUS_OK)
    st = read_quantization(&b);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->num_layers, lookup, &b.e, &layers, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->experts, lookup, &b.e, &m->experts, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->n_group, lookup, &b.e, &m->n_group, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_bool(spec->tie_word_embeddings, lookup, &b.e, &m->tied, err);
  if (st == SL_STATUS_OK && (layers < 1 || layers > 1000000))
    st = sl__err_set(err, SL_STATUS_MODEL_CONFIG, "config.json: %llu layers is out of range (1 .. 1000000)",
                     (unsigned long long)layers);
  m->n_layers = (uint32_t)layers;
  static const sl__place order[] = {SL_PLACE_EMBED, SL_PLACE_LAYER, SL_PLACE_FINAL, SL_PLACE_HEAD};
  for (size_t o = 0; o < 4 && st == SL_STATUS_OK; o++) {
    uint32_t n_iter = order[o] == SL_PLACE_LAYER ? m->n_layers : 1;
    for (uint32_t layer = 0; layer < n_iter && st == SL_STATUS_OK; layer++) {
      env_enter_layer(&b.e, order[o] == SL_PLACE_LAYER ? (int64_t)layer : -1);
      for (size_t i = 0; i < spec->n_params && st == SL_STATUS_OK; i++) {
        const sl__spec_param *sp = &spec->params[i];
        if (sp->place != order[o])
          continue;
        if (sp->place == SL_PLACE_HEAD && m->tied)
          st = build_alias(&b, sp);
        else
          st = build_param(&b, sp, order[o] == SL_PLACE_LAYER ? (int64_t)layer : -1);
      }
    }
  }
  if (st == SL_STATUS_OK && layout == SL_LAYOUT_CHECKPOINT)
    st = to_checkpoint_layout(&b);
  m->params = b.params.data;
  m->n_params = b.params.len;
  if (st == SL_STATUS_OK)
    st = build_units(&b);
  if (st == SL_STATUS_OK)
    st = build_fates(&b);
  free(b.e.vars);
  free(b.e.var_state);
  free(b.e.lvars);
  free(b.e.lvar_state);
  cJSON_Delete(config);
  if (st == SL_STATUS_OK && (m->family == NULL || (arch != NULL && m->architecture == NULL)))
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st != SL_STATUS_OK)
    sl__model_free(m);
  return st;
}
