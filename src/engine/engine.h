/*
 * engine/engine.h — the state one transfer (engine/transfer.h) shares between the files that run
 * it, by job:
 *   engine/transfer.c      setup, the reader threads' start and stop, progress, the run;
 *   engine/reads.c         the read operations of this rank's pieces, and opening their files;
 *   engine/file_choice.c   how each file is read (load_strategy auto decides per file);
 *   engine/route.c         a read's bytes → a bucket slot, an exchange buffer or the copies;
 *   engine/deliver.c       piece bytes → every local copy's rows (the one place bytes land);
 *   engine/readers.c       the pread reader pool (a ring of staging slots per thread), and the
 *                          main thread's wait for the readers;
 *   engine/uring_reader.c  the io_uring reader (O_DIRECT reads kept in flight);
 *   engine/remote.c        reads of the files that are objects of a store (S3: ranged GETs);
 *   engine/buckets.c       the bucket loop: wait for the reader, broadcast, scatter;
 *   engine/exchange.c      two-phase exchange rounds: the rows read, column blocks swapped.
 * Calls go down, never back up: transfer → buckets → exchange → deliver, transfer → readers;
 * readers → route → exchange (packing) and deliver.
 * Internal to the engine: nothing outside src/engine includes it.
 *
 * Data of a piece is thought of as its "packed" form: rows × row_bytes bytes in row order. A
 * delivery moves the packed range [p0, p1) of a piece from a read buffer (source rows
 * src_stride apart) either into a bucket (packed, contiguous) or into every local copy of the
 * piece (rows dst_stride apart). A parameter bound with another dtype (sl_loader_bind_as) is
 * converted element by element on the way (engine/deliver.c): its offsets in the plan are planned
 * bytes, scaled to the memory's element size; an element whose bytes arrive in two deliveries (a
 * chunk or bucket boundary inside it) waits in cast_partial until its other bytes arrive. A
 * parameter held with its last two dimensions transposed (sl__lparam.transposed) has its offsets
 * in the planned orientation; delivery puts every element at its transposed place.
 */
#ifndef SL_ENGINE_H
#define SL_ENGINE_H

#include "base/workers.h"
#include "engine/staging.h"
#include "engine/strategy_choice.h"
#include "engine/transfer.h"
#include "plan/readplan.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sl__engine {
  sl__transfer *t;
  sl__err *err;
  sl__staging staging; /* reader threads, slots per thread, slot size (engine/staging.h) */
  /* my pieces' local copies (CSR by piece) */
  uint32_t *copy_start; /* n_pieces + 1 */
  uint32_t *copy_list;
  /* my buckets in global order */
  uint32_t *my_buckets;
  size_t n_my_buckets;
  /* reads */
  sl__readplan rp;            /* read operations and their deliveries */
  uint32_t *bucket_ops_start; /* my bucket → first op index in bucket_op_list */
  uint32_t *bucket_op_list;
  sl__vec local_ops;       /* uint32_t op indices */
  int *fds;                /* per file, -1 until opened */
  sl__file_stamp *stamps;  /* per file: what fstat said at open (compared after the last read) */
  sl__file_choice *choice; /* per file: how this rank reads it, and why (engine/file_choice.c) */
  /* Per file, or NULL: a read-only mapping of the whole file that this rank's row-parallel slices
   * are copied out of (auto, resident: no system call per row; engine/file_choice.c maps it,
   * engine/readers.c copies) */
  uint8_t **rowmap;
  struct sl__engine_remote *remote; /* the files that are objects of a store (engine/remote.c), or NULL */
  /* bucket slots */
  void *slot_buf[SL_BUCKET_SLOTS_MAX];
  bool slot_abandoned[SL_BUCKET_SLOTS_MAX]; /* target of a broadcast an abort left unfinished */
  uint64_t slot_bytes;
  uint32_t n_slots; /* bucket slots in rotation: SL_BUCKET_SLOTS, or the backend's (bucket_slots) */
  /* two-phase exchange rounds (plan/twophase.h): host buffers, the column blocks of the rows read
   * (one packed area per block, rows_per_round rows each), then the columns received;
   * the bucket slots themselves where the backend's memory is host memory */
  uint8_t *xbuf[SL_BUCKET_SLOTS];
  bool xbuf_own; /* allocated apart (staging memory), released with the engine */
  uint64_t xbuf_bytes;
  /* pool */
  /* guards the pool: the queues and their heads and tails, bucket_left, local_left, stop, pool_err,
   * and, once the readers run, fds (a file still downloading is opened by the first thread that
   * reads it); cv signals changes.
   * lock order: a file gate's lock (engine/file_gate.c) before this one, never this one and then a
   * gate's (under this lock the pool asks sl__file_gate_is_open, which takes none). Under it
   * sl__engine_wait_for asks its predicate, which reads the pool and takes no lock. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t *queue_hi; /* op indices ready (bucket reads) */
  size_t hi_head, hi_tail;
  uint32_t *queue_lo; /* local reads */
  size_t lo_head, lo_tail;
  uint32_t *bucket_left; /* per my bucket: read ops not finished */
  size_t local_left;
  bool stop;
  _Atomic bool failed;
  sl__err pool_err;    /* first worker error */
  sl__workers threads; /* the reader threads (base/workers.h) */
  uint32_t n_threads;
  _Atomic uint64_t bytes_read;
  _Atomic uint64_t bytes_covering;
  _Atomic uint64_t read_ops;
  _Atomic uint64_t bytes_mapped;
  _Atomic uint64_t bytes_done;
  uint64_t bytes_total;
  double t_start;
  _Atomic bool inject_error; /* test hook: the next read fails (SHARDLOAD_INJECT_READ_ERROR) */
  uint64_t inject_delay_us;  /* test hook: every read operation first sleeps this long */
  /* converted parameters: elements split between two deliveries, until complete */
  pthread_mutex_t cast_mu; /* guards cast_partial (deliveries of any reader thread) */
  sl__vec cast_partial;    /* sl__cast_partial */
} sl__engine;

/* The bytes of one element of a converted parameter that arrived so far. */
typedef struct sl__cast_partial {
  uint32_t lparam;
  uint64_t off;     /* the element's first byte in the parameter, planned bytes */
  uint8_t bytes[8]; /* planned dtype */
  uint8_t have;     /* bit k: bytes[k] arrived */
} sl__cast_partial;

/* Whether local parameter lparam is converted on delivery (a planned conversion, or
 * sl_loader_bind_as). */
static inline bool sl__engine_casts(const sl__transfer *t, uint32_t lparam) {
  return t->param_cast != NULL && t->param_cast[lparam].from != t->param_cast[lparam].to;
}

/* Whether delivery rearranges local parameter lparam's bytes (converted, or held transposed:
 * sl__lparam.transposed): its bytes go through staging, never read into it directly. */
static inline bool sl__engine_rearranges(const sl__transfer *t, uint32_t lparam) {
  return sl__engine_casts(t, lparam) || t->plan->lparams[lparam].transposed > 0;
}

/* A reader thread's argument. */
typedef struct sl__engine_worker {
  sl__engine *e;
  int index;
} sl__engine_worker;

/* ---- reads.c ---- */
/* The read operations of this rank: local pieces first, then bucket items in bucket order (after
 * sl__engine_open_files: each file is read as its choice says). */
sl_status sl__engine_build_reads(sl__engine *e);
/* Opens every file a piece this rank reads lies in (and those of its two-phase exchanges),
 * checking each against the catalog and keeping what fstat said, then chooses how each is read
 * (sl__engine_choose); files whose gate is still closed (a download in progress) are left to
 * sl__engine_fd. */
sl_status sl__engine_open_files(sl__engine *e);
/* The descriptor of file f for a reader thread: with a file gate (a download in progress), the
 * file is opened on first use, after its gate opened (engine/file_gate.h). */
sl_status sl__engine_fd(sl__engine *e, uint32_t f, int *fd, sl__err *werr);

/* Takes the next queued read operation (bucket reads first); called with e->mu held and one
 * queued. While files still download, an operation on a complete file goes first (see readers.c). */
uint32_t sl__engine_take_op(sl__engine *e);

/* ---- file_choice.c ---- */
/* Per open file: measures, decides (engine/strategy_choice.h), turns O_DIRECT on where chosen;
 * under auto, maps a file read through the page cache because it is resident where this rank
 * reads row-parallel slices of it row by row (e->rowmap). */
sl_status sl__engine_choose(sl__engine *e);
/* Unmaps e->rowmap's files. */
void sl__engine_rowmaps_free(sl__engine *e);
/* Whether piece P is a mapped parameter's bytes: populated in place, never read into staging. */
bool sl__engine_piece_mapped(const sl__engine *e, const sl__piece *P);
/* After the last read: every opened file is still the one opened, unchanged (catalog.h). */
sl_status sl__engine_check_files(sl__engine *e);

/* ---- deliver.c ---- */
/* Segment seg of piece `piece`, whose first byte is at src (rows src_stride apart), into every
 * local copy of the piece: uploaded from reader thread `worker` (slot `slot`), or copied within
 * backend memory by the main thread (worker < 0). */
sl_status sl__engine_to_copies(sl__engine *e, uint32_t piece, const sl__segment *seg, const uint8_t *src,
                               uint64_t src_stride, int worker, int slot, sl__err *err);
/* After the last delivery: no element of a converted parameter is left incomplete. */
sl_status sl__engine_cast_check(sl__engine *e);

/* ---- route.c ---- */
/* Moves delivery d from a host buffer holding file bytes from file offset buf_off, or (packed) the
 * delivery's packed bytes themselves (a row run). */
sl_status sl__engine_deliver(sl__engine *e, int worker, int slot, const sl__delivery *d, const uint8_t *buf,
                             uint64_t buf_off, bool packed, sl__err *werr);

/* ---- readers.c ---- */
/* The test hook: the first read of this rank fails (SHARDLOAD_INJECT_READ_ERROR); every read
 * operation is slowed down by SHARDLOAD_INJECT_READ_DELAY_MS. */
sl_status sl__engine_injected_failure(sl__engine *e, uint32_t f, uint64_t off, sl__err *werr);
/* Records a worker's error (the first one wins) and wakes everybody up. */
void sl__engine_fail(sl__engine *e, const sl__err *werr);
/* First thing a reader thread does: the backend's reader_start (binding it near the device). */
void sl__engine_reader_start(sl__engine *e, int worker);
/* Counts operation op as finished (its bucket, or the local reads) and wakes the waiters. */
void sl__engine_op_done(sl__engine *e, const sl__read_op *op);
/* Thread body of the pread strategies (arg: sl__engine_worker). */
void *sl__engine_pread_worker(void *arg);

/* ---- remote.c ---- */
typedef struct sl__engine_remote sl__engine_remote;
/* Before the files are opened: a session for the catalog's objects of a store, if it has any. */
sl_status sl__engine_remote_open(sl__engine *e);
/* Bytes [off, off + len) of object file f into buf, on reader `worker`'s own connection. */
sl_status sl__engine_remote_read(sl__engine *e, int worker, uint32_t f, void *buf, uint64_t len, uint64_t off,
                                 sl__err *werr);
void sl__engine_remote_close(sl__engine *e);

/* ---- uring_reader.c ---- */
/* Thread body of the io_uring strategy (arg: sl__engine_worker). */
void *sl__engine_uring_worker(void *arg);

/* ---- buckets.c ---- */
/* Walks this rank's buckets in the global order: waits for the reader's bytes (as reader),
 * broadcasts, scatters into local copies. *t_bcast: seconds inside broadcasts. */
sl_status sl__engine_run_buckets(sl__engine *e, sl__transfer_stats *stats, double *t_bcast, bool *aborted);

/* ---- exchange.c ---- */
/* Whole rows of an exchange round (delivery d: file bytes [p0, p1) in buf, which starts at file
 * offset buf_off) → the round's host buffer, split into one packed area per column block. */
void sl__engine_exchange_pack(sl__engine *e, const sl__delivery *d, const uint8_t *buf, uint64_t buf_off);
/* Read operations of my rows in exchange round `bucket` (my bucket index j). */
sl_status sl__engine_exchange_reads(sl__engine *e, const sl__bucket *b, uint32_t j);
/* The exchange round of my bucket j, once my rows are read: swap column blocks, deliver mine. */
sl_status sl__engine_exchange_round(sl__engine *e, uint32_t j, sl__transfer_stats *stats, bool *aborted);

/* ---- readers.c (the main thread's side) ---- */
/* Waits until pred holds, polling the abort channel (main thread only: it may call MPI). */
sl_status sl__engine_wait_for(sl__engine *e, bool (*pred)(sl__engine *, void *), void *arg, bool *aborted);

#endif
