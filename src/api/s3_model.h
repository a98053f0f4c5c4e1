/*
 * api/s3_model.h — an s3:// model resolved by rank 0 (docs/spec/S3.md): the prefix listed once,
 * config.json fetched (the spec is chosen from it), then the weight files selected from the
 * listing as from a folder (the index applied), their safetensors headers read with ranged GETs
 * and the catalog built from them (model/catalog.h's sl__catalog_from_headers), each file pinned
 * to its listed ETag. Only headers, config.json and the index are read here: the weights are read
 * in place by the ranks that need them (engine/remote.c).
 */
#ifndef SL_API_S3_MODEL_H
#define SL_API_S3_MODEL_H

#include "model/catalog.h"
#include "s3/s3.h"

typedef struct sl__s3_model {
  sl__s3 *s;
  sl__s3_conn *conn;
  char *bucket;
  char *prefix;   /* "" (the whole bucket) or ending in '/' */
  char *location; /* s3://bucket[/prefix], without the trailing '/': the catalog's folder */
  sl__s3_listing listing;
  char *config; /* config.json's text, or NULL when the listing has none */
  size_t config_len;
} sl__s3_model;

/* Opens a session (retries bounded by retry_s), lists the model's prefix and fetches config.json.
 * An empty prefix: SL_STATUS_NOT_FOUND naming it. */
sl_status sl__s3_model_open(const char *url, double retry_s, sl__s3_model **out, sl__err *err);
/* The catalog of the model's weights. co->folder, co->config_json and the selection's effective
 * format are filled in here; the rest of co is the spec's (as for a folder). Only safetensors
 * checkpoints are read from a store. */
sl_status sl__s3_model_catalog(sl__s3_model *m, const sl__catalog_opts *co, sl__catalog *cat, sl__err *err);
void sl__s3_model_free(sl__s3_model *m);

#endif
