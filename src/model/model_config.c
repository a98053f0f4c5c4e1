/*
 * model/model_config.c — config.json as the model builder reads it: parsed (bounded) from the
 * catalog, its architectures[0], and the expression environment in which a spec is evaluated
 * (model/model_build.h sl__model_env): "layer", per-layer vars and spec vars (memoized, each
 * evaluated through the others to a bounded depth), then config.json fields, dotted names walking
 * objects. Also which config.json fields an expression depends on, for messages.
 */
#include "model/model_build.h"

#include "base/json.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

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

/* ---- the expression environment ---- */

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

/* has_tensor: "#" + a tensor name, "{layer}" in it the current layer. */
static bool lookup_tensor(const sl__model_env *e, const char *name, sl__val *out, sl__err *err) {
  char full[600];
  size_t n = 0;
  for (const char *p = name; *p != '\0' && n + 24 < sizeof full;) {
    if (strncmp(p, "{layer}", 7) == 0) {
      if (!e->in_layer) {
        sl__err_set(err, SL_STATUS_ARCH, "spec %s: has_tensor('%s') uses {layer} outside a layer",
                    e->spec->path, name);
        return false;
      }
      n += (size_t)snprintf(full + n, sizeof full - n, "%lld", (long long)e->layer);
      p += 7;
    } else {
      full[n++] = *p++;
    }
  }
  full[n] = '\0';
  out->kind = SL_VAL_BOOL;
  out->i = e->cat != NULL && sl__catalog_find(e->cat, full) != SL_NONE;
  return true;
}

bool sl__model_lookup(void *ctx, const char *name, sl__val *out, sl__err *err) {
  sl__model_env *e = ctx;
  memset(out, 0, sizeof *out);
  if (name[0] == '#')
    return lookup_tensor(e, name + 1, out, err);
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
