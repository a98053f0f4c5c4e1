/*
 * test_extra_config.c — `--extra-config` parsing and validation (docs/spec/FILES.md §6, §7 item 7): each
 * valid key, the exact messages, the validation order, how num_threads must be written, and the
 * merge with --threads and --no-strict.
 */
#include "api/extra_config.h"
#include "check.h"

#include <string.h>

typedef struct call {
  const char *json;
  const char *format;
  const char *strategy;
  uint32_t threads;
  bool no_strict;
} call;

static call plain(const char *json) {
  call c = {json, "hf", "auto", 0, false};
  return c;
}

#define EXPECT_OK(c, mt, nt, nt_set, wt, wt_set) expect_ok(__LINE__, c, mt, nt, nt_set, wt, wt_set)
static void expect_ok(int line, call c, int mt, uint32_t nt, bool nt_set, bool wt, bool wt_set) {
  sl__extra_config out;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__extra_config_parse(c.json, c.format, c.strategy, c.threads, c.no_strict, &out, &err);
  CHECKF(st == SL_STATUS_OK, "line %d: %s: status %s: %s", line, c.json ? c.json : "(null)",
         sl_status_name(st), err.msg);
  CHECKF(out.multithread == mt, "line %d: multithread %d != %d", line, out.multithread, mt);
  CHECKF(out.num_threads == nt, "line %d: num_threads %u != %u", line, out.num_threads, nt);
  CHECKF(out.num_threads_set == nt_set, "line %d: num_threads_set %d", line, (int)out.num_threads_set);
  CHECKF(out.weights_track == wt, "line %d: weights_track %d", line, (int)out.weights_track);
  CHECKF(out.weights_track_set == wt_set, "line %d: weights_track_set %d", line, (int)out.weights_track_set);
}

/* Fails with SL_STATUS_CONFIG; the message equals exact (when not NULL) and contains part (when not NULL). */
#define EXPECT_ERR(c, exact, part) expect_err(__LINE__, c, exact, part)
static void expect_err(int line, call c, const char *exact, const char *part) {
  sl__extra_config out;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__extra_config_parse(c.json, c.format, c.strategy, c.threads, c.no_strict, &out, &err);
  CHECKF(st == SL_STATUS_CONFIG, "line %d: %s: status %s (%s)", line, c.json ? c.json : "(null)",
         sl_status_name(st), err.msg);
  CHECKF(exact == NULL || strcmp(err.msg, exact) == 0, "line %d: message \"%s\" != \"%s\"", line, err.msg,
         exact ? exact : "");
  CHECKF(part == NULL || strstr(err.msg, part) != NULL, "line %d: \"%s\" lacks \"%s\"", line, err.msg,
         part ? part : "");
  /* On an error the output holds what the flags alone give. */
  CHECKF(out.multithread == -1, "line %d: multithread %d after an error", line, out.multithread);
  CHECKF(out.num_threads == (c.threads != 0 ? c.threads : 8), "line %d: num_threads %u after an error", line,
         out.num_threads);
  CHECKF(out.weights_track == !c.no_strict, "line %d: weights_track after an error", line);
}

static void test_defaults_and_keys(void) {
  EXPECT_OK(plain(NULL), -1, 8, false, true, false);
  EXPECT_OK(plain("{}"), -1, 8, false, true, false);
  EXPECT_OK(plain(" \n{ }\t"), -1, 8, false, true, false);
  EXPECT_OK(plain("{\"enable_multithread_load\": true}"), 1, 8, false, true, false);
  EXPECT_OK(plain("{\"enable_multithread_load\": false}"), 0, 8, false, true, false);
  EXPECT_OK(plain("{\"num_threads\": 8}"), -1, 8, true, true, false);
  EXPECT_OK(plain("{\"num_threads\": 1}"), -1, 1, true, true, false);
  EXPECT_OK(plain("{\"num_threads\": 16}"), -1, 16, true, true, false);
  /* The bound of SL_THREADS_MAX (api/extra_config.h): 1024 accepted, 1025 and 100000 refused below. */
  EXPECT_OK(plain("{\"num_threads\": 1024}"), -1, 1024u, true, true, false);
  EXPECT_OK(plain("{\"num_threads\":\n 3 }"), -1, 3, true, true, false);
  EXPECT_OK(plain("{\"enable_weights_track\": false}"), -1, 8, false, false, true);
  EXPECT_OK(plain("{\"enable_weights_track\": true}"), -1, 8, false, true, true);
  EXPECT_OK(plain("{\"enable_multithread_load\":false,\"num_threads\":12,\"enable_weights_track\":false}"), 0,
            12, true, false, true);
  EXPECT_OK(plain("{\"enable_weights_track\": true, \"enable_multithread_load\": true, \"num_threads\": 4}"),
            1, 4, true, true, true);
  /* A key written with an escape is the same key; the token is found by member position. */
  EXPECT_OK(plain("{\"enable_weights_track\": false, \"num\\u005fthreads\": 5}"), -1, 5, true, false, true);
  /* cJSON skips a UTF-8 byte order mark; so does the token scanner. */
  EXPECT_OK(plain("\xEF\xBB\xBF{\"num_threads\": 6}"), -1, 6, true, true, false);
}

static void test_object_and_keys(void) {
  const char *not_object = "extra config must be a JSON object";
  EXPECT_ERR(plain("[]"), not_object, NULL);
  EXPECT_ERR(plain("8"), not_object, NULL);
  EXPECT_ERR(plain("null"), not_object, NULL);
  EXPECT_ERR(plain("\"{}\""), not_object, NULL);
  EXPECT_ERR(plain("[{\"num_threads\": 8}]"), not_object, NULL);
  EXPECT_ERR(plain(""), NULL, not_object);
  EXPECT_ERR(plain("{"), NULL, not_object);
  EXPECT_ERR(plain("{\"num_threads\": 8} x"), NULL, not_object);
  EXPECT_ERR(plain("{num_threads: 8}"), NULL, not_object);
  EXPECT_ERR(plain("{\"num_threads\": 8,}"), NULL, not_object);

  /* Duplicate keys (step 1) come before unknown keys (step 2). */
  EXPECT_ERR(plain("{\"num_threads\": 8, \"num_threads\": 8}"), "duplicate key 'num_threads' in extra config",
             NULL);
  EXPECT_ERR(plain("{\"foo\": 1, \"bar\": 2, \"foo\": 3}"), "duplicate key 'foo' in extra config", NULL);

  EXPECT_ERR(plain("{\"foo\": 1, \"bar\": 2}"),
             "unexpected extra config keys for load format 'hf': bar, foo (allowed: enable_multithread_load, "
             "enable_weights_track, num_threads)",
             NULL);
  call c = plain("{\"zz\": true, \"num_threads\": 8, \"foo\": null}");
  c.format = "safetensors";
  EXPECT_ERR(c,
             "unexpected extra config keys for load format 'safetensors': foo, zz (allowed: "
             "enable_multithread_load, enable_weights_track, num_threads)",
             NULL);
  c = plain("{\"Num_threads\": 8}");
  c.format = NULL;
  EXPECT_ERR(
      c,
      "unexpected extra config keys for load format 'auto': Num_threads (allowed: enable_multithread_load, "
      "enable_weights_track, num_threads)",
      NULL);
  /* Unknown keys (step 2) come before types (step 3). */
  EXPECT_ERR(plain("{\"num_threads\": \"8\", \"x\": 1}"), NULL, "unexpected extra config keys");
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
    EXPECT_ERR(plain(json), NULL, "extra config key 'num_threads' must be an integer from 1 to 1024");
    EXPECT_ERR(plain(json), NULL, shown);
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
      EXPECT_ERR(plain(json), expected, NULL);
    }
  }
  /* Document order: the first bad member is reported; strings with quotes and brackets are skipped. */
  EXPECT_ERR(plain("{\"enable_weights_track\": \"a\\\"}, [\", \"num_threads\": 0}"), NULL,
             "enable_weights_track");
  EXPECT_ERR(plain("{\"enable_weights_track\": true, \"num_threads\": 0}"), NULL, "(got 0)");
}

static void test_strategy_and_flags(void) {
  call c = plain("{\"enable_multithread_load\": true}");
  c.strategy = "direct";
  EXPECT_ERR(c, "enable_multithread_load cannot be combined with load strategy 'direct'", NULL);
  c.strategy = "io_uring";
  EXPECT_ERR(c, "enable_multithread_load cannot be combined with load strategy 'io_uring'", NULL);
  c.strategy = NULL;
  EXPECT_OK(c, 1, 8, false, true, false);
  c = plain("{\"enable_multithread_load\": false}");
  c.strategy = "direct";
  EXPECT_OK(c, 0, 8, false, true, false);
  c = plain("{}");
  c.strategy = "io_uring";
  EXPECT_OK(c, -1, 8, false, true, false);
  /* Types (step 3) before the strategy (step 4). */
  c = plain("{\"enable_multithread_load\": true, \"num_threads\": 0}");
  c.strategy = "direct";
  EXPECT_ERR(c, NULL, "num_threads");

  /* --threads */
  c = plain("{\"num_threads\": 8}");
  c.threads = 4;
  EXPECT_ERR(c, "threads 4 (--threads) conflicts with num_threads 8 in the extra config", NULL);
  c.threads = 8;
  EXPECT_OK(c, -1, 8, true, true, false);
  c = plain(NULL);
  c.threads = 4;
  EXPECT_OK(c, -1, 4, true, true, false);
  c = plain("{\"enable_multithread_load\": true}");
  c.threads = 3;
  EXPECT_OK(c, 1, 3, true, true, false);
  /* The strategy (step 4) before the flags (step 5). */
  c = plain("{\"enable_multithread_load\": true, \"num_threads\": 8}");
  c.threads = 4;
  c.strategy = "direct";
  EXPECT_ERR(c, NULL, "load strategy 'direct'");

  /* --no-strict */
  c = plain("{\"enable_weights_track\": true}");
  c.no_strict = true;
  EXPECT_ERR(c, "strict false (--no-strict) conflicts with enable_weights_track: true in the extra config",
             NULL);
  c = plain("{\"enable_weights_track\": false}");
  c.no_strict = true;
  EXPECT_OK(c, -1, 8, false, false, true);
  c = plain(NULL);
  c.no_strict = true;
  EXPECT_OK(c, -1, 8, false, false, true);
  c = plain("{\"num_threads\": 2}");
  c.no_strict = true;
  c.threads = 2;
  EXPECT_OK(c, -1, 2, true, false, true);
}

int main(void) {
  test_defaults_and_keys();
  test_object_and_keys();
  test_types();
  test_strategy_and_flags();
  return sl_test_finish();
}
