/*
 * test_config.c — api/config.c (the key table behind sl_config) and api/options.c (typed options
 * and the checks across keys). For every key of the table, written out independently below with
 * its type and default: the valid forms are accepted and read back typed, invalid ones are refused
 * with SL_STATUS_CONFIG and a message naming the key and the value, a refused value leaves the
 * previous one in place; defaults; sl_config_keys() lists each key exactly once with its default;
 * the public sl_config_* API (NULL arguments, unknown keys and their "did you mean", vLLM's names
 * of keys, error message life cycle), lists,
 * clones; sl__opts_from_config defaults, cross-key errors and the effective bucket/chunk sizes
 * (computed by hand).
 */
#include "api/config.h"
#include "api/options.h"
#include "check.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* THREADS: a positive integer with the upper bound SL_THREADS_MAX (1024). EXTRA: vLLM's extra-config
 * JSON object (test_extra_config.c has its rules). */
typedef enum { STR, BOOL, U64, POS, ENUM, DBL, LIST, THREADS, EXTRA } ktype;

typedef struct key {
  const char *name;
  ktype type;
  const char *dflt; /* NULL: none */
  const char *choices[6];
} key;

/* The table as documented (docs/CLI.md §7, config.c), written out by hand. */
static const key k_keys[] = {
    {"model", STR, NULL, {0}},
    {"revision", STR, "main", {0}},
    {"cache_dir", STR, NULL, {0}},
    {"offline", BOOL, "false", {0}},
    {"quiet", BOOL, "false", {0}},
    {"load_format", ENUM, "auto", {"auto", "hf", "safetensors", "mistral", "pt", "sharded_state"}},
    {"tp", POS, "1", {0}},
    {"pp", POS, "1", {0}},
    {"dp", POS, "1", {0}},
    {"enable_expert_parallel", BOOL, "false", {0}},
    {"expert_placement", ENUM, "linear", {"linear", "round_robin"}},
    {"enable_eplb", BOOL, "false", {0}},
    {"num_redundant_experts", U64, "0", {0}},
    {"arch", STR, "auto", {0}},
    {"progress", ENUM, "auto", {"auto", "always", "never"}},
    {"layout", ENUM, "vllm", {"vllm", "checkpoint"}},
    {"device", ENUM, "cpu", {"cpu", "cuda"}},
    {"cuda_device", STR, NULL, {0}},
    {"pp_layer_partition", STR, NULL, {0}},
    {"extra_config", EXTRA, NULL, {0}},
    {"threads", THREADS, NULL, {0}},
    {"enable_multithread_load", BOOL, NULL, {0}},
    {"load_strategy", ENUM, "auto", {"auto", "direct", "io_uring", "mmap"}},
    {"prefault", BOOL, "false", {0}},
    {"staging_bytes", POS, "268435456", {0}},
    {"read_chunk_bytes", POS, "16777216", {0}},
    {"coalesce_gap_bytes", U64, "4096", {0}},
    {"two_phase_reads", BOOL, "true", {0}},
    {"storage", ENUM, "auto", {"auto", "shared", "local"}},
    {"bucket_bytes", POS, "67108864", {0}},
    {"save_sharded", STR, NULL, {0}},
    {"save_max_part_bytes", POS, "5368709120", {0}},
    {"overwrite", BOOL, "false", {0}},
    {"report", STR, NULL, {0}},
    {"timeout_s", DBL, "600", {0}},
    {"strict", BOOL, "true", {0}},
    {"skip_vision", BOOL, "false", {0}},
    {"storage_gbps", DBL, "2.0", {0}},
    {"network_gbps", DBL, "25.0", {0}},
    {"ranks_per_node", POS, "8", {0}},
    {"hub_token", STR, NULL, {0}},
    {"hub_backoff_base_ms", U64, "1000", {0}},
    {"hub_parallel_threshold", U64, "134217728", {0}},
    {"hub_chunk_bytes", POS, "67108864", {0}},
    {"hub_connections", POS, "8", {0}},
    {"hub_parallel_files", POS, "4", {0}},
    {"hub_verify", BOOL, "true", {0}},
    {"hub_lock_timeout_s", U64, "0", {0}},
    {"download_all", BOOL, "false", {0}},
    {"include", LIST, NULL, {0}},
};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

static sl_config *fresh(void) {
  sl_config *c = NULL;
  CHECK(sl_config_create(&c) == SL_STATUS_OK && c != NULL);
  return c;
}

/* Sets key=value on a fresh config and expects success, the value stored verbatim. */
static void accept_value(const char *k, const char *v) {
  sl_config *c = fresh();
  sl_status st = sl_config_set(c, k, v);
  CHECKF(st == SL_STATUS_OK, "%s='%s' refused: %s", k, v, sl_config_error(c));
  CHECKF(sl_config_get(c, k) != NULL && strcmp(sl_config_get(c, k), v) == 0, "%s='%s' not stored", k, v);
  CHECKF(sl__config_is_set(c, k), "%s: is_set after set", k);
  CHECK_STR(sl_config_error(c), "");
  sl_config_destroy(c);
}

/* Sets key=value and expects success, the value stored as `stored` (enums: the canonical spelling). */
static void accept_value_as(const char *k, const char *v, const char *stored) {
  sl_config *c = fresh();
  sl_status st = sl_config_set(c, k, v);
  CHECKF(st == SL_STATUS_OK, "%s='%s' refused: %s", k, v, sl_config_error(c));
  CHECKF(sl_config_get(c, k) != NULL && strcmp(sl_config_get(c, k), stored) == 0,
         "%s='%s' stored as '%s', want '%s'", k, v,
         sl_config_get(c, k) != NULL ? sl_config_get(c, k) : "(null)", stored);
  sl_config_destroy(c);
}

/* Sets key=value and expects SL_STATUS_CONFIG with exactly `want` as the message; the previous
 * value (`keep`) stays. */
static void refuse_value(const char *k, const char *keep, const char *v, const char *want) {
  sl_config *c = fresh();
  if (keep != NULL)
    CHECKF(sl_config_set(c, k, keep) == SL_STATUS_OK, "%s='%s': %s", k, keep, sl_config_error(c));
  sl_status st = sl_config_set(c, k, v);
  CHECKF(st == SL_STATUS_CONFIG, "%s='%s' must be refused (status %d)", k, v, (int)st);
  CHECKF(strcmp(sl_config_error(c), want) == 0, "%s='%s': message \"%s\", want \"%s\"", k, v,
         sl_config_error(c), want);
  const char *now = sl_config_get(c, k);
  if (keep != NULL)
    CHECKF(now != NULL && strcmp(now, keep) == 0, "%s: refused '%s' replaced '%s'", k, v, keep);
  else
    CHECKF(now == NULL, "%s: refused '%s' was stored", k, v);
  sl_config_destroy(c);
}

static void test_each_key(void) {
  static const char *const bool_true[] = {"1", "true", "yes", "on", "TRUE", "Yes", "oN"};
  static const char *const bool_false[] = {"0", "false", "no", "off", "FALSE", "No", "OFF"};
  static const char *const bool_bad[] = {"", "2", "y", "n", "truee", " true", "true ", "-1", "enabled"};
  static const char *const pos_ok[] = {"1", "42", "007", "9223372036854775807"};
  static const char *const pos_bad[] = {"0",
                                        "",
                                        "-1",
                                        "+1",
                                        "1.5",
                                        "1e3",
                                        " 1",
                                        "1 ",
                                        "0x10",
                                        "abc",
                                        "00",
                                        "9223372036854775808",
                                        "18446744073709551616"};
  static const char *const u64_ok[] = {"0", "1", "4096", "18446744073709551615"};
  static const char *const u64_bad[] = {"", "-1", "+0", "1k", "4096 ", "18446744073709551616", "1.0"};
  static const char *const dbl_ok[] = {"2", "0.5", "25.0", "1e3", "1e12", "1E-3"};
  static const char *const dbl_bad[] = {"0", "-1", "0.0", "abc", "", "1e13", "nan", "inf", "2x", "-0.5"};
  static const char *const any[] = {"", "x", "a b", "/path/to/model", "org/name", "{\"k\": 1}", "a\nb"};
  char want[512];
  for (size_t i = 0; i < N_KEYS; i++) {
    const key *k = &k_keys[i];
    switch (k->type) {
    case STR:
    case LIST:
      for (size_t v = 0; v < sizeof any / sizeof any[0]; v++)
        accept_value(k->name, any[v]);
      break;
    case BOOL:
      for (size_t v = 0; v < sizeof bool_true / sizeof bool_true[0]; v++) {
        accept_value(k->name, bool_true[v]);
        sl_config *c = fresh();
        sl_config_set(c, k->name, bool_true[v]);
        CHECKF(sl__config_bool(c, k->name), "%s='%s' reads false", k->name, bool_true[v]);
        sl_config_set(c, k->name, bool_false[v]);
        CHECKF(!sl__config_bool(c, k->name), "%s='%s' reads true", k->name, bool_false[v]);
        sl_config_destroy(c);
      }
      for (size_t v = 0; v < sizeof bool_bad / sizeof bool_bad[0]; v++) {
        snprintf(want, sizeof want, "%s: '%s' is not a boolean (accepted: true, false, 1, 0, yes, no)",
                 k->name, bool_bad[v]);
        refuse_value(k->name, "yes", bool_bad[v], want);
      }
      break;
    case EXTRA: {
      static const char *const e_ok[] = {"{}", " {\"num_threads\": 2}", "{\"enable_weights_track\": true}"};
      for (size_t v = 0; v < sizeof e_ok / sizeof e_ok[0]; v++)
        accept_value(k->name, e_ok[v]);
      refuse_value(k->name, "{}", "[]", "extra config must be a JSON object");
      refuse_value(k->name, NULL, "{\"threads\": 2}",
                   "unexpected extra config keys for load format 'auto': threads (allowed: "
                   "enable_multithread_load, enable_weights_track, num_threads)");
      break;
    }
    case THREADS: {
      static const char *const t_ok[] = {"1", "8", "1024", "0001"};
      for (size_t v = 0; v < sizeof t_ok / sizeof t_ok[0]; v++)
        accept_value(k->name, t_ok[v]);
      static const char *const t_over[] = {"1025", "100000", "9223372036854775807"};
      for (size_t v = 0; v < sizeof t_over / sizeof t_over[0]; v++) {
        snprintf(want, sizeof want, "%s: %s is above the limit of 1024", k->name, t_over[v]);
        refuse_value(k->name, "3", t_over[v], want);
      }
      for (size_t v = 0; v < sizeof pos_bad / sizeof pos_bad[0]; v++) {
        snprintf(want, sizeof want, "%s: '%s' is not a positive integer", k->name, pos_bad[v]);
        refuse_value(k->name, "3", pos_bad[v], want);
      }
      break;
    }
    case POS:
    case U64: {
      const char *const *ok = k->type == POS ? pos_ok : u64_ok;
      size_t n_ok = k->type == POS ? sizeof pos_ok / sizeof pos_ok[0] : sizeof u64_ok / sizeof u64_ok[0];
      const char *const *badv = k->type == POS ? pos_bad : u64_bad;
      size_t n_bad = k->type == POS ? sizeof pos_bad / sizeof pos_bad[0] : sizeof u64_bad / sizeof u64_bad[0];
      for (size_t v = 0; v < n_ok; v++) {
        accept_value(k->name, ok[v]);
        sl_config *c = fresh();
        sl_config_set(c, k->name, ok[v]);
        CHECKF(sl__config_u64(c, k->name) == strtoull(ok[v], NULL, 10), "%s='%s' reads %llu", k->name, ok[v],
               (unsigned long long)sl__config_u64(c, k->name));
        sl_config_destroy(c);
      }
      /* Byte counts also take units (1k = 1024, see test_config_units): their message says so. */
      size_t name_len = strlen(k->name);
      bool bytes = (name_len > 6 && strcmp(k->name + name_len - 6, "_bytes") == 0) ||
                   strcmp(k->name, "hub_parallel_threshold") == 0;
      for (size_t v = 0; v < n_bad; v++) {
        if (bytes && strcmp(badv[v], "1k") == 0)
          continue;
        snprintf(want, sizeof want, "%s: '%s' is not a %s integer%s", k->name, badv[v],
                 k->type == POS ? "positive" : "non-negative",
                 bytes ? " or byte count (e.g. 4096, 256M, 1.5GiB, 2GB)" : "");
        refuse_value(k->name, "3", badv[v], want);
      }
      break;
    }
    case DBL: {
      static const double dbl_val[] = {2, 0.5, 25.0, 1e3, 1e12, 1e-3};
      for (size_t v = 0; v < sizeof dbl_ok / sizeof dbl_ok[0]; v++) {
        accept_value(k->name, dbl_ok[v]);
        sl_config *c = fresh();
        sl_config_set(c, k->name, dbl_ok[v]);
        CHECKF(sl__config_double(c, k->name) == dbl_val[v], "%s='%s' reads %g", k->name, dbl_ok[v],
               sl__config_double(c, k->name));
        sl_config_destroy(c);
      }
      for (size_t v = 0; v < sizeof dbl_bad / sizeof dbl_bad[0]; v++) {
        snprintf(want, sizeof want, "%s: '%s' is not a positive number", k->name, dbl_bad[v]);
        refuse_value(k->name, "7.5", dbl_bad[v], want);
      }
      break;
    }
    case ENUM: {
      char accepted[128] = "";
      char pretty[128] = "";
      for (size_t v = 0; v < 6 && k->choices[v] != NULL; v++) {
        accept_value(k->name, k->choices[v]);
        /* Matched case-insensitively. */
        char upper[32];
        size_t n = strlen(k->choices[v]);
        for (size_t j = 0; j <= n; j++)
          upper[j] = (char)((k->choices[v][j] >= 'a' && k->choices[v][j] <= 'z') ? k->choices[v][j] - 32
                                                                                 : k->choices[v][j]);
        accept_value_as(k->name, upper, k->choices[v]); /* stored in the table's spelling */
        snprintf(accepted + strlen(accepted), sizeof accepted - strlen(accepted), "%s%s", v > 0 ? "," : "",
                 k->choices[v]);
        snprintf(pretty + strlen(pretty), sizeof pretty - strlen(pretty), "%s%s", v > 0 ? ", " : "",
                 k->choices[v]);
      }
      static const char *const enum_bad[] = {"", "x", "auto,hf", "cpux", "vll", "linear ", "round-robin"};
      for (size_t v = 0; v < sizeof enum_bad / sizeof enum_bad[0]; v++) {
        if (strcmp(k->name, "load_format") == 0)
          snprintf(want, sizeof want, "unknown load format '%s' (accepted: %s)", enum_bad[v], pretty);
        else
          snprintf(want, sizeof want, "%s: unknown value '%s' (accepted: %s)", k->name, enum_bad[v],
                   accepted);
        refuse_value(k->name, k->choices[0], enum_bad[v], want);
      }
      break;
    }
    }
  }
}

static void test_defaults(void) {
  sl_config *c = fresh();
  for (size_t i = 0; i < N_KEYS; i++) {
    const key *k = &k_keys[i];
    CHECKF(sl_config_get(c, k->name) == NULL, "%s: get on a fresh config is not NULL", k->name);
    CHECKF(!sl__config_is_set(c, k->name), "%s: set on a fresh config", k->name);
    const char *d = sl__config_str(c, k->name);
    if (k->dflt == NULL)
      CHECKF(d == NULL, "%s: default '%s', want none", k->name, d);
    else
      CHECKF(d != NULL && strcmp(d, k->dflt) == 0, "%s: default '%s', want '%s'", k->name, d ? d : "(null)",
             k->dflt);
    /* Also without a config. */
    const char *d0 = sl__config_str(NULL, k->name);
    CHECKF((d0 == NULL && k->dflt == NULL) || (d0 != NULL && k->dflt != NULL && strcmp(d0, k->dflt) == 0),
           "%s: default without a config", k->name);
  }
  CHECK_EQ_U64(sl__config_u64(c, "save_max_part_bytes"), 5ull << 30);
  CHECK_EQ_U64(sl__config_u64(c, "staging_bytes"), 256ull << 20);
  CHECK_EQ_U64(sl__config_u64(c, "coalesce_gap_bytes"), 4096);
  CHECK_EQ_U64(sl__config_u64(c, "threads"), 0); /* no default: 0 */
  CHECK(sl__config_bool(c, "strict"));
  CHECK(sl__config_bool(c, "hub_verify"));
  CHECK(!sl__config_bool(c, "offline"));
  CHECK(!sl__config_bool(c, "model")); /* a key without default reads false */
  CHECK(sl__config_double(c, "storage_gbps") == 2.0);
  CHECK(sl__config_double(c, "network_gbps") == 25.0);
  CHECK(sl__config_str(c, "no_such_key") == NULL);
  CHECK_EQ_U64(sl__config_u64(c, "no_such_key"), 0);
  sl_config_destroy(c);
}

static void test_api(void) {
  sl_config *c = NULL;
  CHECK(sl_config_create(NULL) == SL_STATUS_INVALID_ARGUMENT);
  c = fresh();
  CHECK(sl_config_set(NULL, "tp", "2") == SL_STATUS_INVALID_ARGUMENT);
  CHECK(sl_config_set(c, NULL, "2") == SL_STATUS_INVALID_ARGUMENT);
  CHECK(sl_config_set(c, "tp", NULL) == SL_STATUS_INVALID_ARGUMENT);
  CHECK(sl_config_get(NULL, "tp") == NULL);
  CHECK(sl_config_get(c, NULL) == NULL);
  CHECK(sl_config_get(c, "nope") == NULL);
  CHECK_STR(sl_config_error(NULL), "");
  CHECK_STR(sl_config_error(c), "");
  /* Unknown keys: exact names only (no dashes, no case folding); a near key is suggested. */
  static const struct {
    const char *key;
    const char *near; /* the suggestion, or NULL for none */
  } unknown[] = {{"nope", NULL},
                 {"TP", NULL},
                 {"load-format", "load_format"},
                 {"tp ", "tp"},
                 {"", NULL},
                 {"model.name", "model"},
                 {"zzzzzzzz", NULL},
                 {"stagin_bytes", "staging_bytes"},
                 {"staging", "staging_bytes"},
                 {"tensor_paralel_size", "tensor_parallel_size"},
                 {"downlaod_dir", "download_dir"},
                 {"tq", "tp"},
                 {"enable_expert_paralel", "enable_expert_parallel"}};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    char want[160];
    if (unknown[i].near != NULL)
      snprintf(want, sizeof want, "unknown configuration key '%s'; did you mean %s?", unknown[i].key,
               unknown[i].near);
    else
      snprintf(want, sizeof want, "unknown configuration key '%s'", unknown[i].key);
    CHECK(sl_config_set(c, unknown[i].key, "1") == SL_STATUS_CONFIG);
    CHECK_STR(sl_config_error(c), want);
  }
  /* vLLM's names of keys: the same value as the key itself, read back by either name. */
  static const char *const aliases[][2] = {{"tensor_parallel_size", "tp"},
                                           {"pipeline_parallel_size", "pp"},
                                           {"data_parallel_size", "dp"},
                                           {"download_dir", "cache_dir"}};
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    sl_config *a = fresh();
    CHECKF(sl_config_set(a, aliases[i][0], "3") == SL_STATUS_OK, "%s: %s", aliases[i][0], sl_config_error(a));
    CHECK_STR(sl_config_get(a, aliases[i][1]), "3");
    CHECK_STR(sl_config_get(a, aliases[i][0]), "3");
    CHECK_STR(sl__config_str(a, aliases[i][1]), "3");
    sl_config_destroy(a);
  }
  /* A bad value under an alias names the key and says which one the alias is. */
  CHECK(sl_config_set(c, "tensor_parallel_size", "0") == SL_STATUS_CONFIG);
  CHECK_STR(sl_config_error(c),
            "tp: '0' is not a positive integer (tensor_parallel_size is vLLM's name for tp)");
  /* The message of a failure stays until the next call; a success clears it. */
  CHECK(sl_config_set(c, "tp", "4") == SL_STATUS_OK);
  CHECK(sl_config_set(c, "tp", "0") == SL_STATUS_CONFIG);
  CHECK_STR(sl_config_error(c), "tp: '0' is not a positive integer");
  CHECK_STR(sl_config_get(c, "tp"), "4");
  CHECK(sl_config_set(c, "pp", "x") == SL_STATUS_CONFIG); /* a new failure replaces the message */
  CHECK_STR(sl_config_error(c), "pp: 'x' is not a positive integer");
  CHECK(sl_config_set(c, "pp", "2") == SL_STATUS_OK);
  CHECK_STR(sl_config_error(c), "");
  /* Overwriting a value. */
  CHECK(sl_config_set(c, "tp", "8") == SL_STATUS_OK);
  CHECK_STR(sl_config_get(c, "tp"), "8");
  CHECK_EQ_U64(sl__config_u64(c, "tp"), 8);
  /* The stored value is a copy. */
  char buf[16] = "model-a";
  CHECK(sl_config_set(c, "model", buf) == SL_STATUS_OK);
  strcpy(buf, "changed");
  CHECK_STR(sl_config_get(c, "model"), "model-a");
  /* Internal error slot. */
  sl__err e;
  sl__err_clear(&e);
  sl__err_set(&e, SL_STATUS_MODEL_CONFIG, "config.json: bad");
  sl__config_set_error(c, &e);
  CHECK_STR(sl_config_error(c), "config.json: bad");
  sl__config_clear_error(c);
  CHECK_STR(sl_config_error(c), "");
  sl__config_set_error(NULL, &e);
  sl__config_clear_error(NULL);
  /* Clone: values copied, independent, message not copied. */
  sl__config_set_error(c, &e);
  sl_config *k = sl__config_clone(c);
  CHECK(k != NULL);
  if (k != NULL) {
    CHECK_STR(sl_config_get(k, "tp"), "8");
    CHECK_STR(sl_config_get(k, "pp"), "2");
    CHECK_STR(sl_config_get(k, "model"), "model-a");
    CHECK(sl_config_get(k, "dp") == NULL);
    CHECK_STR(sl_config_error(k), "");
    sl_config_set(c, "tp", "16");
    CHECK_STR(sl_config_get(k, "tp"), "8");
    sl_config_destroy(k);
  }
  k = sl__config_clone(NULL); /* an empty config */
  CHECK(k != NULL && sl_config_get(k, "tp") == NULL);
  sl_config_destroy(k);
  sl_config_destroy(c);
  sl_config_destroy(NULL);
}

static size_t list_len(char **l) {
  size_t n = 0;
  while (l != NULL && l[n] != NULL)
    n++;
  return n;
}

static void test_lists(void) {
  sl_config *c = fresh();
  char **l = sl__config_list(c, "include"); /* unset: empty list */
  CHECK(l != NULL && list_len(l) == 0);
  sl__config_free_list(l);
  CHECK(sl_config_set(c, "include", "tokenizer*\n\n*.py\n") == SL_STATUS_OK);
  l = sl__config_list(c, "include");
  CHECK(list_len(l) == 2);
  if (list_len(l) == 2) {
    CHECK_STR(l[0], "tokenizer*");
    CHECK_STR(l[1], "*.py");
  }
  sl__config_free_list(l);
  CHECK(sl_config_set(c, "include", "\n\nonly") == SL_STATUS_OK);
  l = sl__config_list(c, "include");
  CHECK(list_len(l) == 1 && strcmp(l[0], "only") == 0);
  sl__config_free_list(l);
  CHECK(sl_config_set(c, "include", "") == SL_STATUS_OK);
  l = sl__config_list(c, "include");
  CHECK(l != NULL && list_len(l) == 0);
  sl__config_free_list(l);
  sl__config_free_list(NULL);
  sl_config_destroy(c);
}

static void test_keys_listing(void) {
  const char *text = sl_config_keys();
  CHECK(text != NULL && text[0] != '\0');
  CHECK(sl_config_keys() == text); /* built once */
  /* One line per key: "  NAME<spaces>HELP[; one of A, B][ (default D)]\n". */
  size_t lines = 0;
  size_t seen[N_KEYS] = {0};
  for (const char *p = text; p != NULL && *p != '\0';) {
    const char *nl = strchr(p, '\n');
    CHECKF(nl != NULL, "last line not terminated: \"%s\"", p);
    if (nl == NULL)
      break;
    char line[512];
    size_t len = (size_t)(nl - p) < sizeof line - 1 ? (size_t)(nl - p) : sizeof line - 1;
    memcpy(line, p, len);
    line[len] = '\0';
    lines++;
    CHECKF(strncmp(line, "  ", 2) == 0, "line \"%s\" not indented", line);
    char name[64] = "";
    sscanf(line, "%63s", name);
    bool known = false;
    for (size_t i = 0; i < N_KEYS; i++) {
      if (strcmp(name, k_keys[i].name) != 0)
        continue;
      known = true;
      seen[i]++;
      char tail[96];
      if (k_keys[i].dflt != NULL) {
        snprintf(tail, sizeof tail, " (default %s)", k_keys[i].dflt);
        CHECKF(len >= strlen(tail) && strcmp(line + len - strlen(tail), tail) == 0,
               "line of %s does not end with \"%s\": \"%s\"", name, tail, line);
      }
      if (k_keys[i].type == ENUM) { /* the accepted values, as --help shows them */
        char values[160] = "; one of ";
        for (size_t v = 0; v < 6 && k_keys[i].choices[v] != NULL; v++)
          snprintf(values + strlen(values), sizeof values - strlen(values), "%s%s", v > 0 ? ", " : "",
                   k_keys[i].choices[v]);
        CHECKF(strstr(line, values) != NULL, "line of %s does not list its values \"%s\": \"%s\"", name,
               values, line);
      }
      /* Some help text after the name. */
      CHECKF(strlen(line) > 2 + strlen(name) + 2, "line of %s has no help: \"%s\"", name, line);
    }
    CHECKF(known, "unknown key listed: \"%s\"", line);
    p = nl + 1;
  }
  CHECK_EQ_U64(lines, N_KEYS);
  for (size_t i = 0; i < N_KEYS; i++)
    CHECKF(seen[i] == 1, "key %s listed %zu times", k_keys[i].name, seen[i]);
  /* Every listed key is settable. */
  sl_config *c = fresh();
  for (size_t i = 0; i < N_KEYS; i++) {
    sl_config_set(c, k_keys[i].name, "1");
    CHECKF(strncmp(sl_config_error(c), "unknown configuration key", 25) != 0, "%s: %s", k_keys[i].name,
           sl_config_error(c));
  }
  sl_config_destroy(c);
}

/* ---- options.c ---- */

static sl_status opts_of(const char *const *kv, sl__opts *o, sl__err *err, sl_config **keep) {
  sl_config *c = fresh();
  for (size_t i = 0; kv[i] != NULL; i += 2)
    CHECKF(sl_config_set(c, kv[i], kv[i + 1]) == SL_STATUS_OK, "%s=%s: %s", kv[i], kv[i + 1],
           sl_config_error(c));
  sl__err_clear(err);
  sl_status st = sl__opts_from_config(c, o, err);
  *keep = c; /* strings of o point into the config */
  return st;
}

#define OPTS_ERR(want, ...) opts_err(__LINE__, want, (const char *const[]){__VA_ARGS__, NULL})
static void opts_err(int line, const char *want, const char *const *kv) {
  sl__opts o;
  sl__err err;
  sl_config *c = NULL;
  sl_status st = opts_of(kv, &o, &err, &c);
  CHECKF(st == SL_STATUS_CONFIG, "line %d: must fail (status %d)", line, (int)st);
  CHECKF(strstr(err.msg, want) != NULL, "line %d: message \"%s\" lacks \"%s\"", line, err.msg, want);
  sl_config_destroy(c);
}

static void test_options(void) {
  sl__opts o;
  sl__err err;
  sl_config *c = NULL;
  unsetenv("VLLM_PP_LAYER_PARTITION");
  /* Defaults. */
  sl_status st = opts_of((const char *const[]){"model", "/m", NULL}, &o, &err, &c);
  CHECKF(st == SL_STATUS_OK, "defaults: %s", err.msg);
  CHECK_STR(o.model, "/m");
  CHECK(o.tp == 1 && o.pp == 1 && o.dp == 1);
  CHECK(!o.enable_ep && !o.eplb && o.redundant == 0);
  CHECK(o.placement == SL_PLACEMENT_LINEAR);
  CHECK(o.layout == SL_LAYOUT_VLLM);
  CHECK(o.device == SL_DEVICE_CPU);
  CHECK(o.cuda_device == -1);
  CHECK(o.pp_partition == NULL);
  CHECK(o.format == SL_FORMAT_AUTO);
  CHECK_STR(o.arch, "auto");
  CHECK(o.strategy == SL_STRATEGY_AUTO);
  CHECK(!o.prefault && !o.quiet);
  CHECK_EQ_U64(o.staging_bytes, 268435456);
  CHECK_EQ_U64(o.read_chunk, 16777216);
  CHECK_EQ_U64(o.coalesce_gap, 4096);
  CHECK_EQ_U64(o.bucket_bytes, 67108864);
  CHECK_EQ_U64(o.save_max_part, 5368709120ull);
  CHECK(o.save_dir == NULL && o.report == NULL);
  CHECK(o.storage_gbps == 2.0 && o.network_gbps == 25.0);
  CHECK_EQ_U64(o.ranks_per_node, 8);
  CHECK_EQ_U64(o.extra.num_threads, 8);
  CHECK(o.extra.weights_track);
  /* bucket = min(64 MiB, 256 MiB / 4, 1 GiB) = 64 MiB; slots = 8 threads * 2 = 16;
   * left = 256 MiB - 2 * 64 MiB = 128 MiB; per slot 8 MiB; fit = 8 MiB - 8 KiB → chunk 8380416. */
  CHECK_EQ_U64(sl__effective_bucket(&o), 64ull << 20);
  CHECK_EQ_U64(sl__effective_chunk(&o), (8ull << 20) - 8192);
  o.strategy = SL_STRATEGY_IO_URING; /* 32 slots: per 4 MiB → 4 MiB - 8 KiB */
  CHECK_EQ_U64(sl__effective_chunk(&o), (4ull << 20) - 8192);
  o.strategy = SL_STRATEGY_AUTO;
  o.read_chunk = 1 << 20; /* smaller than what fits: kept */
  CHECK_EQ_U64(sl__effective_chunk(&o), 1 << 20);
  o.staging_bytes = 1 << 20; /* bucket 256 KiB; left 512 KiB; per 32 KiB; fit 24 KiB */
  CHECK_EQ_U64(sl__effective_bucket(&o), 256 << 10);
  CHECK_EQ_U64(sl__effective_chunk(&o), 24 << 10);
  o.staging_bytes = 16ull << 30; /* bucket 2 GiB requested: capped at 1 GiB */
  o.bucket_bytes = 2ull << 30;
  CHECK_EQ_U64(sl__effective_bucket(&o), 1ull << 30);
  o.staging_bytes = 3; /* 3 / 4 = 0 → 1 */
  CHECK_EQ_U64(sl__effective_bucket(&o), 1);
  CHECK_EQ_U64(sl__effective_chunk(&o), 8192); /* nothing fits: two blocks */
  sl_config_destroy(c);

  /* Values carried through. */
  st = opts_of((const char *const[]){"model",
                                     "org/m",
                                     "tp",
                                     "4",
                                     "pp",
                                     "2",
                                     "dp",
                                     "3",
                                     "enable_expert_parallel",
                                     "yes",
                                     "enable_eplb",
                                     "1",
                                     "num_redundant_experts",
                                     "2",
                                     "expert_placement",
                                     "round_robin",
                                     "layout",
                                     "checkpoint",
                                     "cuda_device",
                                     "3",
                                     "pp_layer_partition",
                                     "1,1",
                                     "load_format",
                                     "HF",
                                     "load_strategy",
                                     "direct",
                                     "prefault",
                                     "on",
                                     "threads",
                                     "5",
                                     "strict",
                                     "false",
                                     "save_sharded",
                                     "/out",
                                     "report",
                                     "r.json",
                                     "quiet",
                                     "true",
                                     "storage_gbps",
                                     "1.5",
                                     "ranks_per_node",
                                     "4",
                                     "arch",
                                     "x.json",
                                     NULL},
               &o, &err, &c);
  CHECKF(st == SL_STATUS_OK, "values: %s", err.msg);
  CHECK(o.tp == 4 && o.pp == 2 && o.dp == 3);
  CHECK(o.enable_ep && o.eplb && o.redundant == 2);
  CHECK(o.placement == SL_PLACEMENT_ROUND_ROBIN);
  CHECK(o.layout == SL_LAYOUT_CHECKPOINT);
  CHECK(o.cuda_device == 3);
  CHECK_STR(o.pp_partition, "1,1");
  CHECK(o.format == SL_FORMAT_HF);
  CHECK(o.strategy == SL_STRATEGY_DIRECT);
  CHECK(o.prefault && o.quiet);
  CHECK_EQ_U64(o.extra.num_threads, 5);
  CHECK(!o.extra.weights_track);
  CHECK_STR(o.save_dir, "/out");
  CHECK_STR(o.report, "r.json");
  CHECK(o.storage_gbps == 1.5);
  CHECK_EQ_U64(o.ranks_per_node, 4);
  CHECK_STR(o.arch, "x.json");
  CHECK_STR(sl__strategy_name(o.strategy), "direct");
  sl_config_destroy(c);
  CHECK_STR(sl__strategy_name(SL_STRATEGY_AUTO), "auto");
  CHECK_STR(sl__strategy_name(SL_STRATEGY_IO_URING), "io_uring");
  CHECK_STR(sl__strategy_name(SL_STRATEGY_MMAP), "mmap");

  /* The partition from the environment when the key is not set; the key wins over it. */
  setenv("VLLM_PP_LAYER_PARTITION", "2,3", 1);
  st = opts_of((const char *const[]){"model", "m", NULL}, &o, &err, &c);
  CHECK(st == SL_STATUS_OK);
  CHECK_STR(o.pp_partition, "2,3");
  sl_config_destroy(c);
  st = opts_of((const char *const[]){"model", "m", "pp_layer_partition", "4,1", NULL}, &o, &err, &c);
  CHECK(st == SL_STATUS_OK);
  CHECK_STR(o.pp_partition, "4,1");
  sl_config_destroy(c);
  unsetenv("VLLM_PP_LAYER_PARTITION");

  /* Cross-key errors, each naming what is wrong. */
  {
    sl_config *e = fresh();
    sl__err_clear(&err);
    CHECK(sl__opts_from_config(e, &o, &err) == SL_STATUS_CONFIG);
    CHECK_STR(err.msg, "model: no model folder or repository given");
    sl_config_destroy(e);
  }
  OPTS_ERR("model: no model folder or repository given", "model", "");
  OPTS_ERR("tp: 2147483648 is too large", "model", "m", "tp", "2147483648");
  OPTS_ERR("dp: 4294967297 is too large", "model", "m", "dp", "4294967297");
  OPTS_ERR("ranks_per_node: 2147483648 is too large", "model", "m", "ranks_per_node", "2147483648");
  OPTS_ERR("enable_eplb (--enable-eplb) requires enable_expert_parallel (--enable-expert-parallel)", "model",
           "m", "enable_eplb", "true");
  OPTS_ERR("num_redundant_experts requires enable_eplb (--enable-eplb)", "model", "m",
           "enable_expert_parallel", "true", "num_redundant_experts", "1");
  OPTS_ERR("cuda_device: 'abc' is not a device ordinal", "model", "m", "cuda_device", "abc");
  OPTS_ERR("cuda_device: '1025' is not a device ordinal", "model", "m", "cuda_device", "1025");
  OPTS_ERR("cuda_device: '-1' is not a device ordinal", "model", "m", "cuda_device", "-1");
  OPTS_ERR("load_strategy 'mmap'", "model", "m", "load_strategy", "mmap", "device", "cuda");
  OPTS_ERR("staging_bytes: 1048575 is below the minimum of 1 MiB", "model", "m", "staging_bytes", "1048575");
  /* An extra-config key is its configuration key under another name: the value set last wins. */
  st = opts_of(
      (const char *const[]){"model", "m", "threads", "4", "extra_config", "{\"num_threads\": 2}", NULL}, &o,
      &err, &c);
  CHECKF(st == SL_STATUS_OK && o.extra.num_threads == 2, "threads 4, then num_threads 2: %s", err.msg);
  sl_config_destroy(c);
  st = opts_of((const char *const[]){"model", "m", "staging_bytes", "1048576", "cuda_device", "1024", NULL},
               &o, &err, &c);
  CHECKF(st == SL_STATUS_OK, "1 MiB staging: %s", err.msg);
  CHECK(o.cuda_device == 1024);
  sl_config_destroy(c);
  /* enable_multithread_load false: one reader thread. */
  st = opts_of(
      (const char *const[]){"model", "m", "extra_config", "{\"enable_multithread_load\": false}", NULL}, &o,
      &err, &c);
  CHECKF(st == SL_STATUS_OK, "multithread false: %s", err.msg);
  CHECK_EQ_U64(o.extra.num_threads, 1);
  sl_config_destroy(c);

  /* Enum values are accepted case-insensitively by sl_config_set (test_each_key) and stored in
   * their canonical spelling, so the options read them whatever the case they were given in. */
  st = opts_of((const char *const[]){"model", "m", "layout", "CHECKPOINT", "load_strategy", "MMAP",
                                     "load_format", "SafeTensors", NULL},
               &o, &err, &c);
  CHECKF(st == SL_STATUS_OK, "upper case: %s", err.msg);
  CHECK(o.format == SL_FORMAT_SAFETENSORS);
  CHECK(o.layout == SL_LAYOUT_CHECKPOINT);
  CHECK(o.strategy == SL_STRATEGY_MMAP);
  sl_config_destroy(c);
  st = opts_of((const char *const[]){"model", "m", "device", "CUDA", NULL}, &o, &err, &c);
  CHECK(st == SL_STATUS_OK && o.device == SL_DEVICE_CUDA);
  sl_config_destroy(c);
  st = opts_of((const char *const[]){"model", "m", "expert_placement", "ROUND_ROBIN",
                                     "enable_expert_parallel", "true", NULL},
               &o, &err, &c);
  CHECKF(st == SL_STATUS_OK, "ROUND_ROBIN: %s", err.msg);
  CHECK(o.placement == SL_PLACEMENT_ROUND_ROBIN);
  sl_config_destroy(c);
  st = opts_of((const char *const[]){"model", "m", "load_strategy", "Io_Uring", NULL}, &o, &err, &c);
  CHECK(st == SL_STATUS_OK && o.strategy == SL_STRATEGY_IO_URING);
  sl_config_destroy(c);
  /* The thread bound: 1024 is fine, and the extra config's num_threads has the same bound. */
  st = opts_of((const char *const[]){"model", "m", "threads", "1024", NULL}, &o, &err, &c);
  CHECK(st == SL_STATUS_OK && o.extra.num_threads == 1024);
  sl_config_destroy(c);
  /* storage: auto by default, each value its mode (docs/spec/STORAGE.md §1) */
  static const char *const storage[3] = {"auto", "shared", "local"};
  static const sl__storage modes[3] = {SL_STORAGE_AUTO, SL_STORAGE_SHARED, SL_STORAGE_LOCAL};
  st = opts_of((const char *const[]){"model", "m", NULL}, &o, &err, &c);
  CHECK(st == SL_STATUS_OK && o.storage == SL_STORAGE_AUTO);
  sl_config_destroy(c);
  for (int i = 0; i < 3; i++) {
    st = opts_of((const char *const[]){"model", "m", "storage", storage[i], NULL}, &o, &err, &c);
    CHECKF(st == SL_STATUS_OK && o.storage == modes[i], "storage %s", storage[i]);
    sl_config_destroy(c);
  }
  /* An extra config is checked when it is set (its members are keys): nothing is set then. */
  c = fresh();
  CHECK(sl_config_set(c, "extra_config", "{\"num_threads\": 100000}") == SL_STATUS_CONFIG);
  CHECK(strstr(sl_config_error(c), "must be an integer from 1 to 1024") != NULL);
  CHECK(!sl__config_is_set(c, "threads") && !sl__config_is_set(c, "extra_config"));
  sl_config_destroy(c);
}

int main(void) {
  CHECK_EQ_U64(N_KEYS, 50);
  test_each_key();
  test_defaults();
  test_api();
  test_lists();
  test_keys_listing();
  test_options();
  return sl_test_finish();
}
