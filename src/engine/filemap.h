/*
 * engine/filemap.h — the mmap load strategy's zero-copy parameters (host backend).
 *
 * A parameter built from contiguous ranges of checkpoint files that this rank alone reads (a
 * whole tensor, a dim-0 tensor-parallel slice, a fused qkv or gate_up made of such ranges) need
 * not be copied: its memory can be the page cache's own pages. Each such parameter gets its own
 * address range; every whole page of it that lies inside one source range is a private mapping of
 * the file page (MAP_FIXED), and the few pages where two ranges meet, or a range meets padding,
 * are ordinary memory filled here with a small pread. That needs every range of the parameter to
 * sit at the same offset within a page in the file as in the parameter (the usual case: tensor
 * sizes are multiples of the page size); otherwise the parameter is read as usual.
 *
 * Mappings are private and writable: a caller writing a parameter gets its own copy of the page
 * it writes and never changes the file. The read engine populates the mapped ranges
 * (engine/transfer.c), which is when storage is read.
 */
#ifndef SL_FILEMAP_H
#define SL_FILEMAP_H

#include "engine/file_table.h"
#include "engine/strategy_choice.h"
#include "model/catalog.h"
#include "plan/plan.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Mapped parameter pointers keep at least this alignment. */
#define SL_FILEMAP_ALIGN 8u

typedef struct sl__filemap_region {
  void *base;
  size_t len;
} sl__filemap_region;

typedef struct sl__filemaps {
  sl__filemap_region *regions; /* one per mapped parameter */
  size_t n_regions;
  uint64_t bytes_mapped; /* parameter bytes that are file pages (edge pages excluded) */
  uint64_t bytes_edges;  /* bytes read into edge pages while mapping */
  uint32_t params_mapped;
} sl__filemaps;

/* Maps what can be mapped: not aliases, not skip[i] (the caller's own buffers, those converted on
 * delivery included: a mapping of the file cannot hold another dtype), not a parameter held
 * transposed (sl__lparam.transposed: nor another orientation); every copy of
 * the parameter contiguous, from a piece this rank alone needs and reads, with one common page
 * phase; at least one whole page mapped. The number of mappings stays within half of the
 * system's limit (vm.max_map_count); parameters beyond it are read as usual. Under
 * SL_STRATEGY_AUTO, a parameter that is cold and large on a file system taking O_DIRECT is
 * read as usual too (sl__strategy_map_param): O_DIRECT fills it faster than a mapping's page
 * cache. Sets param_ptr[i] and mapped[i]. Files come from this rank's table of the load (files:
 * opened once, checked at open, left open for the reads, engine/file_table.h), or with files NULL
 * are opened here, checked against the catalog, and closed. On failure nothing stays mapped. */
sl_status sl__filemap_params(const sl__catalog *cat, const sl__schedule *s, const sl__rank_plan *plan,
                             const bool *skip, sl__strategy strategy, sl__file_table *files, void **param_ptr,
                             bool *mapped, sl__filemaps *out, sl__err *err);
void sl__filemaps_free(sl__filemaps *m);

/* Whether sl__filemap_params ran for this load (parameters may be mappings). */
static inline bool sl__filemaps_tried(const sl__filemaps *m) {
  return m->regions != NULL;
}

/* Makes [p, p + len) of a mapped parameter resident (reads it from storage when it is not
 * cached). The error names `path` and the file offset `off` of p. */
sl_status sl__filemap_populate(const void *p, uint64_t len, const char *path, uint64_t off, sl__err *err);

#endif
