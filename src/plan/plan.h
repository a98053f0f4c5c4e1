/*
 * plan/plan.h — what each rank holds and where every byte comes from. Pure functions of (model,
 * catalog, layout, rank): no MPI, no I/O, so any rank of any world size can be planned.
 *
 * Two levels:
 *   - the rank plan: the rank's local parameter table (local shapes, bytes) and its copies, each
 *     a strided byte copy from one checkpoint tensor into one local parameter;
 *   - the schedule: the plans of all ranks merged. Identical source slices needed by several
 *     ranks become one "piece" with exactly one reader (chosen to balance bytes); the others
 *     receive it by broadcast in the group of ranks that need it, packed into buckets. Every rank
 *     derives the same schedule (a rank of a load only its part of it: sl__plan_opts.local), so
 *     no negotiation is needed at run time.
 * The rank plan is plan/slicing.c, the schedule plan/schedule.c; the staging budget that sizes
 * read_chunk and bucket_bytes is engine/staging.h.
 */
#ifndef SL_PLAN_H
#define SL_PLAN_H

#include "model/layout.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

/* The broadcast bucket size when none is given: the one owner of the number (the configuration
 * key bucket_bytes states it as text made from this macro, api/config.c). */
#define SL_BUCKET_BYTES_DEFAULT 67108864

typedef struct sl__plan_opts {
  sl__layout layout;
  const uint32_t *pp_starts; /* pp + 1 layer boundaries */
  bool enable_ep;
  sl__placement placement; /* requested; the effective one is derived (docs/spec/EXPERTS.md §3) */
  bool eplb;
  uint64_t redundant;    /* EPLB redundant experts */
  uint64_t coalesce_gap; /* read across gaps up to this many bytes */
  uint64_t bucket_bytes; /* broadcast bucket size (0: SL_BUCKET_BYTES_DEFAULT) */
  uint64_t read_chunk;   /* largest single read (effective: see sl__staging_split) */
  bool per_row_reads;    /* no two-phase reads (plan/twophase.h): row-parallel slices row by row */
  /* Per file, or NULL: its row-parallel slices are read by their own ranks, not two-phase
   * (load_strategy auto on a file resident in the page cache, engine/twophase_choice.h; the same
   * for every rank of the job). */
  const bool *per_row_files;
  /* Which ranks see which files (plan/visibility.h), or NULL: every rank sees every file. With it,
   * nodes places a reader that reads for others near them (NULL: no preference). */
  const struct sl__visibility *vis;
  const struct sl__node_layout *nodes;
  /* A loading rank's schedule (sl__schedule_build with an own rank): only the groups the own rank
   * is in list their members and only its figures are computed, so that its planning does not
   * grow with the world beyond classifying the ranks (docs/spec/DESIGN.md §3). Ignored without an
   * own rank, and where some rank does not see some file (o->vis): those schedules stay whole. */
  bool local;
} sl__plan_opts;

/* Per-rank derived coordinates. */
typedef struct sl__rank_ctx {
  uint32_t rank;
  sl__coords c;
  uint32_t tp, r;          /* dense tensor parallel */
  uint32_t mt, mr;         /* MoE tensor parallel (dp*tp without EP, 1 with EP) */
  uint32_t ep, e;          /* expert parallel size and rank (ep = 1: no EP) */
  sl__placement placement; /* effective */
  bool eplb;
  uint64_t slots;     /* local expert slots (El) */
  uint64_t slot_base; /* EPLB: first physical slot of this rank */
  bool first_stage, last_stage;
  uint32_t layer_start, layer_end;
} sl__rank_ctx;

typedef struct sl__lparam {
  uint32_t mparam; /* index in the model */
  uint32_t ndim;
  uint64_t shape[SL_SPEC_MAX_DIMS]; /* local shape */
  uint64_t nbytes;
  uint32_t alias_of; /* local index of the entry whose memory it shares, or SL_NONE */
  /* > 0: the last two dimensions are held transposed (spec "transpose", docs/spec/LAYOUTS.md §3.10),
   * and this is the element size in bytes. shape[] is the held shape [.., B, A]; the copies'
   * dst_off / dst_stride address the sources' orientation [.., A, B] of the same elements, and
   * delivery (engine/deliver.c) puts element (.., a, b) of that orientation at (.., b, a). Such a
   * parameter is never read into directly nor mapped. */
  uint32_t transposed;
  char shard[192]; /* human description of the slice */
} sl__lparam;

typedef struct sl__copy {
  uint32_t lparam;     /* destination: local parameter index */
  uint32_t tensor;     /* source: catalog tensor */
  uint32_t unit;       /* expected-set unit this copy (partly) feeds, or SL_NONE */
  uint64_t src_off;    /* bytes from the tensor's first byte */
  uint64_t src_stride; /* bytes between consecutive rows in the source */
  uint64_t row_bytes;  /* bytes per row */
  uint64_t rows;
  uint64_t dst_off; /* bytes from the parameter's first byte (of its sources' orientation when the
                       parameter is transposed: sl__lparam.transposed) */
  uint64_t dst_stride;
  uint32_t piece; /* schedule piece (set by sl__schedule_build) */
} sl__copy;

typedef struct sl__rank_plan {
  sl__rank_ctx ctx;
  size_t n_lparams;
  sl__lparam *lparams; /* table order */
  size_t n_copies;
  sl__copy *copies;
  uint64_t bytes_needed; /* sum of copy bytes */
  uint64_t bytes_local;  /* sum of local table bytes (aliases once, padding included) */
} sl__rank_plan;

/* The coordinates of rank `rank` (plan/rank_ctx.c); an error when the EPLB settings do not fit. */
sl_status sl__rank_ctx_init(const sl__model *m, const sl__plan_opts *o, uint32_t rank, sl__rank_ctx *out,
                            sl__err *err);
/* Global id of the expert in local slot k (< x->slots) of the rank (plan/rank_ctx.c). */
uint64_t sl__rank_slot_expert(const sl__model *m, const sl__rank_ctx *x, uint64_t k);
/* Attention heads over tp, as vLLM checks them first: every parameter cut by heads must have a
 * head count divisible by tp ("Total number of attention heads (N) must be divisible by tensor
 * parallel size (T)"), and q/k/v key/value heads must divide tp or be divided by it. Called by
 * sl__schedule_build before any parameter is sliced, so that this is the first complaint of a
 * bad tp, before the padded vocabulary or any other tensor's. */
sl_status sl__plan_check_heads(const sl__model *m, uint32_t tp, sl__err *err);
/* The plan of one rank. with_table = false skips the shard descriptions (dry runs). */
sl_status sl__plan_rank(const sl__model *m, const sl__catalog *cat, const sl__plan_opts *o, uint32_t rank,
                        bool with_table, sl__rank_plan *out, sl__err *err);
void sl__rank_plan_free(sl__rank_plan *p);
/* sl__plan_rank of a load from caller-described plans (m->described; plan/slicing_described.c):
 * the rank's plan's parameters in its order, each region made copies, each parameter's
 * destination checked to be written exactly once (SL_STATUS_PLAN naming the ranks, the parameter
 * and the regions). */
sl_status sl__plan_rank_described(const sl__model *m, const sl__catalog *cat, const sl__plan_opts *o,
                                  uint32_t rank, bool with_table, sl__rank_plan *out, sl__err *err);

/* ---- schedule ---- */

typedef struct sl__piece {
  uint32_t tensor;
  uint32_t reader; /* the one rank that reads it */
  uint32_t group;  /* broadcast group, or SL_NONE when only the reader needs it and reads it */
  uint32_t n_members;
  uint64_t src_off, src_stride, row_bytes, rows;
  uint64_t nbytes;      /* rows * row_bytes (packed size) */
  uint64_t classes_off; /* its member classes: sl__schedule.piece_classes[classes_off ..] */
  uint32_t n_classes;   /* its members are the ranks of these classes (sl__piece_member) */
  uint32_t xchg;        /* two-phase exchange delivering it (plan/twophase.h), or SL_NONE */
  bool lent; /* the reader is not a member: it reads for ranks that cannot see the file (plan/visibility.h),
                and its group is the members and the reader */
} sl__piece;

typedef struct sl__group {
  uint32_t n;   /* members (sorted ranks) */
  uint64_t off; /* first member in sl__schedule.members; SL_GROUP_UNLISTED: not listed (below) */
  /* Its members are the ranks of these classes (sl__schedule.piece_classes[classes_off ..]), and,
   * in a group of lent pieces, their reader (plan/visibility.h). */
  uint64_t classes_off;
  uint32_t n_classes;
} sl__group;

/* sl__group.off of a group whose members a loading rank's schedule does not list: the own rank is
 * not one of them (sl__plan_opts.local; sl__schedule_list_groups lists them). */
#define SL_GROUP_UNLISTED UINT64_MAX

typedef struct sl__bucket_item {
  uint32_t piece;
  uint64_t piece_off; /* byte range [piece_off, piece_off + len) of the packed piece */
  uint64_t len;
  uint64_t bucket_off; /* where it sits in the bucket */
} sl__bucket_item;

typedef struct sl__bucket {
  uint32_t group;
  uint32_t reader; /* an exchange round: the group's first member (every member reads) */
  uint32_t xchg;   /* SL_NONE: a broadcast; else one round of this two-phase exchange */
  uint64_t round;
  uint64_t nbytes;
  uint64_t first_item;
  uint32_t n_items;
} sl__bucket;

typedef struct sl__schedule {
  uint32_t world;
  size_t n_pieces;
  sl__piece *pieces; /* sorted by (tensor, src_off, geometry) */
  /* Rank classes: ranks whose plans are equal up to the rank id (same stage, tensor rank, experts,
   * ...). Each class is planned once and a piece's members are the ranks of its classes, so the
   * schedule never lists a piece's members rank by rank: data-parallel replicas cost no planning. */
  uint32_t n_classes;
  uint32_t *class_of;      /* per rank */
  uint64_t *class_off;     /* per class (+ 1): its ranks are class_ranks[class_off[c] .. class_off[c+1]) */
  uint32_t *class_ranks;   /* ascending within a class */
  uint32_t *piece_classes; /* per piece, ascending (sl__piece.classes_off) */
  size_t n_groups;
  sl__group *groups;
  uint32_t *group_members; /* ranks of groups */
  size_t n_buckets;
  sl__bucket *buckets; /* global order: every rank walks it the same way */
  size_t n_items;
  sl__bucket_item *items;
  size_t n_xchgs;
  struct sl__xchg *xchgs;   /* two-phase exchanges of row-parallel tensors (plan/twophase.h) */
  uint64_t bytes_exchanged; /* received in two-phase exchanges, summed over ranks */
  /* read by a rank that does not need them: in two-phase exchanges, and lent pieces (plan/visibility.h) */
  uint64_t bytes_read_for_others;
  sl_rank_stats *stats;        /* per rank */
  uint64_t unique_bytes;       /* sum of piece bytes (each source slice once) */
  uint64_t naive_bytes;        /* sum over ranks of the full tensors they touch */
  uint64_t checkpoint_bytes;   /* sum of catalog tensor bytes */
  uint8_t *unit_needed;        /* bitmap over the model's expected set: some rank's plan feeds it */
  uint8_t *tensor_used;        /* bitmap over the catalog: some rank reads it */
  uint64_t tensors_read;       /* catalog tensors some rank reads */
  uint64_t tensors_one_reader; /* of which read whole, each byte once, by one single rank */
  uint64_t expert_tensors;     /* catalog tensors feeding expert parameters */
  uint64_t expert_tensors_one_reader;
  /* false: every group lists its members and stats holds every rank's figures. true: a loading
   * rank's schedule (sl__plan_opts.local): only the groups of this rank list their members, and
   * stats holds the figures of the plans for every rank (bytes needed, local, naive; parameters,
   * experts) but the transfer's (read, covering, sent, received, files opened) for this rank only.
   * The rest is the same as the whole schedule's: pieces and their readers, group numbers and
   * sizes, buckets, exchanges, the totals. */
  bool local;
  uint32_t local_rank; /* the loading rank (local), else SL_NONE */
} sl__schedule;

/* Plans every rank of the layout and merges them. own_rank (or SL_NONE) receives its rank plan
 * in *own with the pieces of its copies filled in. */
sl_status sl__schedule_build(const sl__model *m, const sl__catalog *cat, const sl__plan_opts *o,
                             uint32_t own_rank, sl__rank_plan *own, sl__schedule *out, sl__err *err);
void sl__schedule_free(sl__schedule *s);
/* s with every group's members listed (what the time model needs: plan/stats.h sl__figures_predict),
 * in out: s's arrays but its own groups and members, which sl__schedule_listed_free frees. A loading
 * rank's schedule lists those its rank is not in; its figures stay the rank's own. */
sl_status sl__schedule_listed(const sl__schedule *s, sl__schedule *out, sl__err *err);
void sl__schedule_listed_free(sl__schedule *s);
/* Whether group g lists its members (always, but in a loading rank's schedule). */
static inline bool sl__group_listed(const sl__schedule *s, uint32_t g) {
  return s->groups[g].off != SL_GROUP_UNLISTED;
}
/* The lowest rank of group g (listed or not). */
uint32_t sl__group_lowest(const sl__schedule *s, uint32_t g);
/* Groups in which some bucket is broadcast (the others only swap column blocks in two-phase
 * exchanges): flags[g] set for each (flags: n_groups entries, false on entry), their number returned. */
size_t sl__schedule_broadcasting(const sl__schedule *s, bool *flags);

/* qsort_r order of piece indexes (uint32_t) by size, largest first, then index; ctx: the pieces. */
int sl__piece_cmp_size_desc(const void *a, const void *b, void *ctx);
/* The lowest rank among p's members (plan/pieces.c). */
uint32_t sl__piece_lowest_member(const sl__schedule *s, const sl__piece *p);
/* Whether rank is a member of piece p. */
bool sl__piece_member(const sl__schedule *s, const sl__piece *p, uint32_t rank);
/* The ranks of classes cls[0 .. n) (distinct), ascending, into out (room for them all); returns their
 * count. bits: scratch of (world + 63) / 64 zeroed words, zeroed again on return. */
uint32_t sl__class_ranks(const sl__schedule *s, const uint32_t *cls, uint32_t n, uint32_t *out,
                         uint64_t *bits);

/* ---- read extents (shared by the read engine and the dry-run statistics) ---- */

/* How a piece is read: one covering range (rows merged across small gaps, see plan/schedule.c, or a
 * single contiguous row), or one range per row. chunk: the largest single read. */
bool sl__piece_covering(const sl__piece *p, uint64_t coalesce_gap, uint64_t chunk);
/* Bytes read for a piece, covering gaps included (exact: the read engine reads exactly this). */
uint64_t sl__piece_read_bytes(const sl__piece *p, uint64_t coalesce_gap, uint64_t chunk);

#endif
