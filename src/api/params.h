/*
 * api/params.h — the parameter store: one owner for a loader's parameters. api/loader.c creates
 * them (the table, the memory, the mappings) in its allocation phase; api/bind.c records the
 * caller's buffers; api/params.c holds them: the parameter accessors of shardload.h section 8
 * (dtype ids, sources, reference-counted parameter memory, DLPack, agreement), and at
 * sl_loader_destroy (sl__params_loader_destroy, called first) the keeper that takes the store
 * over while references are outstanding, so that memory handed out by sl_loader_param_retain
 * outlives the loader. Calls go one way: loader.c → bind.c, params.c.
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

/* A loader's parameters, per local parameter of the rank plan. */
typedef struct sl__param_store {
  sl_param *table;
  char *table_strings; /* the table's names, descriptions and aliases (api/loader.c) */
  void **param_ptr;    /* the memory (aliases point at their target's) */
  bool *bound;         /* the caller's buffer (api/bind.c) */
  bool *mapped;        /* a mapping of its checkpoint bytes (load strategy mmap, or auto on host) */
  /* sources' → held dtype (sl__mparam.held_dtype, made with the table), or → bound dtype
   * (sl_loader_bind_as); NULL: no conversion */
  sl__cast_pair *cast;
  sl__filemaps maps;         /* the file mappings behind mapped parameters */
  sl__backend *backend;      /* where the memory lives; the transfer borrows it */
  sl__params_state *sources; /* api/params.c: sources index and keeper (NULL until first needed) */
} sl__param_store;

/* What bind.c and params.c see of a loader: its store and the context they check against. */
typedef struct sl__loader_view {
  sl__param_store *store;
  sl__comm *comm;
  sl__err *err;
  bool planned; /* the table exists */
  bool loaded;  /* sl_loader_load succeeded */
  const sl__rank_plan *plan;
  const sl__catalog *cat;
  const sl__model *model; /* the plan's parameters (their dtypes: sources' and held) */
  bool cuda;              /* device=cuda: parameters are device memory */
} sl__loader_view;

/* api/params.c: called by sl_loader_destroy before it frees anything. When parameter memory is
 * still referenced, takes the backend, the mappings and the parameter pointers over (the loader's
 * fields are left empty) and frees them when the last reference is released. */
void sl__params_loader_destroy(sl_loader *l);

#endif
