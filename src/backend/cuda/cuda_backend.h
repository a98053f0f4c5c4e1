/*
 * backend/cuda/cuda_backend.h — the decisions of the CUDA backend that need no GPU: which device a rank uses,
 * how long a GPU wait may last, each rank's place in the NCCL communicator of a broadcast group,
 * which ranks would share one GPU inside a group, and how a 2-D copy is issued. Pure functions
 * (backend/cuda/logic.c), so that a unit test checks them on machines without a GPU; backend/cuda/backend.c
 * makes the CUDA and NCCL calls.
 */
#ifndef SL_CUDA_BACKEND_H
#define SL_CUDA_BACKEND_H

#include "base/err.h"
#include "comm/comm.h"

#include <stdbool.h>
#include <stdint.h>

/* Environment variable: seconds a broadcast (or any GPU wait) may take before the backend gives
 * up and aborts the NCCL communicator. */
#define SL_CUDA_TIMEOUT_ENV "SHARDLOAD_NCCL_TIMEOUT_S"
#define SL_CUDA_TIMEOUT_DEFAULT_S 600.0
#define SL_CUDA_TIMEOUT_MAX_S 31536000.0 /* one year: anything above is a typo */

/* Seconds from the text of SL_CUDA_TIMEOUT_ENV: NULL or "" → the default; otherwise a positive
 * decimal number ("30", "0.5"). Anything else is SL_STATUS_CONFIG naming the variable. */
sl_status sl__cuda_parse_timeout(const char *text, double *seconds, sl__err *err);

/* The device ordinal: requested >= 0 → that one (it must exist); otherwise the node-local rank
 * modulo count. count <= 0 or a missing ordinal: SL_STATUS_NO_DEVICE. */
sl_status sl__cuda_pick_device(int requested, int local_rank, int count, int *out, sl__err *err);

/* Position of rank among the members of broadcast group g (= its rank in the group's NCCL
 * communicator, members in group order), or -1 when it is not a member. */
int sl__cuda_group_pos(const sl__comm_groups *groups, size_t g, int rank);
/* This rank's position in group g's NCCL communicator: as sl__cuda_group_pos for a group that
 * broadcasts, -1 for one that only exchanges (no communicator is made for it). */
int sl__cuda_comm_pos(const sl__comm_groups *groups, size_t g, int rank);

/* Where a rank's GPU is: two ranks with equal host and bus_id use the same GPU. */
typedef struct sl__cuda_place {
  char host[64];   /* host name (truncated) */
  char bus_id[32]; /* PCI bus id of the device, e.g. "0000:1B:00.0" */
  int device;      /* ordinal in that rank's process */
} sl__cuda_place;

/* NCCL cannot put two ranks of one communicator on one GPU. places: one per rank of the world.
 * Error (SL_STATUS_NCCL) naming the first group, the two ranks and the GPU, when some group that
 * `rank` belongs to has two members on one GPU. */
sl_status sl__cuda_check_places(const sl__comm_groups *groups, int rank, const sl__cuda_place *places,
                                sl__err *err);

/* How a 2-D copy of `rows` rows of `row_bytes` is issued. */
typedef enum sl__cuda_copy_kind {
  SL_CUDA_COPY_NONE = 0, /* nothing to copy */
  SL_CUDA_COPY_FLAT,     /* one contiguous copy of rows * row_bytes */
  SL_CUDA_COPY_2D,       /* cudaMemcpy2DAsync, in pieces of at most SL_CUDA_2D_MAX_ROWS rows */
  SL_CUDA_COPY_ROWS      /* a pitch above the device's limit: one copy per row */
} sl__cuda_copy_kind;

#define SL_CUDA_2D_MAX_ROWS ((uint64_t)1 << 16)

/* Decides the kind; a stride smaller than row_bytes (with rows > 1) or a size that overflows is
 * SL_STATUS_INTERNAL. max_pitch: the device's largest pitch in bytes. */
sl_status sl__cuda_copy_kind_of(uint64_t dst_stride, uint64_t src_stride, uint64_t row_bytes, uint64_t rows,
                                uint64_t max_pitch, sl__cuda_copy_kind *out, sl__err *err);

/* Environment: maxCTAs of every NCCL communicator the backend makes (1-64, default 8: NCCL's
 * channels, each with buffers in device memory and a CTA that competes with the caller's kernels;
 * 8 keep a node's NVLink broadcasts beyond what the readers upload). */
#define SL_NCCL_MAX_CTAS_ENV "SHARDLOAD_NCCL_MAX_CTAS"
#define SL_NCCL_MAX_CTAS_DEFAULT 8
/* Environment: 1 (default) waits for the readers' uploads and the main stream block in the driver on
 * events made with cudaEventBlockingSync; 0 they poll, with a deadline of their own. */
#define SL_CUDA_BLOCKING_SYNC_ENV "SHARDLOAD_CUDA_BLOCKING_SYNC"
/* Environment: 1 (default) the groups' communicators are split from one parent sharing its
 * resources; 0 one communicator of its own per group. */
#define SL_NCCL_SHARE_ENV "SHARDLOAD_NCCL_SHARE"

/* An integer in [lo, hi] from the text of environment variable `name` (NULL or "": dflt). Anything
 * else is SL_STATUS_CONFIG naming the variable and the range. */
sl_status sl__cuda_parse_env_int(const char *name, const char *text, int lo, int hi, int dflt, int *out,
                                 sl__err *err);

/* Whether two of n ranks use one GPU (equal host and bus id): NCCL makes no communicator with both. */
bool sl__cuda_any_shared_gpu(const sl__cuda_place *places, int n);

/* The broadcasting groups split from one parent communicator in layers: one ncclCommSplit per layer
 * (a collective over every rank of the parent), each layer holding groups that share no rank, so
 * that a rank takes one color per layer. rank_groups: for each of `size` ranks, `k` group numbers
 * (SL_CUDA_NO_GROUP where it has fewer), the groups it broadcasts in; n_groups: groups numbered
 * below it. Greedy in group order: each group goes to the first layer none of its ranks is in yet.
 * layer_of[g] receives g's layer (SL_CUDA_NO_GROUP for a group no rank lists); returns the number of
 * layers, or -1 when a group number is out of range or memory runs out. */
#define SL_CUDA_NO_GROUP UINT32_MAX
int sl__cuda_split_layers(const uint32_t *rank_groups, int size, int k, size_t n_groups, uint32_t *layer_of);

/* Broadcast buckets of slot_bytes to keep in rotation with free_bytes of device memory free: the
 * most of 8 down to 4 that take at most a sixteenth of it, else 2 (the engine's minimum). More
 * buckets let the readers fill further ahead of the broadcasts. */
uint32_t sl__cuda_bucket_slots(uint64_t free_bytes, uint64_t slot_bytes);

/* Which CUDA runtime to keep of n candidates: versions[i] is candidate i's CUDA version (1000 * major +
 * 10 * minor; 0: not found), driver the driver's (0: no driver). The first whose major the driver's
 * major reaches (a driver runs runtimes of its own major and older: minor-version compatibility
 * within a major); when none, the first found (its errors then name the driver as too old); -1 when
 * none was found. */
int sl__cuda_pick_runtime(const int *versions, int n, int driver);

/* "13.0" from 13000 ("unknown" for <= 0). */
void sl__cuda_version_text(int v, char *out, size_t cap);
/* "2.28.3" from 22803 (NCCL's encoding from 2.9 on; 2.8.4 from 2804 before); "unknown" for <= 0. */
void sl__nccl_version_text(int v, char *out, size_t cap);

#endif
