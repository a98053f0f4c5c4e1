/*
 * bench_rowread.c — how to read row-parallel slices: every rank of a tp group needs a column
 * block of every row of a set of row-parallel tensors ([rows, row_bytes] each, e.g. o_proj and
 * down_proj), rank r the columns [r, r + 1) * row_bytes / tp. Four ways, each timed from a
 * barrier to a barrier with the slices landing in one preallocated, touched buffer per rank:
 *   perrow    one pread per row (what the loader did before two-phase reads);
 *   uring     the same reads batched through io_uring, up to 256 in flight per submit;
 *   mpiio     Open MPI's MPI-IO: MPI_File_read_all with a subarray file view per tensor;
 *   twophase  each rank preads a contiguous block of whole rows (1/tp of the tensor, 16 MiB
 *             reads), then MPI_Alltoallw with vector types swaps column blocks, and each rank
 *             copies its received columns into place (what the loader does now);
 *   pack      two-phase with the columns packed per destination by memcpy and a plain
 *             MPI_Alltoallv of bytes instead of vector datatypes.
 * Every method's bytes are checked (every 97th byte of each row) against the file's content
 * function (byte i of the file is (i * 2654435761) >> 24 & 0xff), so a wrong method cannot look
 * fast.
 *
 * The file (about --mib MiB, default 480: 8 tensors [4096, 8192 B] + 2 tensors [4096, 28672 B],
 * Llama-8B-like o_proj / down_proj rows) is written once by rank 0 if missing. --cold drops the
 * page cache before each method (root only: sync; echo 3 > /proc/sys/vm/drop_caches).
 *
 * Build: mpicc -O2 -std=c11 scripts/bench_rowread.c -luring -o build/bench_rowread
 * Usage: mpirun -np TP build/bench_rowread FILE [--cold] [--methods perrow,uring,mpiio,twophase,pack]
 * Prints one line per method on rank 0: seconds, GB/s of useful bytes, reads per rank.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NT 10
static const uint64_t t_rows[NT] = {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096};
static const uint64_t t_row[NT] = {8192, 8192, 8192, 8192, 8192, 8192, 8192, 8192, 28672, 28672};
static uint64_t t_off[NT];
static uint64_t file_bytes;
static int rank, tp;

static uint8_t value(uint64_t i) { return (uint8_t)((i * 2654435761ull) >> 24); }

static double now(void) { return MPI_Wtime(); }

static void make_file(const char *path) {
  uint64_t off = 0;
  for (int t = 0; t < NT; t++) {
    t_off[t] = off;
    off += t_rows[t] * t_row[t];
  }
  file_bytes = off;
  if (rank != 0 || access(path, R_OK) == 0)
    return;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  uint8_t *buf = malloc(1 << 20);
  for (uint64_t a = 0; a < file_bytes; a += 1 << 20) {
    for (uint64_t i = 0; i < (1 << 20); i++)
      buf[i] = value(a + i);
    if (write(fd, buf, 1 << 20) != 1 << 20)
      perror("write");
  }
  close(fd);
  free(buf);
}

/* The rank's slice of tensor t: rows x rb bytes at dst + slice_off[t]. */
static uint64_t slice_off[NT], slice_total;
static uint64_t rb_of(int t) { return t_row[t] / (uint64_t)tp; }

static long perrow(int fd, uint8_t *dst) {
  long ops = 0;
  for (int t = 0; t < NT; t++)
    for (uint64_t r = 0; r < t_rows[t]; r++, ops++)
      if (pread(fd, dst + slice_off[t] + r * rb_of(t), rb_of(t), t_off[t] + r * t_row[t] + rank * rb_of(t)) < 0)
        perror("pread");
  return ops;
}

static long uring(int fd, uint8_t *dst) {
  struct io_uring ring;
  io_uring_queue_init(256, &ring, 0);
  long ops = 0, inflight = 0;
  for (int t = 0; t < NT; t++) {
    for (uint64_t r = 0; r < t_rows[t]; r++, ops++) {
      if (inflight == 256) {
        io_uring_submit_and_wait(&ring, 1);
        struct io_uring_cqe *cqe;
        while (io_uring_peek_cqe(&ring, &cqe) == 0) {
          io_uring_cqe_seen(&ring, cqe);
          inflight--;
        }
      }
      struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fd, dst + slice_off[t] + r * rb_of(t), (unsigned)rb_of(t),
                         t_off[t] + r * t_row[t] + rank * rb_of(t));
      inflight++;
    }
  }
  while (inflight > 0) {
    struct io_uring_cqe *cqe;
    io_uring_submit_and_wait(&ring, 1);
    while (io_uring_peek_cqe(&ring, &cqe) == 0) {
      io_uring_cqe_seen(&ring, cqe);
      inflight--;
    }
  }
  io_uring_queue_exit(&ring);
  return ops;
}

static long mpiio(const char *path, uint8_t *dst) {
  MPI_File fh;
  MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
  for (int t = 0; t < NT; t++) {
    int sizes[2] = {(int)t_rows[t], (int)t_row[t]};
    int sub[2] = {(int)t_rows[t], (int)rb_of(t)};
    int start[2] = {0, rank * (int)rb_of(t)};
    MPI_Datatype ft;
    MPI_Type_create_subarray(2, sizes, sub, start, MPI_ORDER_C, MPI_BYTE, &ft);
    MPI_Type_commit(&ft);
    MPI_File_set_view(fh, (MPI_Offset)t_off[t], MPI_BYTE, ft, "native", MPI_INFO_NULL);
    MPI_File_read_all(fh, dst + slice_off[t], (int)(t_rows[t] * rb_of(t)), MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_Type_free(&ft);
  }
  MPI_File_close(&fh);
  return -1; /* not visible from here */
}

static double t_read; /* seconds of twophase spent in preads */

/* pack: columns packed per destination by memcpy, then a plain MPI_Alltoallv of bytes. */
static long twophase(int fd, uint8_t *dst, uint8_t *send, uint8_t *recv, int pack) {
  long ops = 0;
  t_read = 0;
  for (int t = 0; t < NT; t++) {
    uint64_t rows = t_rows[t], S = t_row[t], rb = rb_of(t);
    uint64_t lo = rows * rank / tp, hi = rows * (rank + 1) / tp;
    double t0 = now();
    for (uint64_t a = lo * S; a < hi * S; a += 16u << 20, ops++) {
      uint64_t n = hi * S - a < (16u << 20) ? hi * S - a : 16u << 20;
      if (pread(fd, send + (a - lo * S), n, t_off[t] + a) < 0)
        perror("pread");
    }
    t_read += now() - t0;
    if (pack) {
      int sc[64], sd[64], rc[64], rd[64];
      for (int s = 0; s < tp; s++) {
        for (uint64_t r = 0; r < hi - lo; r++)
          memcpy(recv + s * (hi - lo) * rb + r * rb, send + r * S + s * rb, rb);
        sc[s] = (int)((hi - lo) * rb);
        sd[s] = (int)(s * (hi - lo) * rb);
        uint64_t slo = rows * s / tp, shi = rows * (s + 1) / tp;
        rc[s] = (int)((shi - slo) * rb);
        rd[s] = (int)(slo * rb);
      }
      MPI_Alltoallv(recv, sc, sd, MPI_BYTE, dst + slice_off[t], rc, rd, MPI_BYTE, MPI_COMM_WORLD);
      continue;
    }
    int sc[64], sd[64], rc[64], rd[64];
    MPI_Datatype st[64], rt[64];
    for (int s = 0; s < tp; s++) {
      MPI_Type_vector((int)(hi - lo), (int)rb, (int)S, MPI_BYTE, &st[s]);
      MPI_Type_commit(&st[s]);
      sc[s] = hi > lo;
      sd[s] = s * (int)rb;
      uint64_t slo = rows * s / tp, shi = rows * (s + 1) / tp;
      rt[s] = MPI_BYTE;
      rc[s] = (int)((shi - slo) * rb);
      rd[s] = (int)(slo * rb); /* packed rows land in row order: the slice itself */
    }
    MPI_Alltoallw(send, sc, sd, st, dst + slice_off[t], rc, rd, rt, MPI_COMM_WORLD);
    for (int s = 0; s < tp; s++)
      MPI_Type_free(&st[s]);
  }
  return ops;
}

static int check(const uint8_t *dst) {
  for (int t = 0; t < NT; t++)
    for (uint64_t r = 0; r < t_rows[t]; r++)
      for (uint64_t c = 0; c < rb_of(t); c += 97)
        if (dst[slice_off[t] + r * rb_of(t) + c] != value(t_off[t] + r * t_row[t] + rank * rb_of(t) + c))
          return 1;
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &tp);
  if (argc < 2 || tp > 64) {
    if (rank == 0)
      fprintf(stderr, "usage: bench_rowread FILE [--cold] [--methods LIST]\n");
    MPI_Finalize();
    return 2;
  }
  const char *path = argv[1];
  int cold = 0;
  const char *methods = "perrow,uring,mpiio,twophase";
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--cold") == 0)
      cold = 1;
    else if (strcmp(argv[i], "--methods") == 0 && i + 1 < argc)
      methods = argv[++i];
  }
  make_file(path);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int t = 0; t < NT; t++) {
    slice_off[t] = slice_total;
    slice_total += t_rows[t] * rb_of(t);
  }
  uint64_t block = 0;
  for (int t = 0; t < NT; t++)
    block = t_rows[t] * t_row[t] / tp + t_row[t] > block ? t_rows[t] * t_row[t] / tp + t_row[t] : block;
  uint8_t *dst = malloc(slice_total), *send = malloc(block), *packed = malloc(block);
  memset(dst, 1, slice_total);
  memset(send, 1, block);
  memset(packed, 1, block);
  char list[256];
  snprintf(list, sizeof list, "%s", methods);
  for (char *m = strtok(list, ","); m != NULL; m = strtok(NULL, ",")) {
    if (cold && rank == 0) {
      sync();
      int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
      if (fd < 0 || write(fd, "3", 1) != 1)
        perror("drop_caches");
      if (fd >= 0)
        close(fd);
    }
    memset(dst, 0, slice_total);
    int fd = open(path, O_RDONLY);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    long ops = strcmp(m, "perrow") == 0 ? perrow(fd, dst)
               : strcmp(m, "uring") == 0 ? uring(fd, dst)
               : strcmp(m, "mpiio") == 0 ? mpiio(path, dst)
               : strcmp(m, "pack") == 0  ? twophase(fd, dst, send, packed, 1)
                                         : twophase(fd, dst, send, NULL, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    double sec = now() - t0;
    close(fd);
    int bad = check(dst), anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      printf("%-9s tp=%d %s %.3f s  %.2f GB/s useful  reads/rank %ld  (%.2f per MiB)%s\n", m, tp,
             cold ? "cold" : "warm", sec, (double)file_bytes / sec / 1e9, ops,
             ops < 0 ? -1.0 : (double)ops / ((double)slice_total / (1 << 20)), anybad ? "  WRONG BYTES" : "");
    if (rank == 0 && (strcmp(m, "twophase") == 0 || strcmp(m, "pack") == 0))
      printf("          of which preads %.3f s (rank 0)\n", t_read);
  }
  free(dst);
  free(send);
  free(packed);
  MPI_Finalize();
  return 0;
}
