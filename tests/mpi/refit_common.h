/*
 * refit_common.h — what the refit tests share (test_refit.c, test_refit_faults.c;
 * docs/spec/DESIGN.md §13): the trainers' side written from the fixtures' value function alone (each
 * trainer's blocks of every checkpoint tensor, filled element by element from tests/common/
 * values.h with a version's transformation), and the receivers' expected bytes from the
 * independent reference (tests/common/reference.h) under the same transformation.
 *
 * A version's values: every checkpoint byte XORed with key(v) (version 0: the checkpoint itself).
 * A "rounded" version publishes BF16 tensors as F32 whose low half is 0x8001 (finite values), so
 * that the receivers' BF16 must be the XORed bits plus one (rounding to nearest is up), NaN a NaN
 * and infinity itself: an expectation computed without the library's conversion.
 */
#ifndef SL_TESTS_REFIT_COMMON_H
#define SL_TESTS_REFIT_COMMON_H

#include "reference.h"
#include "shardload/shardload.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

/* How a trainer's blocks cut each tensor (T trainers in groups of `shards`, the others replicas). */
typedef enum tcut {
  CUT_ROWS,      /* the first dimension as torch.chunk cuts it (FSDP's Shard(0)): uneven last blocks */
  CUT_ROWS_LAST, /* rows in blocks of ceil(rows / (shards - 1)): the last trainer's block empty */
  CUT_COLS,      /* the last dimension (Megatron's column blocks; 1-D tensors by rows) */
  CUT_WHOLE      /* every trainer holds every tensor whole (replicas) */
} tcut;

/* XOR key of version v. */
uint8_t rf_key(uint64_t v);

/* One trainer's publisher for the fixture's tensors: shard `shard` of `shards` under `cut`, values
 * of version v, F32 for BF16 tensors when `rounded`. The buffers stay with the publisher until the
 * next rf_trainer_make or rf_trainer_free. skip: a tensor name left out (NULL: none). t must be
 * zeroed the first time; a publisher it holds is kept (cleared, refilled: its plan is reused). */
typedef struct rf_device rf_device;
typedef struct rf_trainer {
  sl_publisher *pub;
  void **bufs;
  void **dev_bufs; /* with a device: the blocks' device copies */
  const rf_device *dev;
  size_t n;
} rf_trainer;
bool rf_trainer_make(rf_trainer *t, const char *fixture, tcut cut, int shard, int shards, uint64_t v,
                     bool rounded, const char *skip, uint64_t bucket_bytes);

/* Device memory for a trainer's blocks (tests/gpu): the publisher is created with device=cuda on
 * `device`, each block copied there. */
struct rf_device {
  int device;
  void *(*copy)(const void *host, size_t nbytes); /* NULL on failure */
  void (*release)(void *ptr);
};
/* rf_trainer_make with blocks in device memory (dev), or host memory (NULL). */
bool rf_trainer_make_on(rf_trainer *t, const rf_device *dev, const char *fixture, tcut cut, int shard,
                        int shards, uint64_t v, bool rounded);
void rf_trainer_free(rf_trainer *t);
void rf_trainer_bufs_free(rf_trainer *t);

/* A receiver's parameters against the reference of layout (tp, pp, dp, ep) at its rank among the
 * receivers, under version v (rounded: see above); float32_norm: model.norm.weight bound as F32. */
void rf_check_receiver(const char *label, const char *fixture, int tp, int pp, int dp, bool ep, int side_rank,
                       const sl_loader *l, uint64_t v, bool rounded);
/* The same for parameters in device memory: fetch copies a parameter's bytes to the host. */
typedef bool (*rf_fetch)(const sl_param *p, uint8_t *host);
void rf_check_receiver_with(const char *label, const char *fixture, int tp, int pp, int dp, bool ep,
                            int side_rank, const sl_loader *l, uint64_t v, bool rounded, rf_fetch fetch);

/* The expected bytes of reference entry e under version v (rounded: see above; into_f32: the
 * caller's buffer holds F32). nan[i]: element i only has to be a NaN (may be NULL). */
void rf_expected(const sl_ref_model *m, const sl_ref_param *e, uint64_t v, bool rounded, bool into_f32,
                 uint8_t *out, uint8_t *nan);

/* Every rank: the same status (a CHECK fails otherwise). */
void rf_same_everywhere(const char *label, sl_status st);

/* A number field of a JSON report ("key": value), -1 when absent. */
double rf_json_number(const char *json, const char *key);

#endif
