/*
 * engine/file_choice.c — how this rank reads each file it opened (engine/strategy_choice.h
 * decides; this measures): the bytes it reads of the file, which of them are mapped parameters,
 * what O_DIRECT's alignment would add to the others and how large its reads would be, and what
 * the page cache holds of all of them (engine/residency.h). Where O_DIRECT is chosen it is
 * turned on for the open file; a file system that refuses it gets the page cache instead. Under
 * auto, a resident file this rank reads row-parallel slices of row by row (not two-phase,
 * engine/twophase_choice.h) is mapped read-only: the slices are copied out of the page cache
 * without a system call per row (engine/readers.c).
 */
#include "engine/engine.h"

#include "base/log.h"
#include "engine/residency.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* A byte range of a file this rank reads. stream: read in chunks (a contiguous piece, or a strided
 * one read with its gaps); otherwise row by row (strided, its rows counted apart). */
typedef struct extent {
  uint32_t file;
  bool mapped, stream;
  uint64_t off, end;
} extent;

bool sl__engine_piece_mapped(const sl__engine *e, const sl__piece *P) {
  uint32_t piece = (uint32_t)(P - e->t->sched->pieces);
  if (P->group != SL_NONE || P->rows > 1 || !e->t->backend->host_addressable || e->t->param_mapped == NULL ||
      e->copy_start[piece + 1] - e->copy_start[piece] != 1)
    return false;
  return e->t->param_mapped[e->t->plan->copies[e->copy_list[e->copy_start[piece]]].lparam];
}

static int by_file_offset(const void *a, const void *b) {
  const extent *x = a, *y = b;
  if (x->file != y->file)
    return x->file < y->file ? -1 : 1;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* O_DIRECT's reads of bytes [off, end) read in chunks: their count and the alignment they add. */
static void stream_cost(const sl__engine *e, uint64_t off, uint64_t end, sl__choice_in *in) {
  uint64_t chunk = e->t->chunk > 0 ? e->t->chunk : end - off;
  for (uint64_t a = off; a < end; a += chunk) {
    uint64_t len = end - a < chunk ? end - a : chunk, woff = 0, wlen = 0;
    sl__readplan_widen(a, len, e->staging.align, &woff, &wlen);
    in->direct_extra += wlen - len;
    in->direct_reads++;
  }
}

/* Piece P's extent, and for a strided piece read row by row, what O_DIRECT would cost its rows. */
static extent piece_extent(const sl__engine *e, const sl__piece *P, bool mapped, sl__choice_in *in) {
  const sl__cat_tensor *T = &e->t->cat->tensors[P->tensor];
  uint64_t first = T->offset + sl__src_of(P, 0), last = T->offset + sl__src_of(P, P->nbytes - 1);
  extent x = {.file = T->file, .mapped = mapped, .stream = true, .off = first, .end = last + 1};
  /* A column piece of a two-phase exchange is read as blocks of whole rows: large reads. */
  if (mapped || P->rows <= 1 || P->xchg != SL_NONE || sl__piece_covering(P, e->t->coalesce_gap, e->t->chunk))
    return x;
  x.stream = false;
  for (uint64_t r = 0; r < P->rows; r++) {
    uint64_t off = first + r * P->src_stride, woff = 0, wlen = 0;
    sl__readplan_widen(off, P->row_bytes, e->staging.align, &woff, &wlen);
    in->direct_extra += wlen - P->row_bytes;
    in->direct_reads += e->t->chunk > 0 ? (P->row_bytes + e->t->chunk - 1) / e->t->chunk : 1;
  }
  return x;
}

/* The extents of the pieces this rank reads, sorted by file and offset, touching ones of the same
 * kind merged; per file the bytes read and mapped, and the row-by-row costs of O_DIRECT. */
static sl_status collect(sl__engine *e, sl__vec *xs) {
  const sl__schedule *s = e->t->sched;
  uint32_t me = (uint32_t)e->t->comm->rank;
  for (size_t k = 0; k < s->n_pieces; k++) {
    const sl__piece *P = &s->pieces[k];
    if (P->reader != me || P->nbytes == 0)
      continue;
    bool mapped = sl__engine_piece_mapped(e, P);
    sl__choice_in *in = &e->files.choice[e->t->cat->tensors[P->tensor].file].in;
    in->bytes += P->nbytes;
    in->bytes_mapped += mapped ? P->nbytes : 0;
    extent *x = sl__vec_push(xs);
    if (x == NULL)
      return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory choosing how to read");
    *x = piece_extent(e, P, mapped, in);
  }
  if (xs->len > 1)
    qsort(xs->data, xs->len, sizeof(extent), by_file_offset);
  size_t n = 0;
  for (size_t i = 0; i < xs->len; i++) {
    extent *x = &SL_VEC_AT(xs, extent, i);
    extent *prev = n > 0 ? &SL_VEC_AT(xs, extent, n - 1) : NULL;
    if (prev != NULL && prev->file == x->file && prev->mapped == x->mapped && prev->stream == x->stream &&
        x->off <= prev->end) {
      prev->end = x->end > prev->end ? x->end : prev->end;
      continue;
    }
    SL_VEC_AT(xs, extent, n++) = *x;
  }
  xs->len = n;
  return SL_STATUS_OK;
}

/* What the page cache holds of each extent, and O_DIRECT's cost for the streamed ones not mapped. */
static void measure(sl__engine *e, const sl__vec *xs) {
  for (size_t i = 0; i < xs->len; i++) {
    const extent *x = &SL_VEC_AT(xs, extent, i);
    sl__choice_in *in = &e->files.choice[x->file].in;
    uint64_t pages = 0, resident = 0;
    if (e->files.fds[x->file] < 0 ||
        !sl__residency(e->files.fds[x->file], x->off, x->end - x->off, &pages, &resident))
      in->resident_known = false;
    in->pages += pages;
    in->resident += resident;
    if (!x->mapped) {
      in->rest_pages += pages;
      in->rest_resident += resident;
      if (x->stream)
        stream_cost(e, x->off, x->end, in);
    }
  }
}

/* Per file: whether this rank reads row-parallel slices of it row by row (strided, no exchange). */
static bool *row_files(const sl__engine *e) {
  const sl__schedule *s = e->t->sched;
  bool *rows = calloc(e->t->cat->n_files + 1, sizeof *rows);
  for (size_t k = 0; rows != NULL && k < s->n_pieces; k++) {
    const sl__piece *P = &s->pieces[k];
    if (P->reader == (uint32_t)e->t->comm->rank && P->rows > 1 && P->xchg == SL_NONE && P->nbytes > 0)
      rows[e->t->cat->tensors[P->tensor].file] = true;
  }
  return rows;
}

/* Whether the kernel makes a mapped range resident in one call that reports failure
 * (MADV_POPULATE_READ, Linux 5.14): without it an I/O error or a truncated file would fault in the
 * copy instead of failing the read, so rows are left to pread. */
static bool populate_works(void *p, uint64_t size) {
#ifdef MADV_POPULATE_READ
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  return madvise(p, (size_t)(size < page ? size : page), MADV_POPULATE_READ) == 0;
#else
  (void)p, (void)size;
  return false;
#endif
}

/* Maps file f for row copies where auto read it through the page cache because it is resident. A
 * mapping that fails, a kernel that cannot populate it safely (or no memory to find out) leaves
 * the rows to pread. */
static void map_rows(sl__engine *e, uint32_t f, const bool *rows) {
  const sl__file_choice *c = &e->files.choice[f];
  uint64_t size = e->t->cat->files[f].size;
  if (rows == NULL || !rows[f] || c->in.strategy != SL_STRATEGY_AUTO || !c->in.host ||
      c->why != SL_WHY_RESIDENT || size == 0 || (uint64_t)(size_t)size != size)
    return;
  void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, e->files.fds[f], 0);
  if (p != MAP_FAILED && populate_works(p, size))
    e->files.rowmap[f] = p;
  else if (p != MAP_FAILED)
    munmap(p, (size_t)size);
}

void sl__engine_rowmaps_free(sl__engine *e) {
  for (size_t f = 0; e->files.rowmap != NULL && f < e->t->cat->n_files; f++)
    if (e->files.rowmap[f] != NULL)
      munmap(e->files.rowmap[f], (size_t)e->t->cat->files[f].size);
  free(e->files.rowmap);
  e->files.rowmap = NULL;
}

sl__file_choice *sl__engine_choice_take(sl__engine *e) {
  sl__file_choice *c = e->files.choice;
  e->files.choice = NULL;
  return c;
}

sl_status sl__engine_choose(sl__engine *e) {
  const sl__catalog *cat = e->t->cat;
  e->files.choice = calloc(cat->n_files + 1, sizeof *e->files.choice);
  e->files.rowmap = calloc(cat->n_files + 1, sizeof *e->files.rowmap);
  if (e->files.choice == NULL || e->files.rowmap == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory choosing how to read");
  for (size_t f = 0; f < cat->n_files; f++)
    e->files.choice[f].in = (sl__choice_in){.strategy = e->t->strategy,
                                            .host = e->t->backend->host_addressable,
                                            .maps = e->t->param_mapped != NULL,
                                            .resident_known = true,
                                            .o_direct = true,
                                            .read_ahead = e->t->one_node};
  sl__vec xs;
  sl__vec_init(&xs, sizeof(extent));
  sl_status st = collect(e, &xs);
  if (st == SL_STATUS_OK)
    measure(e, &xs);
  sl__vec_free(&xs);
  bool *rows = st == SL_STATUS_OK ? row_files(e) : NULL;
  for (size_t f = 0; f < cat->n_files && st == SL_STATUS_OK; f++) {
    sl__file_choice *c = &e->files.choice[f];
    if (c->in.bytes == 0 || e->files.fds[f] < 0)
      continue;
    sl__strategy_decide(c);
    if (c->direct && !sl__set_o_direct(e->files.fds[f])) {
      c->in.o_direct = false;
      sl__strategy_decide(c);
      if (c->in.strategy != SL_STRATEGY_AUTO)
        SL_WARN("%s: the file system refuses O_DIRECT; reading it through the page cache",
                cat->files[f].path);
    }
    map_rows(e, (uint32_t)f, rows);
  }
  free(rows);
  return st;
}
