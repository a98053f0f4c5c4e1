/*
 * bench_naive.c — the naive baseline of scripts/bench: an MPI program in which EVERY rank reads
 * EVERY tensor of a checkpoint in full, as vLLM's default loader does, with a pool of threads
 * that pread into one reused buffer each. Tensors are listed through the public API
 * (sl_model_open / sl_model_tensor), so the file selection is the loader's.
 *
 * Modes:
 *   (default)   read only: nothing is kept (the pure read cost of the naive scheme);
 *   --slice N   also keep part (rank mod N) of every tensor, copied from the read buffer into
 *               one freshly allocated destination (vLLM's "read whole, narrow, copy" at TP=N);
 *   --keep      pread every tensor straight into one fresh buffer holding the whole checkpoint
 *               (at 1 rank: the cost of filling fresh memory from the files, a loader's ceiling);
 *   --list-files  rank 0 prints "SIZE<TAB>PATH" for each selected weight file and stops.
 *
 * Timing: barrier, start, open the model, read, barrier, stop (so the wall time is the slowest
 * rank's). The per-thread read buffers are allocated and touched before the start: the baseline
 * is given every advantage. Rank 0 prints one JSON line on stdout and a summary on stderr.
 *
 * Build (scripts/bench does it):
 *   mpicc -O2 -std=c11 -Iinclude -Ibuild/include scripts/bench_naive.c -Lbuild/lib -lshardload \
 *         -Wl,-rpath,build/lib -lpthread -o build/bench_naive
 * Usage: mpirun -np N bench_naive MODEL [--threads N] [--chunk-bytes N] [--slice N | --keep]
 */
#define _GNU_SOURCE
#include <shardload/shardload.h>

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MSG_MAX 512

typedef struct piece {
  size_t file;      /* index into the model's file list */
  uint64_t offset;  /* absolute offset in the file, bytes */
  uint64_t nbytes;  /* tensor size, bytes */
  uint64_t keep_lo; /* kept range of the tensor, [keep_lo, keep_hi) relative to its start */
  uint64_t keep_hi;
  uint64_t dst; /* where the kept range starts in the destination, bytes */
} piece;

typedef struct shared {
  piece *pieces;
  size_t n_pieces;
  int *fds;
  uint64_t chunk;  /* largest single pread, bytes */
  uint8_t *dst;    /* destination of kept bytes (NULL in read-only mode) */
  bool keep_whole; /* --keep: pread straight into dst */
  pthread_mutex_t mu;
  size_t next;         /* next piece to take, under mu */
  uint64_t bytes_read; /* under mu */
  char error[MSG_MAX]; /* first error, under mu */
} shared;

typedef struct worker {
  shared *sh;
  uint8_t *buf; /* this thread's read buffer, chunk bytes */
} worker;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return (uint64_t)ru.ru_maxrss * 1024u;
}

static bool parse_u64(const char *text, uint64_t *out) {
  if (text == NULL || text[0] < '0' || text[0] > '9')
    return false;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0')
    return false;
  *out = (uint64_t)v;
  return true;
}

static void set_error(shared *sh, const char *msg) {
  pthread_mutex_lock(&sh->mu);
  if (sh->error[0] == '\0')
    snprintf(sh->error, sizeof sh->error, "%s", msg);
  pthread_mutex_unlock(&sh->mu);
}

/* Reads [off, off + len) of fd into buf completely; false (and a message) on error or EOF. */
static bool pread_full(int fd, uint8_t *buf, uint64_t len, uint64_t off, char *msg, size_t msg_size) {
  uint64_t got = 0;
  while (got < len) {
    ssize_t r = pread(fd, buf + got, (size_t)(len - got), (off_t)(off + got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      snprintf(msg, msg_size, "pread of %llu bytes at offset %llu: %s", (unsigned long long)(len - got),
               (unsigned long long)(off + got), r < 0 ? strerror(errno) : "unexpected end of file");
      return false;
    }
    got += (uint64_t)r;
  }
  return true;
}

/* One piece, chunk by chunk; kept bytes are copied out of the read buffer (or read in place). */
static bool read_piece(shared *sh, worker *w, const piece *p, char *msg, size_t msg_size) {
  if (sh->keep_whole)
    return pread_full(sh->fds[p->file], sh->dst + p->dst, p->nbytes, p->offset, msg, msg_size);
  for (uint64_t at = 0; at < p->nbytes; at += sh->chunk) {
    uint64_t len = p->nbytes - at < sh->chunk ? p->nbytes - at : sh->chunk;
    if (!pread_full(sh->fds[p->file], w->buf, len, p->offset + at, msg, msg_size))
      return false;
    if (sh->dst == NULL)
      continue;
    uint64_t lo = at > p->keep_lo ? at : p->keep_lo;
    uint64_t hi = at + len < p->keep_hi ? at + len : p->keep_hi;
    if (lo < hi)
      memcpy(sh->dst + p->dst + (lo - p->keep_lo), w->buf + (lo - at), (size_t)(hi - lo));
  }
  return true;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  for (;;) {
    pthread_mutex_lock(&sh->mu);
    bool stop = sh->error[0] != '\0' || sh->next >= sh->n_pieces;
    size_t i = sh->next;
    if (!stop)
      sh->next++;
    pthread_mutex_unlock(&sh->mu);
    if (stop)
      break;
    char msg[MSG_MAX];
    if (!read_piece(sh, w, &sh->pieces[i], msg, sizeof msg)) {
      set_error(sh, msg);
      break;
    }
    pthread_mutex_lock(&sh->mu);
    sh->bytes_read += sh->pieces[i].nbytes;
    pthread_mutex_unlock(&sh->mu);
  }
  return NULL;
}

static int cmp_piece(const void *a, const void *b) {
  const piece *x = a;
  const piece *y = b;
  if (x->file != y->file)
    return x->file < y->file ? -1 : 1;
  if (x->offset != y->offset)
    return x->offset < y->offset ? -1 : 1;
  return 0;
}

typedef struct options {
  const char *model;
  uint64_t threads;
  uint64_t chunk;
  uint64_t slice; /* 0: nothing kept */
  bool keep;
  bool list_files;
} options;

static int parse_args(int argc, char **argv, options *o, char *msg, size_t msg_size) {
  memset(o, 0, sizeof *o);
  o->threads = 8;
  o->chunk = 16u << 20;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--keep") == 0) {
      o->keep = true;
    } else if (strcmp(a, "--list-files") == 0) {
      o->list_files = true;
    } else if (strcmp(a, "--threads") == 0 || strcmp(a, "--slice") == 0 || strcmp(a, "--chunk-bytes") == 0) {
      uint64_t n = 0;
      if (!parse_u64(v, &n) || n == 0 || n > (1ull << 40)) {
        snprintf(msg, msg_size, "%s: expected a positive integer, got '%s'", a, v != NULL ? v : "");
        return 2;
      }
      if (strcmp(a, "--threads") == 0)
        o->threads = n > 256 ? 256 : n;
      else if (strcmp(a, "--slice") == 0)
        o->slice = n;
      else
        o->chunk = n;
      i++;
    } else if (a[0] == '-') {
      snprintf(msg, msg_size,
               "unknown option '%s' (expected --threads N, --chunk-bytes N, --slice N, --keep, "
               "--list-files)",
               a);
      return 2;
    } else if (o->model == NULL) {
      o->model = a;
    } else {
      snprintf(msg, msg_size, "unexpected argument '%s': one MODEL only", a);
      return 2;
    }
  }
  if (o->model == NULL) {
    snprintf(msg, msg_size,
             "usage: bench_naive MODEL [--threads N] [--chunk-bytes N] [--slice N | --keep] "
             "[--list-files]");
    return 2;
  }
  if (o->keep && o->slice > 0) {
    snprintf(msg, msg_size, "--keep and --slice exclude each other");
    return 2;
  }
  return 0;
}

/* Lists the tensors as pieces (sorted by file and offset) and sizes the destination. */
static int build_pieces(const sl_model *m, const options *o, int rank, piece **out, size_t *n_out,
                        uint64_t *dst_bytes, char *msg, size_t msg_size) {
  size_t n = sl_model_tensor_count(m);
  piece *ps = calloc(n + 1, sizeof *ps);
  if (ps == NULL) {
    snprintf(msg, msg_size, "out of memory listing %zu tensors", n);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    sl_status st = sl_model_tensor(m, i, &t);
    if (st != SL_STATUS_OK) {
      snprintf(msg, msg_size, "tensor %zu of %s: %s", i, o->model, sl_status_name(st));
      free(ps);
      return 1;
    }
    ps[i] = (piece){.file = t.file, .offset = t.offset, .nbytes = t.nbytes};
  }
  qsort(ps, n, sizeof *ps, cmp_piece);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    piece *p = &ps[i];
    if (o->keep) {
      p->keep_lo = 0;
      p->keep_hi = p->nbytes;
    } else if (o->slice > 0) {
      uint64_t part = (uint64_t)rank % o->slice;
      p->keep_lo = p->nbytes / o->slice * part;
      p->keep_hi = part + 1 == o->slice ? p->nbytes : p->nbytes / o->slice * (part + 1);
    }
    p->dst = total;
    total += p->keep_hi - p->keep_lo;
  }
  *out = ps;
  *n_out = n;
  *dst_bytes = total;
  return 0;
}

/* One read buffer per thread, touched now so that the clock does not count their first use.
 * NULL (and a message) on failure; none are needed with --keep. */
static uint8_t **alloc_buffers(const options *o, char *msg, size_t msg_size) {
  uint8_t **bufs = calloc((size_t)o->threads, sizeof *bufs);
  bool ok = bufs != NULL;
  for (size_t i = 0; ok && i < (size_t)o->threads; i++) {
    bufs[i] = malloc((size_t)o->chunk);
    ok = bufs[i] != NULL;
    if (ok)
      memset(bufs[i], 0, (size_t)o->chunk);
  }
  if (!ok) {
    snprintf(msg, msg_size, "out of memory for %llu read buffers of %llu bytes",
             (unsigned long long)o->threads, (unsigned long long)o->chunk);
    for (size_t i = 0; bufs != NULL && i < (size_t)o->threads; i++)
      free(bufs[i]);
    free(bufs);
    return NULL;
  }
  return bufs;
}

static void free_buffers(uint8_t **bufs, uint64_t n) {
  for (size_t i = 0; bufs != NULL && i < (size_t)n; i++)
    free(bufs[i]);
  free(bufs);
}

/* Opens the files, starts the threads, reads every piece; 0 on success. */
static int run_reads(const sl_model *m, shared *sh, const options *o, uint8_t **bufs, char *msg,
                     size_t msg_size) {
  size_t n_files = sl_model_file_count(m);
  sh->fds = calloc(n_files + 1, sizeof *sh->fds);
  int rc = 0;
  if (sh->fds == NULL) {
    snprintf(msg, msg_size, "out of memory");
    rc = 1;
  }
  for (size_t f = 0; sh->fds != NULL && f < n_files; f++) {
    sh->fds[f] = -1;
    if (rc != 0)
      continue;
    sh->fds[f] = open(sl_model_file_path(m, f), O_RDONLY | O_CLOEXEC);
    if (sh->fds[f] < 0) {
      snprintf(msg, msg_size, "cannot open %s: %s", sl_model_file_path(m, f), strerror(errno));
      rc = 1;
    }
  }
  worker *ws = calloc((size_t)o->threads, sizeof *ws);
  pthread_t *tids = calloc((size_t)o->threads, sizeof *tids);
  if (rc == 0 && (ws == NULL || tids == NULL)) {
    snprintf(msg, msg_size, "out of memory");
    rc = 1;
  }
  size_t started = 0;
  for (size_t i = 0; rc == 0 && i < (size_t)o->threads; i++) {
    ws[i].sh = sh;
    ws[i].buf = bufs != NULL ? bufs[i] : NULL;
  }
  for (size_t i = 0; rc == 0 && i < (size_t)o->threads; i++) {
    if (pthread_create(&tids[i], NULL, worker_main, &ws[i]) != 0) {
      snprintf(msg, msg_size, "cannot start reader thread %zu", i);
      set_error(sh, msg); /* the threads already started stop at their next piece */
      rc = 1;
      break;
    }
    started++;
  }
  for (size_t i = 0; i < started; i++)
    pthread_join(tids[i], NULL);
  if (rc == 0 && sh->error[0] != '\0') {
    snprintf(msg, msg_size, "%s", sh->error);
    rc = 1;
  }
  for (size_t f = 0; sh->fds != NULL && f < n_files; f++) {
    if (sh->fds[f] >= 0)
      close(sh->fds[f]);
  }
  free(ws);
  free(tids);
  free(sh->fds);
  sh->fds = NULL;
  return rc;
}

static void list_files(const sl_model *m) {
  for (size_t f = 0; f < sl_model_file_count(m); f++)
    printf("%llu\t%s\n", (unsigned long long)sl_model_file_size(m, f), sl_model_file_path(m, f));
  fflush(stdout);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  char msg[MSG_MAX];
  msg[0] = '\0';
  options o;
  int rc = parse_args(argc, argv, &o, msg, sizeof msg);
  if (rc != 0) {
    if (rank == 0)
      fprintf(stderr, "bench_naive: %s\n", msg);
    MPI_Finalize();
    return rc;
  }
  uint8_t **bufs = NULL;
  if (!o.keep && !o.list_files) {
    bufs = alloc_buffers(&o, msg, sizeof msg);
    rc = bufs == NULL ? 1 : 0;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_seconds();
  sl_model *m = NULL;
  char *open_error = NULL;
  sl_status st = rc == 0 ? sl_model_open(o.model, NULL, &m, &open_error) : SL_STATUS_OK;
  if (st != SL_STATUS_OK) {
    snprintf(msg, sizeof msg, "cannot open model %s: %s: %s", o.model, sl_status_name(st),
             open_error != NULL ? open_error : "");
    rc = 1;
  }
  free(open_error);
  if (rc == 0 && o.list_files) {
    if (rank == 0)
      list_files(m);
    sl_model_close(m);
    MPI_Finalize();
    return 0;
  }
  double t_open = now_seconds() - t0;
  shared sh;
  memset(&sh, 0, sizeof sh);
  pthread_mutex_init(&sh.mu, NULL);
  sh.chunk = o.chunk;
  sh.keep_whole = o.keep;
  uint64_t dst_bytes = 0;
  uint64_t checkpoint_bytes = 0;
  if (rc == 0)
    rc = build_pieces(m, &o, rank, &sh.pieces, &sh.n_pieces, &dst_bytes, msg, sizeof msg);
  for (size_t i = 0; rc == 0 && i < sh.n_pieces; i++)
    checkpoint_bytes += sh.pieces[i].nbytes;
  if (rc == 0 && (o.keep || o.slice > 0)) {
    sh.dst =
        malloc(dst_bytes > 0 ? (size_t)dst_bytes : 1); /* fresh memory: its first touch is part of loading */
    if (sh.dst == NULL) {
      snprintf(msg, sizeof msg, "out of memory for a %llu-byte destination", (unsigned long long)dst_bytes);
      rc = 1;
    }
  }
  if (rc == 0)
    rc = run_reads(m, &sh, &o, bufs, msg, sizeof msg);
  double t_read_end = now_seconds();
  MPI_Barrier(MPI_COMM_WORLD);
  double wall = now_seconds() - t0;
  double my_read = t_read_end - t0 - t_open;
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rc != 0)
    fprintf(stderr, "bench_naive: rank %d: %s\n", rank, msg);
  unsigned long long mine[3] = {(unsigned long long)sh.bytes_read,
                                (unsigned long long)(sh.dst != NULL ? dst_bytes : 0),
                                (unsigned long long)peak_rss_bytes()};
  unsigned long long sums[2] = {0, 0};
  unsigned long long rss_max = 0;
  double read_max = 0.0;
  MPI_Reduce(mine, sums, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&mine[2], &rss_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&my_read, &read_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0 && worst == 0) {
    const char *mode = o.keep ? "keep" : o.slice > 0 ? "slice" : "read";
    double amp = checkpoint_bytes > 0 ? (double)sums[0] / (double)checkpoint_bytes : 0.0;
    printf("{\"program\":\"bench_naive\",\"mode\":\"%s\",\"slice\":%llu,\"world\":%d,\"threads\":%llu,"
           "\"chunk_bytes\":%llu,\"tensors\":%zu,\"checkpoint_bytes\":%llu,\"bytes_read\":%llu,"
           "\"bytes_kept\":%llu,\"read_amplification\":%.4f,\"wall_seconds\":%.6f,\"open_seconds\":%.6f,"
           "\"read_seconds_max\":%.6f,\"peak_rss_bytes_max\":%llu}\n",
           mode, (unsigned long long)o.slice, world, (unsigned long long)o.threads,
           (unsigned long long)o.chunk, sh.n_pieces, (unsigned long long)checkpoint_bytes, sums[0], sums[1],
           amp, wall, t_open, read_max, rss_max);
    fflush(stdout);
    fprintf(stderr,
            "bench_naive: %d rank(s), mode %s: %llu bytes read (%.2fx the checkpoint) in %.3f s, %.2f GB/s\n",
            world, mode, sums[0], amp, wall, wall > 0 ? (double)sums[0] / wall / 1e9 : 0.0);
  }
  free(sh.dst);
  free(sh.pieces);
  free_buffers(bufs, o.threads);
  pthread_mutex_destroy(&sh.mu);
  sl_model_close(m);
  MPI_Finalize();
  return worst != 0 ? 1 : 0;
}
