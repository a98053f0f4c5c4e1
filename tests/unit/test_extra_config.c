/*
 * test_extra_config.c — `--extra-config` (docs/spec/FILES.md §6, §7 item 7): each valid key, the
 * exact messages, the validation order, how num_threads must be written; and its members as
 * configuration keys under vLLM's names (num_threads sets threads, enable_weights_track sets
 * strict, enable_multithread_load is a key): the value set last wins, a refused object sets
 * nothing, enable_multithread_load true needs load strategy auto.
 */
#include "api/config.h"
#include "api/extra_config.h"
#include "api/options.h"
#include "check.h"

#include <string.h>

/* A configuration with model "m", the given load format and strategy (NULL: default), and json as
 * its extra_config; *st the status of setting it. */
static sl_config *config_with(const char *json, const char *format, const char *strategy, sl_status *st) {
  sl_config *c = NULL;
  sl_config_create(&c);
  sl_config_set(c, "model", "m");
  if (format != NULL)
    sl_config_set(c, "load_format", format);
  if (strategy != NULL)
    sl_config_set(c, "load_strategy", strategy);
  *st = sl_config_set(c, "extra_config", json);
  return c;
}

/* The readers' settings the options take from json: multithread, threads, weights_track. */
#define EXPECT_OK(json, mt, nt, wt) expect_ok(__LINE__, json, mt, nt, wt)
static void expect_ok(int line, const char *json, int mt, uint32_t nt, bool wt) {
  sl_status st;
  sl_config *c = config_with(json, "hf", NULL, &st);
  CHECKF(st == SL_STATUS_OK, "line %d: %s: status %s: %s", line, json, sl_status_name(st),
         sl_config_error(c));
  sl__opts o;
  sl__err err;
  sl__err_clear(&err);
  st = sl__opts_from_config(c, &o, &err);
  CHECKF(st == SL_STATUS_OK, "line %d: options: %s", line, err.msg);
  CHECKF(o.extra.multithread == mt, "line %d: multithread %d != %d", line, o.extra.multithread, mt);
  CHECKF(o.extra.num_threads == nt, "line %d: num_threads %u != %u", line, o.extra.num_threads, nt);
  CHECKF(o.extra.weights_track == wt, "line %d: weights_track %d", line, (int)o.extra.weights_track);
  sl_config_destroy(c);
}

/* Refused with SL_STATUS_CONFIG (format: the load format set before, NULL = none); the message
 * equals exact (when not NULL) and contains part (when not NULL); nothing of the object is set. */
#define EXPECT_ERR(json, format, exact, part) expect_err(__LINE__, json, format, exact, part)
static void expect_err(int line, const char *json, const char *format, const char *exact, const char *part) {
  sl_status st;
  sl_config *c = config_with(json, format, NULL, &st);
  const char *msg = sl_config_error(c);
  CHECKF(st == SL_STATUS_CONFIG, "line %d: %s: status %s (%s)", line, json, sl_status_name(st), msg);
  CHECKF(exact == NULL || strcmp(msg, exact) == 0, "line %d: message \"%s\" != \"%s\"", line, msg,
         exact ? exact : "");
  CHECKF(part == NULL || strstr(msg, part) != NULL, "line %d: \"%s\" lacks \"%s\"", line, msg,
         part ? part : "");
  static const char *const keys[] = {"extra_config", "threads", "strict", "enable_multithread_load"};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    CHECKF(!sl__config_is_set(c, keys[k]), "line %d: %s set by a refused extra config", line, keys[k]);
  /* The parser alone: the same verdict, no member. */
  sl__extra_members m;
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__extra_config_parse(json, format, &m, &err) == SL_STATUS_CONFIG && m.n == 0, "line %d: parse",
         line);
  sl_config_destroy(c);
}

static void test_defaults_and_keys(void) {
  EXPECT_OK("{}", -1, 8, true);
  EXPECT_OK(" \n{ }\t", -1, 8, true);
  EXPECT_OK("{\"enable_multithread_load\": true}", 1, 8, true);
  EXPECT_OK("{\"enable_multithread_load\": false}", 0, 1, true); /* one reader thread */
  EXPECT_OK("{\"num_threads\": 8}", -1, 8, true);
  EXPECT_OK("{\"num_threads\": 1}", -1, 1, true);
  EXPECT_OK("{\"num_threads\": 16}", -1, 16, true);
  /* The bound of SL_THREADS_MAX (api/extra_config.h): 1024 accepted, 1025 and 100000 refused below. */
  EXPECT_OK("{\"num_threads\": 1024}", -1, 1024u, true);
  EXPECT_OK("{\"num_threads\":\n 3 }", -1, 3, true);
  EXPECT_OK("{\"enable_weights_track\": false}", -1, 8, false);
  EXPECT_OK("{\"enable_weights_track\": true}", -1, 8, true);
  EXPECT_OK("{\"enable_multithread_load\":false,\"num_threads\":12,\"enable_weights_track\":false}", 0, 1,
            false);
  EXPECT_OK("{\"enable_weights_track\": true, \"enable_multithread_load\": true, \"num_threads\": 4}", 1, 4,
            true);
  /* A key written with an escape is the same key; the token is found by member position. */
  EXPECT_OK("{\"enable_weights_track\": false, \"num\\u005fthreads\": 5}", -1, 5, false);
  /* cJSON skips a UTF-8 byte order mark; so does the token scanner. */
  EXPECT_OK("\xEF\xBB\xBF{\"num_threads\": 6}", -1, 6, true);
  /* The parser's members: the table's spelling, in document order. */
  sl__extra_members m;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__extra_config_parse("{\"num\\u005fthreads\": 5, \"enable_weights_track\": false}", NULL, &m,
                               &err) == SL_STATUS_OK);
  CHECK(m.n == 2);
  CHECK_STR(m.member[0].key, "num_threads");
  CHECK_STR(m.member[0].value, "5");
  CHECK_STR(m.member[1].key, "enable_weights_track");
  CHECK_STR(m.member[1].value, "false");
  CHECK(sl__extra_config_parse(NULL, NULL, &m, &err) == SL_STATUS_OK && m.n == 0);
}

static void test_object_and_keys(void) {
  const char *not_object = "extra config must be a JSON object";
  EXPECT_ERR("[]", "hf", not_object, NULL);
  EXPECT_ERR("8", "hf", not_object, NULL);
  EXPECT_ERR("null", "hf", not_object, NULL);
  EXPECT_ERR("\"{}\"", "hf", not_object, NULL);
  EXPECT_ERR("[{\"num_threads\": 8}]", "hf", not_object, NULL);
  /* Not JSON: base/json.h's messages, naming the byte; its nesting limit. */
  EXPECT_ERR("", "hf", "extra config: invalid JSON near byte 0", NULL);
  EXPECT_ERR("{", "hf", NULL, "extra config: invalid JSON near byte");
  EXPECT_ERR("{\"num_threads\": 8} x", "hf", "extra config: text after the JSON value at byte 19", NULL);
  EXPECT_ERR("{num_threads: 8}", "hf", NULL, "extra config: invalid JSON near byte");
  EXPECT_ERR("{\"num_threads\": 8,}", "hf", NULL, "extra config: invalid JSON near byte");
  char deep[2 * 70 + 1];
  memset(deep, '[', 70);
  memset(deep + 70, ']', 70);
  deep[140] = '\0';
  EXPECT_ERR(deep, "hf", NULL, "extra config: nested deeper than 64 levels");

  /* Duplicate keys (step 1) come before unknown keys (step 2). */
  EXPECT_ERR("{\"num_threads\": 8, \"num_threads\": 8}", "hf", "duplicate key 'num_threads' in extra config",
             NULL);
  EXPECT_ERR("{\"foo\": 1, \"bar\": 2, \"foo\": 3}", "hf", "duplicate key 'foo' in extra config", NULL);

  EXPECT_ERR("{\"foo\": 1, \"bar\": 2}", "hf",
             "unexpected extra config keys for load format 'hf': bar, foo (allowed: enable_multithread_load, "
             "enable_weights_track, num_threads)",
             NULL);
  EXPECT_ERR("{\"zz\": true, \"num_threads\": 8, \"foo\": null}", "safetensors",
             "unexpected extra config keys for load format 'safetensors': foo, zz (allowed: "
             "enable_multithread_load, enable_weights_track, num_threads)",
             NULL);
  EXPECT_ERR(
      "{\"Num_threads\": 8}", NULL,
      "unexpected extra config keys for load format 'auto': Num_threads (allowed: enable_multithread_load, "
      "enable_weights_track, num_threads)",
      NULL);
  /* The key's own configuration name is not an extra-config key (vLLM's set only). */
  EXPECT_ERR("{\"threads\": 8}", "hf", NULL, "unexpected extra config keys for load format 'hf': threads");
  /* Unknown keys (step 2) come before types (step 3). */
  EXPECT_ERR("{\"num_threads\": \"8\", \"x\": 1}", "hf", NULL, "unexpected extra config keys");
}

static void test_types(void) {
  static const char *const bad_threads[] = {"8.0",  "8e0",         "\"8\"", "0",   "-1",         "2147483648",
                                            "1025", "100000",      "08",    "1E1", "8.5",        "null",
                                            "true", "99999999999", "-0",    "[8]", "{\"n\": 8}", "0.0"};
  for (size_t i = 0; i < sizeof bad_threads / sizeof bad_threads[0]; i++) {
    char json[128];
    snprintf(json, sizeof json, "{\"num_threads\": %s}", bad_threads[i]);
    char shown[128];
    snprintf(shown, sizeof shown, "(got %s)", bad_threads[i]);
    EXPECT_ERR(json, "hf", NULL, "extra config key 'num_threads' must be an integer from 1 to 1024");
    EXPECT_ERR(json, "hf", NULL, shown);
  }
  static const char *const bad_bools[] = {"1", "0", "\"true\"", "null", "\"false\"", "[true]"};
  static const char *const bool_keys[] = {"enable_multithread_load", "enable_weights_track"};
  for (size_t k = 0; k < 2; k++) {
    for (size_t i = 0; i < sizeof bad_bools / sizeof bad_bools[0]; i++) {
      char json[128];
      snprintf(json, sizeof json, "{\"%s\": %s}", bool_keys[k], bad_bools[i]);
      char expected[256];
      snprintf(expected, sizeof expected, "extra config key '%s' must be true or false (got %s)",
               bool_keys[k], bad_bools[i]);
      EXPECT_ERR(json, "hf", expected, NULL);
    }
  }
  /* Document order: the first bad member is reported; strings with quotes and brackets are skipped.
   * A valid member before the bad one is not set either. */
  EXPECT_ERR("{\"enable_weights_track\": \"a\\\"}, [\", \"num_threads\": 0}", "hf", NULL,
             "enable_weights_track");
  EXPECT_ERR("{\"enable_weights_track\": false, \"num_threads\": 0}", "hf", NULL, "(got 0)");
}

/* The options' verdict on keys set in order (NULL-terminated pairs): OK with threads nt and
 * weights_track wt, or a CONFIG error containing part. */
static void keys_in_order(int line, const char *const *kv, uint32_t nt, bool wt, const char *part) {
  sl_config *c = NULL;
  sl_config_create(&c);
  sl_config_set(c, "model", "m");
  for (size_t i = 0; kv[i] != NULL; i += 2)
    CHECKF(sl_config_set(c, kv[i], kv[i + 1]) == SL_STATUS_OK, "line %d: %s=%s: %s", line, kv[i], kv[i + 1],
           sl_config_error(c));
  sl__opts o;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__opts_from_config(c, &o, &err);
  if (part != NULL) {
    CHECKF(st == SL_STATUS_CONFIG && strstr(err.msg, part) != NULL, "line %d: \"%s\" lacks \"%s\"", line,
           err.msg, part);
  } else {
    CHECKF(st == SL_STATUS_OK, "line %d: %s", line, err.msg);
    CHECKF(o.extra.num_threads == nt, "line %d: threads %u != %u", line, o.extra.num_threads, nt);
    CHECKF(o.extra.weights_track == wt, "line %d: weights_track %d", line, (int)o.extra.weights_track);
  }
  sl_config_destroy(c);
}
#define KEYS_OK(nt, wt, ...) keys_in_order(__LINE__, (const char *const[]){__VA_ARGS__, NULL}, nt, wt, NULL)
#define KEYS_ERR(part, ...) keys_in_order(__LINE__, (const char *const[]){__VA_ARGS__, NULL}, 0, false, part)

static void test_strategy_and_keys(void) {
  const char *mt = "{\"enable_multithread_load\": true}";
  KEYS_ERR("enable_multithread_load cannot be combined with load strategy 'direct'", "load_strategy",
           "direct", "extra_config", mt);
  KEYS_ERR("enable_multithread_load cannot be combined with load strategy 'io_uring'", "extra_config", mt,
           "load_strategy", "io_uring");
  KEYS_ERR("load strategy 'mmap'", "enable_multithread_load", "true", "load_strategy", "mmap");
  KEYS_OK(8, true, "extra_config", mt, "load_strategy", "auto");
  KEYS_OK(1, true, "extra_config", "{\"enable_multithread_load\": false}", "load_strategy", "direct");
  KEYS_OK(8, true, "extra_config", "{}", "load_strategy", "io_uring");

  /* threads and num_threads are one key: the value set last wins, whichever name set it. */
  KEYS_OK(8, true, "threads", "4", "extra_config", "{\"num_threads\": 8}");
  KEYS_OK(4, true, "extra_config", "{\"num_threads\": 8}", "threads", "4");
  KEYS_OK(3, true, "extra_config", "{\"enable_multithread_load\": true}", "threads", "3");
  KEYS_OK(6, true, "num_threads", "6");
  /* strict and enable_weights_track likewise. */
  KEYS_OK(8, true, "strict", "false", "extra_config", "{\"enable_weights_track\": true}");
  KEYS_OK(8, false, "extra_config", "{\"enable_weights_track\": true}", "strict", "false");
  KEYS_OK(8, false, "enable_weights_track", "no");
  KEYS_OK(2, false, "strict", "false", "threads", "2", "extra_config", "{\"num_threads\": 2}");
  /* A later extra_config replaces only the keys it names. */
  KEYS_OK(5, false, "extra_config", "{\"num_threads\": 5, \"enable_weights_track\": false}", "extra_config",
          "{\"enable_multithread_load\": true}");

  /* What each name reads back: the one key's value. */
  sl_config *c = NULL;
  sl_config_create(&c);
  CHECK(sl_config_set(c, "extra_config", "{\"num_threads\": 12, \"enable_weights_track\": false}") ==
        SL_STATUS_OK);
  CHECK_STR(sl_config_get(c, "threads"), "12");
  CHECK_STR(sl_config_get(c, "num_threads"), "12");
  CHECK_STR(sl_config_get(c, "strict"), "false");
  CHECK_STR(sl_config_get(c, "extra_config"), "{\"num_threads\": 12, \"enable_weights_track\": false}");
  CHECK(!sl__config_is_set(c, "enable_multithread_load"));
  sl_config_destroy(c);
}

int main(void) {
  test_defaults_and_keys();
  test_object_and_keys();
  test_types();
  test_strategy_and_keys();
  return sl_test_finish();
}
