/*
 * args.c — command-line parsing for the subcommands (see args.h).
 */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct flag {
  const char *flag;
  const char *key;
  const char *value; /* fixed value for boolean flags, NULL when the flag takes an argument */
} flag;

static const flag flags[] = {
    {"--enable-expert-parallel", "enable_expert_parallel", "true"},
    {"--enable-eplb", "enable_eplb", "true"},
    {"--offline", "offline", "true"},
    {"--quiet", "quiet", "true"},
    {"--prefault", "prefault", "true"},
    {"--no-strict", "strict", "false"},
    {"--all", "download_all", "true"},
    {"--save-sharded", "save_sharded", NULL},
    {"--overwrite", "overwrite", "true"},
};

static void key_from_flag(const char *f, char *key, size_t cap) {
  size_t i = 0;
  for (const char *p = f + 2; *p != '\0' && i + 1 < cap; p++)
    key[i++] = *p == '-' ? '_' : *p;
  key[i] = '\0';
}

int sl_cli_parse(int argc, char **argv, sl_config *config, sl_cli_args *args, bool allow_world) {
  memset(args, 0, sizeof *args);
  char include[8192] = "";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      args->help = true;
      continue;
    }
    if (strcmp(a, "--json") == 0) {
      args->json = true;
      continue;
    }
    if (strncmp(a, "--", 2) != 0) {
      if (args->positional != NULL) {
        fprintf(stderr, "shardload %s: unexpected argument '%s'\n", argv[0], a);
        return 2;
      }
      args->positional = a;
      continue;
    }
    /* --key=value form */
    char name[128];
    const char *value = NULL;
    const char *eq = strchr(a, '=');
    size_t nlen = eq != NULL ? (size_t)(eq - a) : strlen(a);
    if (nlen >= sizeof name) {
      fprintf(stderr, "shardload %s: option '%s' is too long\n", argv[0], a);
      return 2;
    }
    memcpy(name, a, nlen);
    name[nlen] = '\0';
    if (eq != NULL)
      value = eq + 1;
    const flag *fl = NULL;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
      if (strcmp(flags[k].flag, name) == 0)
        fl = &flags[k];
    if (fl != NULL && fl->value != NULL) {
      if (value != NULL) {
        fprintf(stderr, "shardload %s: %s takes no value\n", argv[0], name);
        return 2;
      }
      if (sl_config_set(config, fl->key, fl->value) != SL_STATUS_OK) {
        fprintf(stderr, "shardload %s: %s\n", argv[0], sl_config_error(config));
        return 2;
      }
      continue;
    }
    if (value == NULL) {
      if (i + 1 >= argc) {
        fprintf(stderr, "shardload %s: %s needs a value\n", argv[0], name);
        return 2;
      }
      value = argv[++i];
    }
    if (allow_world && strcmp(name, "--world") == 0) {
      char *end = NULL;
      errno = 0;
      long w = strtol(value, &end, 10);
      if (errno != 0 || end == value || *end != '\0' || w < 1 || w > 1000000) {
        fprintf(stderr, "shardload %s: --world: '%s' is not a rank count (1 .. 1000000)\n", argv[0], value);
        return 2;
      }
      args->world = (int)w;
      continue;
    }
    char key[128];
    key_from_flag(fl != NULL ? fl->flag : name, key, sizeof key);
    if (strcmp(key, "include") == 0) {
      /* repeated --include: newline-separated list */
      size_t len = strlen(include);
      snprintf(include + len, sizeof include - len, "%s%s", len > 0 ? "\n" : "", value);
      if (sl_config_set(config, "include", include) != SL_STATUS_OK) {
        fprintf(stderr, "shardload %s: %s\n", argv[0], sl_config_error(config));
        return 2;
      }
      continue;
    }
    if (sl_config_set(config, key, value) != SL_STATUS_OK) {
      fprintf(stderr, "shardload %s: %s: %s\n", argv[0], name, sl_config_error(config));
      return 2;
    }
  }
  return 0;
}
