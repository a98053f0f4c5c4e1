/*
 * model/model.c — instantiation of an architecture spec (see model/model.h): the entry points,
 * the expression environment in which the spec is evaluated against config.json (spec vars,
 * per-layer vars, config.json fields), and the model-wide values (layers, experts, groups, tied
 * embeddings, fp8 quantization, default dtype). The parameters are built in model/model_param.c,
 * the expected set and tensor fates in model/model_expect.c (see model/model_build.h).
 */
#include "model/model.h"

#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "model/model_build.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Expression environment
 * ------------------------------------------------------------------------------------------- */

static bool eval_named(sl__model_env *e, const sl__named_expr *ne, sl__val *memo, uint8_t *state,
                       sl__val *out, sl__err *err) {
  if (*state == 2) {
    *out = *memo;
    return true;
  }
  if (*state == 1) {
    sl__err_set(err, SL_STATUS_ARCH, "spec %s: variable '%s' depends on itself", e->spec->path, ne->name);
    return false;
  }
  if (e->depth >= SL_SPEC_MAX_VAR_DEPTH) {
    char q[SL_QUOTE_BUF];
    sl__err_set(err, SL_STATUS_ARCH,
                "spec %s: variable '%s' is defined through more than %d levels of other variables",
                e->spec->path, sl__quote(ne->name, q, sizeof q), SL_SPEC_MAX_VAR_DEPTH);
    return false;
  }
  *state = 1;
  /* Spec vars are layer-independent (they are memoized once): evaluate them outside any layer. */
  bool is_var = ne >= e->spec->vars && ne < e->spec->vars + e->spec->n_vars;
  bool saved = e->in_layer;
  if (is_var)
    e->in_layer = false;
  e->depth++;
  sl_status st = sl__expr_eval(ne->expr, sl__model_lookup, e, memo, err);
  e->depth--;
  e->in_layer = saved;
  *state = st == SL_STATUS_OK ? 2 : 0;
  if (st != SL_STATUS_OK)
    return false;
  *out = *memo;
  return true;
}

bool sl__model_lookup(void *ctx, const char *name, sl__val *out, sl__err *err) {
  sl__model_env *e = ctx;
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
    /* Range first: converting a double outside int64 (or a NaN) to an integer is undefined. */
    if (!(d <= 9.0e18 && d >= -9.0e18) || d != (double)(int64_t)d) {
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

void sl__model_env_enter_layer(sl__model_env *e, int64_t layer) {
  e->in_layer = layer >= 0;
  e->layer = layer;
  memset(e->lvar_state, 0, e->spec->n_layer_vars + 1);
}

/* Appends the config.json fields an expression depends on (through vars) to buf. */
void sl__model_config_fields(const sl__model_env *e, const sl__expr *x, char *buf, size_t cap, int depth) {
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
      sl__model_config_fields(e, sub, buf, cap, depth + 1);
    } else if (strcmp(save, "layer") != 0 && strstr(buf, save) == NULL) {
      size_t len = strlen(buf);
      snprintf(buf + len, cap > len ? cap - len : 0, "%s%s", len > 0 ? ", " : "", save);
    }
    save = comma != NULL ? comma + 2 : NULL;
  }
}

void sl__model_free(sl__model *m) {
  if (m == NULL)
    return;
  free(m->family);
  free(m->architecture);
  for (size_t i = 0; i < m->n_params; i++)
    sl__model_mparam_free(&m->params[i]);
  free(m->params);
  for (size_t i = 0; i < m->n_units; i++)
    free(m->units[i]);
  free(m->units);
  free(m->unit_param);
  free(m->tensor_fate);
  memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------------------------- */

sl_status sl__model_parse_config(const sl__catalog *cat, cJSON **out, sl__err *err) {
  *out = NULL;
  if (cat->config_json == NULL)
    return sl__err_set(err, SL_STATUS_MODEL_CONFIG, "%s has no config.json", cat->folder);
  /* Bounded (base/json.h): a 50 MB config.json of one huge array must not cost gigabytes on every
   * rank. */
  char what[1024];
  snprintf(what, sizeof what, "%s/config.json", cat->folder);
  cJSON *cfg = NULL;
  sl_status st = sl__json_parse(cat->config_json, cat->config_len, what, SL_STATUS_MODEL_CONFIG, &cfg, err);
  if (st != SL_STATUS_OK)
    return st;
  if (!cJSON_IsObject(cfg)) {
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
    return sl__err_set(err, SL_STATUS_MODEL_CONFIG,
                       "config.json has no \"architectures\" list of strings (set arch to a spec file to "
                       "choose one: --arch FILE.json)");
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

static sl_status read_quantization(sl__model_builder *b) {
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(b->e.config, "quantization_config");
  if (q == NULL || cJSON_IsNull(q))
    return SL_STATUS_OK;
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
  const char *mname = cJSON_IsString(method) ? method->valuestring : "(none)";
  /* MXFP4 (GPT-OSS): blocks and scales are ordinary checkpoint tensors that the spec lists and
   * slices with their weight; nothing is derived from the config. */
  if (strcmp(mname, "mxfp4") == 0)
    return SL_STATUS_OK;
  if (strcmp(mname, "compressed-tensors") == 0)
    return sl__model_read_compressed(b, q);
  if (strcmp(mname, "gptq") == 0 || strcmp(mname, "awq") == 0)
    return sl__model_read_int4(b, q, mname);
  if (strcmp(mname, "fp8") != 0)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "unsupported quantization method '%s' (supported: fp8 with "
                       "weight_block_size, mxfp4, compressed-tensors fp8, gptq and awq int4)",
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
  sl__model_builder b;
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
  sl__model_env_enter_layer(&b.e, -1);
  uint64_t layers = 0;
  if (st == SL_STATUS_OK)
    st = read_quantization(&b);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->num_layers, sl__model_lookup, &b.e, &layers, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->experts, sl__model_lookup, &b.e, &m->experts, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->n_group, sl__model_lookup, &b.e, &m->n_group, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_bool(spec->tie_word_embeddings, sl__model_lookup, &b.e, &m->tied, err);
  if (st == SL_STATUS_OK && (layers < 1 || layers > 1000000))
    st = sl__err_set(err, SL_STATUS_MODEL_CONFIG, "config.json: %llu layers is out of range (1 .. 1000000)",
                     (unsigned long long)layers);
  m->n_layers = (uint32_t)layers;
  static const sl__place order[] = {SL_PLACE_EMBED, SL_PLACE_LAYER, SL_PLACE_FINAL, SL_PLACE_HEAD};
  for (size_t o = 0; o < 4 && st == SL_STATUS_OK; o++) {
    uint32_t n_iter = order[o] == SL_PLACE_LAYER ? m->n_layers : 1;
    for (uint32_t layer = 0; layer < n_iter && st == SL_STATUS_OK; layer++) {
      sl__model_env_enter_layer(&b.e, order[o] == SL_PLACE_LAYER ? (int64_t)layer : -1);
      for (size_t i = 0; i < spec->n_params && st == SL_STATUS_OK; i++) {
        const sl__spec_param *sp = &spec->params[i];
        if (sp->place != order[o])
          continue;
        if (sp->place == SL_PLACE_HEAD && m->tied)
          st = sl__model_build_alias(&b, sp);
        else
          st = sl__model_build_param(&b, sp, order[o] == SL_PLACE_LAYER ? (int64_t)layer : -1);
      }
    }
  }
  if (st == SL_STATUS_OK && layout == SL_LAYOUT_CHECKPOINT)
    st = sl__model_to_checkpoint_layout(&b);
  m->params = b.params.data;
  m->n_params = b.params.len;
  if (st == SL_STATUS_OK)
    st = sl__model_build_units(&b);
  if (st == SL_STATUS_OK)
    st = sl__model_build_fates(&b);
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
