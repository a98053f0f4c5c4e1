/*
 * s3/ini.c — AWS's shared credentials and config files (see s3/parse.h), read as botocore reads
 * them (Python's configparser): sections, "key = value" settings whose names are lower-cased,
 * full-line comments, and the indented sub-settings of a setting left empty ("s3 =" then
 * "  addressing_style = path").
 *
 * The file is checked (size, no NUL) and its lines counted before anything is allocated: one
 * entry per line at most, and one arena, a copy of the text cut into NUL-terminated pieces in place.
 */
#include "s3/parse.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* [a, b) without blanks at either end. */
static void trim(char **a, char **b) {
  while (*a < *b && blank(**a))
    (*a)++;
  while (*b > *a && blank((*b)[-1]))
    (*b)--;
}

static void lower(char *s) {
  for (; *s != '\0'; s++)
    if (*s >= 'A' && *s <= 'Z')
      *s = (char)(*s - 'A' + 'a');
}

void sl__s3_ini_free(sl__s3_ini *ini) {
  if (ini == NULL)
    return;
  free(ini->entries);
  free(ini->arena);
  memset(ini, 0, sizeof *ini);
}

typedef struct parser {
  sl__s3_ini *ini;
  const char *what;
  sl__err *err;
  const char *section;    /* the current section, or NULL before the first */
  sl__s3_ini_entry *open; /* the last setting, when its value is empty: sub-settings follow */
  bool in_value;          /* after a setting: indented lines continue it */
} parser;

static sl_status fail(parser *p, uint32_t line, const char *why) {
  return sl__err_set(p->err, SL_STATUS_CONFIG, "%s line %u: %s", p->what, line, why);
}

/* "name = value" or "name: value" in [a, b) (trimmed): its parts, cut in place. */
static sl_status setting(parser *p, uint32_t line, char *a, char *b, char **name, char **value) {
  char *eq = a;
  while (eq < b && *eq != '=' && *eq != ':')
    eq++;
  if (eq == b)
    return fail(p, line, "not a [section], a setting (key = value) or a comment");
  char *ka = a, *kb = eq, *va = eq + 1, *vb = b;
  trim(&ka, &kb);
  trim(&va, &vb);
  if (ka == kb)
    return fail(p, line, "a setting without a name");
  *kb = '\0';
  *vb = '\0';
  lower(ka);
  *name = ka;
  *value = va;
  return SL_STATUS_OK;
}

static sl_status one_line(parser *p, uint32_t line, char *a, char *b) {
  bool indented = a < b && blank(*a);
  char *ta = a, *tb = b;
  trim(&ta, &tb);
  if (ta == tb || *ta == '#' || *ta == ';')
    return SL_STATUS_OK;
  if (indented && p->in_value) {
    if (p->open == NULL)
      return SL_STATUS_OK; /* the continuation of a non-empty value: nothing here reads those */
    char *name = NULL, *value = NULL;
    sl_status st = setting(p, line, ta, tb, &name, &value);
    if (st != SL_STATUS_OK)
      return st;
    p->ini->entries[p->ini->n++] = (sl__s3_ini_entry){
        .section = p->section, .key = p->open->key, .sub = name, .value = value, .line = line};
    return SL_STATUS_OK;
  }
  if (*ta == '[') {
    if (tb[-1] != ']' || tb - ta < 2)
      return fail(p, line, "a section header without its closing ']'");
    char *sa = ta + 1, *sb = tb - 1;
    trim(&sa, &sb);
    *sb = '\0';
    p->section = sa;
    p->open = NULL;
    p->in_value = false;
    p->ini->entries[p->ini->n++] = (sl__s3_ini_entry){.section = sa, .line = line};
    return SL_STATUS_OK;
  }
  if (p->section == NULL)
    return fail(p, line, "a setting before any [section]");
  char *name = NULL, *value = NULL;
  sl_status st = setting(p, line, ta, tb, &name, &value);
  if (st != SL_STATUS_OK)
    return st;
  sl__s3_ini_entry *e = &p->ini->entries[p->ini->n++];
  *e = (sl__s3_ini_entry){.section = p->section, .key = name, .value = value, .line = line};
  p->in_value = true;
  p->open = *value == '\0' ? e : NULL;
  return SL_STATUS_OK;
}

sl_status sl__s3_ini_parse(const char *text, size_t len, const char *what, sl__s3_ini *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  if (len > SL_S3_INI_MAX_BYTES)
    return sl__err_set(err, SL_STATUS_CONFIG,
                       "%s: %zu bytes, more than the %u a credentials or config file "
                       "may have",
                       what, len, SL_S3_INI_MAX_BYTES);
  if (memchr(text, '\0', len) != NULL)
    return sl__err_set(err, SL_STATUS_CONFIG, "%s: a NUL byte (not a text file)", what);
  size_t lines = 1;
  for (size_t i = 0; i < len; i++)
    lines += text[i] == '\n';
  out->arena = malloc(len + 1);
  out->entries = calloc(lines, sizeof *out->entries);
  if (out->arena == NULL || out->entries == NULL) {
    sl__s3_ini_free(out);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
  }
  memcpy(out->arena, text, len);
  out->arena[len] = '\0';
  parser p = {.ini = out, .what = what, .err = err};
  char *a = out->arena;
  char *end = out->arena + len;
  sl_status st = SL_STATUS_OK;
  for (uint32_t line = 1; a <= end && st == SL_STATUS_OK; line++) {
    char *nl = memchr(a, '\n', (size_t)(end - a));
    char *b = nl != NULL ? nl : end;
    *b = '\0';
    st = one_line(&p, line, a, b);
    a = b + 1;
  }
  if (st != SL_STATUS_OK)
    sl__s3_ini_free(out);
  return st;
}

const char *sl__s3_ini_get(const sl__s3_ini *ini, const char *section, const char *key, const char *sub) {
  const char *found = NULL;
  for (size_t i = 0; i < ini->n; i++) {
    const sl__s3_ini_entry *e = &ini->entries[i];
    if (e->key == NULL || strcmp(e->section, section) != 0 || strcmp(e->key, key) != 0)
      continue;
    if ((sub == NULL) != (e->sub == NULL) || (sub != NULL && strcmp(e->sub, sub) != 0))
      continue;
    found = e->value;
  }
  return found;
}

bool sl__s3_ini_has_section(const sl__s3_ini *ini, const char *section) {
  for (size_t i = 0; i < ini->n; i++)
    if (ini->entries[i].key == NULL && strcmp(ini->entries[i].section, section) == 0)
      return true;
  return false;
}
