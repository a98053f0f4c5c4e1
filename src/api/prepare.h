/*
 * api/prepare.h — from a model argument to an instantiated model: resolution (local folder or Hub
 * snapshot), the choice of the architecture spec, the catalog, then the model. Split in two so
 * that rank 0 does the file-system and network part once and every rank builds the model from
 * what rank 0 broadcasts (the catalog blob and the spec's text).
 */
#ifndef SL_PREPARE_H
#define SL_PREPARE_H

#include "model/catalog.h"
#include "model/model.h"
#include "api/options.h"
#include "model/spec.h"

typedef struct sl__prepared {
  sl__catalog cat;
  char *spec_text; /* the spec file's JSON */
  size_t spec_len;
  char *spec_path; /* where it came from (messages) */
  sl__spec *spec;
  sl__model model;
  bool have_model;
  uint64_t download_bytes; /* Hub: bytes fetched by this resolution */
  uint32_t download_files;
  double download_seconds;
  char *commit; /* Hub: resolved commit, or NULL for a local folder */
} sl__prepared;

/* Rank 0's part: resolve, read config.json, pick and read the spec, build the catalog. */
sl_status sl__prepare_catalog(const sl_config *cfg, const sl__opts *o, sl__prepared *out, sl__err *err);
/* Every rank: parse the spec text and instantiate the model from the catalog. */
sl_status sl__prepare_model(const sl__opts *o, sl__prepared *p, sl__err *err);
void sl__prepared_free(sl__prepared *p);

#endif
