/*
 * backend/cuda/bounce.c — pinned scratch areas, one per reader thread and staging slot, that an
 * upload out of that slot may rearrange its bytes into on the host first: narrow rows packed into
 * one contiguous copy (a 2-D copy of rows of a few hundred bytes moves a fraction of what a flat one
 * does), and transposed expert blocks (transpose.c) without an allocation and a wait per block. An
 * area belongs to its slot's uploads: it is handed out from its start again once the engine waited
 * for the slot (upload_wait) or for everything (sync), the same waits that free the slot itself.
 * Allocated on first use, as large as a staging slot (what one upload out of a slot can span), on
 * the reader thread (on the GPU's NUMA node, as the staging); where pinned memory runs short the
 * upload goes without it.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/log.h"

#include <stdlib.h>

#define BOUNCE_ALIGN 64u /* each piece on its own cache lines */

void sl__cuda_bounce_note_staging(cuda_state *st, uint64_t nbytes) {
  uint64_t seen = atomic_load(&st->staging_max);
  while (nbytes > seen && !atomic_compare_exchange_weak(&st->staging_max, &seen, nbytes)) {
  }
}

uint8_t *sl__cuda_bounce(cuda_state *st, size_t idx, uint64_t nbytes) {
  sl__cuda_bounce_area *a = &st->bounce[idx];
  if (a->buf == NULL && !a->failed) {
    uint64_t cap = atomic_load(&st->staging_max);
    void *p = NULL;
    if (cap == 0 || sl__cu.cudaHostAlloc(&p, (size_t)cap, cudaHostAllocPortable) != cudaSuccess) {
      (void)sl__cu.cudaGetLastError();
      a->failed = true; /* uploads out of this slot go without it */
      SL_DEBUG("cuda backend: no pinned scratch of %llu bytes for staging slot %zu", (unsigned long long)cap,
               idx);
      return NULL;
    }
    a->buf = p;
    a->cap = cap;
    a->used = 0;
  }
  uint64_t start = (a->used + BOUNCE_ALIGN - 1) / BOUNCE_ALIGN * BOUNCE_ALIGN;
  if (a->buf == NULL || start > a->cap || nbytes > a->cap - start)
    return NULL;
  a->used = start + nbytes;
  return a->buf + start;
}

void sl__cuda_bounce_reset(cuda_state *st, size_t idx) {
  st->bounce[idx].used = 0;
}

void sl__cuda_bounce_reset_all(cuda_state *st) {
  for (size_t i = 0; st->bounce != NULL && i < (size_t)st->workers * (size_t)st->slots; i++)
    st->bounce[i].used = 0;
}

void sl__cuda_bounce_free(cuda_state *st) {
  for (size_t i = 0; st->bounce != NULL && i < (size_t)st->workers * (size_t)st->slots; i++)
    if (st->bounce[i].buf != NULL)
      (void)sl__cu.cudaFreeHost(st->bounce[i].buf);
  free(st->bounce);
  st->bounce = NULL;
}
