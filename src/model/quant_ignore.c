/*
 * model/quant_ignore.c — the modules a quantization_config leaves unquantized, matched as vLLM
 * matches them (docs/spec/ARCHITECTURES.md §18):
 *   compressed-tensors ("ignore"): "re:PATTERN" is a Python regular expression that must match at
 *     the start of the module name (vLLM compressed_tensors/utils.py, _is_equal_or_regex_match:
 *     re.match); any other entry must equal the name;
 *   ModelOpt ("exclude_modules", or "ignore" in config.json): the name itself, or a shell wildcard
 *     matching the whole name (vLLM modelopt.py, is_layer_excluded).
 * Python's syntax is translated to POSIX extended syntax for regcomp(3): (?:...) groups, \d \w \s
 * and their negations, escaped punctuation and lazy quantifiers (a lazy quantifier does not change
 * whether a match exists). Anything else Python-only (look-arounds, named groups, inline flags,
 * back-references, \b, \A, \Z), counted repetitions and patterns whose compiled form could grow
 * without bound (quantifiers on quantifiers, more than 4 repeated groups, groups 16 deep) are an
 * error naming the pattern, never a silent mismatch.
 */
#include "model/model_packed.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* A class escape (\d \w \s and capitals) as the inside of a bracket expression, or NULL. */
static const char *class_escape(char c, bool *negate) {
  *negate = c == 'D' || c == 'W' || c == 'S';
  switch (c) {
  case 'd':
  case 'D':
    return "0-9";
  case 'w':
  case 'W':
    return "A-Za-z0-9_";
  case 's':
  case 'S':
    return "[:space:]";
  default:
    return NULL;
  }
}

static sl_status unsupported(const char *pattern, const char *what, sl__err *err) {
  return sl__err_set(err, SL_STATUS_QUANTIZATION,
                     "ignore pattern 're:%s' uses %s, which has no POSIX equivalent (supported: groups, "
                     "alternation, classes, \\d \\w \\s, escaped punctuation, quantifiers)",
                     pattern, what);
}

/* One escape "\c" outside brackets into b. */
static sl_status escape_outside(sl__buf *b, const char *pattern, char c, sl__err *err) {
  bool negate = false;
  const char *cls = class_escape(c, &negate);
  if (cls != NULL) {
    sl__buf_appendf(b, "[%s%s]", negate ? "^" : "", cls);
    return SL_STATUS_OK;
  }
  if (c == '\0')
    return unsupported(pattern, "a trailing backslash", err);
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
    return unsupported(pattern, "a letter or digit escape (\\b, \\A, \\Z, a back-reference)", err);
  sl__buf_putc(b, '\\');
  sl__buf_putc(b, c);
  return SL_STATUS_OK;
}

/* A bracket expression starting at p[0] == '[' into b; *used: characters consumed. */
static sl_status bracket(sl__buf *b, const char *pattern, const char *p, size_t *used, sl__err *err) {
  size_t i = 1;
  sl__buf_putc(b, '[');
  if (p[i] == '^')
    sl__buf_putc(b, p[i++]);
  if (p[i] == ']')
    sl__buf_putc(b, p[i++]);
  for (; p[i] != '\0' && p[i] != ']'; i++) {
    if (p[i] == '[' && (p[i + 1] == ':' || p[i + 1] == '.' || p[i + 1] == '='))
      return unsupported(pattern, "a POSIX class inside brackets", err);
    if (p[i] != '\\') {
      sl__buf_putc(b, p[i]);
      continue;
    }
    char c = p[++i];
    bool negate = false;
    const char *cls = class_escape(c, &negate);
    if (cls != NULL && !negate)
      sl__buf_appendf(b, "%s", cls);
    else if (c == ']' || c == '^' || c == '-' || c == '\\' || c == '\0' || cls != NULL)
      return unsupported(pattern, "an escape inside brackets other than \\d \\w \\s and punctuation", err);
    else
      sl__buf_putc(b, c);
  }
  if (p[i] != ']')
    return unsupported(pattern, "an unterminated bracket", err);
  sl__buf_putc(b, ']');
  *used = i + 1;
  return SL_STATUS_OK;
}

/* Limits that keep regcomp's work bounded (glibc copies a group for each "+" or count applied to
 * it, so nested ones grow exponentially); real ignore patterns use a handful of groups. */
#define SL_IGNORE_MAX_DEPTH 16
#define SL_IGNORE_MAX_GROUP_REPEATS 4

/* One translation: the output so far and what the next quantifier may apply to. */
typedef struct xlate {
  sl__buf b;
  const char *pattern;
  int depth;
  int group_repeats;
  bool after_quant; /* the last token was a quantifier: another one is Python's "multiple repeat" */
  bool after_group; /* the last token closed a group */
} xlate;

static sl_status quantifier(xlate *x, const char **p, sl__err *err) {
  if (x->after_quant)
    return unsupported(x->pattern, "a quantifier after a quantifier (Python's \"multiple repeat\")", err);
  if (x->after_group && (**p == '+' || **p == '*') && ++x->group_repeats > SL_IGNORE_MAX_GROUP_REPEATS)
    return unsupported(x->pattern, "more than 4 repeated groups", err);
  sl__buf_putc(&x->b, **p);
  (*p)++;
  if (**p == '?') /* lazy: the same matches exist */
    (*p)++;
  x->after_quant = true;
  x->after_group = false;
  return SL_STATUS_OK;
}

static sl_status token(xlate *x, const char **p, sl__err *err) {
  const char *c = *p;
  bool group_end = false;
  sl_status st = SL_STATUS_OK;
  if (c[0] == '*' || c[0] == '+' || c[0] == '?')
    return quantifier(x, p, err);
  if (c[0] == '{' || c[0] == '}') {
    st = unsupported(x->pattern, "a counted repetition {m,n}", err);
  } else if (c[0] == '(') {
    if (c[1] == '?' && c[2] != ':')
      return unsupported(x->pattern, "a (?...) construct other than (?:...)", err);
    if (++x->depth > SL_IGNORE_MAX_DEPTH)
      return unsupported(x->pattern, "groups nested deeper than 16", err);
    sl__buf_putc(&x->b, '(');
    *p += c[1] == '?' ? 3 : 1;
  } else if (c[0] == ')') {
    x->depth--;
    group_end = true;
    sl__buf_putc(&x->b, ')');
    (*p)++;
  } else if (c[0] == '\\') {
    st = escape_outside(&x->b, x->pattern, c[1], err);
    *p += c[1] != '\0' ? 2 : 1;
  } else if (c[0] == '[') {
    size_t used = 0;
    st = bracket(&x->b, x->pattern, c, &used, err);
    *p += used;
  } else {
    sl__buf_putc(&x->b, c[0]);
    (*p)++;
  }
  x->after_quant = false;
  x->after_group = group_end;
  return st;
}

char *sl__ignore_translate(const char *pattern, sl__err *err) {
  xlate x = {.pattern = pattern};
  sl__buf_init(&x.b, 0);
  sl__buf_appendf(&x.b, "^(");
  sl_status st = SL_STATUS_OK;
  for (const char *p = pattern; st == SL_STATUS_OK && *p != '\0';)
    st = token(&x, &p, err);
  sl__buf_putc(&x.b, ')');
  if (st != SL_STATUS_OK || x.b.failed) {
    if (st == SL_STATUS_OK)
      sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    sl__buf_free(&x.b);
    return NULL;
  }
  return sl__buf_take(&x.b);
}

void sl__ignore_free(sl__ignore *ig) {
  for (size_t i = 0; i < ig->n; i++) {
    if (ig->is_re != NULL && ig->is_re[i])
      regfree(&ig->re[i]);
    if (ig->text != NULL)
      free(ig->text[i]);
  }
  free(ig->text);
  free(ig->re);
  free(ig->is_re);
  memset(ig, 0, sizeof *ig);
}

/* Entry i (a string of at most SL_IGNORE_MAX_PATTERN bytes), compiled when it is a regex. */
static sl_status read_entry(sl__ignore *ig, size_t i, const cJSON *item, bool modelopt, sl__err *err) {
  if (!cJSON_IsString(item) || strlen(item->valuestring) > SL_IGNORE_MAX_PATTERN)
    return sl__err_set(err, SL_STATUS_QUANTIZATION, "%s[%zu] must be a string of at most %d bytes", ig->key,
                       i, SL_IGNORE_MAX_PATTERN);
  ig->text[i] = sl__strdup(item->valuestring);
  if (ig->text[i] == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  ig->n = i + 1;
  if (modelopt || strncmp(ig->text[i], "re:", 3) != 0)
    return SL_STATUS_OK;
  char *ere = sl__ignore_translate(ig->text[i] + 3, err);
  if (ere == NULL)
    return err->status;
  int rc = regcomp(&ig->re[i], ere, REG_EXTENDED | REG_NOSUB);
  free(ere);
  if (rc != 0) {
    char why[256];
    regerror(rc, &ig->re[i], why, sizeof why);
    return sl__err_set(err, SL_STATUS_QUANTIZATION,
                       "%s[%zu]: pattern '%s' is not a valid regular expression: %s", ig->key, i, ig->text[i],
                       why);
  }
  ig->is_re[i] = true;
  return SL_STATUS_OK;
}

sl_status sl__ignore_read(sl__ignore *ig, const cJSON *list, bool modelopt, const char *key, sl__err *err) {
  memset(ig, 0, sizeof *ig);
  ig->wildcards = modelopt;
  ig->key = key;
  if (list == NULL || cJSON_IsNull(list))
    return SL_STATUS_OK;
  int n = cJSON_GetArraySize(list);
  if (!cJSON_IsArray(list) || n < 0 || n > SL_IGNORE_MAX_ENTRIES)
    return sl__err_set(err, SL_STATUS_QUANTIZATION, "%s must be a list of at most %d module names", key,
                       SL_IGNORE_MAX_ENTRIES);
  ig->text = calloc((size_t)n + 1, sizeof *ig->text);
  ig->re = calloc((size_t)n + 1, sizeof *ig->re);
  ig->is_re = calloc((size_t)n + 1, sizeof *ig->is_re);
  if (ig->text == NULL || ig->re == NULL || ig->is_re == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  size_t i = 0;
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, list) {
    sl_status st = read_entry(ig, i++, item, modelopt, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

long sl__ignore_match(const sl__ignore *ig, const char *name, bool exact, bool patterns) {
  for (size_t i = 0; i < ig->n; i++) {
    const char *t = ig->text[i];
    bool hit = exact && strcmp(t, name) == 0;
    if (!hit && patterns && ig->is_re[i])
      hit = regexec(&ig->re[i], name, 0, NULL, 0) == 0;
    else if (!hit && patterns && ig->wildcards)
      hit = fnmatch(t, name, 0) == 0;
    if (hit)
      return (long)i;
  }
  return -1;
}
