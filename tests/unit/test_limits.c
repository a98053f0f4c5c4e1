/*
 * test_limits.c — bounds on what a checkpoint, an index, a config.json or a spec can make a rank
 * spend, and how names from them are printed:
 *   - sl__quote (base/util.c): control characters, quotes and backslashes escaped, long names cut
 *     to SL_QUOTE_SHOWN bytes (at a UTF-8 boundary) with "…(N bytes)";
 *   - config.json through the JSON limits (base/json.h) in sl__model_parse_config: 2,000,001
 *     values refused with MODEL_CONFIG naming the file and the limit;
 *   - specs: more than SL_SPEC_MAX_VARS vars or SL_SPEC_MAX_PARAMS params refused at parse time;
 *     vars defined through more than SL_SPEC_MAX_VAR_DEPTH levels of vars refused at evaluation
 *     with ARCH naming the variable (64 levels still evaluate);
 *   - an index naming tensors that no selected file holds: the catalog is built, counts them and
 *     warns once with the count and the first five names, quoted (a name with a newline escaped).
 */
#include "check.h"
#include "format/safetensors_write.h"
#include "model/catalog.h"
#include "model/model.h"
#include "model/spec.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_quote(void) {
  char buf[SL_QUOTE_BUF];
  CHECK_STR(sl__quote("model.layers.0.q_proj.weight", buf, sizeof buf), "model.layers.0.q_proj.weight");
  CHECK_STR(sl__quote("a\nb\t'c\"\\\x01\x7f", buf, sizeof buf), "a\\nb\\t\\'c\\\"\\\\\\x01\\x7f");
  CHECK_STR(sl__quote(NULL, buf, sizeof buf), "(null)");
  size_t n = 100 * 1024;
  char *big = malloc(n + 1);
  memset(big, 'x', n);
  big[n] = '\0';
  /* A 2-byte character straddling the cut: the cut moves before it. */
  big[199] = (char)0xc3;
  big[200] = (char)0xa9;
  sl__quote(big, buf, sizeof buf);
  CHECK_EQ_U64(strlen(buf), 199 + strlen("\xe2\x80\xa6(102400 bytes)"));
  CHECK_CONTAINS(buf, "xxx\xe2\x80\xa6(102400 bytes)");
  char small[48];
  sl__quote(big, small, sizeof small); /* a small buffer: cut, still terminated */
  CHECK(strlen(small) < sizeof small);
  free(big);
}

static void test_config_json_limit(void) {
  size_t n = 2000001;
  char *text = malloc(2 * n + 64);
  size_t o = 0;
  o += (size_t)snprintf(text, 64, "{\"a\":[");
  for (size_t i = 0; i < n; i++) {
    text[o++] = '0';
    text[o++] = i + 1 < n ? ',' : ']';
  }
  text[o++] = '}';
  text[o] = '\0';
  sl__catalog cat;
  memset(&cat, 0, sizeof cat);
  cat.folder = "/models/huge";
  cat.config_json = text;
  cat.config_len = o;
  cJSON *cfg = NULL;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__model_parse_config(&cat, &cfg, &err) == SL_STATUS_MODEL_CONFIG);
  CHECK(cfg == NULL);
  CHECK_CONTAINS(err.msg, "/models/huge/config.json");
  CHECK_CONTAINS(err.msg, "more than 2000000 JSON values");
  free(text);
}

/* A spec text with n vars chained v0 = 1, v_i = v_{i-1} + 0, num_layers = v_{n-1}. */
static char *chain_spec(size_t n, size_t params) {
  size_t cap = 64 * n + 160 * params + 1024;
  char *s = malloc(cap);
  size_t o = (size_t)snprintf(s, cap, "{\"family\":\"t\",\"architectures\":[\"T\"],\"vars\":{\"v0\":\"1\"");
  for (size_t i = 1; i < n; i++)
    o += (size_t)snprintf(s + o, cap - o, ",\"v%zu\":\"v%zu + 0\"", i, i - 1);
  o += (size_t)snprintf(s + o, cap - o, "},\"num_layers\":\"v%zu\",\"params\":[", n - 1);
  for (size_t i = 0; i < params; i++)
    o += (size_t)snprintf(
        s + o, cap - o,
        "%s{\"name\":\"p%zu.weight\",\"place\":\"final\",\"when\":false,\"style\":\"replicated\","
        "\"sources\":[{\"tensor\":\"p%zu.weight\",\"shape\":[1]}]}",
        i > 0 ? "," : "", i, i);
  snprintf(s + o, cap - o, "]}");
  return s;
}

static sl_status build_chain(size_t n, sl__err *err) {
  char *text = chain_spec(n, 1);
  sl__spec *spec = NULL;
  sl_status st = sl__spec_parse(text, strlen(text), "chain.json", &spec, err);
  free(text);
  if (st != SL_STATUS_OK)
    return st;
  sl__catalog cat;
  memset(&cat, 0, sizeof cat);
  sl__hashmap_init(&cat.by_name, SL_HASHMAP_BORROW);
  cat.folder = "/m";
  cat.config_json = "{\"architectures\":[\"T\"]}";
  cat.config_len = strlen(cat.config_json);
  sl__model m;
  st = sl__model_build(spec, &cat, SL_LAYOUT_VLLM, &m, err);
  if (st == SL_STATUS_OK)
    sl__model_free(&m);
  sl__spec_free(spec);
  return st;
}

static void test_spec_limits(void) {
  sl__err err;
  sl__err_clear(&err);
  CHECK(build_chain(65, &err) == SL_STATUS_ARCH);
  CHECK_CONTAINS(err.msg, "spec chain.json: variable ");
  CHECK_CONTAINS(err.msg, "is defined through more than 64 levels of other variables");
  sl__err_clear(&err);
  sl_status st = build_chain(64, &err);
  CHECKF(strstr(err.msg, "levels") == NULL, "64 levels refused: %s (%d)", err.msg, (int)st);
  /* A 16 MiB spec cannot define 100k vars any more: the count is refused at parse time. */
  char *text = chain_spec(1025, 1);
  sl__spec *spec = NULL;
  sl__err_clear(&err);
  CHECK(sl__spec_parse(text, strlen(text), "many.json", &spec, &err) == SL_STATUS_ARCH);
  CHECK_STR(err.msg, "spec many.json: vars: 1025 entries, more than the limit of 1024");
  free(text);
  text = chain_spec(2, 4097);
  sl__err_clear(&err);
  CHECK(sl__spec_parse(text, strlen(text), "wide.json", &spec, &err) == SL_STATUS_ARCH);
  CHECK_STR(err.msg, "spec wide.json: params: 4097 parameters, more than the limit of 4096");
  free(text);
}

static char g_warned[16384];
static int g_warnings;
static void capture(sl_log_level level, int rank, const char *line, void *user) {
  (void)rank;
  (void)user;
  if (level == SL_LOG_WARN) {
    g_warnings++;
    snprintf(g_warned, sizeof g_warned, "%s", line);
  }
}

static void test_index_missing(void) {
  char *dir = sl_test_mkdtemp("limits");
  static uint8_t data[16];
  sl__st_write_tensor t[1] = {
      {.name = "real.weight", .dtype = SL_DT_F32, .ndim = 1, .shape = {4}, .data = data, .nbytes = 16}};
  char path[4096];
  snprintf(path, sizeof path, "%s/model-00001-of-00001.safetensors", dir);
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__st_write_file(path, t, 1, NULL, 0, &err) == SL_STATUS_OK);
  /* 1000 names the file does not hold, the first one with a newline. */
  sl__buf idx;
  sl__buf_init(&idx, 0);
  sl__buf_appendf(&idx, "{\"weight_map\":{\"real.weight\":\"model-00001-of-00001.safetensors\","
                        "\"ghost\\nline\":\"model-00001-of-00001.safetensors\"");
  for (int i = 1; i < 1000; i++)
    sl__buf_appendf(&idx, ",\"ghost.%d\":\"model-00001-of-00001.safetensors\"", i);
  sl__buf_appendf(&idx, "}}");
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  CHECK(sl_test_write_file(path, idx.data, idx.len) == 0);
  sl__buf_free(&idx);
  sl_log_set_callback(capture, NULL);
  sl__catalog_opts co = {
      .folder = dir, .what = dir, .select = {.format = SL_FORMAT_HF, .fall_back_to_pt = true}};
  sl__catalog cat;
  CHECKF(sl__catalog_build(&co, &cat, &err) == SL_STATUS_OK, "%s", err.msg);
  sl_log_set_callback(NULL, NULL);
  CHECK_EQ_U64(cat.index_missing, 1000);
  CHECK_EQ_U64(cat.n_tensors, 1);
  CHECK_EQ_U64(g_warnings, 1);
  CHECK_CONTAINS(g_warned, "names 1000 tensors that no selected weight file holds");
  CHECK_CONTAINS(g_warned, "'ghost\\nline', 'ghost.1', 'ghost.2', 'ghost.3', 'ghost.4', …");
  CHECK(strstr(g_warned, "ghost.5") == NULL);
  sl__catalog_free(&cat);
  sl_test_rmtree(dir);
  free(dir);
}

int main(void) {
  test_quote();
  test_config_json_limit();
  test_spec_limits();
  test_index_missing();
  return sl_test_finish();
}
