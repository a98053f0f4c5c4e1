/*
 * api/loader.c — the public loader API: the pipeline of DESIGN.md driven phase by phase, each phase
 * ending with an agreement between ranks on its status.
 *
 *   create    copy and validate the configuration, duplicate the communicator
 *   download  rank 0 resolves the model and builds the catalog; it and the spec text are
 *             broadcast; every rank instantiates the model
 *   plan      every rank computes the schedule of all ranks and keeps its own plan; the table of
 *             local parameters becomes visible (callers may bind their own buffers)
 *   load      allocate, pre-check missing/unexpected weights, transfer, reduce tracking bitmaps,
 *             gather statistics, write the report and the pre-sharded copy when configured
 */
#include "shardload/shardload.h"

#include "backend/backend.h"
#include "engine/comm.h"
#include "api/config.h"
#include "plan/stats.h"
#include "engine/filemap.h"
#include "base/log.h"
#include "api/options.h"
#include "api/params.h"
#include "plan/plan.h"
#include "api/prepare.h"
#include "output/save.h"
#include "engine/coverage.h"
#include "engine/transfer.h"
#include "base/util.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum { STATE_CREATED = 0, STATE_CATALOG, STATE_PLANNED, STATE_LOADED, STATE_FAILED };

/* What each rank sends to rank 0 after the load. */
typedef struct rank_record {
  sl_rank_stats stats;
  uint64_t bytes_read_planned;
  uint64_t peak_rss_bytes;
  uint64_t rss_anon, rss_file, rss_shmem; /* at the end of the load */
  uint64_t read_ops;
  uint64_t bytes_mapped;
  double transfer_seconds;
  double read_seconds;
  double bcast_seconds;
} rank_record;

struct sl_loader {
  sl_config *cfg; /* private copy: options point into it */
  sl__opts opts;
  sl__comm comm;
  sl__err err;
  int state;
  sl__prepared prep;
  uint32_t *pp_starts;
  sl__plan_opts po;
  sl__rank_plan plan;
  sl__schedule sched;
  sl__backend *backend;
  int cuda_device;
  void *cuda_stream;
  void *nccl_comm;
  sl_param *table;
  void **param_ptr; /* per local parameter (aliases point at their target's memory) */
  bool *bound;      /* the caller's buffer */
  bool *mapped;     /* a mapping of its checkpoint bytes (load strategy mmap) */
  sl__filemaps maps;
  _Atomic uint64_t *copy_done;
  sl__track track;
  bool have_track;
  sl__transfer_stats tstats;
  rank_record *records; /* rank 0: one per rank */
  double t_resolve, t_catalog, t_model, t_plan, t_alloc, t_transfer, t_track, t_total;
  sl__buf report;
  sl__buf summary;
  sl__params_state *params; /* api/params.c: parameter sources and memory handed out */
};

/* ---------------------------------------------------------------------------------------------
 * Create / destroy
 * ------------------------------------------------------------------------------------------- */

sl_status sl_loader_create(sl_config *config, MPI_Comm comm, sl_loader **out) {
  if (out == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  if (config == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__config_clear_error(config);
  sl_loader *l = calloc(1, sizeof *l);
  if (l == NULL)
    return SL_STATUS_NOMEM;
  sl__buf_init(&l->report, 0);
  sl__buf_init(&l->summary, 0);
  l->cuda_device = -1;
  sl_status st = sl__comm_init(&l->comm, comm, &l->err);
  if (st != SL_STATUS_OK) {
    sl__config_set_error(config, &l->err);
    free(l);
    return st;
  }
  sl__log_set_rank(l->comm.rank);
  l->cfg = sl__config_clone(config);
  if (l->cfg == NULL)
    st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = sl__opts_from_config(l->cfg, &l->opts, &l->err);
  sl__layout layout;
  if (st == SL_STATUS_OK)
    st = sl__layout_init(&layout, l->opts.tp, l->opts.pp, l->opts.dp, (uint32_t)l->comm.size, &l->err);
  if (st == SL_STATUS_OK && l->opts.device == SL_DEVICE_CUDA) {
    char why[512];
    if (!sl__cuda_available(why, sizeof why))
      st = sl__err_set(&l->err, SL_STATUS_NO_DEVICE, "--device cuda: no CUDA device available (%s)", why);
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "checking the configuration");
  if (st != SL_STATUS_OK) {
    sl__config_set_error(config, &l->err);
    sl__comm_free(&l->comm);
    sl_config_destroy(l->cfg);
    free(l);
    return st;
  }
  l->po.layout = layout;
  *out = l;
  return SL_STATUS_OK;
}

static void free_buffers(sl_loader *l) {
  if (l->param_ptr != NULL && l->backend != NULL) {
    for (size_t i = 0; i < l->plan.n_lparams; i++)
      if (l->param_ptr[i] != NULL && !l->bound[i] && !l->mapped[i] && l->plan.lparams[i].alias_of == SL_NONE)
        l->backend->ops->release(l->backend, l->param_ptr[i]);
  }
  sl__filemaps_free(&l->maps);
  free(l->param_ptr);
  l->param_ptr = NULL;
}

void sl_loader_destroy(sl_loader *l) {
  if (l == NULL)
    return;
  sl__params_loader_destroy(l); /* memory still referenced is taken over, not freed here */
  free_buffers(l);
  if (l->backend != NULL)
    l->backend->ops->destroy(l->backend);
  free(l->bound);
  free(l->mapped);
  free((void *)l->copy_done);
  free(l->table);
  free(l->records);
  sl__track_free(&l->track);
  sl__rank_plan_free(&l->plan);
  sl__schedule_free(&l->sched);
  free(l->pp_starts);
  sl__prepared_free(&l->prep);
  sl__buf_free(&l->report);
  sl__buf_free(&l->summary);
  sl__comm_free(&l->comm);
  sl_config_destroy(l->cfg);
  free(l);
}

const char *sl_loader_error(const sl_loader *l) {
  return l != NULL ? l->err.msg : "";
}

sl_status sl_loader_set_cuda(sl_loader *l, int device, void *cuda_stream, void *nccl_comm) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  if (l->state >= STATE_LOADED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_set_cuda must be called before the load");
  l->cuda_device = device;
  l->cuda_stream = cuda_stream;
  l->nccl_comm = nccl_comm;
  return SL_STATUS_OK;
}

/* A failed collective phase leaves the loader unusable (but destroyable). */
static sl_status fail(sl_loader *l, sl_status st) {
  if (st != SL_STATUS_OK) {
    l->state = STATE_FAILED;
    /* Peers may have aborted: the backend's teardown must not wait for them. */
    if (l->backend != NULL)
      l->backend->failed = true;
  }
  return st;
}

/* Every public call starts with a clean message (the first error of *this* call wins), except
 * after a failed collective phase: then the message that failed the ranks stays. */
static sl_status begin(sl_loader *l) {
  if (l->state == STATE_FAILED) {
    char old[SL_ERR_MSG_MAX];
    snprintf(old, sizeof old, "%s", l->err.msg);
    sl__err_clear(&l->err);
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT, "the loader failed earlier: %s", old);
  }
  sl__err_clear(&l->err);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Download: catalog on rank 0, broadcast, model everywhere
 * ------------------------------------------------------------------------------------------- */

sl_status sl_loader_download(sl_loader *l) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = begin(l);
  if (st != SL_STATUS_OK || l->state >= STATE_CATALOG)
    return st;
  double t0 = sl__now();
  uint8_t *blob = NULL;
  size_t blob_len = 0;
  if (l->comm.rank == 0) {
    st = sl__prepare_catalog(l->cfg, &l->opts, &l->prep, &l->err);
    if (st == SL_STATUS_OK)
      st = sl__catalog_serialize(&l->prep.cat, &blob, &blob_len, &l->err);
  }
  l->t_resolve = sl__now() - t0;
  st = sl__comm_agree(&l->comm, st, &l->err, "resolving the model");
  if (st != SL_STATUS_OK) {
    free(blob);
    return fail(l, st);
  }
  double t1 = sl__now();
  st = sl__comm_bcast_blob(&l->comm, &blob, &blob_len, 0, &l->err);
  uint8_t *spec = (uint8_t *)l->prep.spec_text;
  size_t spec_len = l->prep.spec_len;
  if (st == SL_STATUS_OK)
    st = sl__comm_bcast_blob(&l->comm, &spec, &spec_len, 0, &l->err);
  if (st == SL_STATUS_OK && l->comm.rank != 0) {
    l->prep.spec_text = (char *)spec;
    l->prep.spec_len = spec_len;
    st = sl__catalog_deserialize(blob, blob_len, &l->prep.cat, &l->err);
  }
  free(blob);
  st = sl__comm_agree(&l->comm, st, &l->err, "receiving the catalog");
  l->t_catalog = sl__now() - t1;
  if (st != SL_STATUS_OK)
    return fail(l, st);
  double t2 = sl__now();
  st = sl__prepare_model(&l->opts, &l->prep, &l->err);
  st = sl__comm_agree(&l->comm, st, &l->err, "instantiating the architecture spec");
  l->t_model = sl__now() - t2;
  if (st != SL_STATUS_OK)
    return fail(l, st);
  l->state = STATE_CATALOG;
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Plan and table
 * ------------------------------------------------------------------------------------------- */

static sl_status build_table(sl_loader *l) {
  size_t n = l->plan.n_lparams;
  l->table = calloc(n + 1, sizeof *l->table);
  l->param_ptr = calloc(n + 1, sizeof *l->param_ptr);
  l->bound = calloc(n + 1, sizeof *l->bound);
  l->mapped = calloc(n + 1, sizeof *l->mapped);
  l->copy_done = calloc(l->plan.n_copies + 1, sizeof *l->copy_done);
  if (l->table == NULL || l->param_ptr == NULL || l->bound == NULL || l->mapped == NULL ||
      l->copy_done == NULL)
    return sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory building the parameter table");
  for (size_t i = 0; i < l->plan.n_copies; i++)
    atomic_init(&l->copy_done[i], 0);
  for (size_t i = 0; i < n; i++) {
    const sl__lparam *lp = &l->plan.lparams[i];
    const sl__mparam *mp = &l->prep.model.params[lp->mparam];
    sl_param *p = &l->table[i];
    p->name = mp->name;
    p->dtype = sl__dtype_name(mp->dtype);
    p->dtype_bits = sl__dtype_bits(mp->dtype);
    p->ndim = lp->ndim;
    memcpy(p->local_shape, lp->shape, sizeof p->local_shape);
    p->ndim = lp->ndim;
    if (mp->alias_of != SL_NONE) {
      memcpy(p->global_shape, l->prep.model.params[mp->alias_of].shape, sizeof p->global_shape);
      p->alias_of = l->prep.model.params[mp->alias_of].name;
    } else {
      memcpy(p->global_shape, mp->shape, sizeof p->global_shape);
      /* Per-expert parameters of the vllm layout are [E, ...] globally. */
    }
    p->shard = lp->shard;
    p->nbytes = lp->nbytes;
    p->device = -1;
  }
  return SL_STATUS_OK;
}

sl_status sl_loader_plan(sl_loader *l) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = begin(l);
  if (st != SL_STATUS_OK || l->state >= STATE_PLANNED)
    return st;
  if (l->state < STATE_CATALOG) {
    st = sl_loader_download(l);
    if (st != SL_STATUS_OK)
      return st;
  }
  double t0 = sl__now();
  st = sl__pp_starts(&l->opts, l->prep.model.n_layers, &l->pp_starts, &l->err);
  if (st == SL_STATUS_OK) {
    sl__plan_opts_from(&l->opts, &l->po.layout, l->pp_starts, &l->po);
    st = sl__schedule_build(&l->prep.model, &l->prep.cat, &l->po, (uint32_t)l->comm.rank, &l->plan, &l->sched,
                            &l->err);
  }
  if (st == SL_STATUS_OK)
    st = build_table(l);
  st = sl__comm_agree(&l->comm, st, &l->err, "planning");
  l->t_plan = sl__now() - t0;
  if (st != SL_STATUS_OK)
    return fail(l, st);
  if (l->prep.model.experts > 0 && l->opts.enable_ep && l->plan.ctx.ep > 1 &&
      l->plan.ctx.placement != l->opts.placement)
    SL_WARN(
        "expert placement round_robin needs expert groups (n_group > 1), no redundant experts and no EPLB; "
        "using linear");
  l->state = STATE_PLANNED;
  return SL_STATUS_OK;
}

size_t sl_loader_param_count(const sl_loader *l) {
  return (l != NULL && l->state >= STATE_PLANNED && l->state != STATE_FAILED) ? l->plan.n_lparams : 0;
}

const sl_param *sl_loader_param(const sl_loader *l, size_t index) {
  if (l == NULL || l->table == NULL || index >= l->plan.n_lparams)
    return NULL;
  return &l->table[index];
}

const sl_param *sl_loader_find(const sl_loader *l, const char *name) {
  if (l == NULL || l->table == NULL || name == NULL)
    return NULL;
  for (size_t i = 0; i < l->plan.n_lparams; i++)
    if (strcmp(l->table[i].name, name) == 0)
      return &l->table[i];
  return NULL;
}

sl_status sl_loader_bind(sl_loader *l, const char *name, void *data, uint64_t nbytes) {
  if (l == NULL || name == NULL || data == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = begin(l);
  if (st != SL_STATUS_OK)
    return st;
  if (l->state != STATE_PLANNED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_bind(%s): bind after sl_loader_plan and before sl_loader_load", name);
  for (size_t i = 0; i < l->plan.n_lparams; i++) {
    if (strcmp(l->table[i].name, name) != 0)
      continue;
    if (l->plan.lparams[i].alias_of != SL_NONE)
      return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                         "%s shares the memory of %s: bind that one instead", name, l->table[i].alias_of);
    if (nbytes != l->table[i].nbytes)
      return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT, "%s needs a buffer of %llu bytes, got %llu",
                         name, (unsigned long long)l->table[i].nbytes, (unsigned long long)nbytes);
    l->param_ptr[i] = data;
    l->bound[i] = true;
    return SL_STATUS_OK;
  }
  return sl__err_set(&l->err, SL_STATUS_NOT_FOUND, "this rank holds no parameter named '%s'", name);
}

/* ---------------------------------------------------------------------------------------------
 * Load
 * ------------------------------------------------------------------------------------------- */

/* Writes one byte of every page: the kernel's (and a hypervisor's) cost of the first touch is
 * paid here instead of inside the reads. The memory is zero-filled, and stays so. */
static void prefault(void *p, uint64_t nbytes) {
  volatile uint8_t *b = p;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  for (uint64_t k = 0; k < nbytes; k += page)
    b[k] = 0;
}

static sl_status allocate(sl_loader *l) {
  sl_status st = SL_STATUS_OK;
  if (l->opts.strategy == SL_STRATEGY_MMAP && l->backend->host_addressable)
    st = sl__filemap_params(&l->prep.cat, &l->sched, &l->plan, l->bound, l->param_ptr, l->mapped, &l->maps,
                            &l->err);
  for (size_t i = 0; i < l->plan.n_lparams && st == SL_STATUS_OK; i++) {
    const sl__lparam *lp = &l->plan.lparams[i];
    if (lp->alias_of != SL_NONE || l->bound[i] || l->mapped[i])
      continue;
    st = l->backend->ops->alloc(l->backend, lp->nbytes, &l->param_ptr[i], &l->err);
    if (st != SL_STATUS_OK)
      sl__err_prefix(&l->err, "allocating %s", l->table[i].name);
    else if (l->opts.prefault && l->backend->host_addressable)
      prefault(l->param_ptr[i], lp->nbytes);
  }
  for (size_t i = 0; i < l->plan.n_lparams && st == SL_STATUS_OK; i++) {
    const sl__lparam *lp = &l->plan.lparams[i];
    if (lp->alias_of != SL_NONE)
      l->param_ptr[i] = l->param_ptr[lp->alias_of];
    l->table[i].data = l->param_ptr[i];
    l->table[i].device = l->backend->device;
  }
  return st;
}

static uint64_t peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return (uint64_t)ru.ru_maxrss * 1024u;
}

/* Resident memory now, by kind (Linux /proc/self/status; zeros elsewhere): anonymous (allocated
 * parameters, staging, heap), file pages (mmap strategy parameters, libraries), shared memory
 * (MPI's intra-node transport). */
static void rss_by_kind(uint64_t *anon, uint64_t *file, uint64_t *shmem) {
  *anon = *file = *shmem = 0;
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return;
  char line[256];
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long long kb = 0;
    if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
      *anon = kb * 1024u;
    else if (sscanf(line, "RssFile: %llu kB", &kb) == 1)
      *file = kb * 1024u;
    else if (sscanf(line, "RssShmem: %llu kB", &kb) == 1)
      *shmem = kb * 1024u;
  }
  fclose(f);
}

static void write_summary(sl_loader *l, const sl__figures *f);
static void write_report(sl_loader *l, const sl__figures *f);

static sl_status create_backend(sl_loader *l) {
  uint32_t workers = l->opts.extra.num_threads;
  if (l->opts.device == SL_DEVICE_CUDA) {
    int dev = l->cuda_device >= 0 ? l->cuda_device : l->opts.cuda_device;
    return sl__backend_cuda_create(&l->comm, (int)workers, dev, l->cuda_stream, l->nccl_comm, &l->sched,
                                   &l->backend, &l->err);
  }
  return sl__backend_host_create(&l->comm, (int)workers, &l->backend, &l->err);
}

sl_status sl_loader_load(sl_loader *l) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = begin(l);
  if (st != SL_STATUS_OK)
    return st;
  if (l->state >= STATE_LOADED)
    return sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT, "sl_loader_load was already called");
  double t0 = sl__now();
  if (l->state < STATE_PLANNED) {
    st = sl_loader_plan(l);
    if (st != SL_STATUS_OK)
      return st;
  }
  /* Missing and unexpected weights are known from the plan alone: fail before reading. */
  sl__track pre;
  st = sl__track_precheck(&l->prep.model, &l->prep.cat, &l->sched, &pre, &l->err);
  if (st == SL_STATUS_OK) {
    char msg[SL_ERR_MSG_MAX];
    sl_status verdict = SL_STATUS_OK;
    if (sl__track_message(&l->prep.model, &l->prep.cat, &pre, msg, sizeof msg, &verdict)) {
      if (l->opts.extra.weights_track)
        st = sl__err_set(&l->err, verdict, "%s", msg);
      else if (l->comm.rank == 0)
        SL_WARN("%s (loading anyway: strict checking is off)", msg);
    }
    sl__track_free(&pre);
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "checking the weights against the plan");
  if (st != SL_STATUS_OK)
    return fail(l, st);
  double t1 = sl__now();
  /* Group communicators first: the CUDA backend builds its NCCL communicators over them. */
  st = sl__comm_groups_create(&l->comm, &l->sched, &l->err);
  st = sl__comm_agree(&l->comm, st, &l->err, "creating broadcast groups");
  if (st != SL_STATUS_OK)
    return fail(l, st);
  st = create_backend(l);
  if (st == SL_STATUS_OK)
    st = allocate(l);
  st = sl__comm_agree(&l->comm, st, &l->err, "allocating parameters");
  l->t_alloc = sl__now() - t1;
  if (st != SL_STATUS_OK)
    return fail(l, st);
  /* Transfer, with the abort channel armed so that a failing rank stops everyone. */
  double t2 = sl__now();
  st = sl__comm_abort_arm(&l->comm, &l->err);
  sl__transfer tr = {.cat = &l->prep.cat,
                     .sched = &l->sched,
                     .plan = &l->plan,
                     .backend = l->backend,
                     .comm = &l->comm,
                     .param_ptr = l->param_ptr,
                     .param_mapped = l->mapped,
                     .workers = l->opts.extra.num_threads,
                     .chunk = l->po.read_chunk,
                     .coalesce_gap = l->opts.coalesce_gap,
                     .staging_bytes = l->opts.staging_bytes,
                     .strategy = l->opts.strategy,
                     .progress = l->comm.rank == 0 && !l->opts.quiet && isatty(2),
                     .copy_done = l->copy_done};
  if (st == SL_STATUS_OK)
    st = sl__transfer_run(&tr, &l->tstats, &l->err);
  sl__err derr;
  sl__err_clear(&derr);
  sl_status dst = sl__comm_abort_disarm(&l->comm, &derr);
  if (st == SL_STATUS_OK && dst != SL_STATUS_OK) {
    sl__err_copy(&l->err, &derr);
    st = dst;
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "loading");
  l->t_transfer = sl__now() - t2;
  if (st != SL_STATUS_OK)
    return fail(l, st);
  /* Tracking over all ranks. */
  double t3 = sl__now();
  st = sl__track_reduce(&l->comm, &l->prep.model, &l->prep.cat, &l->sched, &l->plan, l->copy_done, &l->track,
                        &l->err);
  l->have_track = st == SL_STATUS_OK;
  if (st == SL_STATUS_OK) {
    char msg[SL_ERR_MSG_MAX];
    sl_status verdict = SL_STATUS_OK;
    if (sl__track_message(&l->prep.model, &l->prep.cat, &l->track, msg, sizeof msg, &verdict)) {
      if (l->opts.extra.weights_track)
        st = sl__err_set(&l->err, verdict, "%s", msg);
      else if (l->comm.rank == 0)
        SL_WARN("%s", msg);
    }
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "tracking weights");
  l->t_track = sl__now() - t3;
  if (st != SL_STATUS_OK)
    return fail(l, st);
  /* Statistics to rank 0. */
  rank_record rec;
  memset(&rec, 0, sizeof rec);
  rec.stats = l->sched.stats[l->comm.rank];
  rec.bytes_read_planned = rec.stats.bytes_read;
  rec.stats.bytes_read = l->tstats.bytes_read;
  rec.stats.bytes_covering = l->tstats.bytes_covering;
  rec.stats.bytes_received = l->tstats.bytes_received;
  rec.stats.bytes_sent = l->tstats.bytes_sent;
  rec.stats.files_opened = l->tstats.files_opened;
  rec.peak_rss_bytes = peak_rss_bytes();
  rss_by_kind(&rec.rss_anon, &rec.rss_file, &rec.rss_shmem);
  rec.read_ops = l->tstats.read_ops;
  rec.bytes_mapped = l->maps.bytes_mapped;
  rec.transfer_seconds = l->tstats.seconds;
  rec.read_seconds = l->tstats.read_seconds;
  rec.bcast_seconds = l->tstats.bcast_seconds;
  if (l->comm.rank == 0) {
    l->records = calloc((size_t)l->comm.size, sizeof *l->records);
    if (l->records == NULL)
      st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory gathering statistics");
  }
  /* Every rank joins the gather; rank 0 receives into a scratch buffer if its allocation failed. */
  rank_record scratch_rec;
  sl_status gst = sl__comm_gather(
      &l->comm, &rec, sizeof rec,
      l->comm.rank == 0 ? (void *)(l->records != NULL ? l->records : &scratch_rec) : NULL, &l->err);
  if (l->comm.rank == 0 && l->records == NULL && gst == SL_STATUS_OK)
    gst = SL_STATUS_NOMEM;
  st = st == SL_STATUS_OK ? gst : st;
  l->state = STATE_LOADED;
  l->t_total = sl__now() - t0 + l->t_resolve + l->t_catalog + l->t_model;
  if (st == SL_STATUS_OK && l->comm.rank == 0) {
    sl_rank_stats *stats = calloc((size_t)l->comm.size, sizeof *stats);
    if (stats != NULL) {
      for (int r = 0; r < l->comm.size; r++)
        stats[r] = l->records[r].stats;
      sl__figures f;
      sl__figures_compute(stats, (uint32_t)l->comm.size, l->sched.unique_bytes, l->opts.storage_gbps,
                          l->opts.network_gbps, l->opts.ranks_per_node, &f);
      write_report(l, &f);
      write_summary(l, &f);
      free(stats);
    }
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "gathering statistics");
  if (st != SL_STATUS_OK)
    return fail(l, st);
  /* Report file and pre-sharded copy, when configured. */
  if (l->opts.report != NULL && l->comm.rank == 0) {
    FILE *fp = fopen(l->opts.report, "w");
    if (fp == NULL || fputs(sl__buf_str(&l->report), fp) == EOF)
      st = sl__err_set(&l->err, SL_STATUS_IO, "cannot write the report %s: %s", l->opts.report,
                       strerror(errno));
    if (fp != NULL && fclose(fp) != 0 && st == SL_STATUS_OK)
      st = sl__err_set(&l->err, SL_STATUS_IO, "cannot write the report %s: %s", l->opts.report,
                       strerror(errno));
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "writing the report");
  if (st != SL_STATUS_OK)
    return st;
  if (l->opts.save_dir != NULL)
    return sl_loader_save_sharded(l, l->opts.save_dir);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Save
 * ------------------------------------------------------------------------------------------- */

sl_status sl_loader_save_sharded(sl_loader *l, const char *dir) {
  if (l == NULL || dir == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = begin(l);
  if (st != SL_STATUS_OK)
    return st;
  st = l->state == STATE_LOADED
           ? SL_STATUS_OK
           : sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT, "sl_loader_save_sharded needs a loaded loader");
  if (st == SL_STATUS_OK && l->comm.rank == 0)
    st = sl__mkdirs(dir, &l->err);
  st = sl__comm_agree(&l->comm, st, &l->err, "creating the output folder");
  if (st != SL_STATUS_OK)
    return st;
  size_t n = l->plan.n_lparams;
  sl__save_entry *entries = calloc(n + 1, sizeof *entries);
  if (entries == NULL)
    st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    const sl__lparam *lp = &l->plan.lparams[i];
    entries[i] = (sl__save_entry){.name = l->table[i].name,
                                  .dtype = l->prep.model.params[lp->mparam].dtype,
                                  .ndim = lp->ndim,
                                  .data = l->param_ptr[i],
                                  .nbytes = lp->nbytes};
    memcpy(entries[i].shape, lp->shape, sizeof entries[i].shape);
  }
  uint32_t parts = 0;
  if (st == SL_STATUS_OK)
    st = sl__save_rank(dir, (uint32_t)l->comm.rank, entries, n, l->opts.save_max_part, l->backend, &parts,
                       &l->err);
  free(entries);
  if (st == SL_STATUS_OK && l->comm.rank == 0)
    st = sl__save_copy_extras(l->prep.cat.folder, dir, &l->err);
  return sl__comm_agree(&l->comm, st, &l->err, "saving the sharded copy");
}

/* ---------------------------------------------------------------------------------------------
 * Report and summary (rank 0)
 * ------------------------------------------------------------------------------------------- */

static void write_report(sl_loader *l, const sl__figures *f) {
  sl__buf *b = &l->report;
  const sl__model *m = &l->prep.model;
  sl__buf_free(b);
  sl__buf_init(b, 0);
  sl__buf_appendf(b, "{\"shardload_version\":\"%s\",\"model\":", SL_VERSION_STRING);
  sl__buf_json_str(b, l->opts.model);
  sl__buf_appendf(b, ",\"folder\":");
  sl__buf_json_str(b, l->prep.cat.folder);
  if (l->prep.commit != NULL) {
    sl__buf_appendf(b, ",\"commit\":");
    sl__buf_json_str(b, l->prep.commit);
  }
  sl__buf_appendf(b, ",\"architecture\":");
  sl__buf_json_str(b, m->architecture != NULL ? m->architecture : "");
  sl__buf_appendf(b, ",\"family\":");
  sl__buf_json_str(b, m->family);
  sl__buf_appendf(
      b,
      ",\"load_format\":\"%s\",\"layout\":\"%s\",\"device\":\"%s\",\"tp\":%u,\"pp\":%u,\"dp\":%u,"
      "\"expert_parallel\":%s,\"expert_placement\":\"%s\",\"eplb\":%s,\"threads\":%u,"
      "\"load_strategy\":\"%s\",\"prefault\":%s,\"files\":%zu,\"tensors\":%zu,\"checkpoint_bytes\":%llu,",
      sl__format_name(l->prep.cat.format), m->layout == SL_LAYOUT_VLLM ? "vllm" : "checkpoint",
      l->opts.device == SL_DEVICE_CUDA ? "cuda" : "cpu", l->opts.tp, l->opts.pp, l->opts.dp,
      l->opts.enable_ep ? "true" : "false", sl__placement_name(l->plan.ctx.placement),
      l->opts.eplb ? "true" : "false", l->opts.extra.num_threads, sl__strategy_name(l->opts.strategy),
      l->opts.prefault ? "true" : "false", l->prep.cat.n_files, l->prep.cat.n_tensors,
      (unsigned long long)l->sched.checkpoint_bytes);
  sl__buf_appendf(
      b,
      "\"phases\":{\"resolve_seconds\":%.6f,\"catalog_broadcast_seconds\":%.6f,\"model_seconds\":%.6f,"
      "\"plan_seconds\":%.6f,\"allocate_seconds\":%.6f,\"transfer_seconds\":%.6f,\"track_seconds\":%.6f,"
      "\"total_seconds\":%.6f},",
      l->t_resolve, l->t_catalog, l->t_model, l->t_plan, l->t_alloc, l->t_transfer, l->t_track, l->t_total);
  sl__buf_appendf(b, "\"download\":{\"bytes\":%llu,\"files\":%u,\"seconds\":%.6f},",
                  (unsigned long long)l->prep.download_bytes, l->prep.download_files,
                  l->prep.download_seconds);
  sl__buf_appendf(b, "\"schedule\":{\"pieces\":%zu,\"broadcast_groups\":%zu,\"buckets\":%zu},",
                  l->sched.n_pieces, l->sched.n_groups, l->sched.n_buckets);
  sl__figures_json(b, f);
  uint64_t rss_max = 0;
  sl__buf_appendf(b, "\"ranks\":[");
  for (int r = 0; r < l->comm.size; r++) {
    const rank_record *rr = &l->records[r];
    rss_max = rr->peak_rss_bytes > rss_max ? rr->peak_rss_bytes : rss_max;
    sl__buf_appendf(
        b,
        "%s{\"rank\":%d,\"bytes_needed\":%llu,\"bytes_read\":%llu,\"bytes_read_planned\":%llu,"
        "\"bytes_covering\":%llu,\"bytes_received\":%llu,\"bytes_sent\":%llu,\"bytes_local\":%llu,"
        "\"bytes_naive\":%llu,\"files_opened\":%u,\"params\":%u,\"experts_local\":%u,\"read_ops\":%llu,"
        "\"bytes_mapped\":%llu,\"peak_rss_bytes\":%llu,\"rss_anon_bytes\":%llu,\"rss_file_bytes\":%llu,"
        "\"rss_shmem_bytes\":%llu,\"transfer_seconds\":%.6f,\"broadcast_seconds\":%.6f}",
        r > 0 ? "," : "", r, (unsigned long long)rr->stats.bytes_needed,
        (unsigned long long)rr->stats.bytes_read, (unsigned long long)rr->bytes_read_planned,
        (unsigned long long)rr->stats.bytes_covering, (unsigned long long)rr->stats.bytes_received,
        (unsigned long long)rr->stats.bytes_sent, (unsigned long long)rr->stats.bytes_local,
        (unsigned long long)rr->stats.bytes_naive, rr->stats.files_opened, rr->stats.params,
        rr->stats.experts_local, (unsigned long long)rr->read_ops, (unsigned long long)rr->bytes_mapped,
        (unsigned long long)rr->peak_rss_bytes, (unsigned long long)rr->rss_anon,
        (unsigned long long)rr->rss_file, (unsigned long long)rr->rss_shmem, rr->transfer_seconds,
        rr->bcast_seconds);
  }
  sl__buf_appendf(b, "],\"peak_rss_bytes_max\":%llu,\"staging_bytes\":%llu,", (unsigned long long)rss_max,
                  (unsigned long long)l->opts.staging_bytes);
  if (l->have_track)
    sl__track_json(m, &l->prep.cat, &l->track, b);
  else
    sl__buf_appendf(b, "\"missing\":[],\"unexpected\":[],\"ignored\":[],\"skipped_count\":0");
  sl__buf_appendf(b, "}\n");
}

static void write_summary(sl_loader *l, const sl__figures *f) {
  sl__buf *b = &l->summary;
  sl__buf_free(b);
  sl__buf_init(b, 0);
  char need[32], rd[32], bc[32], rss[32];
  uint64_t rss_max = 0;
  for (int r = 0; r < l->comm.size; r++)
    rss_max = l->records[r].peak_rss_bytes > rss_max ? l->records[r].peak_rss_bytes : rss_max;
  sl__fmt_bytes(need, sizeof need, f->unique);
  sl__fmt_bytes(rd, sizeof rd, f->read);
  sl__fmt_bytes(bc, sizeof bc, f->received);
  sl__fmt_bytes(rss, sizeof rss, rss_max);
  double rate = l->t_transfer > 0 ? (double)f->needed / l->t_transfer / 1e9 : 0;
  sl__buf_appendf(
      b,
      "shardload: loaded %s (%s) on %d rank%s (tp=%u pp=%u dp=%u%s) in %.2f s\n"
      "  %s needed, %s read (amplification %.2f, %.2f with covering bytes), %s broadcast, %.2f GB/s\n"
      "  missing %zu, unexpected %zu, ignored %zu, skipped %zu; peak RSS per rank %s\n",
      l->opts.model, l->prep.model.architecture != NULL ? l->prep.model.architecture : "?", l->comm.size,
      l->comm.size == 1 ? "" : "s", l->opts.tp, l->opts.pp, l->opts.dp,
      l->opts.enable_ep ? ", expert parallel" : "", l->t_total, need, rd, f->amplification,
      f->amplification_covering, bc, rate, l->have_track ? l->track.n_missing : 0,
      l->have_track ? l->track.n_unexpected : 0, l->have_track ? l->track.n_ignored : 0,
      l->have_track ? l->track.n_skipped : 0, rss);
  uint64_t mapped = 0;
  for (int r = 0; r < l->comm.size; r++)
    mapped += l->records[r].bytes_mapped;
  if (mapped > 0) {
    char mp[32];
    sl__fmt_bytes(mp, sizeof mp, mapped);
    sl__buf_appendf(b, "  %s of the parameters are mappings of the checkpoint files (no copy)\n", mp);
  }
}

const char *sl_loader_report_json(sl_loader *l) {
  if (l == NULL || l->state != STATE_LOADED || l->report.len == 0)
    return NULL;
  return sl__buf_str(&l->report);
}

const char *sl_loader_summary(sl_loader *l) {
  if (l == NULL || l->state != STATE_LOADED || l->summary.len == 0)
    return NULL;
  return sl__buf_str(&l->summary);
}

/* api/params.h: the parts of the loader that api/params.c works on. */
void sl__loader_view_of(sl_loader *l, sl__loader_view *out) {
  *out = (sl__loader_view){.params = &l->params,
                           .comm = &l->comm,
                           .err = &l->err,
                           .planned = l->state >= STATE_PLANNED && l->state != STATE_FAILED,
                           .loaded = l->state == STATE_LOADED,
                           .plan = &l->plan,
                           .cat = &l->prep.cat,
                           .table = l->table,
                           .backend = &l->backend,
                           .maps = &l->maps,
                           .param_ptr = &l->param_ptr,
                           .bound = l->bound,
                           .mapped = l->mapped};
}
