/*
 * test_spec_vision.c — the keys of a multimodal wrapper's spec (model/spec_vision.c; docs/SPECS.md,
 * "Multimodal wrappers"), no MPI:
 *
 *   test_by_name     "vision": NAME found in the including spec's folder (vision/NAME.json): its
 *                    parameters parsed, its vision_prefixes added to the wrapper's, its "when"
 *                    compiled; the text inlined for the other ranks parses in a folder without the
 *                    file and gives the same tower; skip_vision's drop keeps the prefixes.
 *   test_unquantized "quantized": false read (vLLM builds the tower without a quant_config).
 *   test_errors      one clear ARCH error naming the spec and what is wrong: a name not found (the
 *                    folders searched listed), a name that is a path, a number, a vision spec with a
 *                    key it may not have, without num_layers or vision_prefixes, a parameter placed
 *                    "embed", a "when" that is no expression, a "quantized" that is no boolean,
 *                    malformed hf_to_vllm_prefixes.
 */
#include "check.h"
#include "model/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const tower =
    "{\"family\":\"tw\",\"num_layers\":\"vision_config.depth\",\"vision_prefixes\":[\"v.\"],"
    "\"when\":\"default(vision_config.depth, 0) > 0\",\"params\":["
    "{\"name\":\"v.embed.weight\",\"place\":\"all\",\"style\":\"replicated\","
    "\"sources\":[{\"tensor\":\"v.embed.weight\",\"shape\":[4]}]},"
    "{\"name\":\"v.blocks.{layer}.fc.weight\",\"place\":\"layer\",\"style\":\"column\","
    "\"sources\":[{\"tensor\":\"v.blocks.{layer}.fc.weight\",\"shape\":[8,4]}]}]}";

static const char *const head = "{\"family\":\"w\",\"architectures\":[\"W\"],\"params\":[{\"name\":\"e\","
                                "\"place\":\"embed\",\"style\":\"replicated\",\"sources\":[{\"tensor\":\"e\","
                                "\"shape\":[1]}]}],";

static sl_status parse(const char *json, const char *path, sl__spec **s, sl__err *err) {
  sl__err_clear(err);
  return sl__spec_parse(json, strlen(json), path, s, err);
}

static void test_by_name(void) {
  char *dir = sl_test_mkdtemp("vspec");
  char path[1024];
  snprintf(path, sizeof path, "%s/vision", dir);
  CHECK(mkdir(path, 0755) == 0);
  snprintf(path, sizeof path, "%s/vision/tw.json", dir);
  CHECK(sl_test_write_file(path, tower, strlen(tower)) == 0);
  char json[1024];
  snprintf(json, sizeof json,
           "%s\"vision_prefixes\":[\"a.\"],\"hf_to_vllm_prefixes\":[[\"m.\",\"n.\"]],"
           "\"vision\":\"tw\"}",
           head);
  snprintf(path, sizeof path, "%s/w.json", dir);
  sl__spec *s = NULL;
  sl__err err;
  sl_status st = parse(json, path, &s, &err);
  CHECKF(st == SL_STATUS_OK, "wrapper by name: %s", err.msg);
  if (st == SL_STATUS_OK) {
    CHECK(s->vision != NULL && s->vision->n_params == 2 && s->vision_when != NULL);
    CHECK(!s->vision_unquantized); /* "quantized" defaults to true */
    CHECK_EQ_U64(s->n_vision_prefixes, 2);
    CHECK(s->n_vision_prefixes == 2 && strcmp(s->vision_prefixes[0], "a.") == 0 &&
          strcmp(s->vision_prefixes[1], "v.") == 0);
    CHECK(s->n_prefix_map == 1 && strcmp(s->prefix_from[0], "m.") == 0 && strcmp(s->prefix_to[0], "n.") == 0);
    char *inl = NULL;
    size_t n = 0;
    st = sl__spec_inline_vision(json, strlen(json), s, &inl, &n, &err);
    CHECKF(st == SL_STATUS_OK && inl != NULL && n == strlen(inl), "inline: %s", err.msg);
    sl__spec *t = NULL;
    if (inl != NULL) {
      CHECK(strstr(inl, "\"vision\":{") != NULL);
      st = parse(inl, "/nonexistent/w.json", &t, &err);
      CHECKF(st == SL_STATUS_OK, "inlined wrapper elsewhere: %s", err.msg);
    }
    if (t != NULL) {
      CHECK(t->vision != NULL && t->vision->n_params == 2 && t->n_vision_prefixes == 2);
      sl__spec_drop_vision(t);
      CHECK(t->vision == NULL && t->vision_when == NULL);
      CHECK_EQ_U64(t->n_vision_prefixes, 2);
    }
    sl__spec_free(t);
    free(inl);
  }
  sl__spec_free(s);
  sl_test_rmtree(dir);
  free(dir);
}

/* "quantized": false in an inline vision spec: the tower gets no quantization companions. */
static void test_unquantized(void) {
  char json[2048];
  snprintf(json, sizeof json, "%s\"vision\":{\"quantized\":false,%s}", head, tower + 1);
  sl__spec *s = NULL;
  sl__err err;
  sl_status st = parse(json, "/x/w.json", &s, &err);
  CHECKF(st == SL_STATUS_OK && s != NULL && s->vision_unquantized, "quantized false: %s", err.msg);
  sl__spec_free(s);
}

static void check_error(const char *rest, const char *path, const char *n1, const char *n2) {
  char json[2048];
  snprintf(json, sizeof json, "%s%s}", head, rest);
  sl__spec *s = NULL;
  sl__err err;
  sl_status st = parse(json, path, &s, &err);
  CHECKF(st == SL_STATUS_ARCH, "must be refused (%s): %s", sl_status_name(st), json);
  CHECK_CONTAINS(err.msg, n1);
  if (n2 != NULL)
    CHECK_CONTAINS(err.msg, n2);
  sl__spec_free(s);
}

/* rest with the vision object tower minus its first key-value pair replaced by `change`. */
static void check_tower_error(const char *change, const char *n1) {
  char rest[2048];
  snprintf(rest, sizeof rest, "\"vision\":{%s,%s", change, tower + strlen("{\"family\":\"tw\","));
  check_error(rest, "/x/w.json", n1, "vision spec /x/w.json (its vision spec)");
}

static void test_errors(void) {
  char *dir = sl_test_mkdtemp("vspec");
  char path[1024];
  snprintf(path, sizeof path, "%s/w.json", dir);
  char folder[1100];
  snprintf(folder, sizeof folder, "%s/vision", dir);
  check_error("\"vision\":\"nowhere_tower\"", path, "vision spec 'nowhere_tower' not found", folder);
  check_error("\"vision\":\"../tw\"", path, "expected the name of a vision spec", path);
  check_error("\"vision\":3", path, "expected the name of a vision spec", path);
  check_tower_error("\"architectures\":[\"X\"]", "unknown key 'architectures'");
  check_tower_error("\"vision\":\"tw\"", "unknown key 'vision'");
  /* without num_layers / vision_prefixes: the same tower with those keys renamed */
  check_error("\"vision\":{\"family\":\"tw\",\"vision_prefixes\":[\"v.\"],\"params\":[]}", "/x/w.json",
              "'num_layers'", "is required");
  check_error("\"vision\":{\"family\":\"tw\",\"num_layers\":\"1\",\"vision_prefixes\":[],\"params\":[]}",
              "/x/w.json", "'vision_prefixes' must list", NULL);
  check_error("\"vision\":{\"family\":\"tw\",\"num_layers\":\"1\",\"vision_prefixes\":[\"v.\"],\"params\":["
              "{\"name\":\"v.e\",\"place\":\"embed\",\"style\":\"replicated\",\"sources\":[{\"tensor\":"
              "\"v.e\",\"shape\":[1]}]}]}",
              "/x/w.json", "a vision parameter is placed \"layer\"", "v.e");
  check_tower_error("\"when\":3", "expected an expression");
  check_tower_error("\"quantized\":1", "quantized: expected true or false");
  check_error("\"hf_to_vllm_prefixes\":[[\"a.\"]]", path, "hf_to_vllm_prefixes", "two non-empty strings");
  check_error("\"hf_to_vllm_prefixes\":\"a.\"", path, "hf_to_vllm_prefixes", "expected an array");
  sl_test_rmtree(dir);
  free(dir);
}

int main(void) {
  test_by_name();
  test_unquantized();
  test_errors();
  return sl_test_finish();
}
