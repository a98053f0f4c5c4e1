/*
 * model/spec_skip.c — the spec key "skip_tensors" (docs/SPECS.md): a list of
 * {"prefix": TEMPLATE, "when": EXPR}, each naming the checkpoint tensors under a layer's prefix
 * (the template holds {layer} once) that are skipped silently in the layers where `when` holds.
 * vLLM builds some layers without a module the checkpoint still ships (DeepSeek-V3.2's sparse
 * attention indexer of the layers that reuse another layer's top-k; the embedding of every
 * multi-token-prediction layer but the first), and drops those tensors; the spec says which.
 * Parsing only; model/model_skip.c evaluates the rules against a model.
 */
#include "model/spec.h"

#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest number of rules (the shipped specs use one or two). */
#define SL_SPEC_MAX_SKIP_TENSORS 64u

static sl_status skip_error(const char *path, size_t i, const char *what, sl__err *err) {
  return sl__err_set(err, SL_STATUS_ARCH, "spec %s: skip_tensors[%zu]: %s", path, i, what);
}

/* One rule: exactly the keys prefix (a template with one {layer}) and when (an expression). */
static sl_status parse_rule(const cJSON *item, const char *path, size_t i, sl__spec_skip *out, sl__err *err) {
  if (!cJSON_IsObject(item))
    return skip_error(path, i, "expected {\"prefix\": TEMPLATE, \"when\": EXPR}", err);
  const cJSON *key = NULL;
  cJSON_ArrayForEach(key, item) {
    if (key->string == NULL || key->string[0] == '_')
      continue;
    if (strcmp(key->string, "prefix") != 0 && strcmp(key->string, "when") != 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "unknown key '%s'", key->string);
      return skip_error(path, i, msg, err);
    }
  }
  const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(item, "prefix");
  const cJSON *when = cJSON_GetObjectItemCaseSensitive(item, "when");
  if (!cJSON_IsString(prefix))
    return skip_error(path, i, "'prefix' must be a string", err);
  const char *at = strstr(prefix->valuestring, "{layer}");
  if (at == NULL || strstr(at + 1, "{layer}") != NULL)
    return skip_error(path, i, "'prefix' must hold {layer} exactly once", err);
  if (!cJSON_IsString(when) && !cJSON_IsBool(when))
    return skip_error(path, i, "'when' must be an expression", err);
  out->prefix = sl__strdup(prefix->valuestring);
  if (out->prefix == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  char where[512];
  snprintf(where, sizeof where, "spec %s: skip_tensors[%zu].when", path, i);
  return sl__expr_compile(cJSON_IsString(when) ? when->valuestring : (cJSON_IsTrue(when) ? "true" : "false"),
                          where, &out->when, err);
}

sl_status sl__spec_parse_skip_tensors(const cJSON *root, const char *path, sl__spec *s, sl__err *err) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "skip_tensors");
  if (list == NULL)
    return SL_STATUS_OK;
  if (!cJSON_IsArray(list))
    return sl__err_set(err, SL_STATUS_ARCH, "spec %s: skip_tensors: expected an array of rules", path);
  size_t n = (size_t)cJSON_GetArraySize(list);
  if (n > SL_SPEC_MAX_SKIP_TENSORS)
    return sl__err_set(err, SL_STATUS_ARCH, "spec %s: skip_tensors: %zu rules, more than the limit of %u",
                       path, n, SL_SPEC_MAX_SKIP_TENSORS);
  s->skip_tensors = calloc(n + 1, sizeof *s->skip_tensors);
  if (s->skip_tensors == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    st = parse_rule(cJSON_GetArrayItem(list, (int)i), path, i, &s->skip_tensors[i], err);
    s->n_skip_tensors = i + 1; /* freed with what it holds, also on failure */
  }
  return st;
}

void sl__spec_skip_free(sl__spec *s) {
  for (size_t i = 0; i < s->n_skip_tensors; i++) {
    free(s->skip_tensors[i].prefix);
    sl__expr_free(s->skip_tensors[i].when);
  }
  free(s->skip_tensors);
  s->skip_tensors = NULL;
  s->n_skip_tensors = 0;
}
