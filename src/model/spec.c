/*
 * model/spec.c — parsing of architecture spec files (format in model/spec.h and docs/SPECS.md); the
 * search for the spec of an architecture is model/spec_find.c. Every key is checked: an unknown
 * key is an error naming it (typos in a user's spec must not be silently ignored); keys starting
 * with '_' are comments.
 */
#include "model/spec.h"
#include "model/gdn.h"

#include "base/json.h"
#include "base/util.h"
#include "format/cast.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const style_names[SL_STYLE_COUNT] = {
    "replicated", "column", "row", "merged", "qkv", "vocab", "concat", "moe_w13", "moe_w2", "moe3d_w13",
    "moe3d_w2",
    /* family styles (plan/slicing_families.c) */
    "qkv_fused", "merged_fused", "moe3d_w13_interleaved", "moe3d_w2_blocked", "moe_w2_bias",
    "moe3d_w13_transposed", "moe3d_w2_transposed", "moe3d_w13_interleaved_transposed",
    /* quantization companions (plan/slicing_quant.c) */
    "quant_parts", "int4",
    /* per key/value head (plan/slicing_heads.c) */
    "kv_heads",
    /* gated DeltaNet layers (plan/slicing_gdn.c) */
    "gdn",
    /* pack-quantized and NVFP4 (plan/slicing_packed.c) */
    "packed", "packed_moe", "moe_whole"};

const char *sl__style_name(sl__style s) {
  return (unsigned)s < SL_STYLE_COUNT ? style_names[s] : "?";
}

typedef struct ctx {
  const char *path;
  sl__err *err;
} ctx;

static sl_status spec_error(ctx *c, const char *where, const char *what) {
  return sl__err_set(c->err, SL_STATUS_ARCH, "spec %s: %s: %s", c->path, where, what);
}

/* Checks that every key of obj is in the NULL-terminated list `allowed`. */
static sl_status check_keys(ctx *c, const cJSON *obj, const char *where, const char *const *allowed) {
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, obj) {
    if (item->string == NULL || item->string[0] == '_')
      continue;
    bool ok = false;
    for (const char *const *a = allowed; *a != NULL; a++)
      ok = ok || strcmp(*a, item->string) == 0;
    if (!ok) {
      char msg[256];
      snprintf(msg, sizeof msg, "unknown key '%s'", item->string);
      return spec_error(c, where, msg);
    }
  }
  return SL_STATUS_OK;
}

/* Compiles an expression given as a JSON string or integer or boolean. */
static sl_status compile_item(ctx *c, const cJSON *item, const char *where, sl__expr **out) {
  char buf[64];
  const char *text = NULL;
  if (cJSON_IsString(item)) {
    text = item->valuestring;
  } else if (cJSON_IsNumber(item)) {
    if (item->valuedouble < 0 || item->valuedouble > 9e15 ||
        item->valuedouble != (double)(int64_t)item->valuedouble)
      return spec_error(c, where, "a number must be a non-negative integer");
    snprintf(buf, sizeof buf, "%lld", (long long)item->valuedouble);
    text = buf;
  } else if (cJSON_IsBool(item)) {
    text = cJSON_IsTrue(item) ? "true" : "false";
  } else {
    return spec_error(c, where, "expected an expression (string, integer or boolean)");
  }
  char w[512];
  snprintf(w, sizeof w, "spec %s: %s", c->path, where);
  return sl__expr_compile(text, w, out, c->err);
}

static sl_status opt_expr(ctx *c, const cJSON *obj, const char *key, const char *where, const char *dflt,
                          sl__expr **out) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
  char w[256];
  snprintf(w, sizeof w, "%s.%s", where, key);
  if (item == NULL) {
    if (dflt == NULL) {
      *out = NULL;
      return SL_STATUS_OK;
    }
    char ww[512];
    snprintf(ww, sizeof ww, "spec %s: %s (default)", c->path, w);
    return sl__expr_compile(dflt, ww, out, c->err);
  }
  return compile_item(c, item, w, out);
}

static sl_status string_dup(ctx *c, const cJSON *item, const char *where, char **out) {
  if (!cJSON_IsString(item) || item->valuestring[0] == '\0')
    return spec_error(c, where, "expected a non-empty string");
  *out = sl__strdup(item->valuestring);
  return *out != NULL ? SL_STATUS_OK : sl__err_set(c->err, SL_STATUS_NOMEM, "out of memory");
}

static sl_status string_list(ctx *c, const cJSON *arr, const char *where, char ***out, size_t *n_out) {
  if (!cJSON_IsArray(arr))
    return spec_error(c, where, "expected an array of strings");
  size_t n = (size_t)cJSON_GetArraySize(arr);
  char **list = calloc(n + 1, sizeof *list);
  if (list == NULL)
    return sl__err_set(c->err, SL_STATUS_NOMEM, "out of memory");
  size_t k = 0;
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, arr) {
    sl_status st = string_dup(c, item, where, &list[k]);
    if (st != SL_STATUS_OK) {
      for (size_t i = 0; i < k; i++)
        free(list[i]);
      free(list);
      return st;
    }
    k++;
  }
  *out = list;
  if (n_out != NULL)
    *n_out = n;
  return SL_STATUS_OK;
}

static sl_status named_exprs(ctx *c, const cJSON *obj, const char *where, sl__named_expr **out,
                             size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  if (obj == NULL)
    return SL_STATUS_OK;
  if (!cJSON_IsObject(obj))
    return spec_error(c, where, "expected an object of NAME: EXPRESSION");
  size_t n = (size_t)cJSON_GetArraySize(obj);
  if (n > SL_SPEC_MAX_VARS) {
    char msg[160];
    snprintf(msg, sizeof msg, "%zu entries, more than the limit of %u", n, SL_SPEC_MAX_VARS);
    return spec_error(c, where, msg);
  }
  sl__named_expr *v = calloc(n + 1, sizeof *v);
  if (v == NULL)
    return sl__err_set(c->err, SL_STATUS_NOMEM, "out of memory");
  *out = v;
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, obj) {
    if (item->string[0] == '_')
      continue;
    char w[256];
    snprintf(w, sizeof w, "%s.%s", where, item->string);
    v[*n_out].name = sl__strdup(item->string);
    if (v[*n_out].name == NULL)
      return sl__err_set(c->err, SL_STATUS_NOMEM, "out of memory");
    sl_status st = compile_item(c, item, w, &v[*n_out].expr);
    (*n_out)++;
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

static sl_status parse_source(ctx *c, const cJSON *obj, const char *where, sl__spec_source *s) {
  static const char *const keys[] = {"tensor", "part", "shape", "rotary_heads", "vllm_rotary_heads", NULL};
  if (!cJSON_IsObject(obj))
    return spec_error(c, where, "a source must be an object");
  sl_status st = check_keys(c, obj, where, keys);
  if (st == SL_STATUS_OK)
    st = string_dup(c, cJSON_GetObjectItemCaseSensitive(obj, "tensor"), where, &s->tensor);
  if (st != SL_STATUS_OK)
    return st;
  const cJSON *part = cJSON_GetObjectItemCaseSensitive(obj, "part");
  if (part != NULL) {
    st = string_dup(c, part, where, &s->part);
    if (st != SL_STATUS_OK)
      return st;
  }
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(obj, "shape");
  if (!cJSON_IsArray(shape))
    return spec_error(c, where, "'shape' must be an array of expressions");
  size_t n = (size_t)cJSON_GetArraySize(shape);
  if (n > SL_SPEC_MAX_DIMS)
    return spec_error(c, where, "'shape' has more than 8 dimensions");
  s->ndim = n;
  for (size_t i = 0; i < n; i++) {
    char w[256];
    snprintf(w, sizeof w, "%s.shape[%zu]", where, i);
    st = compile_item(c, cJSON_GetArrayItem(shape, (int)i), w, &s->shape[i]);
    if (st != SL_STATUS_OK)
      return st;
  }
  st = opt_expr(c, obj, "rotary_heads", where, NULL, &s->rotary_heads);
  return st == SL_STATUS_OK ? opt_expr(c, obj, "vllm_rotary_heads", where, NULL, &s->vllm_rotary_heads) : st;
}

static bool style_parse(const char *s, sl__style *out) {
  for (int i = 0; i < SL_STYLE_COUNT; i++) {
    if (strcmp(style_names[i], s) == 0) {
      *out = (sl__style)i;
      return true;
    }
  }
  return false;
}

/* Checks the parts a style needs (names and count), so that errors show when loading the spec. */
static sl_status check_parts(ctx *c, const sl__spec_param *p, const char *where) {
  size_t n = p->n_sources;
  const char *err = NULL;
  switch (p->style) {
  case SL_STYLE_REPLICATED:
  case SL_STYLE_COLUMN:
  case SL_STYLE_ROW:
  case SL_STYLE_VOCAB:
  case SL_STYLE_MOE_W2:
  case SL_STYLE_MOE3D_W2:
  case SL_STYLE_MERGED_FUSED:
  case SL_STYLE_MOE3D_W13_INTERLEAVED:
  case SL_STYLE_MOE3D_W2_BLOCKED:
  case SL_STYLE_MOE_W2_BIAS:
  case SL_STYLE_MOE3D_W13_TRANSPOSED:
  case SL_STYLE_MOE3D_W2_TRANSPOSED:
  case SL_STYLE_MOE3D_W13_IL_T:
    if (n != 1)
      err = "this style takes exactly one source";
    break;
  case SL_STYLE_QKV_FUSED:
    if (n != 1)
      err = "qkv_fused takes exactly one source (the fused q, k, v tensor)";
    else if (p->q_heads == NULL || p->kv_heads == NULL || p->head_dim == NULL)
      err = "qkv_fused needs \"heads\": {\"q\", \"kv\", \"head_dim\"}";
    break;
  case SL_STYLE_MERGED:
  case SL_STYLE_CONCAT:
  case SL_STYLE_QUANT_PARTS:
    if (n < 1)
      err = "this style takes one or more sources";
    break;
  case SL_STYLE_QKV:
    if (n != 3 || p->sources[0].part == NULL || p->sources[1].part == NULL || p->sources[2].part == NULL ||
        strcmp(p->sources[0].part, "q") != 0 || strcmp(p->sources[1].part, "k") != 0 ||
        strcmp(p->sources[2].part, "v") != 0)
      err = "qkv takes three sources with parts q, k, v in that order";
    else if (p->q_heads == NULL || p->kv_heads == NULL || p->head_dim == NULL)
      err = "qkv needs \"heads\": {\"q\", \"kv\", \"head_dim\"}";
    break;
  case SL_STYLE_MOE_W13:
    if (n != 2 || p->sources[0].part == NULL || p->sources[1].part == NULL ||
        strcmp(p->sources[0].part, "w1") != 0 || strcmp(p->sources[1].part, "w3") != 0)
      err = "moe_w13 takes two sources with parts w1, w3 in that order";
    break;
  case SL_STYLE_MOE3D_W13:
    if (!((n == 1 && p->sources[0].part != NULL && strcmp(p->sources[0].part, "w13") == 0) ||
          (n == 2 && p->sources[0].part != NULL && p->sources[1].part != NULL &&
           strcmp(p->sources[0].part, "w1") == 0 && strcmp(p->sources[1].part, "w3") == 0)))
      err = "moe3d_w13 takes one source with part w13, or two with parts w1, w3";
    break;
  case SL_STYLE_KV_HEADS:
    if (n != 1 || p->kv_heads == NULL || p->head_dim == NULL)
      err = "kv_heads takes one source and \"heads\": {\"kv\", \"head_dim\"}";
    break;
  case SL_STYLE_INT4:
    err = "int4 is derived from quantization_config (gptq, awq), never declared in a spec";
    break;
  case SL_STYLE_GDN:
    err = sl__gdn_spec_check(p);
    break;
  case SL_STYLE_PACKED:
  case SL_STYLE_PACKED_MOE:
  case SL_STYLE_MOE_WHOLE:
    err = "this style is derived from quantization_config (pack-quantized, NVFP4), never declared in a spec";
    break;
  case SL_STYLE_COUNT:
    err = "unknown style";
    break;
  }
  if (p->style == SL_STYLE_VOCAB && p->vocab == NULL)
    err = "vocab needs \"vocab\": EXPR (the unpadded vocabulary size)";
  bool per_expert = p->style == SL_STYLE_MOE_W13 || p->style == SL_STYLE_MOE_W2;
  for (size_t i = 0; i < n && err == NULL; i++) {
    bool has = strstr(p->sources[i].tensor, "{expert}") != NULL;
    if (per_expert && !has)
      err = "per-expert sources need {expert} in the tensor name";
    if (!per_expert && has)
      err = "{expert} is only allowed in moe_w13 / moe_w2 sources";
    if (p->place != SL_PLACE_LAYER && strstr(p->sources[i].tensor, "{layer}") != NULL)
      err = "{layer} is only allowed in layer parameters";
  }
  if (err == NULL && p->place == SL_PLACE_LAYER && strstr(p->name, "{layer}") == NULL && p->when == NULL)
    err = "a layer parameter's name needs {layer} (or a \"when\" that holds in one layer)";
  return err != NULL ? spec_error(c, where, err) : SL_STATUS_OK;
}

/* "transpose": true (docs/SPECS.md): in the vllm layout the parameter holds its local tensor with
 * the last two dimensions transposed, vLLM's orientation of experts a checkpoint stores the other
 * way. Only the styles whose sources are stored so take it; the checkpoint layout ignores it. */
static sl_status parse_transpose(ctx *c, const cJSON *obj, const char *where, sl__spec_param *p) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "transpose");
  if (t == NULL)
    return SL_STATUS_OK;
  if (!cJSON_IsBool(t))
    return spec_error(c, where, "'transpose' must be true or false");
  p->transpose = cJSON_IsTrue(t);
  if (p->transpose && p->style != SL_STYLE_MOE3D_W13_TRANSPOSED && p->style != SL_STYLE_MOE3D_W2_TRANSPOSED &&
      p->style != SL_STYLE_MOE3D_W13_IL_T) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "'transpose' is only supported with styles moe3d_w13_transposed, moe3d_w2_transposed and "
             "moe3d_w13_interleaved_transposed, not %s",
             sl__style_name(p->style));
    return spec_error(c, where, msg);
  }
  return SL_STATUS_OK;
}

/* "dtype" (docs/SPECS.md): the parameter is held in this dtype whatever its sources' (vLLM keeps
 * some norms in F32), converted as delivered; one of the conversions of format/cast.h. */
static sl_status parse_dtype(ctx *c, const cJSON *obj, const char *where, sl__spec_param *p) {
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(obj, "dtype");
  p->dtype = SL_DT_COUNT;
  if (d == NULL)
    return SL_STATUS_OK;
  const char *name = cJSON_IsString(d) ? d->valuestring : "";
  if (!sl__dtype_parse(name, strlen(name), &p->dtype) || !sl__cast_supported(p->dtype, p->dtype) ||
      p->dtype == SL_DT_I64)
    return spec_error(c, where,
                      "'dtype' must be one of F32, F16, BF16, F64, I32 (the dtypes a parameter can be "
                      "converted to)");
  return SL_STATUS_OK;
}

static sl_status parse_param(ctx *c, const cJSON *obj, const char *where, sl__spec_param *p) {
  static const char *const keys[] = {"name",    "place",     "when",    "style", "heads", "vocab",
                                     "experts", "transpose", "sources", "dtype", NULL};
  if (!cJSON_IsObject(obj))
    return spec_error(c, where, "a parameter must be an object");
  sl_status st = check_keys(c, obj, where, keys);
  if (st == SL_STATUS_OK)
    st = string_dup(c, cJSON_GetObjectItemCaseSensitive(obj, "name"), where, &p->name);
  if (st != SL_STATUS_OK)
    return st;
  char w[256];
  snprintf(w, sizeof w, "%s (%s)", where, p->name);
  const cJSON *place = cJSON_GetObjectItemCaseSensitive(obj, "place");
  const char *pl = cJSON_IsString(place) ? place->valuestring : "";
  if (strcmp(pl, "embed") == 0)
    p->place = SL_PLACE_EMBED;
  else if (strcmp(pl, "layer") == 0)
    p->place = SL_PLACE_LAYER;
  else if (strcmp(pl, "final") == 0)
    p->place = SL_PLACE_FINAL;
  else if (strcmp(pl, "head") == 0)
    p->place = SL_PLACE_HEAD;
  else if (strcmp(pl, "all") == 0)
    p->place = SL_PLACE_ALL;
  else
    return spec_error(c, w, "'place' must be one of embed, layer, final, head, all");
  const cJSON *style = cJSON_GetObjectItemCaseSensitive(obj, "style");
  if (!cJSON_IsString(style) || !style_parse(style->valuestring, &p->style))
    return spec_error(c, w,
                      "'style' must be one of replicated, column, row, merged, qkv, vocab, concat, moe_w13, "
                      "moe_w2, moe3d_w13, moe3d_w2");
  st = parse_transpose(c, obj, w, p);
  if (st == SL_STATUS_OK)
    st = parse_dtype(c, obj, w, p);
  if (st == SL_STATUS_OK)
    st = opt_expr(c, obj, "when", w, NULL, &p->when);
  if (st == SL_STATUS_OK)
    st = opt_expr(c, obj, "vocab", w, NULL, &p->vocab);
  if (st == SL_STATUS_OK)
    st = opt_expr(c, obj, "experts", w, NULL, &p->experts);
  if (st != SL_STATUS_OK)
    return st;
  const cJSON *heads = cJSON_GetObjectItemCaseSensitive(obj, "heads");
  if (heads != NULL) {
    static const char *const hkeys[] = {"q", "kv", "head_dim", "v_head_dim", NULL};
    char hw[300];
    snprintf(hw, sizeof hw, "%s.heads", w);
    if (!cJSON_IsObject(heads))
      return spec_error(c, hw, "expected an object");
    st = check_keys(c, heads, hw, hkeys);
    if (st == SL_STATUS_OK)
      st = opt_expr(c, heads, "q", hw, NULL, &p->q_heads);
    if (st == SL_STATUS_OK)
      st = opt_expr(c, heads, "kv", hw, NULL, &p->kv_heads);
    if (st == SL_STATUS_OK)
      st = opt_expr(c, heads, "head_dim", hw, NULL, &p->head_dim);
    if (st == SL_STATUS_OK)
      st = opt_expr(c, heads, "v_head_dim", hw, NULL, &p->v_head_dim);
    if (st != SL_STATUS_OK)
      return st;
  }
  const cJSON *sources = cJSON_GetObjectItemCaseSensitive(obj, "sources");
  if (!cJSON_IsArray(sources) || cJSON_GetArraySize(sources) < 1)
    return spec_error(c, w, "'sources' must be a non-empty array");
  if ((size_t)cJSON_GetArraySize(sources) > SL_SPEC_MAX_SOURCES)
    return spec_error(c, w, "'sources' has more than 256 entries");
  p->n_sources = (size_t)cJSON_GetArraySize(sources);
  p->sources = calloc(p->n_sources, sizeof *p->sources);
  if (p->sources == NULL)
    return sl__err_set(c->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < p->n_sources; i++) {
    char sw[320];
    snprintf(sw, sizeof sw, "%s.sources[%zu]", w, i);
    st = parse_source(c, cJSON_GetArrayItem(sources, (int)i), sw, &p->sources[i]);
    if (st != SL_STATUS_OK)
      return st;
  }
  return check_parts(c, p, w);
}

/* family, architectures, fall_back_to_pt and allow_patterns_override. */
static sl_status parse_identity(ctx *c, const cJSON *root, sl__spec *s) {
  sl_status st = string_dup(c, cJSON_GetObjectItemCaseSensitive(root, "family"), "family", &s->family);
  if (st == SL_STATUS_OK)
    st = string_list(c, cJSON_GetObjectItemCaseSensitive(root, "architectures"), "architectures",
                     &s->architectures, &s->n_arch);
  if (st == SL_STATUS_OK) {
    const cJSON *fb = cJSON_GetObjectItemCaseSensitive(root, "fall_back_to_pt");
    if (fb != NULL && !cJSON_IsBool(fb))
      st = spec_error(c, "fall_back_to_pt", "expected true or false");
    s->fall_back_to_pt = fb == NULL || cJSON_IsTrue(fb);
  }
  const cJSON *apo = cJSON_GetObjectItemCaseSensitive(root, "allow_patterns_override");
  if (st == SL_STATUS_OK && apo != NULL)
    st = string_list(c, apo, "allow_patterns_override", &s->allow_patterns_override, NULL);
  return st;
}

/* vars, layer_vars and the model-wide expressions (each with its default). */
static sl_status parse_exprs(ctx *c, const cJSON *root, sl__spec *s) {
  sl_status st = named_exprs(c, cJSON_GetObjectItemCaseSensitive(root, "vars"), "vars", &s->vars, &s->n_vars);
  if (st == SL_STATUS_OK)
    st = named_exprs(c, cJSON_GetObjectItemCaseSensitive(root, "layer_vars"), "layer_vars", &s->layer_vars,
                     &s->n_layer_vars);
  if (st == SL_STATUS_OK)
    st = opt_expr(c, root, "num_layers", "top level", "num_hidden_layers", &s->num_layers);
  if (st == SL_STATUS_OK)
    st = opt_expr(c, root, "experts", "top level", "0", &s->experts);
  if (st == SL_STATUS_OK)
    st = opt_expr(c, root, "n_group", "top level", "default(n_group, 1)", &s->n_group);
  if (st == SL_STATUS_OK)
    st = opt_expr(c, root, "tie_word_embeddings", "top level", "default(tie_word_embeddings, false)",
                  &s->tie_word_embeddings);
  return st;
}

/* skip_layers {"from", "count", "prefix"} and skip_contains. */
static sl_status parse_skips(ctx *c, const cJSON *root, sl__spec *s) {
  sl_status st = SL_STATUS_OK;
  const cJSON *skl = cJSON_GetObjectItemCaseSensitive(root, "skip_layers");
  if (skl != NULL) {
    static const char *const skeys[] = {"from", "count", "prefix", NULL};
    st = cJSON_IsObject(skl) ? check_keys(c, skl, "skip_layers", skeys)
                             : spec_error(c, "skip_layers", "expected {\"from\": EXPR, \"count\": EXPR}");
    if (st == SL_STATUS_OK)
      st = opt_expr(c, skl, "from", "skip_layers", "num_hidden_layers", &s->skip_layers_from);
    if (st == SL_STATUS_OK)
      st = opt_expr(c, skl, "count", "skip_layers", "0", &s->skip_layers_count);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(skl, "prefix");
    if (st == SL_STATUS_OK && pre != NULL)
      st = string_dup(c, pre, "skip_layers.prefix", &s->skip_layers_prefix);
  }
  const cJSON *sc = cJSON_GetObjectItemCaseSensitive(root, "skip_contains");
  if (st == SL_STATUS_OK && sc != NULL)
    st = string_list(c, sc, "skip_contains", &s->skip_contains, &s->n_skip_contains);
  const cJSON *vp = cJSON_GetObjectItemCaseSensitive(root, "vision_prefixes");
  if (st == SL_STATUS_OK && vp != NULL)
    st = string_list(c, vp, "vision_prefixes", &s->vision_prefixes, &s->n_vision_prefixes);
  return st;
}

/* fp8_scale_name (optional): a template holding {weight} or {stem} once and no other brace. */
static sl_status parse_fp8_scale_name(ctx *c, const cJSON *root, sl__spec *s) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "fp8_scale_name");
  if (n == NULL)
    return SL_STATUS_OK;
  const char *t = cJSON_IsString(n) ? n->valuestring : NULL;
  const char *w = t != NULL ? strstr(t, "{weight}") : NULL;
  const char *x = t != NULL ? strstr(t, "{stem}") : NULL;
  const char *hole = w != NULL ? w : x;
  size_t braces = 0;
  for (const char *p = t; p != NULL && *p != '\0'; p++)
    braces += *p == '{' || *p == '}';
  if (hole == NULL || (w != NULL && x != NULL) || braces != 2)
    return spec_error(
        c, "fp8_scale_name",
        "expected a string holding {weight} or {stem} once (\"{weight}_scale_inv\", \"{stem}.scale\")");
  s->fp8_scale_name = sl__strdup(t);
  return s->fp8_scale_name != NULL ? SL_STATUS_OK : sl__err_set(c->err, SL_STATUS_NOMEM, "out of memory");
}

/* rename {"format", "map": [[FROM, TO], ...]} (optional). */
static sl_status parse_rename(ctx *c, const cJSON *root, sl__spec *s) {
  const cJSON *rn = cJSON_GetObjectItemCaseSensitive(root, "rename");
  if (rn == NULL)
    return SL_STATUS_OK;
  static const char *const rkeys[] = {"format", "map", NULL};
  sl_status st = cJSON_IsObject(rn)
                     ? check_keys(c, rn, "rename", rkeys)
                     : spec_error(c, "rename", "expected {\"format\": ..., \"map\": [[FROM, TO], ...]}");
  if (st == SL_STATUS_OK)
    st = string_dup(c, cJSON_GetObjectItemCaseSensitive(rn, "format"), "rename.format", &s->rename_format);
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(rn, "map");
  if (st == SL_STATUS_OK && !cJSON_IsArray(map))
    st = spec_error(c, "rename.map", "expected an array of [FROM, TO] pairs");
  if (st != SL_STATUS_OK)
    return st;
  s->n_rename = (size_t)cJSON_GetArraySize(map);
  s->rename_from = calloc(s->n_rename + 1, sizeof *s->rename_from);
  s->rename_to = calloc(s->n_rename + 1, sizeof *s->rename_to);
  if (s->rename_from == NULL || s->rename_to == NULL)
    st = sl__err_set(c->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < s->n_rename && st == SL_STATUS_OK; i++) {
    const cJSON *pair = cJSON_GetArrayItem(map, (int)i);
    if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2) {
      st = spec_error(c, "rename.map", "each entry must be [FROM, TO]");
      break;
    }
    st = string_dup(c, cJSON_GetArrayItem(pair, 0), "rename.map", &s->rename_from[i]);
    if (st == SL_STATUS_OK)
      st = string_dup(c, cJSON_GetArrayItem(pair, 1), "rename.map", &s->rename_to[i]);
  }
  return st;
}

/* params: a non-empty array of parameters. */
static sl_status parse_params(ctx *c, const cJSON *root, sl__spec *s) {
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "params");
  if (!cJSON_IsArray(params) || cJSON_GetArraySize(params) < 1)
    return spec_error(c, "params", "expected a non-empty array of parameters");
  size_t n = (size_t)cJSON_GetArraySize(params);
  if (n > SL_SPEC_MAX_PARAMS) {
    char msg[160];
    snprintf(msg, sizeof msg, "%zu parameters, more than the limit of %u", n, SL_SPEC_MAX_PARAMS);
    return spec_error(c, "params", msg);
  }
  s->n_params = n;
  s->params = calloc(s->n_params, sizeof *s->params);
  if (s->params == NULL)
    return sl__err_set(c->err, SL_STATUS_NOMEM, "out of memory");
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < s->n_params && st == SL_STATUS_OK; i++) {
    char w[64];
    snprintf(w, sizeof w, "params[%zu]", i);
    st = parse_param(c, cJSON_GetArrayItem(params, (int)i), w, &s->params[i]);
  }
  return st;
}

/* The keys of a multimodal wrapper (model/spec_vision.c reads and checks them): the vision spec, a
 * spec of its own, parsed here. */
static sl_status parse_wrapper(ctx *c, const cJSON *root, sl__spec *s) {
  char *text = NULL;
  char *vpath = NULL;
  sl_status st = sl__spec_wrapper_keys(root, s, &text, &vpath, c->err);
  if (st == SL_STATUS_OK && text != NULL)
    st = sl__spec_parse(text, strlen(text), vpath, &s->vision, c->err);
  if (st == SL_STATUS_OK && s->vision != NULL)
    st = sl__spec_vision_accept(s, c->err);
  free(text);
  free(vpath);
  return st;
}

sl_status sl__spec_parse(const char *json, size_t len, const char *path, sl__spec **out, sl__err *err) {
  *out = NULL;
  ctx c = {.path = path, .err = err};
  char what[1024];
  snprintf(what, sizeof what, "spec %s", path);
  cJSON *root = NULL;
  sl_status parsed = sl__json_parse(json, len, what, SL_STATUS_ARCH, &root, err);
  if (parsed != SL_STATUS_OK)
    return parsed;
  sl__spec *s = calloc(1, sizeof *s);
  sl_status st = SL_STATUS_OK;
  if (s == NULL) {
    cJSON_Delete(root);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  static const char *const keys[] = {"family",
                                     "architectures",
                                     "fall_back_to_pt",
                                     "allow_patterns_override",
                                     "vars",
                                     "layer_vars",
                                     "num_layers",
                                     "experts",
                                     "n_group",
                                     "tie_word_embeddings",
                                     "skip_layers",
                                     "skip_contains",
                                     "vision_prefixes",
                                     "skip_tensors",
                                     "fp8_scale_name",
                                     "rename",
                                     "params",
                                     "vision",
                                     "hf_to_vllm_prefixes",
                                     NULL};
  s->path = sl__strdup(path);
  if (s->path == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK && !cJSON_IsObject(root))
    st = spec_error(&c, "top level", "expected an object");
  if (st == SL_STATUS_OK)
    st = check_keys(&c, root, "top level", keys);
  if (st == SL_STATUS_OK)
    st = parse_identity(&c, root, s);
  if (st == SL_STATUS_OK)
    st = parse_exprs(&c, root, s);
  if (st == SL_STATUS_OK)
    st = parse_skips(&c, root, s);
  if (st == SL_STATUS_OK)
    st = sl__spec_parse_skip_tensors(root, path, s, err);
  if (st == SL_STATUS_OK)
    st = parse_fp8_scale_name(&c, root, s);
  if (st == SL_STATUS_OK)
    st = parse_rename(&c, root, s);
  if (st == SL_STATUS_OK)
    st = parse_params(&c, root, s);
  if (st == SL_STATUS_OK)
    st = parse_wrapper(&c, root, s);
  cJSON_Delete(root);
  if (st != SL_STATUS_OK) {
    sl__spec_free(s);
    return st;
  }
  *out = s;
  return SL_STATUS_OK;
}

sl_status sl__spec_load_file(const char *path, sl__spec **out, sl__err *err) {
  char *text = NULL;
  size_t len = 0;
  sl_status st = sl__read_file(path, SL_SPEC_MAX_BYTES, &text, &len, err);
  if (st != SL_STATUS_OK) {
    if (err != NULL && err->status == st && st != SL_STATUS_NOMEM)
      err->status = SL_STATUS_ARCH;
    return SL_STATUS_ARCH;
  }
  st = sl__spec_parse(text, len, path, out, err);
  free(text);
  return st;
}

static void free_named(sl__named_expr *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(v[i].name);
    sl__expr_free(v[i].expr);
  }
  free(v);
}

/* Lists are allocated with a NULL terminator and filled in order, so NULL marks the end. */
static void free_list(char **list) {
  if (list == NULL)
    return;
  for (size_t i = 0; list[i] != NULL; i++)
    free(list[i]);
  free(list);
}

void sl__spec_free(sl__spec *s) {
  if (s == NULL)
    return;
  free(s->path);
  free(s->family);
  free_list(s->architectures);
  free_list(s->allow_patterns_override);
  free_named(s->vars, s->n_vars);
  free_named(s->layer_vars, s->n_layer_vars);
  sl__expr_free(s->num_layers);
  sl__expr_free(s->experts);
  sl__expr_free(s->n_group);
  sl__expr_free(s->tie_word_embeddings);
  sl__expr_free(s->skip_layers_from);
  sl__expr_free(s->skip_layers_count);
  free(s->skip_layers_prefix);
  free_list(s->skip_contains);
  free(s->fp8_scale_name);
  free_list(s->vision_prefixes);
  sl__spec_skip_free(s);
  free(s->rename_format);
  free_list(s->rename_from);
  free_list(s->rename_to);
  for (size_t i = 0; i < s->n_params; i++) {
    sl__spec_param *p = &s->params[i];
    free(p->name);
    sl__expr_free(p->when);
    sl__expr_free(p->q_heads);
    sl__expr_free(p->kv_heads);
    sl__expr_free(p->head_dim);
    sl__expr_free(p->v_head_dim);
    sl__expr_free(p->vocab);
    sl__expr_free(p->experts);
    for (size_t j = 0; j < p->n_sources; j++) {
      free(p->sources[j].tensor);
      free(p->sources[j].part);
      for (size_t k = 0; k < p->sources[j].ndim; k++)
        sl__expr_free(p->sources[j].shape[k]);
      sl__expr_free(p->sources[j].rotary_heads);
      sl__expr_free(p->sources[j].vllm_rotary_heads);
    }
    free(p->sources);
  }
  free(s->params);
  sl__spec_drop_vision(s);
  free(s->vision_text);
  free_list(s->prefix_from);
  free_list(s->prefix_to);
  free(s);
}

void sl__spec_drop_vision(sl__spec *s) {
  sl__spec_free(s->vision);
  s->vision = NULL;
  sl__expr_free(s->vision_when);
  s->vision_when = NULL;
}
