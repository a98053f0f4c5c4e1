/*
 * args.c — command-line parsing for the subcommands (see args.h): the flag table (booleans, own
 * names, vLLM's spellings), the configuration keys each subcommand uses, the generic parser and
 * its "did you mean" suggestion, and the per-subcommand option list printed by --help.
 */
#include "args.h"

#include "base/edit_distance.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct flag {
  const char *flag;
  const char *key;
  const char *value; /* fixed value for boolean flags, NULL when the flag takes an argument */
} flag;

/* Flags whose spelling is not `--` + the key with '-' for '_'. The aliases are vLLM's spellings
 * (`vllm serve --tensor-parallel-size 4` and `-tp 4` mean `--tp 4` here). */
static const flag flags[] = {
    {"--enable-expert-parallel", "enable_expert_parallel", "true"},
    {"--enable-eplb", "enable_eplb", "true"},
    {"--offline", "offline", "true"},
    {"--quiet", "quiet", "true"},
    {"--prefault", "prefault", "true"},
    {"--no-two-phase-reads", "two_phase_reads", "false"},
    {"--no-strict", "strict", "false"},
    {"--all", "download_all", "true"},
    {"--load-only", "download_all", "false"},
    {"--tensor-parallel-size", "tp", NULL},
    {"-tp", "tp", NULL},
    {"--pipeline-parallel-size", "pp", NULL},
    {"-pp", "pp", NULL},
    {"--data-parallel-size", "dp", NULL},
    {"-dp", "dp", NULL},
    {"--download-dir", "cache_dir", NULL},
    {"--overwrite", "overwrite", "true"},
    {"--skip-vision", "skip_vision", "true"},
    {"--language-model-only", "skip_vision", "true"},
};
#define N_FLAGS (sizeof flags / sizeof flags[0])

/* ---- the keys of each subcommand ---- */

static const char *const load_keys[] = {"tp",
                                        "pp",
                                        "dp",
                                        "enable_expert_parallel",
                                        "expert_placement",
                                        "enable_eplb",
                                        "num_redundant_experts",
                                        "pp_layer_partition",
                                        "arch",
                                        "layout",
                                        "load_format",
                                        "device",
                                        "cuda_device",
                                        "threads",
                                        "extra_config",
                                        "enable_multithread_load",
                                        "load_strategy",
                                        "prefault",
                                        "staging_bytes",
                                        "read_chunk_bytes",
                                        "coalesce_gap_bytes",
                                        "two_phase_reads",
                                        "storage",
                                        "bucket_bytes",
                                        "strict",
                                        "skip_vision",
                                        "report",
                                        "save_sharded",
                                        "save_max_part_bytes",
                                        "overwrite",
                                        "quiet",
                                        "progress",
                                        "timeout_s",
                                        "revision",
                                        "cache_dir",
                                        "offline",
                                        "hub_token",
                                        "hub_connections",
                                        "hub_chunk_bytes",
                                        "hub_parallel_threshold",
                                        "hub_parallel_files",
                                        "hub_verify",
                                        "hub_backoff_base_ms",
                                        "hub_lock_timeout_s",
                                        NULL};
static const char *const plan_keys[] = {"tp",
                                        "pp",
                                        "dp",
                                        "enable_expert_parallel",
                                        "expert_placement",
                                        "enable_eplb",
                                        "num_redundant_experts",
                                        "pp_layer_partition",
                                        "arch",
                                        "layout",
                                        "load_format",
                                        "threads",
                                        "extra_config",
                                        "enable_multithread_load",
                                        "load_strategy",
                                        "staging_bytes",
                                        "read_chunk_bytes",
                                        "coalesce_gap_bytes",
                                        "two_phase_reads",
                                        "storage",
                                        "bucket_bytes",
                                        "strict",
                                        "skip_vision",
                                        "storage_gbps",
                                        "network_gbps",
                                        "ranks_per_node",
                                        "revision",
                                        "cache_dir",
                                        "offline",
                                        "hub_token",
                                        NULL};
static const char *const inspect_keys[] = {"load_format", NULL};
static const char *const download_keys[] = {"revision",
                                            "include",
                                            "download_all",
                                            "cache_dir",
                                            "offline",
                                            "load_format",
                                            "quiet",
                                            "hub_token",
                                            "hub_connections",
                                            "hub_chunk_bytes",
                                            "hub_parallel_threshold",
                                            "hub_parallel_files",
                                            "hub_verify",
                                            "hub_backoff_base_ms",
                                            "hub_lock_timeout_s",
                                            NULL};

const sl_cli_command sl_cli_cmd_load = {"load", load_keys,
                                        SL_CLI_LIST_PARAMS | SL_CLI_RELOAD | SL_CLI_PLAN_FILE};
const sl_cli_command sl_cli_cmd_reshard = {"reshard", load_keys, 0};
const sl_cli_command sl_cli_cmd_plan = {"plan", plan_keys, SL_CLI_JSON | SL_CLI_WORLD | SL_CLI_PLAN_FILE};
const sl_cli_command sl_cli_cmd_inspect = {"inspect", inspect_keys, SL_CLI_JSON};
const sl_cli_command sl_cli_cmd_download = {"download", download_keys, 0};

/* ---- the configuration keys, from the library's own list ---- */

#define MAX_KEYS 128

typedef struct key_line {
  char name[SL_EDIT_NAME_MAX];
  const char *help; /* into sl_config_keys() */
  size_t help_len;
} key_line;

/* sl_config_keys() is one "  name  meaning (default X)" line per key. */
static size_t config_keys(key_line *out, size_t cap) {
  size_t n = 0;
  const char *p = sl_config_keys();
  while (p != NULL && *p != '\0' && n < cap) {
    const char *end = strchr(p, '\n');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    size_t i = 0;
    while (i < len && p[i] == ' ')
      i++;
    size_t s = i;
    while (i < len && p[i] != ' ')
      i++;
    if (i > s && i - s < SL_EDIT_NAME_MAX) {
      memcpy(out[n].name, p + s, i - s);
      out[n].name[i - s] = '\0';
      while (i < len && p[i] == ' ')
        i++;
      out[n].help = p + i;
      out[n].help_len = len - i;
      n++;
    }
    p = end != NULL ? end + 1 : NULL;
  }
  return n;
}

static bool key_known(const char *key) {
  key_line lines[MAX_KEYS];
  size_t n = config_keys(lines, MAX_KEYS);
  for (size_t i = 0; i < n; i++)
    if (strcmp(lines[i].name, key) == 0)
      return true;
  return false;
}

static void key_from_flag(const char *f, char *key, size_t cap) {
  size_t i = 0;
  for (const char *p = f + 2; *p != '\0' && i + 1 < cap; p++)
    key[i++] = *p == '-' ? '_' : *p;
  key[i] = '\0';
}

static void flag_from_key(const char *key, char *f, size_t cap) {
  snprintf(f, cap, "--%s", key);
  for (char *p = f + 2; *p != '\0'; p++)
    if (*p == '_')
      *p = '-';
}

static bool uses_key(const sl_cli_command *cmd, const char *key) {
  for (const char *const *k = cmd->keys; *k != NULL; k++)
    if (strcmp(*k, key) == 0)
      return true;
  return false;
}

/* ---- did you mean ---- */

typedef struct suggestion {
  char best[SL_EDIT_NAME_MAX + 2];
  size_t score; /* lower is better */
} suggestion;

/* A candidate scores its edit distance, or 1 when one name contains the other (--staging →
 * --staging-bytes); candidates of the command itself win ties over other keys. */
static void consider(suggestion *s, const char *typed, const char *candidate) {
  size_t score = sl__edit_distance(typed, candidate);
  const char *t = typed + strspn(typed, "-");
  const char *c = candidate + strspn(candidate, "-");
  if (strlen(t) >= 4 && (strstr(c, t) != NULL || strstr(t, c) != NULL) && score > 1)
    score = 1;
  size_t tl = strlen(t);
  size_t limit = tl < 4 ? 1 : tl / 3 > 2 ? tl / 3 : 2; /* a short name suggests only near misses */
  if (score <= limit && score < s->score) {
    s->score = score;
    snprintf(s->best, sizeof s->best, "%s", candidate);
  }
}

static void unknown_option(const sl_cli_command *cmd, const char *typed) {
  suggestion s = {.best = "", .score = (size_t)-1};
  char f[SL_EDIT_NAME_MAX + 2];
  for (const char *const *k = cmd->keys; *k != NULL; k++) {
    flag_from_key(*k, f, sizeof f);
    consider(&s, typed, f);
  }
  for (size_t i = 0; i < N_FLAGS; i++)
    if (uses_key(cmd, flags[i].key))
      consider(&s, typed, flags[i].flag);
  if (cmd->options & SL_CLI_JSON)
    consider(&s, typed, "--json");
  if (cmd->options & SL_CLI_WORLD)
    consider(&s, typed, "--world");
  if (cmd->options & SL_CLI_LIST_PARAMS)
    consider(&s, typed, "--list-params");
  if (cmd->options & SL_CLI_RELOAD) {
    consider(&s, typed, "--reload");
    consider(&s, typed, "--reload-revision");
  }
  if (cmd->options & SL_CLI_PLAN_FILE)
    consider(&s, typed, "--plan-file");
  consider(&s, typed, "--help");
  if (s.best[0] == '\0') { /* then any key: the command accepts every configuration key */
    key_line lines[MAX_KEYS];
    size_t n = config_keys(lines, MAX_KEYS);
    for (size_t i = 0; i < n; i++) {
      flag_from_key(lines[i].name, f, sizeof f);
      consider(&s, typed, f);
    }
  }
  if (s.best[0] != '\0')
    fprintf(stderr, "shardload %s: unknown option '%s'; did you mean %s?\n", cmd->name, typed, s.best);
  else
    fprintf(stderr, "shardload %s: unknown option '%s' (shardload %s --help lists the options)\n", cmd->name,
            typed, cmd->name);
}

/* ---- the parser ---- */

/* The tool's own options with a value (--reload, --reload-revision, --plan-file) at argv[*i]:
 * 1 when taken (*i past its value), 0 when name is none of them, 2 after a usage error. */
static int tool_value(int argc, char **argv, int *i, const char *name, const char *value,
                      const sl_cli_command *cmd, sl_cli_args *args) {
  bool is_reload = (cmd->options & SL_CLI_RELOAD) && strcmp(name, "--reload") == 0;
  bool is_reload_rev = (cmd->options & SL_CLI_RELOAD) && strcmp(name, "--reload-revision") == 0;
  bool is_plan_file = (cmd->options & SL_CLI_PLAN_FILE) && strcmp(name, "--plan-file") == 0;
  if (!is_reload && !is_reload_rev && !is_plan_file)
    return 0;
  if (value == NULL && *i + 1 >= argc) {
    fprintf(stderr, "shardload %s: %s needs a value\n", cmd->name, name);
    return 2;
  }
  value = value != NULL ? value : argv[++*i];
  if (is_plan_file) {
    args->plan_file = value;
  } else if (is_reload_rev) {
    args->reload_revision = value;
  } else if (args->n_reload < SL_CLI_RELOAD_MAX) {
    args->reload[args->n_reload++] = value;
  } else {
    fprintf(stderr, "shardload %s: at most %d --reload options\n", cmd->name, SL_CLI_RELOAD_MAX);
    return 2;
  }
  return 1;
}

int sl_cli_parse(int argc, char **argv, sl_config *config, sl_cli_args *args, const sl_cli_command *cmd) {
  memset(args, 0, sizeof *args);
  char include[8192] = "";
  const char *c = cmd->name;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      args->help = true;
      continue;
    }
    if (a[0] != '-' || a[1] == '\0') {
      if (args->positional != NULL) {
        fprintf(stderr, "shardload %s: unexpected argument '%s' (after '%s')\n", c, a, args->positional);
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
      fprintf(stderr, "shardload %s: option '%s' is too long\n", c, a);
      return 2;
    }
    memcpy(name, a, nlen);
    name[nlen] = '\0';
    if (eq != NULL)
      value = eq + 1;
    bool is_json = (cmd->options & SL_CLI_JSON) && strcmp(name, "--json") == 0;
    bool is_list = (cmd->options & SL_CLI_LIST_PARAMS) && strcmp(name, "--list-params") == 0;
    if (is_json || is_list) {
      if (value != NULL) {
        fprintf(stderr, "shardload %s: %s takes no value\n", c, name);
        return 2;
      }
      args->json |= is_json;
      args->list_params |= is_list;
      continue;
    }
    bool is_world = (cmd->options & SL_CLI_WORLD) && strcmp(name, "--world") == 0;
    int taken = tool_value(argc, argv, &i, name, value, cmd, args);
    if (taken == 2)
      return 2;
    if (taken == 1)
      continue;
    const flag *fl = NULL;
    for (size_t k = 0; k < N_FLAGS; k++)
      if (strcmp(flags[k].flag, name) == 0)
        fl = &flags[k];
    char key[128] = "";
    if (fl != NULL)
      snprintf(key, sizeof key, "%s", fl->key);
    else if (name[1] == '-')
      key_from_flag(name, key, sizeof key);
    if (!is_world && (key[0] == '\0' || !key_known(key))) {
      unknown_option(cmd, name);
      return 2;
    }
    if (fl != NULL && fl->value != NULL) {
      if (value != NULL) {
        fprintf(stderr, "shardload %s: %s takes no value\n", c, name);
        return 2;
      }
      if (sl_config_set(config, fl->key, fl->value) != SL_STATUS_OK) {
        fprintf(stderr, "shardload %s: %s\n", c, sl_config_error(config));
        return 2;
      }
      continue;
    }
    if (value == NULL) {
      if (i + 1 >= argc) {
        fprintf(stderr, "shardload %s: %s needs a value\n", c, name);
        return 2;
      }
      value = argv[++i];
    }
    if (is_world) {
      char *end = NULL;
      errno = 0;
      long w = strtol(value, &end, 10);
      if (errno != 0 || end == value || *end != '\0' || w < 1 || w > 1000000) {
        fprintf(stderr, "shardload %s: --world: '%s' is not a rank count (1 .. 1000000)\n", c, value);
        return 2;
      }
      args->world = (int)w;
      continue;
    }
    if (strcmp(key, "include") == 0) {
      /* repeated --include: newline-separated list */
      size_t len = strlen(include);
      snprintf(include + len, sizeof include - len, "%s%s", len > 0 ? "\n" : "", value);
      if (sl_config_set(config, "include", include) != SL_STATUS_OK) {
        fprintf(stderr, "shardload %s: %s\n", c, sl_config_error(config));
        return 2;
      }
      continue;
    }
    if (sl_config_set(config, key, value) != SL_STATUS_OK) {
      fprintf(stderr, "shardload %s: %s: %s\n", c, name, sl_config_error(config));
      return 2;
    }
  }
  return 0;
}

/* ---- --help ---- */

void sl_cli_print_options(FILE *out, const sl_cli_command *cmd) {
  key_line lines[MAX_KEYS];
  size_t n = config_keys(lines, MAX_KEYS);
  bool bytes = false;
  fprintf(out, "\noptions:\n");
  for (const char *const *k = cmd->keys; *k != NULL; k++) {
    const key_line *line = NULL;
    for (size_t i = 0; i < n && line == NULL; i++)
      if (strcmp(lines[i].name, *k) == 0)
        line = &lines[i];
    if (line == NULL)
      continue;
    char f[SL_EDIT_NAME_MAX + 2];
    flag_from_key(*k, f, sizeof f);
    /* Every spelling of the key: its own flag (unless a boolean flag spells it the same), the
     * boolean flags and vLLM's aliases. */
    char spelled[160] = "";
    size_t off = 0;
    bool own = true;
    for (size_t i = 0; i < N_FLAGS; i++)
      own &= strcmp(flags[i].flag, f) != 0;
    if (own)
      off += (size_t)snprintf(spelled, sizeof spelled, "%s", f);
    for (size_t i = 0; i < N_FLAGS && off < sizeof spelled; i++)
      if (strcmp(flags[i].key, *k) == 0)
        off +=
            (size_t)snprintf(spelled + off, sizeof spelled - off, "%s%s", off > 0 ? ", " : "", flags[i].flag);
    fprintf(out, "  %-36s %.*s\n", spelled, (int)line->help_len, line->help);
    size_t kl = strlen(*k);
    bytes |= (kl > 6 && strcmp(*k + kl - 6, "_bytes") == 0);
  }
  if (cmd->options & SL_CLI_WORLD)
    fprintf(out, "  %-36s %s\n", "--world N", "number of ranks to plan for (required)");
  if (cmd->options & SL_CLI_LIST_PARAMS)
    fprintf(out, "  %-36s %s\n", "--list-params", "print every rank's table of local parameters");
  if (cmd->options & SL_CLI_RELOAD) {
    fprintf(out, "  %-36s %s\n", "--reload MODEL",
            "after the load, read MODEL (same architecture and shapes) into the same memory; repeatable");
    fprintf(out, "  %-36s %s\n", "--reload-revision REV",
            "the Hub revision of every --reload (default main)");
  }
  if (cmd->options & SL_CLI_PLAN_FILE)
    fprintf(out, "  %-36s %s\n", "--plan-file FILE",
            "every rank's described plan instead of an architecture spec: {\"ranks\": [PLAN, ...]} or "
            "{\"classes\": [{\"ranks\": [..], \"plan\": PLAN}]}");
  if (cmd->options & SL_CLI_JSON)
    fprintf(out, "  %-36s %s\n", "--json", "print the result as JSON");
  fprintf(out, "  %-36s %s\n", "--help, -h", "this text");
  fprintf(out, "\nFlags take --name VALUE or --name=VALUE; --tensor-parallel-size, -tp and the like are\n"
               "vLLM's spellings. Booleans take true or false (the flag form alone means true).\n");
  if (bytes)
    fprintf(out, "Byte counts take units: 256M, 4GiB, 1.5G (K, M, G, T and KiB... are powers of 1024),\n"
                 "2GB (KB, MB, GB, TB are powers of 1000).\n");
}

/* ---- --quiet ---- */

bool sl_cli_quiet(const sl_config *config) {
  static const char *const yes[] = {"1", "true", "yes", "on"}; /* the library's true spellings */
  const char *v = sl_config_get(config, "quiet");
  for (size_t i = 0; v != NULL && i < sizeof yes / sizeof yes[0]; i++)
    if (strcasecmp(v, yes[i]) == 0)
      return true;
  return false;
}

const char *sl_cli_status_words(sl_status st, char *buf, size_t cap) {
  if (st == SL_STATUS_HUB)
    snprintf(buf, cap, "%s (%s)", sl_status_name(st), sl_hub_cause_name(sl_last_error_cause()));
  else
    snprintf(buf, cap, "%s", sl_status_name(st));
  return buf;
}
