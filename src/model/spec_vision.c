/*
 * model/spec_vision.c — the keys of a spec that describe a multimodal wrapper (docs/SPECS.md,
 * "Multimodal wrappers"; docs/spec/ARCHITECTURES.md §24):
 *
 *   "vision": NAME | {...}        the vision tower's spec: specs/vision/NAME.json (looked for in
 *                                 the including spec's folder first, then in the spec folders), or
 *                                 the same object inline. A vision spec is a spec of its own,
 *                                 parsed by sl__spec_parse: family, vars, layer_vars, num_layers
 *                                 (the tower's blocks), vision_prefixes (its checkpoint prefixes,
 *                                 added to the including spec's), "when" (whether config.json has
 *                                 a tower at all: a text-only export has none), "quantized"
 *                                 (false: vLLM builds the tower without the checkpoint's
 *                                 quant_config, so its linears are never quantized companions'
 *                                 business; default true) and params placed "layer" (one per
 *                                 block, {layer} its index) or "all"; every stage holds them.
 *   "hf_to_vllm_prefixes": [[A, B], ...]   vLLM's hf_to_vllm_mapper: a source tensor missing
 *                                 under its name is looked up with prefix A replaced by B (older
 *                                 checkpoints that already store vLLM's names; model/model_names.c).
 *
 * A vision spec read from a file is inlined into the spec text that rank 0 broadcasts
 * (sl__spec_inline_vision), so that the other ranks need no spec folder. With skip_vision the
 * tower is dropped (sl__spec_drop_vision) and its tensors are skipped by their prefixes.
 *
 * This file reads, checks and locates; model/spec.c parses the vision spec (a spec of its own,
 * through sl__spec_parse) between sl__spec_wrapper_keys and sl__spec_vision_accept, so that the
 * calls go one way.
 */
#include "model/spec.h"

#include "base/json.h"
#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Pairs of hf_to_vllm_prefixes a spec may list (vLLM's mappers have at most a handful). */
#define SL_SPEC_MAX_PREFIX_PAIRS 64u

static sl_status fail(sl__err *err, const sl__spec *s, const char *where, const char *what) {
  return sl__err_set(err, SL_STATUS_ARCH, "spec %s: %s: %s", s->path, where, what);
}

/* A vision spec's name: letters, digits, '_' and '-' (a file name, never a path). */
static bool valid_name(const char *n) {
  if (*n == '\0' || strlen(n) > 128)
    return false;
  for (const char *p = n; *p != '\0'; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
          *p == '-'))
      return false;
  return true;
}

/* dir/vision/name.json when it can be read, else NULL. */
static char *candidate(const char *dir, size_t dir_len, const char *name) {
  char *path = sl__asprintf("%.*s/vision/%s.json", (int)dir_len, dir, name);
  if (path != NULL && access(path, R_OK) != 0) {
    free(path);
    path = NULL;
  }
  return path;
}

/* The file of vision spec `name`: beside the including spec (its folder's vision/), then in each
 * spec folder's vision/. NULL when none; `searched` lists the folders tried. */
static char *find_file(const sl__spec *s, const char *name, sl__buf *searched) {
  const char *slash = strrchr(s->path, '/');
  char *found = slash != NULL ? candidate(s->path, (size_t)(slash - s->path), name) : NULL;
  if (slash != NULL)
    sl__buf_appendf(searched, "%.*s/vision", (int)(slash - s->path), s->path);
  char *list = found == NULL ? sl__spec_search_path() : NULL;
  for (char *p = list; p != NULL && found == NULL;) {
    char *colon = strchr(p, ':');
    size_t n = colon != NULL ? (size_t)(colon - p) : strlen(p);
    if (n > 0) {
      found = candidate(p, n, name);
      sl__buf_appendf(searched, "%s%.*s/vision", searched->len > 0 ? ", " : "", (int)n, p);
    }
    p = colon != NULL ? colon + 1 : NULL;
  }
  free(list);
  return found;
}

/* The keys a vision spec may have: what describes a tower (no architectures, experts, renames,
 * skipped layers or nested wrappers). */
static sl_status check_vision_keys(const cJSON *obj, const char *path, sl__err *err) {
  static const char *const keys[] = {"family", "vars", "layer_vars", "num_layers", "vision_prefixes",
                                     "params", "when", "quantized",  NULL};
  if (!cJSON_IsObject(obj))
    return sl__err_set(err, SL_STATUS_ARCH, "vision spec %s: expected an object", path);
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, obj) {
    if (item->string == NULL || item->string[0] == '_')
      continue;
    bool ok = false;
    for (const char *const *k = keys; *k != NULL; k++)
      ok = ok || strcmp(*k, item->string) == 0;
    if (!ok)
      return sl__err_set(err, SL_STATUS_ARCH,
                         "vision spec %s: unknown key '%s' (a vision spec has family, vars, layer_vars, "
                         "num_layers, vision_prefixes, when, quantized and params)",
                         path, item->string);
  }
  if (cJSON_GetObjectItemCaseSensitive(obj, "num_layers") == NULL)
    return sl__err_set(err, SL_STATUS_ARCH,
                       "vision spec %s: 'num_layers' (the tower's blocks, an expression over config.json) "
                       "is required",
                       path);
  const cJSON *vp = cJSON_GetObjectItemCaseSensitive(obj, "vision_prefixes");
  if (!cJSON_IsArray(vp) || cJSON_GetArraySize(vp) < 1)
    return sl__err_set(err, SL_STATUS_ARCH,
                       "vision spec %s: 'vision_prefixes' must list the tower's checkpoint prefixes "
                       "(skip_vision skips the tensors under them)",
                       path);
  return SL_STATUS_OK;
}

/* A vision spec object → the text sl__spec_parse reads (architectures empty, "when" and
 * "quantized" taken out); its "when" (default true) compiled into s->vision_when, its "quantized"
 * (default true) into s->vision_unquantized. */
static sl_status vision_text(const cJSON *obj, const char *path, char **text, sl__spec *s, sl__err *err) {
  sl_status st = check_vision_keys(obj, path, err);
  if (st != SL_STATUS_OK)
    return st;
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(obj, "when");
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(obj, "quantized");
  char where[1100];
  snprintf(where, sizeof where, "vision spec %s: when", path);
  if (w != NULL && !cJSON_IsString(w))
    return sl__err_set(err, SL_STATUS_ARCH, "%s: expected an expression (a string)", where);
  if (q != NULL && !cJSON_IsBool(q))
    return sl__err_set(err, SL_STATUS_ARCH, "vision spec %s: quantized: expected true or false", path);
  s->vision_unquantized = cJSON_IsFalse(q);
  st = sl__expr_compile(w != NULL ? w->valuestring : "true", where, &s->vision_when, err);
  if (st != SL_STATUS_OK)
    return st;
  cJSON *copy = cJSON_Duplicate(obj, true);
  char *printed = NULL;
  cJSON_DeleteItemFromObjectCaseSensitive(copy, "when");
  cJSON_DeleteItemFromObjectCaseSensitive(copy, "quantized");
  if (copy != NULL && cJSON_AddArrayToObject(copy, "architectures") != NULL)
    printed = cJSON_PrintUnformatted(copy);
  cJSON_Delete(copy);
  *text = printed != NULL ? sl__strdup(printed) : NULL;
  cJSON_free(printed);
  return *text != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
}

/* "vision": NAME → the file's vision spec as text to parse, its path (the file's text kept for
 * sl__spec_inline_vision). */
static sl_status load_vision_file(sl__spec *s, const char *name, char **text, char **vpath, sl__err *err) {
  if (!valid_name(name))
    return fail(err, s, "vision",
                "expected the name of a vision spec (letters, digits, '_' and '-': specs/vision/NAME.json) "
                "or the vision spec as an object");
  sl__buf searched;
  sl__buf_init(&searched, 0);
  *vpath = find_file(s, name, &searched);
  if (*vpath == NULL) {
    sl_status st =
        sl__err_set(err, SL_STATUS_ARCH, "spec %s: vision spec '%s' not found (looked for %s.json in %s)",
                    s->path, name, name, searched.len > 0 ? sl__buf_str(&searched) : "no folder");
    sl__buf_free(&searched);
    return st;
  }
  sl__buf_free(&searched);
  size_t len = 0;
  sl_status st = sl__read_file(*vpath, SL_SPEC_MAX_BYTES, &s->vision_text, &len, err);
  cJSON *root = NULL;
  if (st == SL_STATUS_OK)
    st = sl__json_parse(s->vision_text, len, *vpath, SL_STATUS_ARCH, &root, err);
  if (st == SL_STATUS_OK)
    st = vision_text(root, *vpath, text, s, err);
  cJSON_Delete(root);
  if (st != SL_STATUS_OK && st != SL_STATUS_NOMEM && err != NULL)
    err->status = SL_STATUS_ARCH;
  return st == SL_STATUS_OK || st == SL_STATUS_NOMEM ? st : SL_STATUS_ARCH;
}

/* The vision spec's prefixes added to the including spec's vision_prefixes. */
static sl_status merge_prefixes(sl__spec *s, sl__err *err) {
  const sl__spec *v = s->vision;
  char **list = realloc(s->vision_prefixes, (s->n_vision_prefixes + v->n_vision_prefixes + 1) * sizeof *list);
  if (list == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  s->vision_prefixes = list;
  for (size_t i = 0; i < v->n_vision_prefixes; i++) {
    list[s->n_vision_prefixes] = sl__strdup(v->vision_prefixes[i]);
    if (list[s->n_vision_prefixes] == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    list[++s->n_vision_prefixes] = NULL;
  }
  return SL_STATUS_OK;
}

/* "hf_to_vllm_prefixes": [[CHECKPOINT PREFIX, VLLM PREFIX], ...]. */
static sl_status parse_prefix_map(const cJSON *arr, sl__spec *s, sl__err *err) {
  if (!cJSON_IsArray(arr))
    return fail(err, s, "hf_to_vllm_prefixes", "expected an array of [CHECKPOINT PREFIX, VLLM PREFIX] pairs");
  size_t n = (size_t)cJSON_GetArraySize(arr);
  if (n > SL_SPEC_MAX_PREFIX_PAIRS)
    return fail(err, s, "hf_to_vllm_prefixes", "more than 64 pairs");
  s->prefix_from = calloc(n + 1, sizeof *s->prefix_from);
  s->prefix_to = calloc(n + 1, sizeof *s->prefix_to);
  if (s->prefix_from == NULL || s->prefix_to == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  const cJSON *pair = NULL;
  cJSON_ArrayForEach(pair, arr) {
    const cJSON *a = cJSON_GetArrayItem(pair, 0);
    const cJSON *b = cJSON_GetArrayItem(pair, 1);
    if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !cJSON_IsString(a) || !cJSON_IsString(b) ||
        a->valuestring[0] == '\0' || b->valuestring[0] == '\0')
      return fail(err, s, "hf_to_vllm_prefixes",
                  "each entry must be [CHECKPOINT PREFIX, VLLM PREFIX], two non-empty strings");
    s->prefix_from[s->n_prefix_map] = sl__strdup(a->valuestring);
    s->prefix_to[s->n_prefix_map] = sl__strdup(b->valuestring);
    if (s->prefix_from[s->n_prefix_map] == NULL || s->prefix_to[s->n_prefix_map] == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    s->n_prefix_map++;
  }
  return SL_STATUS_OK;
}

sl_status sl__spec_wrapper_keys(const cJSON *root, sl__spec *s, char **text, char **vpath, sl__err *err) {
  *text = NULL;
  *vpath = NULL;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "hf_to_vllm_prefixes");
  sl_status st = map != NULL ? parse_prefix_map(map, s, err) : SL_STATUS_OK;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "vision");
  if (st != SL_STATUS_OK || v == NULL)
    return st;
  if (cJSON_IsString(v))
    return load_vision_file(s, v->valuestring, text, vpath, err);
  if (!cJSON_IsObject(v))
    return fail(err, s, "vision", "expected the name of a vision spec (specs/vision/NAME.json) or an object");
  *vpath = sl__asprintf("%s (its vision spec)", s->path);
  return *vpath != NULL ? vision_text(v, *vpath, text, s, err)
                        : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
}

sl_status sl__spec_vision_accept(sl__spec *s, sl__err *err) {
  const sl__spec *v = s->vision;
  for (size_t i = 0; i < v->n_params; i++) {
    const sl__spec_param *p = &v->params[i];
    if (p->place != SL_PLACE_LAYER && p->place != SL_PLACE_ALL)
      return sl__err_set(err, SL_STATUS_ARCH,
                         "vision spec %s: params[%zu] (%s): a vision parameter is placed \"layer\" (one per "
                         "vision block) or \"all\" (once); every pipeline stage holds the tower",
                         v->path, i, p->name);
  }
  return merge_prefixes(s, err);
}

sl_status sl__spec_inline_vision(const char *json, size_t len, const sl__spec *s, char **out, size_t *out_len,
                                 sl__err *err) {
  *out = NULL;
  *out_len = 0;
  if (s->vision_text == NULL)
    return SL_STATUS_OK;
  cJSON *root = NULL;
  cJSON *vision = NULL;
  sl_status st = sl__json_parse(json, len, s->path, SL_STATUS_ARCH, &root, err);
  if (st == SL_STATUS_OK)
    st = sl__json_parse(s->vision_text, strlen(s->vision_text), s->path, SL_STATUS_ARCH, &vision, err);
  if (st == SL_STATUS_OK && !cJSON_ReplaceItemInObjectCaseSensitive(root, "vision", vision))
    st = sl__err_set(err, SL_STATUS_INTERNAL, "spec %s: no 'vision' key to inline", s->path);
  else if (st == SL_STATUS_OK)
    vision = NULL; /* owned by root now */
  char *text = st == SL_STATUS_OK ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  cJSON_Delete(vision);
  if (st == SL_STATUS_OK && text == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK) {
    *out = sl__strdup(text);
    *out_len = strlen(text);
    st = *out != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  cJSON_free(text);
  return st;
}
