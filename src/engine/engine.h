/*
 * engine/engine.h — the state one transfer (engine/transfer.h) shares between the files that run
 * it, kept by job: each section below is one file's (or one job's) part of the state, with who
 * writes it, what lock guards it and who may read it, then that file's functions. sl__engine is
 * the composition of these parts and of the run's inputs. The files, by job:
 *   engine/transfer.c      the run: its inputs and my pieces' copies, setup, the steps, figures;
 *   engine/reads.c         the read operations of this rank's pieces, and opening their files
 *                          (sl__engine_reads, and with file_choice.c and remote.c sl__engine_files);
 *   engine/file_choice.c   how each file is read (load_strategy auto decides per file);
 *   engine/remote.c        reads of the files that are objects of a store (S3: ranged GETs);
 *   engine/readers.c       the reader pool (sl__engine_pool): the queues, failure and completion,
 *                          the pread readers (a ring of staging slots per thread), the main
 *                          thread's wait for the readers, the figures and the test hooks;
 *   engine/uring_reader.c  the io_uring reader (O_DIRECT reads kept in flight), a pool member;
 *   engine/route.c         a read's bytes → a bucket slot, an exchange buffer or the copies;
 *   engine/deliver.c       piece bytes → every local copy's rows (the one place bytes land), and
 *                          the converted elements still incomplete (sl__engine_cast_state);
 *   engine/buckets.c       my buckets and their slots (sl__engine_buckets), and the bucket loop:
 *                          wait for the reader, broadcast, scatter;
 *   engine/exchange.c      two-phase exchange rounds (sl__engine_exchange): the rows read,
 *                          column blocks swapped.
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
 * chunk or bucket boundary inside it) waits in casts.partial until its other bytes arrive. A
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

typedef struct sl__engine sl__engine;

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

/* =============================================================================================
 * reads.c — the read operations
 * ========================================================================================== */

/* Written by reads.c (exchange.c adds a round's rows when reads.c asks it) before the readers
 * start; read-only afterwards, by anyone, without a lock. */
typedef struct sl__engine_reads {
  sl__readplan rp;            /* read operations and their deliveries: local ones first */
  sl__vec local_ops;          /* uint32_t op indices of the local reads */
  uint32_t *bucket_ops_start; /* my bucket → first op index in bucket_op_list (n_mine + 1) */
  uint32_t *bucket_op_list;
} sl__engine_reads;

void sl__engine_reads_init(sl__engine *e);
void sl__engine_reads_free(sl__engine *e);
/* The read operations of this rank: local pieces first, then bucket items in bucket order (after
 * sl__engine_open_files: each file is read as its choice says). */
sl_status sl__engine_build_reads(sl__engine *e);

/* =============================================================================================
 * reads.c, file_choice.c, remote.c — the files read
 * ========================================================================================== */

/* Per catalog file. fds and stamps are reads.c's: written before the readers start and, once
 * they run, under the pool's mu (sl__engine_fd: a file still downloading is opened by the first
 * reader that reads it). choice and rowmap are file_choice.c's, remote is remote.c's: written
 * before the readers start, read-only while they run. sl__engine_files_close releases them all. */
typedef struct sl__engine_files {
  int *fds;                /* -1 until opened */
  sl__file_stamp *stamps;  /* what fstat said at open (compared after the last read) */
  sl__file_choice *choice; /* how this rank reads it, and why */
  /* Or NULL: a read-only mapping of the whole file that this rank's row-parallel slices are
   * copied out of (auto, resident: no system call per row; engine/readers.c copies) */
  uint8_t **rowmap;
  struct sl__engine_remote *remote; /* the files that are objects of a store, or NULL */
} sl__engine_files;

/* Opens every file a piece this rank reads lies in (and those of its two-phase exchanges),
 * checking each against the catalog and keeping what fstat said, then chooses how each is read
 * (sl__engine_choose); files whose gate is still closed (a download in progress) are left to
 * sl__engine_fd. */
sl_status sl__engine_open_files(sl__engine *e);
/* The descriptor of file f for a reader thread: with a file gate (a download in progress), the
 * file is opened on first use, after its gate opened (engine/file_gate.h). */
sl_status sl__engine_fd(sl__engine *e, uint32_t f, int *fd, sl__err *werr);
/* After the last read: every opened file is still the one opened, unchanged (catalog.h). */
sl_status sl__engine_check_files(sl__engine *e);
/* Closes the files this transfer opened (the load's table keeps its own), unmaps and frees. */
void sl__engine_files_close(sl__engine *e);

/* file_choice.c: per open file, measures, decides (engine/strategy_choice.h), turns O_DIRECT on
 * where chosen; under auto, maps a file read through the page cache because it is resident where
 * this rank reads row-parallel slices of it row by row (files.rowmap). */
sl_status sl__engine_choose(sl__engine *e);
/* Unmaps files.rowmap's files. */
void sl__engine_rowmaps_free(sl__engine *e);
/* Hands the per-file choices over to the caller (the figures of the run); NULL afterwards. */
sl__file_choice *sl__engine_choice_take(sl__engine *e);
/* Whether piece P is a mapped parameter's bytes: populated in place, never read into staging. */
bool sl__engine_piece_mapped(const sl__engine *e, const sl__piece *P);

/* remote.c */
typedef struct sl__engine_remote sl__engine_remote;
/* Before the files are opened: a session for the catalog's objects of a store, if it has any. */
sl_status sl__engine_remote_open(sl__engine *e);
/* Bytes [off, off + len) of object file f into buf, on reader `worker`'s own connection. */
sl_status sl__engine_remote_read(sl__engine *e, int worker, uint32_t f, void *buf, uint64_t len, uint64_t off,
                                 sl__err *werr);
void sl__engine_remote_close(sl__engine *e);

/* =============================================================================================
 * readers.c — the reader pool (uring_reader.c's threads are members too)
 * ========================================================================================== */

/* A reader thread's argument. */
typedef struct sl__engine_worker {
  sl__engine *e;
  int index;
} sl__engine_worker;

/* Owned by readers.c: the other files go through its functions, except the reads said below
 * (and sl__engine_fd's use of mu, engine/reads.c). */
typedef struct sl__engine_pool {
  /* guards the queues and their heads and tails, bucket_left, local_left, stop and err, and
   * files.fds once the readers run; cv signals their changes. failed may be read without it.
   * The main thread's predicates (sl__engine_wait_for) read bucket_left and local_left under it.
   * lock order: a file gate's lock (engine/file_gate.c) before mu, never mu and then a gate's
   * (under mu the pool asks sl__file_gate_is_open, which takes none). Under mu
   * sl__engine_wait_for asks its predicate, which reads the pool and takes no lock. casts.mu
   * (engine/deliver.c) is taken by readers outside mu. */
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
  sl__err err;         /* first reader error */
  sl__workers threads; /* the reader threads (base/workers.h) */
  uint32_t n_threads;
  sl__engine_worker *args; /* per thread */
} sl__engine_pool;

/* Whether the pool stopped or failed (arg: the engine): the give-up callback of the waits below
 * the pool (a file's gate, engine/reads.c; a GET's retries, engine/remote.c). Inline, so that
 * those files call nothing of readers.c, which calls them. */
static inline bool sl__engine_stopping(void *arg) {
  sl__engine_pool *p = arg;
  pthread_mutex_lock(&p->mu);
  bool stop = p->stop || atomic_load(&p->failed);
  pthread_mutex_unlock(&p->mu);
  return stop;
}

/* The figures of the reads: bumped by any reader thread through sl__engine_count_*, read by the
 * main thread (the watchdog's progress, the run's report). Atomic: no lock. */
typedef struct sl__engine_figures {
  _Atomic uint64_t bytes_read;     /* covering and alignment included */
  _Atomic uint64_t bytes_covering; /* read only to cover gaps or to align */
  _Atomic uint64_t read_ops;       /* system calls (or GETs) */
  _Atomic uint64_t bytes_mapped;   /* of bytes_read: populated mappings, not copied */
  _Atomic uint64_t bytes_done;     /* useful bytes read: the watchdog's sign of progress */
} sl__engine_figures;

/* Test hooks, set by sl__engine_inject_init from the environment, used by readers.c only. */
typedef struct sl__engine_inject {
  _Atomic bool error; /* the next read fails (SHARDLOAD_INJECT_READ_ERROR) */
  uint64_t delay_us;  /* every read operation first sleeps this long */
} sl__engine_inject;

/* The pool's lock and condition, its error cleared, the figures at zero. */
void sl__engine_pool_init(sl__engine *e);
void sl__engine_pool_free(sl__engine *e);
/* After sl__engine_build_reads: the queues (the local reads queued), the counts of operations
 * left, the number of threads. */
sl_status sl__engine_pool_prepare(sl__engine *e);
/* Starts the reader threads, each running fn (sl__engine_pread_worker or
 * sl__engine_uring_worker, which transfer.c picks); the ones that started run even when this
 * fails. */
sl_status sl__engine_pool_start(sl__engine *e, void *(*fn)(void *));
/* Stops and joins the reader threads whatever happened; a reader's error becomes the run's. */
sl_status sl__engine_pool_stop(sl__engine *e, sl_status st);
/* Queues the read operations of my bucket j for the readers (ahead of local reads). */
void sl__engine_push_bucket(sl__engine *e, size_t j);
/* A reader's wait for work: when idle (nothing of its own in flight), waits for a queued
 * operation, then takes up to room of them (bucket reads first) into take. Returns true when
 * the thread is to quit: the pool failed, or it stopped and the thread is idle. While files
 * still download, an operation on a complete file goes first. */
bool sl__engine_take_ops(sl__engine *e, bool idle, uint32_t room, uint32_t *take, uint32_t *n_take);
/* Records a worker's error (the first one wins) and wakes everybody up. */
void sl__engine_fail(sl__engine *e, const sl__err *werr);
/* Counts operation op as finished (its bucket, or the local reads) and wakes the waiters. */
void sl__engine_op_done(sl__engine *e, const sl__read_op *op);
/* First thing a reader thread does: the backend's reader_start (binding it near the device). */
void sl__engine_reader_start(sl__engine *e, int worker);
/* Figures: bytes read of one operation (covering of them: not needed; useful: the op's own). */
void sl__engine_count_read(sl__engine *e, uint64_t read, uint64_t covering, uint64_t useful);
/* Figures: n system calls (or GETs) of reads. */
void sl__engine_count_calls(sl__engine *e, uint64_t n);
void sl__engine_inject_init(sl__engine *e);
/* The test hook: the first read of this rank fails (SHARDLOAD_INJECT_READ_ERROR); every read
 * operation is slowed down by SHARDLOAD_INJECT_READ_DELAY_MS. */
sl_status sl__engine_injected_failure(sl__engine *e, uint32_t f, uint64_t off, sl__err *werr);
/* Thread body of the pread strategies (arg: sl__engine_worker). */
void *sl__engine_pread_worker(void *arg);
/* The main thread's side: waits until pred holds, polling the abort channel (it may call MPI). */
sl_status sl__engine_wait_for(sl__engine *e, bool (*pred)(sl__engine *, void *), void *arg, bool *aborted);

/* uring_reader.c: thread body of the io_uring strategy (arg: sl__engine_worker). */
void *sl__engine_uring_worker(void *arg);

/* =============================================================================================
 * route.c and deliver.c — where bytes land
 * ========================================================================================== */

/* Moves delivery d from a host buffer holding file bytes from file offset buf_off, or (packed) the
 * delivery's packed bytes themselves (a row run). */
sl_status sl__engine_deliver(sl__engine *e, int worker, int slot, const sl__delivery *d, const uint8_t *buf,
                             uint64_t buf_off, bool packed, sl__err *werr);

/* The bytes of one element of a converted parameter that arrived so far. */
typedef struct sl__cast_partial {
  uint32_t lparam;
  uint64_t off;     /* the element's first byte in the parameter, planned bytes */
  uint8_t bytes[8]; /* planned dtype */
  uint8_t have;     /* bit k: bytes[k] arrived */
} sl__cast_partial;

/* Owned by deliver.c: converted parameters' elements split between two deliveries, until
 * complete. */
typedef struct sl__engine_cast_state {
  /* guards partial (deliveries of any reader thread, and the main thread's); taken alone, never
   * with another lock held */
  pthread_mutex_t mu;
  sl__vec partial; /* sl__cast_partial */
} sl__engine_cast_state;

void sl__engine_casts_init(sl__engine *e);
void sl__engine_casts_free(sl__engine *e);
/* Segment seg of piece `piece`, whose first byte is at src (rows src_stride apart), into every
 * local copy of the piece: uploaded from reader thread `worker` (slot `slot`), or copied within
 * backend memory by the main thread (worker < 0). */
sl_status sl__engine_to_copies(sl__engine *e, uint32_t piece, const sl__segment *seg, const uint8_t *src,
                               uint64_t src_stride, int worker, int slot, sl__err *err);
/* After the last delivery: no element of a converted parameter is left incomplete. */
sl_status sl__engine_cast_check(sl__engine *e);

/* =============================================================================================
 * buckets.c — my buckets and their slots
 * ========================================================================================== */

/* Owned by buckets.c: written before the readers start (sl__engine_buckets_index,
 * sl__engine_slots_alloc), and slot_abandoned by the main thread's bucket loop. The readers write
 * bytes into slot_buf[k] (engine/route.c) and read the rest; no lock: a slot's bucket is read
 * only after its operations were queued, and broadcast only once they are done (pool.mu). */
typedef struct sl__engine_buckets {
  uint32_t *mine; /* my buckets (those whose group contains me) in global order */
  size_t n_mine;
  void *slot_buf[SL_BUCKET_SLOTS_MAX];      /* my bucket j lies in slot j % n_slots */
  bool slot_abandoned[SL_BUCKET_SLOTS_MAX]; /* target of a broadcast an abort left unfinished */
  uint64_t slot_bytes;
  uint32_t n_slots; /* bucket slots in rotation: SL_BUCKET_SLOTS, or the backend's (bucket_slots) */
} sl__engine_buckets;

/* My buckets: those whose group contains me, in global order. */
sl_status sl__engine_buckets_index(sl__engine *e);
/* The bucket slots, as large as my largest bucket (or exchange round, where the slots are host
 * memory and so serve as its buffers): after sl__engine_exchange_size. */
sl_status sl__engine_slots_alloc(sl__engine *e);
/* Frees my buckets and releases the slots, but not one an abort left a broadcast unfinished in
 * (unless the backend's abort ended the broadcast): it may still be written into. */
void sl__engine_buckets_free(sl__engine *e);
/* Walks this rank's buckets in the global order: waits for the reader's bytes (as reader),
 * broadcasts, scatters into local copies. *t_bcast: seconds inside broadcasts. */
sl_status sl__engine_run_buckets(sl__engine *e, sl__transfer_stats *stats, double *t_bcast, bool *aborted);

/* =============================================================================================
 * exchange.c — two-phase exchange rounds
 * ========================================================================================== */

/* Owned by exchange.c: host buffers of the rounds (plan/twophase.h), the column blocks of the rows
 * read (one packed area per block, rows_per_round rows each), then the columns received; the
 * bucket slots themselves where the backend's memory is host memory. Set before the readers
 * start; the readers pack into buf[j % n_slots] (a round's rows, no lock: as bucket slots), the
 * main thread swaps and delivers it once they are done. */
typedef struct sl__engine_exchange {
  uint8_t *buf[SL_BUCKET_SLOTS];
  bool own;       /* allocated apart (staging memory), released with the engine */
  uint64_t bytes; /* my largest round */
} sl__engine_exchange;

/* The size of the rounds' buffers: my largest round. */
void sl__engine_exchange_size(sl__engine *e);
/* The rounds' buffers: the bucket slots (host memory), else staging memory; after
 * sl__engine_slots_alloc. */
sl_status sl__engine_exchange_alloc(sl__engine *e);
void sl__engine_exchange_free(sl__engine *e);
/* Read operations of my rows in exchange round `bucket` (my bucket index j). */
sl_status sl__engine_exchange_reads(sl__engine *e, const sl__bucket *b, uint32_t j);
/* Whole rows of an exchange round (delivery d: file bytes [p0, p1) in buf, which starts at file
 * offset buf_off) → the round's host buffer, split into one packed area per column block. */
void sl__engine_exchange_pack(sl__engine *e, const sl__delivery *d, const uint8_t *buf, uint64_t buf_off);
/* The exchange round of my bucket j, once my rows are read: swap column blocks, deliver mine. */
sl_status sl__engine_exchange_round(sl__engine *e, uint32_t j, sl__transfer_stats *stats, bool *aborted);

/* =============================================================================================
 * transfer.c — the composition
 * ========================================================================================== */

/* The inputs (t, err, staging) and my pieces' copies are transfer.c's, set before the readers
 * start and read-only afterwards; each other part is its section's above. */
struct sl__engine {
  sl__transfer *t;
  sl__err *err;         /* the main thread's error (a reader has its own, then pool.err) */
  sl__staging staging;  /* reader threads, slots per thread, slot size (engine/staging.h) */
  uint32_t *copy_start; /* my pieces' local copies, CSR by piece: n_pieces + 1 */
  uint32_t *copy_list;
  sl__engine_reads reads;
  sl__engine_files files;
  sl__engine_pool pool;
  sl__engine_figures figures;
  sl__engine_inject inject;
  sl__engine_cast_state casts;
  sl__engine_buckets buckets;
  sl__engine_exchange exchange;
};

#endif
