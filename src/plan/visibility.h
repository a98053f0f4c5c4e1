/*
 * plan/visibility.h — which ranks can read which checkpoint files, and the readers chosen with it.
 *
 * Without a shared volume some ranks cannot open the checkpoint (a node without the mount, a model
 * copied onto one machine, a Hub cache on node 0's disk). The plan still knows every byte each rank
 * needs: a piece is read by a rank that sees its file, and a rank that does not see it receives the
 * piece through the same broadcast groups as shared pieces — its group is then the piece's members
 * plus the reader, which reads for others without keeping the bytes (docs/spec/STORAGE.md).
 */
#ifndef SL_PLAN_VISIBILITY_H
#define SL_PLAN_VISIBILITY_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

/* Where the checkpoint can be read (configuration key storage). */
typedef enum sl__storage {
  SL_STORAGE_AUTO,   /* every rank checks which files it can open, and that they are rank 0's */
  SL_STORAGE_SHARED, /* every rank opens every file it reads, unchecked (a shared volume) */
  SL_STORAGE_LOCAL   /* the ranks of rank 0's node only; the others receive over the network */
} sl__storage;

struct sl__schedule;
struct sl__catalog;
struct sl__node_layout;

typedef struct sl__visibility {
  uint32_t world;
  uint32_t n_files;
  size_t row_bytes; /* bytes of one rank's bits: (n_files + 7) / 8 */
  uint8_t *sees;    /* world rows of row_bytes: bit `file` of row `rank`; NULL when everywhere */
  uint32_t *seers;  /* per file: how many ranks see it */
  bool everywhere;  /* every rank sees every file (then the planner ignores it) */
} sl__visibility;

/* "auto", "shared" or "local". */
const char *sl__storage_name(sl__storage s);
/* Every rank sees every file (a shared volume): nothing allocated. */
void sl__visibility_everywhere(sl__visibility *v, uint32_t world, uint32_t n_files);
/* An empty visibility (nobody sees anything) for world × n_files; false when out of memory. */
bool sl__visibility_alloc(sl__visibility *v, uint32_t world, uint32_t n_files);
void sl__visibility_free(sl__visibility *v);
void sl__visibility_set(sl__visibility *v, uint32_t rank, uint32_t file);
bool sl__visibility_sees(const sl__visibility *v, uint32_t rank, uint32_t file);
/* Counts each file's seers and whether every rank sees every file (after the bits are set). */
void sl__visibility_count(sl__visibility *v);
/* The files on the first node only (ranks whose node is node_of_first, or the first ranks_per_node
 * ranks): the `storage local` visibility. */
bool sl__visibility_first_node(sl__visibility *v, uint32_t world, uint32_t n_files,
                               const struct sl__node_layout *nodes);

/* Readers for every piece of the schedule (phase 2 of plan/schedule.c when some rank does not see
 * some file): a piece whose members include ranks that see its file is read by the least-loaded of
 * those; one whose members see nothing of it is read by the least-loaded rank that sees the file,
 * on the node of its first member when one there does (lent: the reader is not a member). Exclusive
 * pieces whose member reads them come first, then the rest largest first. An error names a needed
 * file that no rank sees. */
sl_status sl__visibility_readers(struct sl__schedule *s, const struct sl__catalog *cat,
                                 const sl__visibility *v, const struct sl__node_layout *nodes, sl__err *err);

#endif
