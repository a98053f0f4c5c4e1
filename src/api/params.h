/*
 * api/params.h — what api/params.c (the parameter accessors of shardload.h section 8: dtype ids,
 * sources, reference-counted parameter memory, DLPack, agreement) and api/bind.c (the caller's
 * buffers) need from the loader.
 *
 * api/loader.c keeps its struct private; it fills this view on request and calls
 * sl__params_loader_destroy first thing in sl_loader_destroy, so that memory handed out by
 * sl_loader_param_retain outlives the loader.
 */
#ifndef SL_API_PARAMS_H
#define SL_API_PARAMS_H

#include "shardload/core.h"

#include "backend/backend.h"
#include "base/err.h"
#include "comm/comm.h"
#include "engine/filemap.h"
#include "format/cast.h"
#include "model/catalog.h"
#include "plan/plan.h"

#include <stdbool.h>

typedef struct sl__params_state sl__params_state;

typedef struct sl__loader_view {
  sl__params_state **params; /* the loader's params state (NULL until first needed) */
  sl__comm *comm;
  sl__err *err;
  bool planned; /* the table exists */
  bool loaded;  /* sl_loader_load succeeded */
  const sl__rank_plan *plan;
  const sl__catalog *cat;
  sl_param *table;
  sl__backend **backend;
  sl__filemaps *maps;
  void ***param_ptr;
  bool *bound;
  const bool *mapped;
  sl__cast_pair **cast; /* per local parameter: planned → bound dtype; NULL until a sl_loader_bind_as */
  bool cuda;            /* device=cuda: parameters are device memory */
} sl__loader_view;

/* api/loader.c */
void sl__loader_view_of(sl_loader *l, sl__loader_view *out);
/* api/params.c: called by sl_loader_destroy before it frees anything. When parameter memory is
 * still referenced, takes the backend, the mappings and the parameter pointers over (the loader's
 * fields are left empty) and frees them when the last reference is released. */
void sl__params_loader_destroy(sl_loader *l);

#endif
