/*
 * api/config.c — the configuration table. Every key the library accepts is one row below: its type,
 * its default and a short description. sl_config_set validates against the row (so the error
 * names the key and what it accepts); loaders read typed values back with the getters. docs/CLI.md's
 * table of keys is written from this one (scripts/config-keys --write, through sl_config_keys), and
 * tests/unit/test_config_keys.py fails while it or another list of keys disagrees.
 */
#include "api/config.h"
#include "api/last_error.h"

#include "api/extra_config.h"
#include "base/edit_distance.h"
#include "base/util.h"
#include "plan/plan.h" /* SL_BUCKET_BYTES_DEFAULT */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A numeric macro as the text of a default (the macro stays the one owner of the number). */
#define SL__TEXT2(x) #x
#define SL__TEXT(x) SL__TEXT2(x)

typedef enum { T_STR, T_BOOL, T_U64, T_POS, T_ENUM, T_DOUBLE, T_LIST } key_type;

typedef struct key_def {
  const char *name;
  key_type type;
  const char *dflt;    /* textual default, NULL = none */
  const char *choices; /* T_ENUM: comma-separated, matched case-insensitively */
  const char *help;
} key_def;

/* Upper bounds of numeric keys beyond their type's, which protect the process (threads: each one
 * is a stack and a staging ring). */
static const struct {
  const char *name;
  uint64_t max;
} key_bounds[] = {{"threads", SL_THREADS_MAX}};

static uint64_t key_max(const char *name) {
  for (size_t i = 0; i < sizeof key_bounds / sizeof key_bounds[0]; i++)
    if (strcmp(key_bounds[i].name, name) == 0)
      return key_bounds[i].max;
  return 0;
}

static const key_def keys[] = {
    {"model", T_STR, NULL, NULL, "model folder or Hub repository id"},
    {"revision", T_STR, "main", NULL, "Hub revision: branch, tag, refs/pr/N or commit"},
    {"cache_dir", T_STR, NULL, NULL, "Hugging Face cache folder (default HF_HUB_CACHE, $HF_HOME/hub)"},
    {"offline", T_BOOL, "false", NULL, "no network at all; resolve from the cache"},
    {"quiet", T_BOOL, "false", NULL, "no progress output (the CLI: no summary either; errors still print)"},
    {"progress", T_ENUM, "auto", "auto,always,never",
     "rank 0's progress: a bar on a terminal, else log lines"},
    {"load_format", T_ENUM, "auto", "auto,hf,safetensors,mistral,pt,sharded_state", "weight file selection"},
    {"tp", T_POS, "1", NULL, "tensor-parallel size"},
    {"pp", T_POS, "1", NULL, "pipeline-parallel size"},
    {"dp", T_POS, "1", NULL, "data-parallel size"},
    {"enable_expert_parallel", T_BOOL, "false", NULL, "whole experts per rank over dp*tp ranks"},
    {"expert_placement", T_ENUM, "linear", "linear,round_robin", "expert placement strategy"},
    {"enable_eplb", T_BOOL, "false", NULL, "expert-parallel load balancing (no expert filter)"},
    {"num_redundant_experts", T_U64, "0", NULL, "EPLB redundant expert slots"},
    {"arch", T_STR, "auto", NULL,
     "architecture spec: auto (from config.json), a spec JSON file, or an architecture name"},
    {"layout", T_ENUM, "vllm", "vllm,checkpoint", "names and fusion of the local parameters"},
    {"device", T_ENUM, "cpu", "cpu,cuda", "where the parameters land"},
    {"cuda_device", T_STR, NULL, NULL, "CUDA device ordinal (default: node-local rank)"},
    {"pp_layer_partition", T_STR, NULL, NULL, "explicit layers per stage, e.g. 4,6,6,4"},
    {"extra_config", T_STR, NULL, NULL,
     "vLLM's extra-config JSON object: enable_multithread_load, num_threads (sets threads), "
     "enable_weights_track (sets strict)"},
    {"threads", T_POS, NULL, NULL, "reader threads per rank, at most 1024 (default 8)"},
    {"enable_multithread_load", T_BOOL, NULL, NULL,
     "false: one reader thread; true needs load_strategy auto (vLLM's extra-config key)"},
    {"load_strategy", T_ENUM, "auto", "auto,direct,io_uring,mmap",
     "how bytes are read (auto: per file, mapped on host, page cache if resident, else O_DIRECT)"},
    {"prefault", T_BOOL, "false", NULL, "touch host parameter memory before reading (timed as allocation)"},
    {"staging_bytes", T_POS, "268435456", NULL, "staging memory cap per rank, bytes"},
    {"read_chunk_bytes", T_POS, "16777216", NULL, "largest single read, bytes"},
    {"coalesce_gap_bytes", T_U64, "4096", NULL, "read across gaps up to this size to merge ranges"},
    {"two_phase_reads", T_BOOL, "true", NULL,
     "row-parallel slices: each rank reads whole rows, then the ranks swap column blocks (false: "
     "each rank reads its columns row by row; load_strategy auto also does that for a file in the page "
     "cache of the ranks' one node)"},
    {"storage", T_ENUM, "auto", "auto,shared,local",
     "where the checkpoint is readable: auto (the first rank of each node checks which files its node "
     "can open), shared (every rank), local (rank 0's node only; dry run: the first node); ranks that "
     "cannot read a file receive its bytes"},
    {"bucket_bytes", T_POS, SL__TEXT(SL_BUCKET_BYTES_DEFAULT), NULL, "broadcast bucket size, bytes"},
    {"save_sharded", T_STR, NULL, NULL, "write each rank's parameters to this folder"},
    {"save_max_part_bytes", T_POS, "5368709120", NULL, "largest part file of save_sharded, bytes"},
    {"overwrite", T_BOOL, "false", NULL,
     "save_sharded: remove the files of an older save that this one does not replace"},
    {"report", T_STR, NULL, NULL, "JSON report file written by rank 0"},
    {"timeout_s", T_DOUBLE, "600", NULL,
     "load watchdog: a wait longer than this names the ranks not heard from and ends the job (MPI_Abort)"},
    {"strict", T_BOOL, "true", NULL, "missing or unexpected weights are errors"},
    {"skip_vision", T_BOOL, "false", NULL,
     "load a multimodal checkpoint's language model alone: its vision tower's tensors are skipped (vLLM's "
     "--language-model-only, or --limit-mm-per-prompt 0 for every modality)"},
    {"storage_gbps", T_DOUBLE, "2.0", NULL, "dry run: storage read GB/s per node"},
    {"network_gbps", T_DOUBLE, "25.0", NULL, "dry run: network GB/s per node"},
    {"ranks_per_node", T_POS, "8", NULL, "dry run: ranks per node"},
    {"hub_token", T_STR, NULL, NULL, "Hub access token (default HF_TOKEN, token file)"},
    {"hub_backoff_base_ms", T_U64, "1000", NULL, "unit of the retry backoff, milliseconds"},
    {"hub_parallel_threshold", T_U64, "134217728", NULL, "files larger than this use ranged chunks"},
    {"hub_chunk_bytes", T_POS, "67108864", NULL, "ranged download chunk size, bytes"},
    {"hub_connections", T_POS, "8", NULL, "ranged chunks in flight per file"},
    {"hub_parallel_files", T_POS, "4", NULL, "files downloaded at once"},
    {"hub_verify", T_BOOL, "true", NULL, "check size and hash before publishing a blob"},
    {"hub_lock_timeout_s", T_U64, "0", NULL, "give up waiting for a blob lock after this (0 = never)"},
    {"download_all", T_BOOL, "false", NULL, "download every top-level non-weight file too"},
    {"include", T_LIST, NULL, NULL, "extra glob patterns to download, newline-separated"},
};

#define N_KEYS (sizeof keys / sizeof keys[0])

/* vLLM's spellings of keys (its EngineArgs names and its extra-config keys), accepted wherever a
 * key is (sl_config_set, sl_config_get, the members of extra_config): the CLI's
 * --tensor-parallel-size and Python's tensor_parallel_size=2 mean tp, {"num_threads": 4} means
 * threads 4. */
static const struct {
  const char *alias;
  const char *key;
} key_aliases[] = {
    {"tensor_parallel_size", "tp"},     {"pipeline_parallel_size", "pp"},       {"data_parallel_size", "dp"},
    {"download_dir", "cache_dir"},      {"language_model_only", "skip_vision"}, {"num_threads", "threads"},
    {"enable_weights_track", "strict"},
};

#define N_ALIASES (sizeof key_aliases / sizeof key_aliases[0])

struct sl_config {
  char *values[sizeof keys / sizeof keys[0]];
  sl__err err;
};

static int key_index(const char *key) {
  for (size_t a = 0; a < N_ALIASES; a++) {
    if (strcmp(key_aliases[a].alias, key) == 0) {
      key = key_aliases[a].key;
      break;
    }
  }
  for (size_t i = 0; i < N_KEYS; i++) {
    if (strcmp(keys[i].name, key) == 0)
      return (int)i;
  }
  return -1;
}

/* ---- did you mean ---- */

/* Scores a candidate as the CLI does for options: its edit distance, or 1 when one name contains
 * the other and the typed one has 4 characters or more (staging -> staging_bytes); a short name
 * suggests only near misses. */
static void consider(const char *typed, const char *candidate, const char **best, size_t *best_score) {
  size_t score = sl__edit_distance(typed, candidate);
  size_t tl = strlen(typed);
  if (tl >= 4 && (strstr(candidate, typed) != NULL || strstr(typed, candidate) != NULL) && score > 1)
    score = 1;
  size_t limit = tl < 4 ? 1 : tl / 3 > 2 ? tl / 3 : 2;
  if (score <= limit && score < *best_score) {
    *best_score = score;
    *best = candidate;
  }
}

/* The key or alias nearest to an unknown one, or NULL when none is near. */
static const char *nearest_key(const char *typed) {
  const char *best = NULL;
  size_t score = (size_t)-1;
  for (size_t i = 0; i < N_KEYS; i++)
    consider(typed, keys[i].name, &best, &score);
  for (size_t a = 0; a < N_ALIASES; a++)
    consider(typed, key_aliases[a].alias, &best, &score);
  return best;
}

static bool parse_bool(const char *v, bool *out) {
  static const char *const t[] = {"1", "true", "yes", "on"};
  static const char *const f[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(v, t[i]) == 0) {
      *out = true;
      return true;
    }
    if (strcasecmp(v, f[i]) == 0) {
      *out = false;
      return true;
    }
  }
  return false;
}

/* The choice v names (case-insensitively): start and len_out locate its canonical spelling in choices,
 * which is what gets stored, so that readers of the value compare exact lower-case names. */
static bool enum_match(const char *choices, const char *v, const char **start, size_t *len_out) {
  const char *p = choices;
  size_t n = strlen(v);
  while (*p != '\0') {
    const char *comma = strchr(p, ',');
    size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
    if (len == n && strncasecmp(p, v, n) == 0) {
      if (start != NULL)
        *start = p;
      if (len_out != NULL)
        *len_out = len;
      return true;
    }
    p += len + (comma != NULL ? 1 : 0);
  }
  return false;
}

static bool parse_double(const char *v, double *out) {
  char *end = NULL;
  double d = strtod(v, &end);
  if (end == v || *end != '\0' || !(d > 0) || d > 1e12)
    return false;
  *out = d;
  return true;
}

/* Byte counts (keys named *_bytes, and hub_parallel_threshold) accept a unit: K, M, G, T (also
 * written KiB, MiB, GiB, TiB) are powers of 1024; KB, MB, GB, TB are powers of 1000 (dd's
 * convention); B alone is bytes; case is ignored. With a unit the number may have a fraction (1.5G; up to
 * six decimals), rounded down to whole bytes. Other integer keys take plain digits only. */
static bool is_byte_key(const key_def *k) {
  size_t n = strlen(k->name);
  return (n > 6 && strcmp(k->name + n - 6, "_bytes") == 0) || strcmp(k->name, "hub_parallel_threshold") == 0;
}

static bool parse_count(const key_def *k, const char *v, uint64_t *out) {
  if (sl__parse_u64(v, out))
    return true;
  if (!is_byte_key(k) || *v < '0' || *v > '9')
    return false;
  uint64_t whole = 0;
  uint64_t frac = 0; /* the first six decimals, as an integer over frac_div */
  uint64_t frac_div = 1;
  const char *p = v;
  for (; *p >= '0' && *p <= '9'; p++)
    if (sl__mul_overflow(whole, 10, &whole) || sl__add_overflow(whole, (uint64_t)(*p - '0'), &whole))
      return false;
  if (*p == '.') {
    p++;
    if (*p < '0' || *p > '9')
      return false;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (frac_div < 1000000) {
        frac = frac * 10 + (uint64_t)(*p - '0');
        frac_div *= 10;
      }
    }
  }
  static const struct {
    const char *name;
    uint64_t mult;
  } units[] = {{"k", 1ULL << 10}, {"kib", 1ULL << 10}, {"kb", 1000ULL},
               {"m", 1ULL << 20}, {"mib", 1ULL << 20}, {"mb", 1000000ULL},
               {"g", 1ULL << 30}, {"gib", 1ULL << 30}, {"gb", 1000000000ULL},
               {"t", 1ULL << 40}, {"tib", 1ULL << 40}, {"tb", 1000000000000ULL},
               {"b", 1ULL}};
  uint64_t mult = 0;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp(p, units[i].name) == 0)
      mult = units[i].mult;
  if (mult == 0 || (mult == 1 && frac_div > 1))
    return false;
  /* frac < 10^6 and mult <= 2^40: frac * mult < 2^60, no overflow. */
  uint64_t total = 0;
  if (sl__mul_overflow(whole, mult, &total) || sl__add_overflow(total, frac * mult / frac_div, &total))
    return false;
  *out = total;
  return true;
}

static sl_status config_create_impl(sl_config **out) {
  if (out == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = calloc(1, sizeof **out);
  return *out != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
}

sl_status sl_config_create(sl_config **out) {
  return sl__api_return(config_create_impl(out), NULL, __func__);
}

void sl_config_destroy(sl_config *config) {
  if (config == NULL)
    return;
  for (size_t i = 0; i < N_KEYS; i++)
    free(config->values[i]);
  free(config);
}

static sl_status validate(const key_def *k, const char *value, sl__err *err) {
  bool b;
  uint64_t u;
  double d;
  switch (k->type) {
  case T_STR:
  case T_LIST:
    return SL_STATUS_OK;
  case T_BOOL:
    if (parse_bool(value, &b))
      return SL_STATUS_OK;
    return sl__err_set(err, SL_STATUS_CONFIG,
                       "%s: '%s' is not a boolean (accepted: true, false, 1, 0, yes, no)", k->name, value);
  case T_U64:
    if (parse_count(k, value, &u))
      return SL_STATUS_OK;
    return sl__err_set(err, SL_STATUS_CONFIG, "%s: '%s' is not a non-negative integer%s", k->name, value,
                       is_byte_key(k) ? " or byte count (e.g. 4096, 256M, 1.5GiB, 2GB)" : "");
  case T_POS:
    if (!parse_count(k, value, &u) || u < 1 || u > 0x7fffffffffffffffULL)
      return sl__err_set(err, SL_STATUS_CONFIG, "%s: '%s' is not a positive integer%s", k->name, value,
                         is_byte_key(k) ? " or byte count (e.g. 4096, 256M, 1.5GiB, 2GB)" : "");
    if (key_max(k->name) != 0 && u > key_max(k->name))
      return sl__err_set(err, SL_STATUS_CONFIG, "%s: %s is above the limit of %llu", k->name, value,
                         (unsigned long long)key_max(k->name));
    return SL_STATUS_OK;
  case T_DOUBLE:
    if (parse_double(value, &d))
      return SL_STATUS_OK;
    return sl__err_set(err, SL_STATUS_CONFIG, "%s: '%s' is not a positive number", k->name, value);
  case T_ENUM:
    if (enum_match(k->choices, value, NULL, NULL))
      return SL_STATUS_OK;
    if (strcmp(k->name, "load_format") == 0)
      return sl__err_set(
          err, SL_STATUS_CONFIG,
          "unknown load format '%s' (accepted: auto, hf, safetensors, mistral, pt, sharded_state)", value);
    return sl__err_set(err, SL_STATUS_CONFIG, "%s: unknown value '%s' (accepted: %s)", k->name, value,
                       k->choices);
  }
  return SL_STATUS_INTERNAL;
}

/* extra_config's members are keys under vLLM's spelling (the alias table), each set as if given
 * alone: the value set last wins, as for any key set twice. Nothing is set when the object is
 * refused. */
static sl_status apply_extra_config(sl_config *config, const char *json) {
  sl__extra_members m;
  sl_status st = sl__extra_config_parse(json, sl__config_str(config, "load_format"), &m, &config->err);
  for (size_t i = 0; i < m.n && st == SL_STATUS_OK; i++)
    st = sl_config_set(config, m.member[i].key, m.member[i].value);
  return st;
}

static sl_status config_set_impl(sl_config *config, const char *key, const char *value) {
  if (config == NULL || key == NULL || value == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&config->err);
  int i = key_index(key);
  if (i < 0) {
    const char *near = nearest_key(key);
    if (near != NULL)
      return sl__err_set(&config->err, SL_STATUS_CONFIG, "unknown configuration key '%s'; did you mean %s?",
                         key, near);
    return sl__err_set(&config->err, SL_STATUS_CONFIG, "unknown configuration key '%s'", key);
  }
  sl_status st = validate(&keys[i], value, &config->err);
  if (st != SL_STATUS_OK) {
    if (strcmp(key, keys[i].name) != 0) { /* an alias: say which key the message names */
      size_t len = strlen(config->err.msg);
      snprintf(config->err.msg + len, sizeof config->err.msg - len, " (%s is vLLM's name for %s)", key,
               keys[i].name);
    }
    return st;
  }
  if (strcmp(keys[i].name, "extra_config") == 0) {
    st = apply_extra_config(config, value);
    if (st != SL_STATUS_OK)
      return st;
  }
  /* Enum values are stored in their canonical (table) spelling: "CUDA" is kept as "cuda". */
  const char *canon = value;
  size_t canon_len = strlen(value);
  if (keys[i].type == T_ENUM)
    enum_match(keys[i].choices, value, &canon, &canon_len);
  char *copy = sl__strndup(canon, canon_len);
  if (copy == NULL)
    return sl__err_set(&config->err, SL_STATUS_NOMEM, "out of memory");
  free(config->values[i]);
  config->values[i] = copy;
  return SL_STATUS_OK;
}

sl_status sl_config_set(sl_config *config, const char *key, const char *value) {
  return sl__api_return(config_set_impl(config, key, value), sl__config_err(config), __func__);
}

const char *sl_config_get(const sl_config *config, const char *key) {
  if (config == NULL || key == NULL)
    return NULL;
  int i = key_index(key);
  return i >= 0 ? config->values[i] : NULL;
}

const char *sl_config_error(const sl_config *config) {
  return config != NULL ? config->err.msg : "";
}

void sl__config_set_error(sl_config *cfg, const sl__err *err) {
  if (cfg == NULL || err == NULL)
    return;
  sl__err_clear(&cfg->err);
  sl__err_copy(&cfg->err, err);
}

const sl__err *sl__config_err(const sl_config *cfg) {
  return cfg != NULL ? &cfg->err : NULL;
}

void sl__config_clear_error(sl_config *cfg) {
  if (cfg != NULL)
    sl__err_clear(&cfg->err);
}

bool sl__config_is_set(const sl_config *cfg, const char *key) {
  return sl_config_get(cfg, key) != NULL;
}

const char *sl__config_str(const sl_config *cfg, const char *key) {
  int i = key_index(key);
  if (i < 0)
    return NULL;
  if (cfg != NULL && cfg->values[i] != NULL)
    return cfg->values[i];
  return keys[i].dflt;
}

bool sl__config_bool(const sl_config *cfg, const char *key) {
  const char *v = sl__config_str(cfg, key);
  bool b = false;
  if (v != NULL)
    parse_bool(v, &b);
  return b;
}

uint64_t sl__config_u64(const sl_config *cfg, const char *key) {
  const char *v = sl__config_str(cfg, key);
  int i = key_index(key);
  uint64_t u = 0;
  if (v != NULL && i >= 0)
    parse_count(&keys[i], v, &u);
  return u;
}

double sl__config_double(const sl_config *cfg, const char *key) {
  const char *v = sl__config_str(cfg, key);
  double d = 0;
  if (v != NULL)
    parse_double(v, &d);
  return d;
}

char **sl__config_list(const sl_config *cfg, const char *key) {
  const char *v = sl__config_str(cfg, key);
  size_t n = 0;
  for (const char *p = v; p != NULL && *p != '\0'; p++)
    n += *p == '\n';
  char **list = calloc(n + 2, sizeof *list);
  if (list == NULL || v == NULL)
    return list;
  size_t k = 0;
  const char *p = v;
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
    if (len > 0) {
      list[k] = sl__strndup(p, len);
      if (list[k] == NULL) {
        sl__config_free_list(list);
        return NULL;
      }
      k++;
    }
    p += len + (nl != NULL ? 1 : 0);
  }
  return list;
}

void sl__config_free_list(char **list) {
  if (list == NULL)
    return;
  for (char **p = list; *p != NULL; p++)
    free(*p);
  free(list);
}

sl_config *sl__config_clone(const sl_config *cfg) {
  sl_config *c = calloc(1, sizeof *c);
  if (c == NULL || cfg == NULL)
    return c;
  for (size_t i = 0; i < N_KEYS; i++) {
    if (cfg->values[i] == NULL)
      continue;
    c->values[i] = sl__strdup(cfg->values[i]);
    if (c->values[i] == NULL) {
      sl_config_destroy(c);
      return NULL;
    }
  }
  return c;
}

/* process-wide: sl_config_keys' text, the same for every caller (the key table is constant); written
 * once under keys_once, read-only after. */
static char keys_help[8192];
/* process-wide: builds keys_help exactly once, whichever threads ask first. */
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

/* One key's line: "  NAME  MEANING[; one of A, B, C][ (default D)]" (an enum's accepted values
 * listed, so that `--help` and docs/CLI.md's table say what --layout or --load-format take). */
static int key_line(char *out, size_t cap, const key_def *k) {
  char choices[256] = "";
  if (k->type == T_ENUM && k->choices != NULL) {
    size_t c = (size_t)snprintf(choices, sizeof choices, "; one of ");
    for (const char *p = k->choices; *p != '\0' && c + 3 < sizeof choices; p++) {
      if (*p == ',') {
        choices[c++] = ',';
        choices[c++] = ' ';
      } else {
        choices[c++] = *p;
      }
    }
    choices[c] = '\0';
  }
  if (k->dflt != NULL)
    return snprintf(out, cap, "  %-24s %s%s (default %s)\n", k->name, k->help, choices, k->dflt);
  return snprintf(out, cap, "  %-24s %s%s\n", k->name, k->help, choices);
}

static void keys_build(void) {
  size_t off = 0;
  for (size_t i = 0; i < N_KEYS && off < sizeof keys_help; i++) {
    int n = key_line(keys_help + off, sizeof keys_help - off, &keys[i]);
    if (n < 0 || (size_t)n >= sizeof keys_help - off) {
      keys_help[off] = '\0'; /* a partial line never ends the list */
      break;
    }
    off += (size_t)n;
  }
}

const char *sl_config_keys(void) {
  pthread_once(&keys_once, keys_build);
  return keys_help;
}
