/*
 * model/spec_find.c — the search for the spec of an architecture (model/spec.h: sl__spec_find):
 * the spec folders in order ($SHARDLOAD_SPECS, then the bundled specs found relative to the
 * library file: model/spec_dirs.c), each folder's *.json sorted, the first spec listing the
 * architecture.
 */
#include "model/spec.h"

#include "base/util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Tries every *.json of dir (sorted); returns OK and *out on the first spec naming arch. Appends
 * the architectures seen to `known`. Invalid spec files are skipped with their error kept in
 * first_err (reported if nothing matches). */
static sl_status search_dir(const char *dir, const char *arch, sl__spec **out, sl__buf *known,
                            sl__err *first_err) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return SL_STATUS_NOT_FOUND;
  sl__vec names;
  sl__vec_init(&names, sizeof(char *));
  struct dirent *e = NULL;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || !sl__str_ends_with(e->d_name, ".json"))
      continue;
    char **slot = sl__vec_push(&names);
    if (slot != NULL)
      *slot = sl__strdup(e->d_name);
  }
  closedir(d);
  qsort(names.data, names.len, sizeof(char *), cmp_str);
  sl_status found = SL_STATUS_NOT_FOUND;
  for (size_t i = 0; i < names.len; i++) {
    char *name = SL_VEC_AT(&names, char *, i);
    if (name == NULL || found == SL_STATUS_OK)
      continue;
    char *path = sl__path_join(dir, name);
    sl__spec *s = NULL;
    sl__err err;
    sl__err_clear(&err);
    if (path != NULL && sl__spec_load_file(path, &s, &err) == SL_STATUS_OK) {
      for (size_t a = 0; a < s->n_arch; a++) {
        if (strcmp(s->architectures[a], arch) == 0)
          found = SL_STATUS_OK;
        if (strstr(sl__buf_str(known), s->architectures[a]) == NULL)
          sl__buf_appendf(known, "%s%s", known->len > 0 ? ", " : "", s->architectures[a]);
      }
      if (found == SL_STATUS_OK)
        *out = s;
      else
        sl__spec_free(s);
    } else {
      sl__err_copy(first_err, &err);
    }
    free(path);
  }
  for (size_t i = 0; i < names.len; i++)
    free(SL_VEC_AT(&names, char *, i));
  sl__vec_free(&names);
  return found;
}

sl_status sl__spec_find(const char *architecture, sl__spec **out, sl__err *err) {
  *out = NULL;
  sl__buf known;
  sl__buf_init(&known, 0);
  sl__err first_err;
  sl__err_clear(&first_err);
  char *list = sl__spec_search_path(); /* model/spec_dirs.c */
  sl__buf searched;                    /* the folders tried, for the message when no spec is found at all */
  sl__buf_init(&searched, 0);
  sl_status st = SL_STATUS_NOT_FOUND;
  char *p = list;
  while (p != NULL && st != SL_STATUS_OK) {
    char *colon = strchr(p, ':');
    if (colon != NULL)
      *colon = '\0';
    if (*p != '\0') {
      st = search_dir(p, architecture, out, &known, &first_err);
      sl__buf_appendf(&searched, "%s%s", searched.len > 0 ? ", " : "", p);
    }
    p = colon != NULL ? colon + 1 : NULL;
  }
  free(list);
  if (st == SL_STATUS_OK) {
    sl__buf_free(&known);
    sl__buf_free(&searched);
    return SL_STATUS_OK;
  }
  /* No spec at all: say where the bundled ones were looked for (a package missing its specs). */
  char known_text[2048];
  if (known.len > 0)
    snprintf(known_text, sizeof known_text, "%s", sl__buf_str(&known));
  else
    snprintf(known_text, sizeof known_text, "none found; searched %s",
             searched.len > 0 ? sl__buf_str(&searched) : "no folder");
  st =
      sl__err_set(err, SL_STATUS_ARCH,
                  "unknown architecture '%s' (known: %s); describe it in a spec file and pass it as the arch "
                  "setting (--arch FILE.json; see docs/SPECS.md), or name a folder of specs in "
                  "SHARDLOAD_SPECS%s%s",
                  architecture, known_text, first_err.status != SL_STATUS_OK ? "; note: " : "",
                  first_err.status != SL_STATUS_OK ? first_err.msg : "");
  sl__buf_free(&known);
  sl__buf_free(&searched);
  return st;
}
