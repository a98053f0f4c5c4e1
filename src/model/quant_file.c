/*
 * model/quant_file.c — ModelOpt checkpoints of older releases keep their quantization config in
 * hf_quant_config.json beside config.json. Like vLLM (transformers_utils/config.py, get_config:
 * "ModelOpt 0.29.0 and before saves the quantization config in a separate hf_quant_config.json"),
 * the file is read when config.json has no quantization_config and becomes its
 * quantization_config, so that the one config text every rank receives holds it
 * (docs/spec/ARCHITECTURES.md §19).
 */
#include "model/quant_file.h"

#include "base/json.h"
#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Real ones are a few KiB. */
#define SL_QUANT_FILE_MAX_BYTES (16u * 1024u * 1024u)

sl_status sl__config_merge_quant_file(const char *folder, char **json, size_t *len, sl__err *err) {
  if (*json == NULL || folder == NULL)
    return SL_STATUS_OK;
  cJSON *config = NULL;
  if (sl__json_parse(*json, *len, "config.json", SL_STATUS_MODEL_CONFIG, &config, err) != SL_STATUS_OK ||
      !cJSON_IsObject(config)) {
    cJSON_Delete(config); /* config.json's own errors are reported where it is read (model/model_config.c) */
    sl__err_clear(err);
    return SL_STATUS_OK;
  }
  const cJSON *have = cJSON_GetObjectItemCaseSensitive(config, "quantization_config");
  char *path = have == NULL || cJSON_IsNull(have) ? sl__path_join(folder, "hf_quant_config.json") : NULL;
  char *text = NULL;
  size_t text_len = 0;
  sl__err ferr;
  sl__err_clear(&ferr);
  sl_status st = path != NULL ? sl__read_file(path, SL_QUANT_FILE_MAX_BYTES, &text, &text_len, &ferr)
                              : SL_STATUS_NOT_FOUND;
  cJSON *quant = NULL;
  if (st == SL_STATUS_OK)
    st = sl__json_parse(text, text_len, path, SL_STATUS_QUANTIZATION, &quant, err);
  else if (st != SL_STATUS_NOT_FOUND)
    sl__err_copy(err, &ferr);
  if (st == SL_STATUS_OK && !cJSON_IsObject(quant))
    st = sl__err_set(err, SL_STATUS_QUANTIZATION, "%s: expected a JSON object", path);
  char *merged = NULL;
  if (st == SL_STATUS_OK) {
    cJSON_DeleteItemFromObjectCaseSensitive(config, "quantization_config"); /* a null one */
    if (cJSON_AddItemToObject(config, "quantization_config", quant))
      quant = NULL;
    merged = cJSON_PrintUnformatted(config);
    if (merged == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  if (st == SL_STATUS_OK) {
    free(*json);
    *json = merged;
    *len = strlen(merged);
  }
  cJSON_Delete(quant);
  cJSON_Delete(config);
  free(text);
  free(path);
  return st == SL_STATUS_NOT_FOUND ? SL_STATUS_OK : st;
}
