/*
 * output/save.h — `--save-sharded DIR`: each rank writes its local parameters as
 * DIR/model-rank-{rank}-part-{part}.safetensors (docs/spec/TRACKING.md §4), and rank 0 copies the model's
 * non-weight files, so that a pre-sharded copy can be loaded by anything that reads safetensors.
 *
 * A save is all or nothing (docs/spec/TRACKING.md §4.5). The loader (api/loader.c) drives these steps,
 * agreeing between ranks after each one:
 *   1. every rank plans its parts (sl__save_plan_build); rank 0 checks the folder for files of an
 *      older save that this one would not replace (sl__save_check_stale): refused, or removed
 *      with `overwrite`;
 *   2. every rank writes its parts under temporary names (sl__save_write_temp);
 *   3. rank 0 removes the completion marker (SL_SAVE_MARKER) of any earlier save, then every rank
 *      renames its temporaries onto the final names (sl__save_commit);
 *   4. rank 0 copies the non-weight files, the marker last (sl__save_copy_extras).
 * A failure at any step makes every rank remove what this save wrote (sl__save_discard), so a
 * folder holding the marker holds a complete save.
 */
#ifndef SL_SAVE_H
#define SL_SAVE_H

#include "backend/backend.h"
#include "base/err.h"
#include "format/dtype.h"
#include "model/sharded_name.h"

#include <stdbool.h>
#include <stdint.h>

/* Written last by rank 0: a folder with this file (and part files) holds a complete save. */
#define SL_SAVE_MARKER "config.json"

typedef struct sl__save_entry {
  const char *name;
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[8];
  const void *data; /* backend memory; entries with equal data and nbytes share memory */
  uint64_t nbytes;
} sl__save_entry;

/* The parts of one rank: the kept entries in table order, cut into parts. */
typedef struct sl__save_plan {
  size_t n_kept;
  size_t *kept;     /* entry indices, table order */
  size_t *part_end; /* part k is kept[part_end[k-1] .. part_end[k]) (part_end[-1] = 0) */
  uint32_t n_parts;
} sl__save_plan;

/* Zero-size entries and aliases are dropped (of entries sharing memory — equal data pointer AND
 * equal size — the one whose name sorts first bytewise is kept); the rest is split greedily in
 * table order up to max_part bytes per part (a larger tensor gets a part of its own). */
sl_status sl__save_plan_build(const sl__save_entry *entries, size_t n, uint64_t max_part, sl__save_plan *out,
                              sl__err *err);
void sl__save_plan_free(sl__save_plan *p);

/* Writes the parts of plan under temporary names beside the final ones (dot-prefixed, so that no
 * loader's "*.safetensors" pattern matches them), each with the metadata "format": "pt" and, when
 * layout is given, the layout of the save (model/sharded_name.h). On failure nothing of them is left.
 * SHARDLOAD_INJECT_SAVE_ERROR=<rank> makes that rank fail as if the disk were full, after its
 * first part (a test aid for the failure path). */
sl_status sl__save_write_temp(const char *dir, uint32_t rank, const sl__save_entry *entries,
                              const sl__save_plan *plan, const sl__sharded_layout *layout,
                              sl__backend *backend, sl__err *err);
/* Renames this rank's n_parts temporaries onto their final names. */
sl_status sl__save_commit(const char *dir, uint32_t rank, uint32_t n_parts, sl__err *err);
/* Removes this rank's temporaries 0 .. n_parts-1 and, with finals, its final part files of those
 * numbers too (a save that failed after its first rename). */
void sl__save_discard(const char *dir, uint32_t rank, uint32_t n_parts, bool finals);

/* Rank 0: part files in dir (model-rank-R-part-K.safetensors, and the temporaries of such names)
 * that a save by `world` ranks with parts[r] parts on rank r would not replace: ranks >= world
 * and parts >= parts[R]. With remove false they are refused (SL_STATUS_CONFIG naming the folder,
 * their count and the first one, and --overwrite); with remove true they are deleted. */
sl_status sl__save_check_stale(const char *dir, uint32_t world, const uint32_t *parts, bool remove,
                               sl__err *err);
/* Rank 0: removes dir/SL_SAVE_MARKER when present. */
sl_status sl__save_remove_marker(const char *dir, sl__err *err);

/* One process's whole save of one rank: plan, temporaries, rename, then the rank's own part files
 * numbered beyond the new ones are removed. *parts receives the number of part files now in place
 * (0 on failure: nothing of this save is left). */
sl_status sl__save_rank(const char *dir, uint32_t rank, const sl__save_entry *entries, size_t n,
                        uint64_t max_part, sl__backend *backend, uint32_t *parts, sl__err *err);

/* Rank 0: copies every top-level non-weight file of model_folder into dir (not *.safetensors,
 * *.bin, *.pt, *.pth, *.ckpt, *.gguf, *.h5, *.msgpack, *.onnx, nor the index files), each through
 * a temporary file; SL_SAVE_MARKER last. */
sl_status sl__save_copy_extras(const char *model_folder, const char *dir, sl__err *err);
/* Rank 0, for a model that is not in a folder (an object store's): its config.json text (what
 * names where it came from) written as dir's SL_SAVE_MARKER, through a temporary file. */
sl_status sl__save_write_config(const char *dir, const char *text, size_t len, const char *what,
                                sl__err *err);

/* COLLECTIVE (output/save_job.c): the whole save of every rank, steps 1-4 above. */
struct sl__comm;
typedef struct sl__save_job {
  const char *dir;
  const char *model_folder; /* rank 0 copies its non-weight files; NULL: ... */
  const char *config_json;  /* ... rank 0 writes this config.json instead (a model of an object store, */
  size_t config_len;        /* whose other files stay there), or nothing when NULL too */
  const sl__save_entry *entries;
  size_t n;
  uint64_t max_part;
  bool overwrite; /* remove an older save's files that this one does not replace */
  sl__backend *backend;
  sl__sharded_layout layout; /* the job's tp, pp, dp: written into every part's metadata */
} sl__save_job;
sl_status sl__save_sharded(struct sl__comm *comm, const sl__save_job *job, sl__err *err);

/* mkdir -p. */
sl_status sl__mkdirs(const char *dir, sl__err *err);

#endif
