/*
 * plan/visibility.c — which ranks see which files, and the readers chosen with it (see
 * plan/visibility.h). Only runs when some rank does not see some file: then readers are chosen rank
 * by rank among those that see the piece's file, which costs the members of each shared piece and,
 * for a piece none of whose members sees its file, one pass over the ranks. The class-level choice
 * of plan/schedule.c stays the path of a shared volume, where every rank is a candidate.
 */
#include "plan/visibility.h"

#include "model/catalog.h"
#include "plan/plan.h"
#include "plan/stats.h"

#include <stdlib.h>
#include <string.h>

const char *sl__storage_name(sl__storage s) {
  return s == SL_STORAGE_SHARED ? "shared" : s == SL_STORAGE_LOCAL ? "local" : "auto";
}

void sl__visibility_everywhere(sl__visibility *v, uint32_t world, uint32_t n_files) {
  memset(v, 0, sizeof *v);
  v->world = world;
  v->n_files = n_files;
  v->everywhere = true;
}

bool sl__visibility_alloc(sl__visibility *v, uint32_t world, uint32_t n_files) {
  memset(v, 0, sizeof *v);
  v->world = world;
  v->n_files = n_files;
  v->row_bytes = ((size_t)n_files + 7) / 8;
  v->sees = calloc((size_t)world * v->row_bytes + 1, 1);
  v->seers = calloc((size_t)n_files + 1, sizeof *v->seers);
  if (v->sees == NULL || v->seers == NULL) {
    sl__visibility_free(v);
    return false;
  }
  return true;
}

void sl__visibility_free(sl__visibility *v) {
  if (v == NULL)
    return;
  free(v->sees);
  free(v->seers);
  memset(v, 0, sizeof *v);
}

void sl__visibility_set(sl__visibility *v, uint32_t rank, uint32_t file) {
  v->sees[(size_t)rank * v->row_bytes + file / 8] |= (uint8_t)(1u << (file % 8));
}

bool sl__visibility_sees(const sl__visibility *v, uint32_t rank, uint32_t file) {
  if (v->sees == NULL)
    return v->everywhere;
  return (v->sees[(size_t)rank * v->row_bytes + file / 8] >> (file % 8)) & 1u;
}

void sl__visibility_count(sl__visibility *v) {
  v->everywhere = true;
  if (v->sees == NULL)
    return;
  for (uint32_t f = 0; f < v->n_files; f++) {
    v->seers[f] = 0;
    for (uint32_t r = 0; r < v->world; r++)
      v->seers[f] += sl__visibility_sees(v, r, f);
    v->everywhere = v->everywhere && v->seers[f] == v->world;
  }
}

bool sl__visibility_first_node(sl__visibility *v, uint32_t world, uint32_t n_files,
                               const sl__node_layout *nodes) {
  if (!sl__visibility_alloc(v, world, n_files))
    return false;
  uint32_t first = sl__node_layout_of(nodes, 0);
  for (uint32_t r = 0; r < world; r++)
    for (uint32_t f = 0; f < n_files && sl__node_layout_of(nodes, r) == first; f++)
      sl__visibility_set(v, r, f);
  sl__visibility_count(v);
  return true;
}

/* ---------------------------------------------------------------------------------------------
 * Readers
 * ------------------------------------------------------------------------------------------- */

typedef struct chooser {
  sl__schedule *s;
  const sl__catalog *cat;
  const sl__visibility *v;
  const sl__node_layout *nodes;
  uint64_t *load; /* per rank: bytes it reads so far */
} chooser;

static bool lighter(const uint64_t *load, uint32_t a, uint32_t b) {
  return b == SL_NONE || load[a] < load[b] || (load[a] == load[b] && a < b);
}

/* The least-loaded member of p that sees file f, or SL_NONE. */
static uint32_t seeing_member(const chooser *ch, const sl__piece *p, uint32_t f) {
  const sl__schedule *s = ch->s;
  uint32_t best = SL_NONE;
  for (uint32_t j = 0; j < p->n_classes; j++) {
    uint32_t c = s->piece_classes[p->classes_off + j];
    for (uint64_t i = s->class_off[c]; i < s->class_off[c + 1]; i++) {
      uint32_t r = s->class_ranks[i];
      if (sl__visibility_sees(ch->v, r, f) && lighter(ch->load, r, best))
        best = r;
    }
  }
  return best;
}

/* The least-loaded rank that sees file f, on node `node` when one there does (SL_NONE: any). */
static uint32_t seeing_rank(const chooser *ch, uint32_t f, uint32_t node) {
  uint32_t near = SL_NONE;
  uint32_t any = SL_NONE;
  for (uint32_t r = 0; r < ch->v->world; r++) {
    if (!sl__visibility_sees(ch->v, r, f))
      continue;
    if (lighter(ch->load, r, any))
      any = r;
    if (ch->nodes != NULL && node != SL_NONE && sl__node_layout_of(ch->nodes, r) == node &&
        lighter(ch->load, r, near))
      near = r;
  }
  return near != SL_NONE ? near : any;
}

static sl_status choose(chooser *ch, sl__piece *p, sl__err *err) {
  uint32_t f = ch->cat->tensors[p->tensor].file;
  uint32_t r = seeing_member(ch, p, f);
  p->lent = r == SL_NONE;
  if (p->lent) {
    uint32_t first = sl__piece_lowest_member(ch->s, p);
    if (ch->v->seers[f] == 0)
      return sl__err_set(err, SL_STATUS_IO,
                         "no rank can open %s (rank %u needs tensor %s from it): the file must be readable "
                         "on at least one rank",
                         ch->cat->files[f].path, first, ch->cat->tensors[p->tensor].name);
    r = seeing_rank(ch, f, ch->nodes != NULL ? sl__node_layout_of(ch->nodes, first) : SL_NONE);
  }
  p->reader = r;
  ch->load[r] += p->nbytes;
  return SL_STATUS_OK;
}

sl_status sl__visibility_readers(sl__schedule *s, const sl__catalog *cat, const sl__visibility *v,
                                 const sl__node_layout *nodes, sl__err *err) {
  chooser ch = {
      .s = s, .cat = cat, .v = v, .nodes = nodes, .load = calloc((size_t)s->world + 1, sizeof(uint64_t))};
  uint32_t *rest = calloc(s->n_pieces + 1, sizeof *rest);
  if (ch.load == NULL || rest == NULL) {
    free(ch.load);
    free(rest);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning %u ranks", s->world);
  }
  size_t n_rest = 0;
  sl_status st = SL_STATUS_OK;
  for (size_t k = 0; k < s->n_pieces; k++) {
    sl__piece *p = &s->pieces[k];
    s->unique_bytes += p->nbytes;
    p->lent = false;
    if (p->xchg != SL_NONE) { /* its file is seen everywhere (plan/twophase.c): as plan/schedule.c */
      p->reader = sl__piece_lowest_member(s, p);
    } else if (p->n_members == 1 && seeing_member(&ch, p, cat->tensors[p->tensor].file) != SL_NONE) {
      p->reader = s->class_ranks[s->class_off[s->piece_classes[p->classes_off]]];
      ch.load[p->reader] += p->nbytes;
    } else {
      rest[n_rest++] = (uint32_t)k;
    }
  }
  qsort_r(rest, n_rest, sizeof *rest, sl__piece_cmp_size_desc, s->pieces);
  for (size_t i = 0; i < n_rest && st == SL_STATUS_OK; i++)
    st = choose(&ch, &s->pieces[rest[i]], err);
  free(ch.load);
  free(rest);
  return st;
}
