/*
 * fuzz_quant_ignore.c — libFuzzer target for the ignore lists of pack-quantized and NVFP4
 * quantization configs (model/quant_ignore.c): the input's first line is a pattern, the rest a
 * module name. The pattern, as a compressed-tensors "re:" regular expression (translated from
 * Python's syntax to POSIX) and as a plain entry, and as a ModelOpt wildcard, compiles or fails
 * with a message; a compiled list matches the name or not, never crashes.
 */
#include "fuzz_common.h"
#include "model/model_packed.h"

static void one(const char *entry, const char *name, bool modelopt) {
  cJSON *list = cJSON_CreateArray();
  if (list == NULL)
    return;
  cJSON_AddItemToArray(list, cJSON_CreateString(entry));
  cJSON_AddItemToArray(list, cJSON_CreateString("lm_head"));
  sl__ignore ig;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__ignore_read(&ig, list, modelopt, "fuzz.ignore", &err);
  fuzz_check_error("fuzz_quant_ignore read", st, &err);
  if (st == SL_STATUS_OK) {
    (void)sl__ignore_match(&ig, name, true, true);
    (void)sl__ignore_match(&ig, name, true, false);
    (void)sl__ignore_match(&ig, name, false, true);
  }
  sl__ignore_free(&ig);
  cJSON_Delete(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstr(data, size);
  char *nl = strchr(text, '\n');
  const char *name = "model.layers.0.self_attn.qkv_proj";
  if (nl != NULL) {
    *nl = '\0';
    name = nl + 1;
  }
  sl__err err;
  sl__err_clear(&err);
  char *ere = sl__ignore_translate(text, &err);
  fuzz_check_error("fuzz_quant_ignore translate", ere != NULL ? SL_STATUS_OK : err.status, &err);
  free(ere);
  char *re = malloc(strlen(text) + 4);
  if (re != NULL) {
    memcpy(re, "re:", 3);
    memcpy(re + 3, text, strlen(text) + 1);
    one(re, name, false);
    free(re);
  }
  one(text, name, false);
  one(text, name, true);
  free(text);
  return 0;
}
