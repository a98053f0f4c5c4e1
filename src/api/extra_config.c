/*
 * api/extra_config.c — parses and validates `--extra-config JSON` (docs/spec/FILES.md §6) into its
 * members; api/config.c sets each as the configuration key it names.
 *
 * cJSON parses the text; what cJSON does not keep is recovered from the text itself:
 *   - repeated keys (cJSON keeps both members): found by walking the members with a map;
 *   - how a number was written (cJSON keeps only a double, and accepts "08" or "+8"): a small
 *     scanner walks the top-level members of the already-validated text in member order and
 *     records each value's token, so num_threads can be required to be a plain integer literal.
 * Validation runs in the order of the spec and stops at the first failure.
 */
#include "api/extra_config.h"
#include "base/hashmap.h"
#include "base/json.h"
#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SL_TOKEN_SHOWN_MAX 64 /* bytes of an offending value quoted in a message */

static const char *const k_allowed_keys[] = {"enable_multithread_load", "enable_weights_track",
                                             "num_threads"};
#define SL_ALLOWED_LIST "enable_multithread_load, enable_weights_track, num_threads"

/* The source text of one member's value. */
typedef struct token_span {
  const char *p;
  size_t n;
} token_span;

/* ---- scanner over text that cJSON has already accepted ---- */

static const char *skip_ws(const char *p) {
  while (*p != '\0' && (unsigned char)*p <= 32)
    p++;
  return p;
}

/* p at '"': returns the byte after the closing quote (or the end of the text). */
static const char *skip_string(const char *p) {
  p++;
  while (*p != '\0' && *p != '"') {
    if (*p == '\\' && p[1] != '\0')
      p += 2;
    else
      p++;
  }
  return *p == '"' ? p + 1 : p;
}

static const char *skip_value(const char *p) {
  if (*p == '"')
    return skip_string(p);
  if (*p == '{' || *p == '[') {
    int depth = 0;
    while (*p != '\0') {
      if (*p == '"') {
        p = skip_string(p);
        continue;
      }
      if (*p == '{' || *p == '[')
        depth++;
      if (*p == '}' || *p == ']')
        depth--;
      p++;
      if (depth == 0)
        break;
    }
    return p;
  }
  while (*p != '\0' && (unsigned char)*p > 32 && *p != ',' && *p != '}' && *p != ']')
    p++;
  return p;
}

/* Records the value token of each of the n top-level members, in order. Spans left empty when
 * the text does not have the expected shape (then num_threads fails validation). */
static void scan_member_values(const char *text, token_span *spans, size_t n) {
  const char *p = text;
  if ((unsigned char)p[0] == 0xEF && (unsigned char)p[1] == 0xBB && (unsigned char)p[2] == 0xBF)
    p += 3; /* cJSON skips a UTF-8 byte order mark */
  p = skip_ws(p);
  if (*p != '{')
    return;
  p++;
  for (size_t i = 0; i < n; i++) {
    p = skip_ws(p);
    if (*p != '"')
      return;
    p = skip_ws(skip_string(p));
    if (*p != ':')
      return;
    p = skip_ws(p + 1);
    const char *start = p;
    p = skip_value(p);
    spans[i].p = start;
    spans[i].n = (size_t)(p - start);
    p = skip_ws(p);
    if (*p == ',')
      p++;
  }
}

/* ---- validation steps ---- */

static bool is_allowed_key(const char *key) {
  for (size_t i = 0; i < sizeof k_allowed_keys / sizeof k_allowed_keys[0]; i++) {
    if (strcmp(key, k_allowed_keys[i]) == 0)
      return true;
  }
  return false;
}

static sl_status check_duplicates(const cJSON *root, sl__err *err) {
  sl__hashmap seen;
  sl__hashmap_init(&seen, SL_HASHMAP_BORROW);
  sl_status st = SL_STATUS_OK;
  for (const cJSON *c = root->child; c != NULL; c = c->next) {
    bool oom = false;
    if (sl__hashmap_put(&seen, c->string, strlen(c->string), 0, NULL, &oom))
      continue;
    if (oom)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the extra config");
    else
      st = sl__err_set(err, SL_STATUS_CONFIG, "duplicate key '%s' in extra config", c->string);
    break;
  }
  sl__hashmap_free(&seen);
  return st;
}

static int compare_strings(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static sl_status check_unknown_keys(const cJSON *root, size_t n_members, const char *format, sl__err *err) {
  const char **unknown = calloc(n_members > 0 ? n_members : 1, sizeof *unknown);
  if (unknown == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the extra config");
  size_t n = 0;
  for (const cJSON *c = root->child; c != NULL; c = c->next) {
    if (!is_allowed_key(c->string))
      unknown[n++] = c->string;
  }
  sl_status st = SL_STATUS_OK;
  if (n > 0) {
    qsort(unknown, n, sizeof *unknown, compare_strings);
    sl__buf list;
    sl__buf_init(&list, 0);
    for (size_t i = 0; i < n; i++)
      sl__buf_appendf(&list, "%s%s", i > 0 ? ", " : "", unknown[i]);
    if (list.failed)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the extra config");
    else
      st = sl__err_set(err, SL_STATUS_CONFIG,
                       "unexpected extra config keys for load format '%s': %s (allowed: " SL_ALLOWED_LIST ")",
                       format, sl__buf_str(&list));
    sl__buf_free(&list);
  }
  free(unknown);
  return st;
}

/* A positive decimal integer literal: no sign, no leading zero, no fraction, no exponent. */
static bool parse_thread_count(token_span t, uint32_t *out) {
  if (t.n == 0 || t.n > 10 || t.p[0] < '1' || t.p[0] > '9')
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < t.n; i++) {
    if (t.p[i] < '0' || t.p[i] > '9')
      return false;
    v = v * 10 + (uint64_t)(t.p[i] - '0');
  }
  if (v > SL_THREADS_MAX)
    return false;
  *out = (uint32_t)v;
  return true;
}

static int shown_length(token_span t) {
  return (int)(t.n < SL_TOKEN_SHOWN_MAX ? t.n : SL_TOKEN_SHOWN_MAX);
}

/* Step 3: the type of each known member, in document order; each valid one becomes a member of
 * out under its table spelling (a static string: the JSON's own may have been written with an
 * escape). */
static sl_status check_types(const cJSON *root, const token_span *spans, sl__extra_members *out,
                             sl__err *err) {
  size_t i = 0;
  for (const cJSON *c = root->child; c != NULL; c = c->next, i++) {
    const char *key = c->string;
    token_span t = spans[i];
    size_t k = 0;
    while (strcmp(key, k_allowed_keys[k]) != 0) /* known: check_unknown_keys ran first */
      k++;
    if (out->n >= sizeof out->member / sizeof out->member[0]) /* no duplicate: at most one each */
      return sl__err_set(err, SL_STATUS_INTERNAL, "extra config: more members than keys");
    char *value = out->member[out->n].value;
    size_t cap = sizeof out->member[out->n].value;
    if (strcmp(key, "num_threads") == 0) {
      uint32_t v = 0;
      if (!cJSON_IsNumber(c) || !parse_thread_count(t, &v))
        return sl__err_set(err, SL_STATUS_CONFIG,
                           "extra config key 'num_threads' must be an integer from 1 to %u, written without "
                           "fraction or exponent (got %.*s)",
                           SL_THREADS_MAX, shown_length(t), t.p != NULL ? t.p : "");
      snprintf(value, cap, "%u", v);
    } else if (cJSON_IsBool(c)) {
      snprintf(value, cap, "%s", cJSON_IsTrue(c) ? "true" : "false");
    } else {
      return sl__err_set(err, SL_STATUS_CONFIG, "extra config key '%s' must be true or false (got %.*s)", key,
                         shown_length(t), t.p != NULL ? t.p : "");
    }
    out->member[out->n++].key = k_allowed_keys[k];
  }
  return SL_STATUS_OK;
}

sl_status sl__extra_config_parse(const char *json, const char *load_format_name, sl__extra_members *out,
                                 sl__err *err) {
  const char *format = load_format_name != NULL ? load_format_name : "auto";
  const char *text = json != NULL ? json : "{}";
  memset(out, 0, sizeof *out);

  /* base/json.h: its limits before cJSON allocates anything (the text comes from the user). */
  cJSON *root = NULL;
  sl_status st = sl__json_parse_whole(text, strlen(text), "extra config", SL_STATUS_CONFIG, &root, err);
  if (st != SL_STATUS_OK)
    return st;
  token_span *spans = NULL;
  size_t n = 0;
  if (!cJSON_IsObject(root)) {
    st = sl__err_set(err, SL_STATUS_CONFIG, "extra config must be a JSON object");
    goto done;
  }
  for (const cJSON *c = root->child; c != NULL; c = c->next)
    n++;
  st = check_duplicates(root, err);
  if (st != SL_STATUS_OK)
    goto done;
  st = check_unknown_keys(root, n, format, err);
  if (st != SL_STATUS_OK)
    goto done;
  spans = calloc(n > 0 ? n : 1, sizeof *spans);
  if (spans == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the extra config");
    goto done;
  }
  scan_member_values(text, spans, n);
  st = check_types(root, spans, out, err);
done:
  if (st != SL_STATUS_OK)
    out->n = 0;
  free(spans);
  cJSON_Delete(root);
  return st;
}
