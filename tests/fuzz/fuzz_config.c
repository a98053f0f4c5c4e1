/*
 * fuzz_config.c — libFuzzer target for config.json (model/model.c): the input replaces the
 * config.json of a small real checkpoint (the llama fixture, SL_FIXTURES), whose spec is then
 * instantiated in the vLLM layout. Any config either yields a model or fails with a message
 * naming the field; huge numbers, wrong types, deep nesting and long arrays end cleanly.
 */
#include "fuzz_common.h"
#include "model/catalog.h"
#include "model/model.h"
#include "model/spec.h"

#include <cjson/cJSON.h>

static sl__catalog cat;
static sl__spec *spec;

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *fixtures = getenv("SL_FIXTURES");
  if (fixtures == NULL) {
    fprintf(stderr, "fuzz_config: set SL_FIXTURES to the folder of the generated fixture models\n");
    exit(2);
  }
  char folder[4096];
  snprintf(folder, sizeof folder, "%s/llama", fixtures);
  sl__catalog_opts opts = {.folder = folder, .what = folder, .select = {.format = SL_FORMAT_AUTO}};
  sl__err err;
  sl__err_clear(&err);
  if (sl__catalog_build(&opts, &cat, &err) != SL_STATUS_OK ||
      sl__spec_find("LlamaForCausalLM", &spec, &err) != SL_STATUS_OK) {
    fprintf(stderr, "fuzz_config: %s (set SHARDLOAD_SPECS to the specs folder)\n", err.msg);
    exit(2);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *saved = cat.config_json;
  size_t saved_len = cat.config_len;
  cat.config_json = (char *)data;
  cat.config_len = size;
  sl__model m;
  memset(&m, 0, sizeof m);
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__model_build(spec, &cat, SL_LAYOUT_VLLM, &m, &err);
  fuzz_check_error("fuzz_config", st, &err);
  if (st == SL_STATUS_OK)
    sl__model_free(&m);
  cat.config_json = saved;
  cat.config_len = saved_len;
  return 0;
}
