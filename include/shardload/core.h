/*
 * shardload/core.h — the public API of libshardload without MPI (shardload/shardload.h adds the MPI
 * entry points): it loads a Hugging Face safetensors checkpoint into every rank of a distributed
 * job, each rank holding exactly its tensor-parallel slices and experts, every checkpoint byte read
 * from storage once, cluster-wide. Longer explanations, by section number: docs/API.md.
 *
 * Contents:
 *   0. the version and the ABI (structs the caller allocates)   6. model inspection (no MPI)
 *   1. status codes (one X-macro table)                          7. Hub download without loading
 *   2. logging                                                   8. parameters for other runtimes
 *   3. configuration (key/value, validated up front)             9. progress
 *   4. the loader (create, plan, bind, load, table, report)     10. reload in place
 *   5. dry-run planning for any world size (no MPI)             11. load from peers
 *  12. caller-described plans                                   13. weight sync (refit)
 */

/*
 * Conventions (docs/API.md, "Conventions"): a function that can fail returns an sl_status and
 * leaves the details in sl_last_error() (thread-local, section 1); the others
 * (destroy, close and release, version queries, getters of strings, counts and tables) return
 * their result directly. Out-parameters come last; every create has a destroy and destroy(NULL)
 * is a no-op. Functions marked COLLECTIVE must be called by every rank of the loader's
 * communicator, in the same order. No function calls MPI_Init, exit or abort (the one MPI_Abort:
 * the load watchdog, section 4). Handles are not thread-safe: one handle, one thread at a time.
 */

/*
 * For integrators (in full: docs/API.md, "Building against it", "MPI thread level", "Thread
 * safety", "Memory").
 *   - Build: shardload.h includes <mpi.h> (compile with MPI's flags; this header needs none).
 *     CMake: find_package(shardload CONFIG), shardload::shardload; pkg-config: shardload. Specs
 *     are found in $SHARDLOAD_SPECS, then <libdir>/../share/shardload/specs, then <libdir>/specs.
 *   - MPI: MPI_THREAD_FUNNELED or higher; every MPI call is made from the calling thread; create
 *     loaders after MPI_Init_thread, destroy them before MPI_Finalize.
 *   - Threads: distinct handles from distinct threads (MPI loaders at once: MPI_THREAD_MULTIPLE);
 *     logging settings are process-wide.
 *   - Memory: the caller frees what it creates (destroy/close); what the library returns is the
 *     library's, valid as documented (at the latest until destroy), except what a function says
 *     the caller frees with free(). Bound buffers stay the caller's; strings passed in are copied
 *     or only read during the call.
 */
#ifndef SHARDLOAD_CORE_H
#define SHARDLOAD_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden symbols; what this header declares is its exported API. */
#pragma GCC visibility push(default)

/* ---------------------------------------------------------------------------------------------
 * 0. The version and the ABI (docs/API.md §0).
 *
 * shardload/version.h gives the headers' version (SL_VERSION_STRING, SL_VERSION_HEX 0x00MMmmpp);
 * sl_version_hex() is the library's: the same major and minor is the compatibility promised.
 * Structs the caller allocates and the library fills (sl_param_source, sl_rank_stats,
 * sl_tensor_info) start with `size`: the caller sets it to sizeof(T) (the *_INIT initializers do);
 * the library refuses 0, less than the first version or over 64 KiB (SL_STATUS_INVALID_ARGUMENT,
 * naming the struct and both sizes) and writes only the first .size bytes. Fields are only added
 * at the end.
 * ------------------------------------------------------------------------------------------- */
#include "shardload/version.h"

/* The library's own version, "MAJOR.MINOR.PATCH" (a static string), and the same as 0x00MMmmpp:
 * the values SL_VERSION_STRING and SL_VERSION_HEX had when the library was built. Two functions,
 * so that the string needs no parsing and the number no formatting. Thread-safe. */
const char *sl_version(void);
uint32_t sl_version_hex(void);

/* What the library was built with, for bindings that copy this header's layouts (the Python
 * package's ctypes structs) and check them when they load it: sl_abi("sl_param_source") is
 * sizeof(sl_param_source) in the library, for every struct of this header (sl_param,
 * sl_param_source, sl_rank_stats, sl_tensor_info, sl_comm_ops); sl_abi("SL_MAX_DIMS") is the
 * value of that constant, for SL_MAX_DIMS, SL_COMM_OPS_VERSION, SL_VERSION_HEX, SL_DTYPE_COUNT and
 * SL_STATUS_COUNT. 0 for NULL or a name this library does not know (one newer than it). Thread-safe. */
uint64_t sl_abi(const char *name);

/* `T var = SL_SIZED_INIT(T);`: .size set to sizeof(T), every other field zero. (C++ compilers warn
 * of the fields a designated initializer leaves out: there it is a value-initialized copy.) */
#ifdef __cplusplus
#define SL_SIZED_INIT(type)                                                                                  \
  ([] {                                                                                                      \
    type sized_{};                                                                                           \
    sized_.size = sizeof(type);                                                                              \
    return sized_;                                                                                           \
  }())
#else
#define SL_SIZED_INIT(type)                                                                                  \
  { .size = sizeof(type) }
#endif

/* ---------------------------------------------------------------------------------------------
 * 1. Status codes. Append-only: a value never changes meaning. X(NAME, "message").
 * Every failure of a Hub or S3 request is SL_STATUS_HUB (since 0.2); what failed is its cause,
 * sl_last_error_cause() (an sl_hub_cause below). HUB_REVISION_NOT_FOUND .. HUB_CACHE keep their
 * values and meanings but are no longer returned since 0.2: they are causes now.
 * ------------------------------------------------------------------------------------------- */
#define SL_STATUS_MAP(X)                                                                                     \
  X(OK, "success")                                                                                           \
  X(INTERNAL, "internal error")                                                                              \
  X(INVALID_ARGUMENT, "invalid argument")                                                                    \
  X(CONFIG, "invalid configuration")                                                                         \
  X(NOMEM, "out of memory")                                                                                  \
  X(IO, "input/output error")                                                                                \
  X(NOT_FOUND, "not found")                                                                                  \
  X(UNSUPPORTED, "not supported")                                                                            \
  X(ST_HEADER_TOO_SMALL, "safetensors file too small for a header")                                          \
  X(ST_HEADER_TOO_LARGE, "safetensors header length too large")                                              \
  X(ST_HEADER_LENGTH, "safetensors header length exceeds the file")                                          \
  X(ST_HEADER_UTF8, "safetensors header is not valid UTF-8")                                                 \
  X(ST_HEADER_JSON, "safetensors header is not valid")                                                       \
  X(ST_INVALID_OFFSET, "safetensors tensor has invalid data offsets")                                        \
  X(ST_OVERFLOW, "safetensors tensor size overflows")                                                        \
  X(ST_MISALIGNED, "safetensors tensor does not end on a byte boundary")                                     \
  X(ST_TENSOR_INFO, "safetensors tensor shape and offsets disagree")                                         \
  X(ST_INCOMPLETE, "safetensors data section does not match the file size")                                  \
  X(INDEX, "invalid safetensors index file")                                                                 \
  X(NO_WEIGHTS, "cannot find any model weights")                                                             \
  X(DUPLICATE_TENSOR, "duplicate tensor name")                                                               \
  X(PICKLE, "invalid or unsupported PyTorch (torch.save) checkpoint")                                        \
  X(MODEL_CONFIG, "invalid model config.json")                                                               \
  X(ARCH, "architecture spec error")                                                                         \
  X(SHAPE, "tensor shape mismatch")                                                                          \
  X(DIVISIBILITY, "size not divisible by the parallel layout")                                               \
  X(LAYOUT, "invalid parallel layout")                                                                       \
  X(QUANTIZATION, "unsupported quantization")                                                                \
  X(MISSING_WEIGHTS, "weights not initialized from checkpoint")                                              \
  X(UNEXPECTED_WEIGHTS, "checkpoint tensors consumed by no rank")                                            \
  X(MPI, "MPI error")                                                                                        \
  X(PEER_FAILED, "another rank failed")                                                                      \
  X(CUDA, "CUDA error")                                                                                      \
  X(NO_DEVICE, "no CUDA device available")                                                                   \
  X(NCCL, "NCCL error")                                                                                      \
  X(HUB_REVISION_NOT_FOUND, "revision not found on the Hub")                                                 \
  X(HUB_ENTRY_NOT_FOUND, "file not found in the repository")                                                 \
  X(HUB_GATED, "gated repository")                                                                           \
  X(HUB_DISABLED, "access to the repository is disabled")                                                    \
  X(HUB_REPO_NOT_FOUND, "repository not found")                                                              \
  X(HUB_BAD_TOKEN, "invalid Hub token")                                                                      \
  X(HUB_FORBIDDEN, "forbidden by the Hub")                                                                   \
  X(HUB_NOT_FOUND, "not found on the Hub")                                                                   \
  X(HUB_BAD_REQUEST, "bad request to the Hub")                                                               \
  X(HUB_HTTP, "HTTP error from the Hub")                                                                     \
  X(HUB_NETWORK, "network error")                                                                            \
  X(HUB_TLS, "TLS error")                                                                                    \
  X(HUB_PROXY, "proxy error")                                                                                \
  X(HUB_OFFLINE, "not in the cache and offline mode is on")                                                  \
  X(HUB_CHECKSUM, "downloaded file failed its checksum")                                                     \
  X(HUB_SIZE, "downloaded file has the wrong size")                                                          \
  X(HUB_METADATA, "unexpected reply from the Hub")                                                           \
  X(HUB_INVALID_NAME, "invalid repository id, revision or path")                                             \
  X(HUB_CACHE, "Hub cache error")                                                                            \
  X(COMM, "communication between ranks failed")                                                              \
  X(PLAN, "invalid caller-described plan")                                                                   \
  X(HUB, "Hub or object-store request failed")

typedef enum sl_status {
#define SL__STATUS_ENUM(name, msg) SL_STATUS_##name,
  SL_STATUS_MAP(SL__STATUS_ENUM)
#undef SL__STATUS_ENUM
      SL_STATUS_COUNT
} sl_status;

/* "SL_STATUS_IO" → "IO"; unknown values → "UNKNOWN". Static strings. */
const char *sl_status_name(sl_status status);
/* A one-line generic description of the status (sl_last_error has the details). */
const char *sl_status_message(sl_status status);

/* The one channel of error messages (docs/API.md, "Errors"): the message of the calling thread's
 * last failed call into this library (a status other than SL_STATUS_OK), "" before any. Like
 * errno: thread-local, a successful call leaves it as it was, another thread's failure never
 * touches it; valid until this thread's next failing call. The older accessors (sl_loader_error,
 * sl_config_error, sl_plan_error, sl_publisher_error, `char **error`) give the same text. */
const char *sl_last_error(void);

/* What failed, for SL_STATUS_HUB: an sl_hub_cause (Hub causes, then S3 ones). Append-only, as
 * the statuses. X(NAME, "message"); the Hub causes are the former SL_STATUS_HUB_* codes. */
#define SL_HUB_CAUSE_MAP(X)                                                                                  \
  X(NONE, "no Hub or object-store cause")                                                                    \
  X(REVISION_NOT_FOUND, "revision not found on the Hub")                                                     \
  X(ENTRY_NOT_FOUND, "file not found in the repository")                                                     \
  X(GATED, "gated repository")                                                                               \
  X(DISABLED, "access to the repository is disabled")                                                        \
  X(REPO_NOT_FOUND, "repository not found")                                                                  \
  X(BAD_TOKEN, "invalid Hub token")                                                                          \
  X(FORBIDDEN, "forbidden by the Hub")                                                                       \
  X(NOT_FOUND, "not found on the Hub")                                                                       \
  X(BAD_REQUEST, "bad request to the Hub")                                                                   \
  X(HTTP, "HTTP error")                                                                                      \
  X(NETWORK, "network error")                                                                                \
  X(TLS, "TLS error")                                                                                        \
  X(PROXY, "proxy error")                                                                                    \
  X(OFFLINE, "not in the cache and offline mode is on")                                                      \
  X(CHECKSUM, "downloaded file failed its checksum")                                                         \
  X(SIZE, "downloaded file has the wrong size")                                                              \
  X(METADATA, "unexpected reply")                                                                            \
  X(INVALID_NAME, "invalid repository id, revision or path")                                                 \
  X(CACHE, "Hub cache error")                                                                                \
  X(S3_WRONG_REGION, "the bucket is in another region")                                                      \
  X(S3_NO_SUCH_BUCKET, "no such bucket")                                                                     \
  X(S3_NO_SUCH_KEY, "no such object")                                                                        \
  X(S3_CHANGED, "the object changed during the load")                                                        \
  X(S3_EXPIRED_TOKEN, "the session token has expired")                                                       \
  X(S3_INVALID_TOKEN, "the session token is not valid")                                                      \
  X(S3_UNKNOWN_KEY_ID, "the store does not know the access key id")                                          \
  X(S3_BAD_SIGNATURE, "the secret access key does not match its key id")                                     \
  X(S3_ACCESS_DENIED, "access denied by the store")                                                          \
  X(S3_SHORT_OBJECT, "the object is shorter than listed")                                                    \
  X(S3_BAD_REPLY, "the store's reply was refused")

typedef enum sl_hub_cause {
#define SL__HUB_CAUSE_ENUM(name, msg) SL_HUB_CAUSE_##name,
  SL_HUB_CAUSE_MAP(SL__HUB_CAUSE_ENUM)
#undef SL__HUB_CAUSE_ENUM
      SL_HUB_CAUSE_COUNT
} sl_hub_cause;

/* The cause of the calling thread's last failed call (same thread and lifetime as sl_last_error):
 * an sl_hub_cause when it returned SL_STATUS_HUB, else SL_HUB_CAUSE_NONE. */
int sl_last_error_cause(void);
/* SL_HUB_CAUSE_GATED → "GATED"; unknown values → "UNKNOWN". Static strings. */
const char *sl_hub_cause_name(int cause);

/* ---------------------------------------------------------------------------------------------
 * 2. Logging. Levels come from the environment variable SHARDLOAD_LOG (error, warn, info, debug;
 * default warn). Lines go to stderr, prefixed with the rank, unless a callback is set.
 * ------------------------------------------------------------------------------------------- */
typedef enum sl_log_level {
  SL_LOG_ERROR = 0,
  SL_LOG_WARN = 1,
  SL_LOG_INFO = 2,
  SL_LOG_DEBUG = 3
} sl_log_level;

typedef void (*sl_log_fn)(sl_log_level level, int rank, const char *line, void *user);

/* Process-wide; safe to call while other threads log (a line being written at that moment may
 * still go to the previous callback or level). NULL restores stderr. The callback is called from
 * the library's threads, several at once: make it thread-safe. `rank` is the rank of the loader
 * the line comes from (its own threads included); lines from elsewhere carry the rank of the last
 * loader created in the process, -1 before any. */
void sl_log_set_callback(sl_log_fn fn, void *user);
void sl_log_set_level(sl_log_level level);

/* ---------------------------------------------------------------------------------------------
 * 3. Configuration: string keys and values, validated when set (the message names the key and
 * what it accepts) and again as a whole when a loader is created. Keys are listed in docs/CLI.md
 * §7 ("Configuration keys"); the CLI flags map onto them one to one.
 * ------------------------------------------------------------------------------------------- */
typedef struct sl_config sl_config;

sl_status sl_config_create(sl_config **out);
void sl_config_destroy(sl_config *config);
/* Copies key and value. An unknown key or a malformed value is an error; the config is unchanged.
 * vLLM's names are accepted for the same keys: tensor_parallel_size (tp), pipeline_parallel_size
 * (pp), data_parallel_size (dp), download_dir (cache_dir), language_model_only (skip_vision). The
 * message of an unknown key suggests the nearest key ("did you mean tp?") when one is near. */
sl_status sl_config_set(sl_config *config, const char *key, const char *value);
/* The value last set for key (or its vLLM name, as for sl_config_set), or NULL (the default
 * applies). Valid until the next set/destroy. */
const char *sl_config_get(const sl_config *config, const char *key);
/* Every configuration key with its default and meaning, one per line. The text is the library's,
 * built on the first call (from any thread, concurrent calls included) and never changed or freed:
 * every call returns the same pointer. */
const char *sl_config_keys(void);
/* The message of the last failure of a call that took this config (sl_config_set,
 * sl_loader_create, sl_dryrun_create, sl_hub_download); "" when none. Kept for the ABI: the same
 * text as sl_last_error() right after that failure, which is the way to read it. */
const char *sl_config_error(const sl_config *config);

/* ---------------------------------------------------------------------------------------------
 * 4. The loader.
 * ------------------------------------------------------------------------------------------- */
typedef struct sl_loader sl_loader;

#define SL_MAX_DIMS 8

/* One entry of the table of local parameters. Owned by the loader; valid until destroy. */
typedef struct sl_param {
  const char *name;                   /* vLLM parameter name (layout vllm) or checkpoint name */
  const char *dtype;                  /* safetensors dtype name: "BF16", "F8_E4M3", ... */
  uint32_t dtype_bits;                /* bits per element */
  uint32_t ndim;                      /* number of dimensions (0 = scalar) */
  uint64_t global_shape[SL_MAX_DIMS]; /* unsharded shape (padded vocabulary included) */
  uint64_t local_shape[SL_MAX_DIMS];  /* shape of this rank's tensor */
  const char *shard;                  /* human description, e.g. "column dim 0 [256, 512) of 1024" */
  void *data;                         /* host or device pointer (see device) to local bytes */
  uint64_t nbytes;                    /* bytes of the local tensor */
  int device;                         /* -1 host memory, else the CUDA device ordinal */
  const char *alias_of;               /* non-NULL when data is shared with another entry */
} sl_param;

/* The communicator of a loader that is not an MPI job: functions the caller provides (the Python
 * package builds them over a torch.distributed process group); docs/API.md §4, "sl_comm_ops".
 * Every function but poll and abort is COLLECTIVE over the ranks it names and BLOCKING. Ranks are
 * 0 .. size-1; `members` lists a group's ranks in increasing order (NULL with n_members == size:
 * every rank), `root` is a position in it. A call waits at most timeout_s (0: none) without the
 * job's progress, then returns SL_COMM_TIMEOUT; a failing call writes a one-line message into msg
 * (msg_cap bytes). A nonzero stop_epoch: return SL_COMM_STOPPED soon after any rank's stop_raise
 * with that epoch. After SL_COMM_ERROR or SL_COMM_TIMEOUT the library calls abort(ctx, message)
 * once and every later call of the loader fails with SL_STATUS_COMM; it never ends the process. */
typedef enum sl_comm_result {
  SL_COMM_OK = 0,
  SL_COMM_ERROR = 1,   /* failed: msg says why (a peer's connection closed, ...) */
  SL_COMM_TIMEOUT = 2, /* no progress within timeout_s: msg names the silent ranks */
  SL_COMM_STOPPED = 3  /* stop_epoch was raised by some rank before completion */
} sl_comm_result;

typedef enum sl_comm_reduce_op { SL_COMM_MIN = 0, SL_COMM_SUM = 1 } sl_comm_reduce_op;

#define SL_COMM_OPS_VERSION 1

typedef struct sl_comm_ops {
  uint32_t version; /* SL_COMM_OPS_VERSION */
  int rank;         /* this process: 0 .. size-1 */
  int size;         /* ranks of the job: tp * pp * dp */
  void *ctx;        /* passed to every function */
  /* nbytes from members[root] into buf on every member (nbytes <= 1 GiB). */
  int (*broadcast)(void *ctx, const int *members, int n_members, int root, void *buf, uint64_t nbytes,
                   uint64_t stop_epoch, double timeout_s, char *msg, size_t msg_cap);
  /* Every rank's nbytes from send into recv[r * nbytes] (every rank). */
  int (*allgather)(void *ctx, const void *send, uint64_t nbytes, void *recv, double timeout_s, char *msg,
                   size_t msg_cap);
  /* Among members: send_counts[i] bytes at send + send_displs[i] go to members[i]; recv_counts[i]
   * bytes from members[i] land at recv + recv_displs[i] (counts may be 0). */
  int (*alltoallv)(void *ctx, const int *members, int n_members, const void *send,
                   const uint64_t *send_counts, const uint64_t *send_displs, void *recv,
                   const uint64_t *recv_counts, const uint64_t *recv_displs, uint64_t stop_epoch,
                   double timeout_s, char *msg, size_t msg_cap);
  /* Element-wise reduction (sl_comm_reduce_op) of count values over every rank, in place. */
  int (*allreduce)(void *ctx, int64_t *values, int count, int op, double timeout_s, char *msg,
                   size_t msg_cap);
  /* Not collective. stop_raise: every rank's calls with this stop_epoch return SL_COMM_STOPPED;
   * stop_check: 1 (and *from, the rank that raised, or -1) when some rank raised it, else 0. Cheap:
   * the library calls stop_check at most every few milliseconds while it waits. */
  void (*stop_raise)(void *ctx, uint64_t stop_epoch);
  int (*stop_check)(void *ctx, uint64_t stop_epoch, int *from);
  /* Optional (NULL). poll: called at least every 100 ms while the library waits outside the
   * functions above or reads, with the seconds since this rank last made progress (a transport that
   * must show other ranks that this one lives does it here). abort: the communicator failed (see
   * above); `reason` names the failure. Neither may call this library. */
  void (*poll)(void *ctx, double idle_s);
  void (*abort)(void *ctx, const char *reason);
} sl_comm_ops;

/* COLLECTIVE (over the caller's ranks). As sl_loader_create, over the communication functions of
 * `ops` (copied; ctx stays the caller's and must outlive the loader). Checks the table (version,
 * rank, size, every function but poll and abort set): SL_STATUS_INVALID_ARGUMENT naming what is
 * wrong. With device=cuda and no NCCL communicator given (sl_loader_set_cuda), the NCCL ids travel
 * through ops. */
sl_status sl_loader_create_ops(sl_config *config, const sl_comm_ops *ops, sl_loader **out);
/* COLLECTIVE. Frees every buffer the loader allocated (bound buffers stay the caller's). */
void sl_loader_destroy(sl_loader *loader);
/* NOT collective: frees this rank's memory and handles without any communication, for a loader the
 * other ranks may never destroy (a garbage collector's finalizer). The loader's MPI communicators
 * stay allocated until MPI_Finalize; NCCL communicators still open are aborted. Memory retained by
 * sl_loader_param_retain stays valid, as after sl_loader_destroy. Prefer sl_loader_destroy; NULL
 * is a no-op; MPI may already be finalized. */
void sl_loader_release_local(sl_loader *loader);
/* Message of the last failure on this rank ("another rank failed: ..." when a peer failed). Kept
 * for the ABI: the same text as sl_last_error() right after that failure. */
const char *sl_loader_error(const sl_loader *loader);
/* After a COLLECTIVE call failed: the status of the failure that caused it — on the rank that
 * failed first its own status, elsewhere (where the call returned SL_STATUS_PEER_FAILED) that rank's
 * status — and *rank, that rank (-1 when no agreement named one, e.g. the communicator failed).
 * Lets every rank report the same kind of failure (SL_STATUS_HUB for a Hub failure: its cause is
 * sl_last_error_cause() after the failed call, on every rank). rank may be NULL. */
sl_status sl_loader_error_cause(const sl_loader *loader, int *rank);

/* Not collective. Before MPI_Init with device=cuda (a CUDA-aware MPI makes its context on the
 * current device): makes a device current on the calling thread, `device` if >= 0, else the
 * node-local rank the launcher exported modulo the device count (docs/API.md §4 lists the
 * variables). *chosen: the ordinal (pass it on as cuda_device), -1 when none was set. On failure
 * (SL_STATUS_NO_DEVICE, SL_STATUS_UNSUPPORTED without CUDA support) the message is in
 * sl_last_error(); *error, if not NULL, gets a copy the caller frees with free() (pass NULL). */
sl_status sl_cuda_select_device(int device, int *chosen, char **error);

/* Optional, before sl_loader_load with device=cuda: use this CUDA device, stream (cudaStream_t)
 * and NCCL communicator (ncclComm_t, spanning the loader's communicator in the same rank order)
 * instead of creating them. Pass -1 / NULL to keep the default. Not collective. */
sl_status sl_loader_set_cuda(sl_loader *loader, int device, void *cuda_stream, void *nccl_comm);

/* COLLECTIVE. Rank 0 resolves the model argument (local folder, or Hub repository downloaded into
 * the cache) and builds the catalog; every rank receives it. Called by sl_loader_load if needed. */
sl_status sl_loader_download(sl_loader *loader);

/* Planning is done by sl_loader_load; this runs it early (COLLECTIVE: needs the catalog) so that
 * the caller can walk the planned table, bind its own buffers, then load. */
sl_status sl_loader_plan(sl_loader *loader);

/* After sl_loader_plan, before sl_loader_load: the loader writes the parameter named name into
 * the caller's buffer (host pointer, or device pointer with device=cuda) of exactly nbytes
 * bytes. The buffer stays owned by the caller. Not collective. A buffer of another element type
 * (converted while loading): sl_loader_bind_as, section 8. */
sl_status sl_loader_bind(sl_loader *loader, const char *name, void *data, uint64_t nbytes);

/* COLLECTIVE. Reads this rank's byte ranges, broadcasts shared ranges, checks missing and
 * unexpected weights across ranks. On return every rank has the same status. A file rewritten
 * during the load fails it on every rank, naming the file. The load watchdog (key timeout_s,
 * default 600 s) bounds every wait of create, download, plan and load: a rank whose wait expires
 * without progress of the job names the ranks not heard from and ENDS THE JOB WITH MPI_Abort, the
 * library's one exit (docs/API.md §4, "The load watchdog"). */
sl_status sl_loader_load(sl_loader *loader);

/* The table of local parameters (after sl_loader_plan or sl_loader_load). */
size_t sl_loader_param_count(const sl_loader *loader);
const sl_param *sl_loader_param(const sl_loader *loader, size_t index);
/* NULL when this rank holds no parameter of that name. */
const sl_param *sl_loader_find(const sl_loader *loader, const char *name);

/* COLLECTIVE. Writes each rank's local parameters as
 * DIR/model-rank-{rank}-part-{part}.safetensors and, on rank 0, copies the non-weight files. */
sl_status sl_loader_save_sharded(sl_loader *loader, const char *dir);

/* The JSON report of the load (docs/REPORT.md). On rank 0 the job's: every rank's row and every
 * node's ("report_scope": "job"; the report file holds it). On another rank its own view, whose
 * size does not grow with the job ("report_scope": "rank"): the job's figures and totals, as rank 0
 * sent them at the end of the load, with only this rank's row in "ranks" and no node rows. The
 * string is owned by the loader and valid until the next call on it. NULL before sl_loader_load. */
const char *sl_loader_report_json(sl_loader *loader);
/* A short human summary of the same figures, the same on every rank. Same ownership as the report. */
const char *sl_loader_summary(sl_loader *loader);

/* ---------------------------------------------------------------------------------------------
 * 5. Dry-run planning: the plan of every rank of a world of any size, from the headers alone.
 * No MPI, no tensor data read. The config's tp*pp*dp must equal world_size.
 * ------------------------------------------------------------------------------------------- */
typedef struct sl_dryrun sl_dryrun;

typedef struct sl_rank_stats {
  size_t size;             /* sizeof(sl_rank_stats), set by the caller (section 0) */
  uint64_t bytes_needed;   /* bytes of the rank's local parameters (zero padding excluded) */
  uint64_t bytes_read;     /* bytes this rank reads from storage (covering bytes included) */
  uint64_t bytes_covering; /* extra bytes read only to cover gaps between coalesced ranges */
  uint64_t bytes_received; /* bytes that arrive by broadcast from other ranks */
  uint64_t bytes_sent;     /* bytes this rank broadcasts (counted once per broadcast) */
  uint64_t bytes_local;    /* bytes of the local table (padding included) */
  uint64_t bytes_naive;    /* what reading every touched tensor whole would cost this rank */
  uint32_t files_opened;   /* files this rank reads from */
  uint32_t params;         /* entries in the local table */
  uint32_t experts_local;  /* local experts per MoE layer (0 for dense models) */
} sl_rank_stats;
#define SL_RANK_STATS_INIT SL_SIZED_INIT(sl_rank_stats)

/* On failure *out is NULL and sl_config_error(config) holds the message. The dry run keeps a copy
 * of config: the caller may destroy it once this returns. */
sl_status sl_dryrun_create(sl_config *config, int world_size, sl_dryrun **out);
void sl_dryrun_destroy(sl_dryrun *dryrun);
int sl_dryrun_world_size(const sl_dryrun *dryrun);
/* The figures of one rank into *out, whose .size the caller set (section 0). */
sl_status sl_dryrun_rank_stats(const sl_dryrun *dryrun, int rank, sl_rank_stats *out);
/* JSON summary (per-rank figures, amplification, predicted time). Owned by the handle. */
const char *sl_dryrun_json(sl_dryrun *dryrun);
/* Human summary table. Owned by the handle. */
const char *sl_dryrun_summary(sl_dryrun *dryrun);

/* ---------------------------------------------------------------------------------------------
 * 6. Inspection of a safetensors file or a model folder (no MPI).
 * ------------------------------------------------------------------------------------------- */
typedef struct sl_model sl_model;

typedef struct sl_tensor_info {
  size_t size; /* sizeof(sl_tensor_info), set by the caller (section 0) */
  const char *name;
  const char *dtype;
  uint32_t ndim;
  uint64_t shape[SL_MAX_DIMS];
  uint64_t nbytes;
  uint64_t offset; /* absolute byte offset in its file */
  size_t file;     /* index into the file list */
} sl_tensor_info;
#define SL_TENSOR_INFO_INIT SL_SIZED_INIT(sl_tensor_info)

/* path: a .safetensors file or a model folder (file selection per the config's load_format).
 * config may be NULL (defaults). On failure *out is NULL and the message in sl_last_error();
 * *error (if non-NULL) receives a copy the caller frees with free() (pass NULL). */
sl_status sl_model_open(const char *path, const sl_config *config, sl_model **out, char **error);
void sl_model_close(sl_model *model);
size_t sl_model_file_count(const sl_model *model);
const char *sl_model_file_path(const sl_model *model, size_t index);
uint64_t sl_model_file_size(const sl_model *model, size_t index);
size_t sl_model_tensor_count(const sl_model *model);
/* Tensor index into *out, whose .size the caller set (section 0). */
sl_status sl_model_tensor(const sl_model *model, size_t index, sl_tensor_info *out);
/* The model folder's config.json text, or NULL when absent. */
const char *sl_model_config_json(const sl_model *model);
/* The effective load format of a folder ("hf", "safetensors", "mistral", "pt"; auto resolved),
 * or "single file". */
const char *sl_model_load_format(const sl_model *model);
/* Non-fatal findings (index entries naming absent tensors...), one per line; "" when none. */
const char *sl_model_warnings(const sl_model *model);

/* ---------------------------------------------------------------------------------------------
 * 7. Hub download without loading. Fills the Hugging Face cache with what a load of the config's
 * "model" (a repository id) needs, plus the files matching "include" and, with download_all,
 * every other top-level non-weight file (the `shardload download` command sets download_all, as
 * the Hub contract says a download does). No MPI. *snapshot_dir (freed by the caller with free())
 * receives the snapshot folder; on failure the message is in sl_config_error(config).
 * ------------------------------------------------------------------------------------------- */
sl_status sl_hub_download(sl_config *config, char **snapshot_dir);

/* ---------------------------------------------------------------------------------------------
 * 8. Parameters for other runtimes (the Python package, DLPack consumers): element types as
 * numbers, where each local parameter's bytes come from, parameter memory that outlives the
 * loader, and an agreement between ranks. Existing calls are unchanged.
 * ------------------------------------------------------------------------------------------- */

/* The 22 safetensors element types, in the safetensors writer's order (values never change). */
typedef enum sl_dtype {
  SL_DTYPE_BOOL = 0,
  SL_DTYPE_F4 = 1,
  SL_DTYPE_F6_E2M3 = 2,
  SL_DTYPE_F6_E3M2 = 3,
  SL_DTYPE_U8 = 4,
  SL_DTYPE_I8 = 5,
  SL_DTYPE_F8_E5M2 = 6,
  SL_DTYPE_F8_E4M3 = 7,
  SL_DTYPE_F8_E8M0 = 8,
  SL_DTYPE_F8_E4M3FNUZ = 9,
  SL_DTYPE_F8_E5M2FNUZ = 10,
  SL_DTYPE_I16 = 11,
  SL_DTYPE_U16 = 12,
  SL_DTYPE_F16 = 13,
  SL_DTYPE_BF16 = 14,
  SL_DTYPE_I32 = 15,
  SL_DTYPE_U32 = 16,
  SL_DTYPE_F32 = 17,
  SL_DTYPE_C64 = 18,
  SL_DTYPE_F64 = 19,
  SL_DTYPE_I64 = 20,
  SL_DTYPE_U64 = 21,
  SL_DTYPE_COUNT
} sl_dtype;

/* The dtype of a table entry as a number (SL_DTYPE_COUNT for NULL or an unknown name). */
sl_dtype sl_param_dtype_id(const sl_param *param);
/* "BF16" for SL_DTYPE_BF16; NULL out of range. Static strings. */
const char *sl_dtype_name(sl_dtype dtype);
/* Bits per element (4, 6, 8 ... 64); 0 out of range. */
uint32_t sl_dtype_bits(sl_dtype dtype);

/* sl_loader_bind with a conversion (docs/API.md §8): the caller's host buffer holds the local shape
 * in element type dtype (nbytes = elements × its size); each element is converted from the
 * checkpoint's dtype as delivered, rounding as torch's Tensor.to(dtype) on the CPU. Among F32, F16,
 * BF16 and F64; another pair, or device=cuda with a dtype other than the planned one, is
 * SL_STATUS_UNSUPPORTED; a wrong nbytes SL_STATUS_INVALID_ARGUMENT. The table entry then describes
 * the buffer (dtype, nbytes), the sources the checkpoint's bytes. Binding again replaces the
 * binding. Not collective. */
sl_status sl_loader_bind_as(sl_loader *loader, const char *name, void *data, uint64_t nbytes, sl_dtype dtype);

/* One source of a local parameter: `rows` rows of `row_bytes` bytes, taken from the checkpoint
 * tensor `tensor` (rows src_stride bytes apart, starting src_offset bytes after the tensor's
 * first byte) and written at dst_offset in the local parameter (rows dst_stride bytes apart).
 * Together the sources of a parameter are exactly what it holds of the checkpoint (bytes covered
 * by none are zero: vocabulary padding). An alias has no sources (its target has them).
 * dst_transposed: the parameter is held with its last two dimensions transposed (Llama-4's
 * experts), dst_offset and dst_stride address it in the checkpoint's orientation (docs/API.md §8). */
typedef struct sl_param_source {
  size_t size;                        /* sizeof(sl_param_source), set by the caller (section 0) */
  const char *tensor;                 /* checkpoint tensor name (owned by the loader) */
  sl_dtype dtype;                     /* its element type */
  uint32_t tensor_ndim;               /* its dimensions */
  uint64_t tensor_shape[SL_MAX_DIMS]; /* its shape */
  uint64_t src_offset;
  uint64_t src_stride;
  uint64_t row_bytes;
  uint64_t rows;
  uint64_t dst_offset;
  uint64_t dst_stride;
  uint32_t dst_transposed; /* nonzero: dst_offset / dst_stride are in the checkpoint's orientation */
} sl_param_source;
#define SL_PARAM_SOURCE_INIT SL_SIZED_INIT(sl_param_source)

/* After sl_loader_plan: the number of sources of local parameter index (0 when out of range). */
size_t sl_loader_param_source_count(sl_loader *loader, size_t index);
/* Source k (0 .. count-1) of local parameter index into *out, whose .size the caller set
 * (section 0). */
sl_status sl_loader_param_source(sl_loader *loader, size_t index, size_t k, sl_param_source *out);

/* A counted reference to the memory of one loaded parameter. After a successful sl_loader_load,
 * sl_loader_param_retain hands one out: the memory stays valid (and is not freed by
 * sl_loader_destroy) until the reference is released; the loader's other memory is freed as
 * usual. Memory the caller bound stays the caller's: a reference to it keeps nothing alive.
 * Not collective. sl_param_ref_release may be called from any thread, before or after
 * sl_loader_destroy; release(NULL) is a no-op. With device=cuda, memory that outlives the loader
 * is freed with cudaFree on release (the loader's NCCL communicators are then aborted at destroy,
 * not finalized with the peers). */
typedef struct sl_param_ref sl_param_ref;

sl_status sl_loader_param_retain(sl_loader *loader, size_t index, sl_param_ref **out);
void *sl_param_ref_data(const sl_param_ref *ref);
void sl_param_ref_release(sl_param_ref *ref);

/* DLPack: *managed_tensor receives a new DLManagedTensor (dlpack/dlpack.h, the legacy unversioned
 * struct) viewing local parameter index after a successful load: data, device (kDLCPU or kDLCUDA
 * with the ordinal), dtype, local shape, contiguous (strides NULL). It holds a reference as
 * sl_loader_param_retain does; its deleter releases the reference and frees the struct. Types
 * DLPack has no code for (F8_*, F4, F6_*) are exported as raw bytes: uint8 of shape [nbytes];
 * BOOL as DLPack's bool when the header knows it, else uint8. SL_STATUS_UNSUPPORTED when the
 * library was built without dlpack/dlpack.h (Debian: libdlpack-dev). Not collective. */
sl_status sl_loader_param_dlpack(sl_loader *loader, size_t index, void **managed_tensor);
/* The deleter of a DLManagedTensor made by sl_loader_param_dlpack (for callers that own one and
 * drop it unconsumed); NULL is a no-op. */
void sl_dlpack_free(void *managed_tensor);

/* COLLECTIVE. An agreement on a check done outside the library (e.g. a caller's buffers checked
 * against the plan before the load): every rank returns the same status; a failing rank's
 * sl_loader_error is its own message, the others' "another rank failed: rank R: <message>". The
 * loader stays usable: a failed agreement does not fail the loader. */
sl_status sl_loader_agree(sl_loader *loader, sl_status status, const char *message);

/* ---------------------------------------------------------------------------------------------
 * 9. Progress.
 * ------------------------------------------------------------------------------------------- */

/* Progress of a load: bytes_done of bytes_total. On rank 0 the figures are the job's, cluster-wide:
 * bytes_total is the sum of every rank's bytes_needed (the report's bytes_needed) and bytes_done an
 * estimate from rank 0's own progress (no message between ranks: the load is not slowed); on the
 * other ranks they are the rank's own bytes. Called from a thread the library starts for the load
 * (never the caller's, never two calls at once), at most 4 times a second and only when the figure
 * changed, then once with bytes_done == bytes_total after a successful transfer (from the thread that
 * called sl_loader_load). It must return quickly and call neither MPI nor this library. */
typedef void (*sl_progress_fn)(uint64_t bytes_done, uint64_t bytes_total, void *user);

/* Sets (fn) or clears (NULL) the progress callback; before sl_loader_load. Not collective: ranks
 * may set different callbacks, or none. Independent of the `progress` configuration key, which
 * governs what is printed on stderr. */
sl_status sl_loader_set_progress(sl_loader *loader, sl_progress_fn fn, void *user);

/* ---------------------------------------------------------------------------------------------
 * 10. Reload in place: a loaded loader reads another checkpoint of the same architecture and
 * shapes (new weights of a training run, another revision of a Hub repository) into the memory
 * it already holds. docs/API.md §10, docs/spec/DESIGN.md §10.
 * ------------------------------------------------------------------------------------------- */

/* What a local parameter holds after the last sl_loader_reload. */
typedef enum sl_reload_state {
  SL_RELOAD_OLD = 0,    /* what it held before that call (also: never reloaded, or the reload refused) */
  SL_RELOAD_NEW = 1,    /* every byte from the new checkpoint */
  SL_RELOAD_PARTIAL = 2 /* some bytes from the new checkpoint, the others as before: neither */
} sl_reload_state;

/* COLLECTIVE, after a successful load (or reload). Reads checkpoint `model` (as the key model;
 * NULL or "": the current one) at `revision` (NULL: the loader's when model is its current one,
 * else main; folders ignore it) into the parameters' memory, planned and run as a load; every
 * other key stays the loader's. No pointer changes (table, bound, retained and exported memory
 * see the new values; mapped parameters become private copies). A plan that does not write
 * exactly the loaded memory is refused before any byte is written (SL_STATUS_SHAPE naming the
 * parameter), the loader unchanged. A failure during the transfer fails the loader;
 * sl_loader_reload_state then tells each parameter's state. docs/API.md §10. */
sl_status sl_loader_reload(sl_loader *loader, const char *model, const char *revision);

/* Not collective. What local parameter index of this rank holds after the last sl_loader_reload
 * or sl_loader_refit (section 13; its own meaning there) (an alias: its target's state).
 * SL_STATUS_INVALID_ARGUMENT for an index out of the table or a NULL out. */
sl_status sl_loader_reload_state(const sl_loader *loader, size_t index, sl_reload_state *out);

/* ---------------------------------------------------------------------------------------------
 * 11. Load from peers: ranks that hold the model in one layout (loaded loaders, the donors) give
 * ranks that need it in another (freshly created loaders, the receivers) their parameters over a
 * communicator that holds both, without touching storage. docs/API.md §11, docs/spec/DESIGN.md §11.
 * ------------------------------------------------------------------------------------------- */

/* COLLECTIVE over every rank of `ops` (the job: donors and receivers). As
 * sl_loader_load_from_peers (shardload.h, over an MPI communicator), over the caller's
 * communication functions. */
sl_status sl_loader_load_from_peers_ops(sl_loader *loader, const sl_comm_ops *ops);

/* The dry run of a load from peers (`shardload plan --from-tp`; no MPI, no tensor data): source_world
 * ranks hold the model as `source` configures it (the donors, numbered first), world_size ranks need
 * it as `target` configures it (the receivers). Every rank's plan from the headers, the messages
 * between them, per rank the bytes sent and received, and the predicted time (docs/API.md §11).
 * On failure *out is NULL and sl_config_error(target) holds the message. docs/REPORT.md, "Dry run
 * of a load from peers". */
typedef struct sl_dryrun_peers sl_dryrun_peers;
sl_status sl_dryrun_peers_create(sl_config *target, int world_size, sl_config *source, int source_world,
                                 sl_dryrun_peers **out);
void sl_dryrun_peers_destroy(sl_dryrun_peers *dryrun);
/* JSON (docs/report.schema.json's peers_dryrun) and a human table; owned by the handle. */
const char *sl_dryrun_peers_json(sl_dryrun_peers *dryrun);
const char *sl_dryrun_peers_summary(sl_dryrun_peers *dryrun);

/* ---------------------------------------------------------------------------------------------
 * 12. Caller-described plans: instead of an architecture spec, each rank describes its own
 * parameters and where their bytes come from (the vLLM plugin records it from vLLM's own weight
 * loaders); everything else is as for a spec's plan. A region pairs the elements of a box of a
 * checkpoint tensor with those of a box of a parameter in row-major order (a view or reshape is
 * one region); a transposed parameter's boxes address it with its last two dimensions exchanged;
 * a parameter's regions write each of its bytes exactly once, except those declared zero. Checked
 * on every rank before any byte is read (SL_STATUS_PLAN, naming the rank, parameter, region,
 * tensor and rule); the builder refuses a duplicate name, too many dimensions or counts at once
 * (SL_STATUS_INVALID_ARGUMENT, sl_plan_error). The rules: docs/API.md §12, docs/spec/DESIGN.md §12.
 * ------------------------------------------------------------------------------------------- */

/* How a parameter of the table is filled (sl_loader_param_fill). */
typedef enum sl_fill {
  SL_FILL_SPEC = 0,     /* by an architecture spec's plan */
  SL_FILL_RECORDED = 1, /* by a caller-described plan, as described */
  SL_FILL_FALLBACK = 2  /* by a caller-described plan: one whole checkpoint tensor, as stored, which
                           the caller hands to its own loader (the vLLM plugin: the model's
                           weight_loader) after the load */
} sl_fill;

typedef struct sl_plan sl_plan;

/* A region whose tensor is this index (sl_plan_add_regions): zeros (see sl_plan_add_zeros). */
#define SL_PLAN_ZEROS UINT32_MAX

sl_status sl_plan_create(sl_plan **out);
void sl_plan_destroy(sl_plan *plan);
/* The message of the plan's last failed call ("" when none). Valid until the next call on it. Kept
 * for the ABI: the same text as sl_last_error() right after that failure. */
const char *sl_plan_error(const sl_plan *plan);
/* A parameter of this rank: name (unique on this rank, copied), the dtype it is held in, its shape
 * (ndim <= SL_MAX_DIMS; 0: a scalar), transposed (nonzero: see above), fill (SL_FILL_RECORDED, or
 * SL_FILL_FALLBACK: one region reading one whole checkpoint tensor into the whole parameter, of the
 * tensor's shape and dtype, not transposed). *index (may be NULL) receives its index: 0, 1, ... in
 * the order added. */
sl_status sl_plan_add_param(sl_plan *plan, const char *name, sl_dtype dtype, uint32_t ndim,
                            const uint64_t *shape, int transposed, int fill, uint32_t *index);
/* n parameters at once (what sl_plan_add_param does, one call): parameter i is names[i], dtypes[i],
 * ndims[i] dimensions whose sizes follow those of the parameters before it in `shapes` (n_shapes in
 * all), transposed[i] and fills[i] (transposed and fills may be NULL: none transposed, every one
 * SL_FILL_RECORDED). Their indexes follow the plan's parameters so far. Each is checked as by
 * sl_plan_add_param before any is added: on a refusal nothing is added (out of memory may leave the
 * first ones added). */
sl_status sl_plan_add_params(sl_plan *plan, size_t n, const char *const *names, const sl_dtype *dtypes,
                             const uint32_t *ndims, const uint64_t *shapes, size_t n_shapes,
                             const uint8_t *transposed, const uint8_t *fills);
/* A region (see above): box start/count (ndim = the tensor's dimensions) of checkpoint tensor
 * `tensor` (copied) fills box dst_start/dst_count (dst_ndim = the parameter's dimensions) of
 * parameter `param`. The tensor's dtype must be the parameter's, or convertible to it (the
 * parameter is then held converted: the spec key "dtype" of docs/SPECS.md). */
sl_status sl_plan_add_region(sl_plan *plan, uint32_t param, const char *tensor, uint32_t ndim,
                             const uint64_t *start, const uint64_t *count, uint32_t dst_ndim,
                             const uint64_t *dst_start, const uint64_t *dst_count);
/* Box dst_start/dst_count of parameter `param` is zero on purpose (no checkpoint byte lands there:
 * vLLM's padded vocabulary rows). */
sl_status sl_plan_add_zeros(sl_plan *plan, uint32_t param, uint32_t dst_ndim, const uint64_t *dst_start,
                            const uint64_t *dst_count);
/* n regions at once (what sl_plan_add_region and sl_plan_add_zeros do, one call; the Python package
 * hands a DeepSeek-V3-sized plan over in one): region i fills parameter params[i] from tensor
 * names[tensors[i]] (tensors[i] < n_names; SL_PLAN_ZEROS: zeros, ndims[i] 0); its numbers follow those
 * of the regions before it in `numbers`: start[ndims[i]], count[ndims[i]], dst_start[dst_ndims[i]],
 * dst_count[dst_ndims[i]]; n_numbers is their total. Checked as the single calls; on failure nothing
 * is added. */
sl_status sl_plan_add_regions(sl_plan *plan, size_t n, const uint32_t *params, const uint32_t *tensors,
                              const char *const *names, size_t n_names, const uint32_t *ndims,
                              const uint32_t *dst_ndims, const uint64_t *numbers, size_t n_numbers);
/* A checkpoint tensor this rank's engine skips on purpose (rotary buffers, a tied head, another
 * pipeline stage's layers): when no rank reads it, it is skipped, not unexpected. */
sl_status sl_plan_skip(sl_plan *plan, const char *tensor);
/* What the plan holds so far. */
size_t sl_plan_param_count(const sl_plan *plan);
uint64_t sl_plan_region_count(const sl_plan *plan);

/* The JSON form (files, dry runs, tests; its keys: docs/API.md §12, docs/spec/DESIGN.md §12).
 * sl_plan_from_json: every key checked (an unknown one is an error naming it), every number a
 * non-negative integer, the counts bounded; on failure *out is NULL, the message in
 * sl_last_error() and, if error is not NULL, a copy in *error the caller frees with free(). sl_plan_to_json:
 * the plan in that form, regions under their parameter (NULL when out of memory); the caller frees it with
 * free(). */
sl_status sl_plan_from_json(const char *text, size_t len, sl_plan **out, char **error);
char *sl_plan_to_json(const sl_plan *plan);
/* Every rank's plans from one JSON document ({"ranks": [PLAN, ...]}, one per rank, or
 * {"classes": [{"ranks": [R, ...], "plan": PLAN}, ...]}, every rank in exactly one class) into
 * plans[0 .. world_size) (the caller's array); the ranks of a class share one plan. Free them with
 * sl_plans_destroy. Errors as sl_plan_from_json's. */
sl_status sl_plans_from_json(const char *text, size_t len, int world_size, sl_plan **plans, char **error);
/* Destroys every distinct plan of plans[0 .. world_size) once and sets the entries to NULL. */
void sl_plans_destroy(sl_plan **plans, int world_size);

/* Not collective; before sl_loader_download, sl_loader_plan and sl_loader_load, on every rank (the
 * job agrees in sl_loader_download whether it loads from described plans; a rank that sets none
 * fails it on every rank). This rank's plan (copied) replaces the architecture spec, so an
 * architecture without one loads; tp, pp and dp only number the ranks in reports (none: every rank
 * a data-parallel replica). Not with load_format sharded_state nor a load from peers. plan NULL:
 * this rank's plan could not be made; the download then fails on every rank (SL_STATUS_PLAN
 * naming this rank). docs/API.md §12. */
sl_status sl_loader_set_plan(sl_loader *loader, const sl_plan *plan);
/* After sl_loader_plan: how local parameter index is filled (SL_FILL_SPEC for an architecture
 * spec's plan); SL_FILL_SPEC also for an index out of the table. */
sl_fill sl_loader_param_fill(const sl_loader *loader, size_t index);

/* The dry run of described plans (section 5): world_size ranks, plans[r] rank r's (the same
 * pointer, or equal plans, for ranks that describe the same: data-parallel replicas). The
 * configuration's model, and its tp, pp and dp as for sl_loader_set_plan. */
sl_status sl_dryrun_create_described(sl_config *config, int world_size, const sl_plan *const *plans,
                                     sl_dryrun **out);

/* ---------------------------------------------------------------------------------------------
 * 13. Weight sync (refit): ranks that train (the publishers) push the blocks of checkpoint tensors
 * they hold, in the checkpoint's global coordinates, into the parameters of loaded loaders (the
 * receivers) over a communicator that holds both, one refit per training step: the plan made once
 * per pair of layouts and kept, each byte across each node's link at most once, a step of the
 * version the receivers hold moving nothing. docs/API.md §13, docs/spec/DESIGN.md §13.
 * ------------------------------------------------------------------------------------------- */

/* A trainer rank's side: its blocks and the plan of its last refit (kept for the next). */
typedef struct sl_publisher sl_publisher;

/* Not collective. config: NULL for the defaults, else the keys it reads (timeout_s, bucket_bytes,
 * network_gbps, device, cuda_device; the others are ignored). */
sl_status sl_publisher_create(const sl_config *config, sl_publisher **out);
void sl_publisher_destroy(sl_publisher *publisher);
/* Message of the last failure on this rank ("" when none). Kept for the ABI: the same text as
 * sl_last_error() right after that failure. */
const char *sl_publisher_error(const sl_publisher *publisher);
/* Not collective. One block: checkpoint tensor `tensor` (the receivers' name) of global shape
 * shape[0 .. ndim) (NULL: the receivers' checkpoint's), the block of extent[] elements at
 * offsets[] (a contiguous hyper-rectangle; an extent of 0: an empty block), row-major at `data` in
 * `dtype` (host memory, or device memory with device=cuda; valid and unchanged until the next
 * sl_publish returns). Blocks accumulate until sl_publisher_clear (which keeps the plan). */
sl_status sl_publisher_add(sl_publisher *publisher, const char *tensor, sl_dtype dtype, uint32_t ndim,
                           const uint64_t *shape, const uint64_t *offsets, const uint64_t *extent,
                           const void *data);
void sl_publisher_clear(sl_publisher *publisher);

/* COLLECTIVE over every rank of `ops` (the trainers calling this, the receivers
 * sl_loader_refit_ops), in the same order on every rank: this rank's blocks as version `version`
 * (>= 1, the same everywhere). Checks, plan, transfer and faults: docs/API.md §13. shardload.h has
 * the MPI form, sl_publish. */
sl_status sl_publish_ops(sl_publisher *publisher, const sl_comm_ops *ops, uint64_t version);
/* The JSON report of the last successful publish (or refit), the same on every rank of its job but
 * planning_seconds (docs/REPORT.md, "Refit report"; docs/report.schema.json's refit); NULL when
 * none. Owned by the handle. */
const char *sl_publisher_report_json(const sl_publisher *publisher);

/* COLLECTIVE over every rank of `ops` (see sl_publish_ops): a loaded loader receives version
 * `version` into the memory it holds, no pointer moving. On a failure it stays loaded:
 * sl_loader_reload_state says per parameter NEW, OLD or PARTIAL, and the next refit of the version
 * moves what is missing (docs/API.md §13). shardload.h has the MPI form, sl_loader_refit. */
sl_status sl_loader_refit_ops(sl_loader *loader, const sl_comm_ops *ops, uint64_t version);
/* Not collective. *version: the version every parameter holds (0: the checkpoint loaded or last
 * reloaded); *pending (may be NULL): a version a failed refit left in part (0: none). */
sl_status sl_loader_version(const sl_loader *loader, uint64_t *version, uint64_t *pending);
/* The JSON report of the loader's last successful refit (see sl_publisher_report_json). */
const char *sl_loader_refit_report_json(const sl_loader *loader);

/* The dry run of a refit (`shardload plan --from-publishers`; no MPI, no tensor data): the
 * receivers as `target` configures them (world_size ranks), the trainers as `publishers` says
 * ("fsdp:N", "fsdp:NxR" or JSON: docs/REPORT.md, "Refit report"), the job's first ranks. The same
 * checks, plan and time model as a refit's. On failure *out is NULL and sl_config_error(target)
 * holds the message. */
typedef struct sl_dryrun_refit sl_dryrun_refit;
sl_status sl_dryrun_refit_create(sl_config *target, int world_size, const char *publishers,
                                 sl_dryrun_refit **out);
void sl_dryrun_refit_destroy(sl_dryrun_refit *dryrun);
/* JSON (docs/report.schema.json's refit_dryrun) and a human table; owned by the handle. */
const char *sl_dryrun_refit_json(sl_dryrun_refit *dryrun);
const char *sl_dryrun_refit_summary(sl_dryrun_refit *dryrun);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* SHARDLOAD_CORE_H */
