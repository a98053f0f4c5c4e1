/*
 * plan/refit.h — weight sync (refit, docs/spec/DESIGN.md §13): what trainers publish, and the part
 * of a plan one refit moves. Pure.
 *
 * A trainer publishes, per checkpoint tensor it holds, one block of the full tensor: its offsets
 * in the checkpoint's global coordinates and its extent (a contiguous hyper-rectangle: FSDP's row
 * blocks, uneven or empty last ones, Megatron's column or row blocks), the local memory laid out
 * row-major in the published dtype. Every rank checks every trainer's blocks against the
 * receivers' catalog (names, shapes, dtypes that convert, bounds, blocks of two trainers that
 * overlap without being the same block), then turns each block into the donor copies of a load
 * from peers (plan/peers.h) in the checkpoint's bytes at the catalog's dtype: the planner of a
 * load from peers then cuts every receiver copy at the trainers' blocks, so that each byte comes
 * from one trainer (replicas, identical blocks, share the sending) and crosses each node's link at
 * most once (relays). A trainer whose dtype differs converts as it packs a message: the link
 * carries the catalog's dtype.
 *
 * The plan is made once per pair of layouts and kept; each refit moves only the parts the
 * receivers still need (sl__peer_plan_subset): none for a receiver that holds the version, the
 * copies a failed refit of the same version left incomplete, every part otherwise.
 */
#ifndef SL_PLAN_REFIT_H
#define SL_PLAN_REFIT_H

#include "base/err.h"
#include "model/catalog.h"
#include "plan/peers.h"

#include <stdbool.h>
#include <stdint.h>

/* One published block. */
typedef struct sl__refit_block {
  char *name;      /* the checkpoint tensor */
  uint32_t tensor; /* its index in the receivers' catalog (sl__refit_check) */
  sl__dtype dtype; /* of the published elements */
  uint32_t ndim;
  bool shape_known;                  /* false: the trainer did not say; the catalog's (sl__refit_check) */
  uint64_t shape[SL_CAT_MAX_DIMS];   /* the full tensor's, as the trainer says it */
  uint64_t offsets[SL_CAT_MAX_DIMS]; /* the block's first element */
  uint64_t extent[SL_CAT_MAX_DIMS];  /* the block's shape (a 0: an empty block) */
} sl__refit_block;

/* One trainer's blocks, in the order it added them (a block's index is its donor "parameter"). */
typedef struct sl__refit_blocks {
  size_t n, cap;
  sl__refit_block *b;
} sl__refit_blocks;

/* The most blocks one trainer publishes (a bound on what a blob may ask to allocate). */
#define SL_REFIT_MAX_BLOCKS (1u << 24)

/* Appends a block (its name copied). shape NULL: the tensor's shape is the catalog's (checked by
 * sl__refit_check). Checks what needs no catalog: the name, the dtype, ndim <= SL_CAT_MAX_DIMS,
 * offsets + extent within a given shape (overflow-checked). */
sl_status sl__refit_blocks_add(sl__refit_blocks *b, const char *name, sl__dtype dtype, uint32_t ndim,
                               const uint64_t *shape, const uint64_t *offsets, const uint64_t *extent,
                               sl__err *err);
void sl__refit_blocks_free(sl__refit_blocks *b);

/* The wire form (little-endian): "SLRB", u32 count; per block u32 name bytes, the name, u32 dtype,
 * u32 ndim, u32 flags (1: the shape is given, the only flag), then ndim × (shape, offset, extent) as
 * u64 (shape 0 when not given). parse validates every length and count
 * against the blob before allocating, and every block as sl__refit_blocks_add does; `who` names
 * the sender in messages. */
sl_status sl__refit_blocks_serialize(const sl__refit_blocks *b, uint8_t **blob, size_t *len, sl__err *err);
sl_status sl__refit_blocks_parse(const uint8_t *blob, size_t len, const char *who, sl__refit_blocks *out,
                                 sl__err *err);
/* A 64-bit hash of the layout (names, shapes, offsets, extents, in order; not the dtypes, which
 * the plan does not depend on: a refit checks them each time, sl__refit_check_dtypes). */
uint64_t sl__refit_blocks_hash(const sl__refit_blocks *b);

/* Every trainer's blocks (trainers[0 .. n), job rank rank_of[t]) against the receivers' catalog,
 * before any byte moves: a name the catalog lacks (with the nearest name), another shape (or, for
 * a block whose shape was not given, other dimensions or offsets + extent outside the catalog's), a dtype
 * that neither equals the catalog's nor converts into it (F32, F16, BF16, F64 convert into each
 * other), a catalog tensor of sub-byte elements, and two blocks of one tensor that overlap without
 * being the same block. The first problem, in trainer and block order, naming the tensor and the
 * trainers. Sets every block's tensor. */
sl_status sl__refit_check(const sl__catalog *cat, sl__refit_blocks *trainers, uint32_t n,
                          const uint32_t *rank_of, sl__err *err);

/* Each block of b (its tensor tensor_of[i], from the checked copy of these blocks that planned)
 * publishes a dtype that equals its tensor's wire dtype (wire[t]: the catalog's) or converts into
 * it, and on a GPU (device) equals it: the first that does not, named. */
sl_status sl__refit_check_dtypes(const sl__refit_blocks *b, const uint32_t *tensor_of, const sl__dtype *wire,
                                 bool device, sl__err *err);

/* A trainer's checked blocks as the donor copies of plan/peers.h (*out malloc'd, *n of them): in
 * the checkpoint tensor's bytes at the catalog's dtype; lparam = the block's index, dst_off and
 * dst_stride in the block's memory as if it held the catalog's dtype. */
sl_status sl__refit_copies(const sl__catalog *cat, const sl__refit_blocks *b, sl__copy **out, size_t *n,
                           sl__err *err);

/* The trainers' layout of a dry run (*out: *n trainers' blocks, malloc'd; sl__refit_blocks_free
 * each): "fsdp:N" / "fsdp:NxR" (every catalog tensor cut along its first dimension as torch.chunk
 * cuts it over N trainers, R replicas of those) or JSON text {"trainers": [{"TENSOR": {"offsets":
 * [..], "extent": [..], "dtype": "F32", "shape": [..]}, ...}, ...]} (dtype and shape default to
 * the catalog's). Untrusted text: bounded, every value checked. */
sl_status sl__refit_describe(const char *text, const sl__catalog *cat, sl__refit_blocks **out, uint32_t *n,
                             sl__err *err);

/* The parts of pp with keep[part] set, in pp's order, packed into the same messages' order (a
 * message without kept parts dropped, its offsets and sizes recomputed), the groups those messages
 * use renumbered, sent and received recounted. keep: one byte per part of pp. */
sl_status sl__peer_plan_subset(const sl__peer_plan *pp, const uint8_t *keep, sl__peer_plan *out,
                               sl__err *err);

#endif
