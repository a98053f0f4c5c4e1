/*
 * engine/twophase_choice.h — whether the row-parallel tensors of a file are read two-phase, and
 * why: the decision of `load_strategy auto` per file, taken once for the whole job before planning
 * (every rank plans the same exchanges, plan/twophase.h), and the same record under the explicit
 * strategies (which keep two-phase reads).
 *
 * Two-phase reads (two_phase_reads) read a row-parallel tensor as blocks of whole rows, one per
 * rank, and exchange the column blocks all-to-all: large reads instead of one small read per row
 * and rank. That pays where the rows come from storage. Where the file is in the page cache of
 * the ranks' one node, each rank copies its row slices out of the page cache instead (a read-only
 * mapping of the file, engine/readers.c): no system call per row and no exchange. Cold files,
 * ranks on several nodes (the exchange keeps each node from reading the others' rows), device
 * destinations, objects of a store and files still downloading keep two-phase reads.
 *
 * Pure: the decision and its words are functions of their inputs (tests/unit/test_twophase_choice.c).
 */
#ifndef SL_TWOPHASE_CHOICE_H
#define SL_TWOPHASE_CHOICE_H

#include "engine/strategy_choice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sl__twophase_why {
  SL_TWOPHASE_OFF = 0,     /* two_phase_reads false: row by row, as configured */
  SL_TWOPHASE_EXPLICIT,    /* an explicit load_strategy: two-phase, as before auto chose per file */
  SL_TWOPHASE_DEVICE,      /* device destination: two-phase */
  SL_TWOPHASE_NODES,       /* ranks on several nodes: two-phase */
  SL_TWOPHASE_REMOTE,      /* an object of a store: two-phase */
  SL_TWOPHASE_DOWNLOADING, /* the file was still downloading when the job planned: two-phase */
  SL_TWOPHASE_UNKNOWN,     /* the page cache could not be asked: two-phase */
  SL_TWOPHASE_COLD,        /* mostly not in the page cache: two-phase */
  SL_TWOPHASE_RESIDENT     /* mostly in the page cache: row slices copied out of it, no exchange */
} sl__twophase_why;

/* What the decision knows of one file (rank 0 measures it, every rank gets the same). */
typedef struct sl__twophase_in {
  bool configured; /* two_phase_reads */
  sl__strategy strategy;
  bool host;           /* the destination is host memory */
  bool one_node;       /* every rank of the job is on one node (one page cache) */
  bool remote;         /* an object of a store */
  bool downloading;    /* not complete yet when the job planned */
  bool resident_known; /* the page cache answered */
  uint64_t pages, resident;
} sl__twophase_in;

typedef struct sl__twophase_choice {
  sl__twophase_in in;
  bool two_phase; /* the file's row-parallel tensors are read two-phase */
  sl__twophase_why why;
} sl__twophase_choice;

/* Whether rank 0 measures the file's residency at all: only where the answer can turn two-phase
 * reads off (auto, configured, host, one node, a complete local file). */
bool sl__twophase_measures(const sl__twophase_in *in);

/* The decision for one file: sets c->two_phase and c->why from c->in. A file counts as resident
 * when at least SL_CHOICE_RESIDENT_NUM / SL_CHOICE_RESIDENT_DEN of its pages are cached (the
 * threshold of the strategy choice, engine/strategy_choice.h). */
void sl__twophase_decide(sl__twophase_choice *c);

/* One sentence saying why (the report's "two_phase_reason"), into out (cap bytes, terminated). */
void sl__twophase_reason(const sl__twophase_choice *c, char *out, size_t cap);

#endif
