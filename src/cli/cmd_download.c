/*
 * cmd_download.c — `shardload download REPO ...`: fills the Hugging Face cache with what a load of
 * REPO needs plus every other top-level non-weight file (tokenizer, generation config, README…:
 * docs/spec/HUB.md §3; --load-only leaves them out) and the --include patterns, and prints the
 * snapshot folder on stdout. Uses the public API only.
 */
#include "cli.h"

#include "shardload/shardload.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void download_usage(FILE *out) {
  fprintf(out, "usage: shardload download REPO [options]\n"
               "\n"
               "Downloads what loading the Hub repository REPO needs, and every other top-level file\n"
               "that is not a weight file (tokenizer, generation config, README...), into the Hugging\n"
               "Face cache and prints the snapshot folder.\n"
               "\n"
               "options:\n"
               "  --revision R       branch, tag, refs/pr/N or commit (default main)\n"
               "  --include PATTERN  also download the files matching PATTERN (repeatable)\n"
               "  --load-only        only what a load needs: config.json, the index, the weights\n"
               "  --all              every top-level non-weight file too (the default)\n"
               "  --cache-dir DIR    cache folder (default HF_HUB_CACHE, else $HF_HOME/hub)\n"
               "  --offline          no network: resolve from the cache only\n"
               "  --load-format F    auto, hf, safetensors, mistral or pt (default auto)\n"
               "  --quiet            no progress output\n");
}

/* Matches "--name VALUE" and "--name=VALUE"; *i is advanced past what was consumed. */
static int take_value(int argc, char **argv, int *i, const char *name, const char **value) {
  size_t n = strlen(name);
  const char *arg = argv[*i];
  if (strncmp(arg, name, n) != 0)
    return 0;
  if (arg[n] == '=') {
    *value = arg + n + 1;
    return 1;
  }
  if (arg[n] != '\0')
    return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "shardload download: %s needs a value\n", name);
    return -1;
  }
  *i += 1;
  *value = argv[*i];
  return 1;
}

/* Appends pattern to a newline-separated list (the "include" config key). */
static char *append_line(char *list, const char *pattern) {
  size_t a = list != NULL ? strlen(list) : 0;
  size_t b = strlen(pattern);
  char *out = realloc(list, a + b + 2);
  if (out == NULL) {
    free(list);
    return NULL;
  }
  if (a > 0)
    out[a++] = '\n';
  memcpy(out + a, pattern, b + 1);
  return out;
}

typedef struct option_map {
  const char *flag;
  const char *key;
} option_map;

static const option_map k_value_options[] = {
    {"--revision", "revision"},
    {"--cache-dir", "cache_dir"},
    {"--load-format", "load_format"},
};

typedef struct bool_option {
  const char *flag;
  const char *key;
  const char *value;
} bool_option;

static const bool_option k_bool_options[] = {
    {"--all", "download_all", "true"},
    {"--load-only", "download_all", "false"},
    {"--offline", "offline", "true"},
    {"--quiet", "quiet", "true"},
};

/* Parses argv into config; returns 0, or 2 for a usage error (message printed). */
static int parse_args(int argc, char **argv, sl_config *config, char **include, const char **repo) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *value = NULL;
    int r = take_value(argc, argv, &i, "--include", &value);
    if (r < 0)
      return 2;
    if (r > 0) {
      *include = append_line(*include, value);
      if (*include == NULL) {
        fprintf(stderr, "shardload download: out of memory\n");
        return 2;
      }
      continue;
    }
    bool matched = false;
    for (size_t k = 0; !matched && k < sizeof k_value_options / sizeof k_value_options[0]; k++) {
      r = take_value(argc, argv, &i, k_value_options[k].flag, &value);
      if (r < 0)
        return 2;
      if (r == 0)
        continue;
      matched = true;
      if (sl_config_set(config, k_value_options[k].key, value) != SL_STATUS_OK) {
        fprintf(stderr, "shardload download: %s\n", sl_config_error(config));
        return 2;
      }
    }
    for (size_t k = 0; !matched && k < sizeof k_bool_options / sizeof k_bool_options[0]; k++) {
      if (strcmp(arg, k_bool_options[k].flag) != 0)
        continue;
      matched = true;
      sl_config_set(config, k_bool_options[k].key, k_bool_options[k].value);
    }
    if (matched)
      continue;
    if (arg[0] == '-' && arg[1] != '\0') {
      fprintf(stderr, "shardload download: unknown option '%s'\n", arg);
      return 2;
    }
    if (*repo != NULL) {
      fprintf(stderr, "shardload download: more than one repository given ('%s' and '%s')\n", *repo, arg);
      return 2;
    }
    *repo = arg;
  }
  if (*repo == NULL) {
    fprintf(stderr, "shardload download: a repository id is required\n");
    return 2;
  }
  return 0;
}

int sl_cli_download(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      download_usage(stdout);
      return 0;
    }
  }
  sl_config *config = NULL;
  if (sl_config_create(&config) != SL_STATUS_OK) {
    fprintf(stderr, "shardload download: out of memory\n");
    return 1;
  }
  char *include = NULL;
  const char *repo = NULL;
  /* docs/spec/HUB.md §3: `download` fetches the other top-level non-weight files too (a load
   * fetches only what it reads); --load-only turns this off. */
  sl_config_set(config, "download_all", "true");
  int rc = parse_args(argc, argv, config, &include, &repo);
  if (rc == 0 && sl_config_set(config, "model", repo) != SL_STATUS_OK)
    rc = 2;
  if (rc == 0 && include != NULL && sl_config_set(config, "include", include) != SL_STATUS_OK)
    rc = 2;
  if (rc == 2)
    download_usage(stderr);
  if (rc == 0) {
    char *snapshot = NULL;
    sl_status st = sl_hub_download(config, &snapshot);
    if (st == SL_STATUS_OK) {
      printf("%s\n", snapshot);
    } else {
      fprintf(stderr, "shardload download: %s: %s\n", sl_status_name(st), sl_config_error(config));
      rc = 1;
    }
    free(snapshot);
  }
  free(include);
  sl_config_destroy(config);
  return rc;
}
