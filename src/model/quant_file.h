/*
 * model/quant_file.h — hf_quant_config.json as config.json's quantization_config (model/quant_file.c).
 */
#ifndef SL_MODEL_QUANT_FILE_H
#define SL_MODEL_QUANT_FILE_H

#include "base/err.h"

#include <stddef.h>

/* When config.json's text *json (of *len bytes, owned) has no quantization_config and folder holds
 * hf_quant_config.json, *json becomes config.json with that file as its quantization_config. An
 * unreadable or invalid file is an error naming it; config.json's own errors are left to its
 * reader. */
sl_status sl__config_merge_quant_file(const char *folder, char **json, size_t *len, sl__err *err);

#endif
