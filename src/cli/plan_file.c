/*
 * plan_file.c — `--plan-file FILE` of `shardload plan` and `shardload load`: every rank's
 * caller-described plan from one JSON file (shardload/core.h sl_plans_from_json: {"ranks": [PLAN,
 * ...]} or {"classes": [{"ranks": [..], "plan": PLAN}]}), read whole and parsed by the library.
 */
#include "plan_file.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* The whole file, NUL-terminated (malloc'd), or NULL with a message on stderr. */
static char *read_all(const char *cmd, const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "shardload %s: cannot open the plan file %s\n", cmd, path);
    return NULL;
  }
  size_t cap = 1 << 16;
  size_t n = 0;
  char *text = malloc(cap + 1);
  while (text != NULL) {
    n += fread(text + n, 1, cap - n, f);
    if (n < cap)
      break;
    char *more = realloc(text, 2 * cap + 1);
    if (more == NULL) {
      free(text);
      text = NULL;
    }
    text = more;
    cap *= 2;
  }
  bool failed = ferror(f) != 0;
  fclose(f);
  if (text == NULL || failed) {
    fprintf(stderr, "shardload %s: cannot read the plan file %s\n", cmd, path);
    free(text);
    return NULL;
  }
  text[n] = '\0';
  *len = n;
  return text;
}

sl_plan **sl_cli_read_plans(const char *cmd, const char *path, int world) {
  size_t len = 0;
  char *text = read_all(cmd, path, &len);
  sl_plan **plans = text != NULL ? calloc((size_t)world + 1, sizeof *plans) : NULL;
  char *error = NULL;
  if (plans != NULL && sl_plans_from_json(text, len, world, plans, &error) != SL_STATUS_OK) {
    fprintf(stderr, "shardload %s: %s: %s\n", cmd, path, error != NULL ? error : "out of memory");
    free(plans);
    plans = NULL;
  }
  free(error);
  free(text);
  return plans;
}

void sl_cli_free_plans(sl_plan **plans, int world) {
  sl_plans_destroy(plans, world);
  free(plans);
}
