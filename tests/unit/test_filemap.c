/*
 * test_filemap.c — engine/filemap.c, the zero-copy parameters of the mmap load strategy, on small
 * files the test writes itself and a hand-built catalog, schedule and rank plan:
 *   - a parameter made of one file range (src_off inside a tensor) and one fused from two ranges
 *     with a common page phase: whole pages mapped in place, edge pages read, padding left zero;
 *     the bytes equal the file's, the pointer keeps the page phase, the counters
 *     (params_mapped, regions, bytes_mapped, bytes_edges) equal the hand-computed values;
 *   - private writes: writing a mapped parameter never reaches the file;
 *   - fallbacks (not mapped, pointer untouched): strided copies, shared pieces (group), pieces read
 *     by another rank, a piece feeding two copies, mismatched page phases, a phase that breaks the
 *     8-byte alignment, no whole page, aliases, caller-owned buffers (skip), zero size, no copies;
 *   - sl__filemap_populate, and its error on a truncated file (naming file and offset);
 *   - failures: a file whose size changed since the catalog was built, a missing file — the error
 *     names the file and nothing stays mapped.
 */
#include "check.h"
#include "engine/filemap.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t P; /* page size */

static uint8_t file_byte(uint32_t file, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(file + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 29;
  return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

static char *write_data_file(const char *dir, const char *name, uint32_t id, uint64_t size) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *path = malloc(n);
  snprintf(path, n, "%s/%s", dir, name);
  uint8_t *buf = malloc(size);
  for (uint64_t i = 0; i < size; i++)
    buf[i] = file_byte(id, i);
  CHECK(sl_test_write_file(path, buf, size) == 0);
  free(buf);
  return path;
}

/* Parameter bytes [dst, dst + len) must equal file bytes [foff, foff + len). */
static void expect_file_bytes(const uint8_t *p, uint64_t dst, uint32_t file, uint64_t foff, uint64_t len,
                              const char *what) {
  uint64_t bad = len;
  for (uint64_t i = 0; i < len; i++)
    if (p[dst + i] != file_byte(file, foff + i)) {
      bad = i;
      break;
    }
  CHECKF(bad == len, "%s: byte %llu of [%llu, +%llu) differs from file offset %llu", what,
         (unsigned long long)(dst + bad), (unsigned long long)dst, (unsigned long long)len,
         (unsigned long long)(foff + bad));
}

enum { MAXT = 32, MAXC = 32, MAXL = 32 };

typedef struct fixture {
  sl__cat_file files[2];
  sl__cat_tensor tensors[MAXT];
  sl__catalog cat;
  sl__piece pieces[MAXC];
  sl__schedule s;
  sl__lparam lp[MAXL];
  sl__copy copies[MAXC];
  sl__rank_plan plan;
  bool skip[MAXL];
  void *ptr[MAXL];
  bool mapped[MAXL];
} fixture;

static fixture F;

static uint32_t add_tensor(uint32_t file, uint64_t offset, uint64_t nbytes) {
  uint32_t t = (uint32_t)F.cat.n_tensors++;
  F.tensors[t] = (sl__cat_tensor){.name = "t", .file = file, .offset = offset, .nbytes = nbytes};
  return t;
}

static uint32_t add_param(uint64_t nbytes) {
  uint32_t i = (uint32_t)F.plan.n_lparams++;
  F.lp[i] = (sl__lparam){.mparam = i, .ndim = 1, .nbytes = nbytes, .alias_of = SL_NONE};
  F.lp[i].shape[0] = nbytes;
  return i;
}

/* A copy of `len` bytes from tensor t at src_off into parameter i at dst_off; a piece of its own
 * read by `reader` (group SL_NONE unless given) unless piece != SL_NONE. */
static uint32_t add_copy(uint32_t i, uint32_t t, uint64_t src_off, uint64_t len, uint64_t dst_off,
                         uint64_t rows, uint32_t reader, uint32_t group, uint32_t piece) {
  if (piece == SL_NONE) {
    piece = (uint32_t)F.s.n_pieces++;
    F.pieces[piece] = (sl__piece){.tensor = t,
                                  .reader = reader,
                                  .group = group,
                                  .n_members = 1,
                                  .src_off = src_off,
                                  .src_stride = len * 2,
                                  .row_bytes = len,
                                  .rows = rows,
                                  .nbytes = len * rows};
  }
  uint32_t c = (uint32_t)F.plan.n_copies++;
  F.copies[c] = (sl__copy){.lparam = i,
                           .tensor = t,
                           .unit = SL_NONE,
                           .src_off = src_off,
                           .src_stride = len * 2,
                           .row_bytes = len,
                           .rows = rows,
                           .dst_off = dst_off,
                           .dst_stride = len,
                           .piece = piece};
  return piece;
}

int main(void) {
  P = (uint64_t)sysconf(_SC_PAGESIZE);
  char *dir = sl_test_mkdtemp("filemap");
  CHECK(dir != NULL);
  if (dir == NULL)
    return sl_test_finish();
  const uint64_t size0 = 12 * P, size1 = 4 * P;
  char *path0 = write_data_file(dir, "a.safetensors", 0, size0);
  char *path1 = write_data_file(dir, "b.safetensors", 1, size1);
  F.files[0] = (sl__cat_file){.path = path0, .name = "a.safetensors", .size = size0};
  F.files[1] = (sl__cat_file){.path = path1, .name = "b.safetensors", .size = size1};
  F.cat.n_files = 2;
  F.cat.files = F.files;
  F.cat.tensors = F.tensors;
  F.s.world = 2;
  F.s.pieces = F.pieces;
  F.plan.ctx.rank = 0;
  F.plan.lparams = F.lp;
  F.plan.copies = F.copies;

  /* L0: one range, tensor at offset 0 of file 0, src_off P: file [P, 3P + 100). Phase 0:
   * reservation [0, 2P + 100): pages [0, 2P) mapped, edge [2P, 2P + 100) read. */
  uint32_t tbig = add_tensor(0, 0, size0);
  uint32_t L0 = add_param(2 * P + 100);
  add_copy(L0, tbig, P, 2 * P + 100, 0, 1, 0, SL_NONE, SL_NONE);
  /* L1: fused from two ranges, phase 64, plus 24 bytes of padding at the end:
   *   A: file [3P + 64, 5P + 1000) → param [0, 2P + 936): reservation [64, 2P + 1000):
   *      page [P, 2P) mapped; edges [64, P) and [2P, 2P + 1000) read;
   *   B: file [6P + 1000, 9P + 1000) → param [2P + 936, 5P + 936): reservation [2P + 1000, 5P + 1000):
   *      pages [3P, 5P) mapped; edges [2P + 1000, 3P) and [5P, 5P + 1000) read. */
  uint32_t tA = add_tensor(0, 3 * P + 64, 2 * P + 936);
  uint32_t tB = add_tensor(0, 6 * P + 1000 - 200, 3 * P + 200);
  uint32_t L1 = add_param(5 * P + 936 + 24);
  add_copy(L1, tA, 0, 2 * P + 936, 0, 1, 0, SL_NONE, SL_NONE);
  add_copy(L1, tB, 200, 3 * P, 2 * P + 936, 1, 0, SL_NONE, SL_NONE);
  /* Fallbacks, each big enough to hold whole pages but for the one reason given. */
  uint32_t L2 = add_param(4 * P); /* strided: 2 rows */
  add_copy(L2, tbig, 0, 2 * P, 0, 2, 0, SL_NONE, SL_NONE);
  uint32_t L3 = add_param(2 * P); /* shared piece: broadcast to a group */
  add_copy(L3, tbig, 0, 2 * P, 0, 1, 0, 0, SL_NONE);
  uint32_t L4 = add_param(2 * P); /* read by rank 1 */
  add_copy(L4, tbig, 0, 2 * P, 0, 1, 1, SL_NONE, SL_NONE);
  uint32_t L5 = add_param(4 * P); /* phases 0 and 8 */
  add_copy(L5, tbig, 0, 2 * P, 0, 1, 0, SL_NONE, SL_NONE);
  add_copy(L5, tbig, 4 * P + 8, 2 * P, 2 * P, 1, 0, SL_NONE, SL_NONE);
  uint32_t L6 = add_param(3 * P); /* phase 4: not 8-byte aligned */
  add_copy(L6, tbig, 4, 3 * P, 0, 1, 0, SL_NONE, SL_NONE);
  uint32_t L7 = add_param(P - 8); /* no whole page: [8, P) */
  add_copy(L7, tbig, 8, P - 8, 0, 1, 0, SL_NONE, SL_NONE);
  uint32_t L8 = add_param(2 * P); /* alias of L0 */
  add_copy(L8, tbig, 0, 2 * P, 0, 1, 0, SL_NONE, SL_NONE);
  F.lp[L8].alias_of = L0;
  uint32_t L9 = add_param(2 * P); /* the caller's own buffer */
  add_copy(L9, tbig, 0, 2 * P, 0, 1, 0, SL_NONE, SL_NONE);
  F.skip[L9] = true;
  uint32_t L10 = add_param(0); /* zero size */
  add_copy(L10, tbig, 0, 0, 0, 1, 0, SL_NONE, SL_NONE);
  uint32_t L11 = add_param(2 * P); /* no copies */
  uint32_t L12 = add_param(2 * P); /* a piece feeding two copies (L12 and L13) */
  uint32_t L13 = add_param(2 * P);
  uint32_t shared = add_copy(L12, tbig, 0, 2 * P, 0, 1, 0, SL_NONE, SL_NONE);
  add_copy(L13, tbig, 0, 2 * P, 0, 1, 0, SL_NONE, shared);
  /* L14: a whole tensor of file 1 (for the truncation test): 2 pages, phase 0. */
  uint32_t t1 = add_tensor(1, P, 2 * P);
  uint32_t L14 = add_param(2 * P);
  add_copy(L14, t1, 0, 2 * P, 0, 1, 0, SL_NONE, SL_NONE);

  void *const sentinel = (void *)&F;
  for (size_t i = 0; i < F.plan.n_lparams; i++)
    F.ptr[i] = sentinel;
  sl__filemaps maps;
  sl__err err;
  sl__err_clear(&err);
  sl_status st =
      sl__filemap_params(&F.cat, &F.s, &F.plan, F.skip, SL_STRATEGY_MMAP, NULL, F.ptr, F.mapped, &maps, &err);
  CHECKF(st == SL_STATUS_OK, "filemap: %s", err.msg);
  if (st != SL_STATUS_OK)
    return sl_test_finish();

  /* Which parameters are mapped. */
  for (uint32_t i = 0; i < F.plan.n_lparams; i++) {
    bool want = i == L0 || i == L1 || i == L14;
    CHECKF(F.mapped[i] == want, "param %u mapped %d, want %d", i, F.mapped[i], want);
    if (!want)
      CHECKF(F.ptr[i] == sentinel, "param %u: pointer changed though not mapped", i);
  }
  CHECK(!F.mapped[L11] && F.ptr[L11] == sentinel);
  CHECK_EQ_U64(maps.params_mapped, 3);
  CHECK_EQ_U64(maps.n_regions, 3);
  /* Mapped: L0 2P, L1 P + 2P, L14 2P. Edges: L0 100; L1 (P - 64) + 1000 + (P - 1000) + 1000. */
  CHECK_EQ_U64(maps.bytes_mapped, 7 * P);
  CHECK_EQ_U64(maps.bytes_edges, 100 + (P - 64) + 1000 + (P - 1000) + 1000);
  /* Page phases and alignment. */
  CHECK_EQ_U64((uintptr_t)F.ptr[L0] % P, 0);
  CHECK_EQ_U64((uintptr_t)F.ptr[L1] % P, 64);
  CHECK_EQ_U64((uintptr_t)F.ptr[L1] % SL_FILEMAP_ALIGN, 0);

  /* Contents. */
  const uint8_t *p0 = F.ptr[L0];
  const uint8_t *p1 = F.ptr[L1];
  sl__err_clear(&err);
  CHECK(sl__filemap_populate(p0, 2 * P + 100, path0, P, &err) == SL_STATUS_OK);
  CHECK(sl__filemap_populate(p1, 5 * P + 960, path0, 3 * P + 64, &err) == SL_STATUS_OK);
  CHECK(sl__filemap_populate(p1, 0, path0, 0, &err) == SL_STATUS_OK);
  expect_file_bytes(p0, 0, 0, P, 2 * P + 100, "L0");
  expect_file_bytes(p1, 0, 0, 3 * P + 64, 2 * P + 936, "L1 part A");
  expect_file_bytes(p1, 2 * P + 936, 0, 6 * P + 1000, 3 * P, "L1 part B");
  bool pad_zero = true;
  for (uint64_t i = 5 * P + 936; i < 5 * P + 960; i++)
    pad_zero = pad_zero && p1[i] == 0;
  CHECK(pad_zero);
  expect_file_bytes(F.ptr[L14], 0, 1, P, 2 * P, "L14");

  /* Private writes: the parameter changes, the file does not. */
  uint8_t *w0 = F.ptr[L0];
  uint8_t *w1 = F.ptr[L1];
  memset(w0, 0xAB, P + 17);           /* a mapped page and part of the next */
  memset(w1 + 3 * P - 64, 0xCD, 300); /* inside L1's mapped page [3P, 4P) of the reservation */
  w0[2 * P + 50] = (uint8_t)~file_byte(0, 3 * P + 50); /* an edge byte */
  CHECK(w0[0] == 0xAB && w0[P + 16] == 0xAB && w1[3 * P - 64] == 0xCD);
  size_t flen = 0;
  uint8_t *fb = (uint8_t *)sl_test_read_file(path0, &flen);
  CHECK(fb != NULL && flen == size0);
  bool same = fb != NULL;
  for (uint64_t i = 0; fb != NULL && i < size0; i++)
    same = same && fb[i] == file_byte(0, i);
  CHECKF(same, "the file changed after writes to mapped parameters");
  free(fb);
  /* The untouched rest of the parameter still shows the file. */
  expect_file_bytes(p0, P + 17, 0, 2 * P + 17, P - 17, "L0 after the write");

  /* Populate on a truncated file: an error naming the file and offset, not a crash. */
  CHECK(truncate(path1, 0) == 0);
  sl__err_clear(&err);
  st = sl__filemap_populate((const uint8_t *)F.ptr[L14] + P, P, path1, 2 * P, &err);
  CHECK(st == SL_STATUS_IO);
  char want[1024];
  snprintf(want, sizeof want,
           "read of %s at offset %llu (%llu bytes, mapped) failed: I/O error or file truncated", path1,
           (unsigned long long)(2 * P), (unsigned long long)P);
  CHECK_STR(err.msg, want);
  sl__filemaps_free(&maps);
  CHECK(maps.regions == NULL && maps.n_regions == 0 && maps.params_mapped == 0);

  /* The catalog no longer matches file 1 (size 0 now): refused, naming the file; nothing mapped. */
  for (size_t i = 0; i < F.plan.n_lparams; i++) {
    F.ptr[i] = sentinel;
    F.mapped[i] = false;
  }
  sl__err_clear(&err);
  st =
      sl__filemap_params(&F.cat, &F.s, &F.plan, F.skip, SL_STRATEGY_MMAP, NULL, F.ptr, F.mapped, &maps, &err);
  CHECK(st == SL_STATUS_IO);
  snprintf(want, sizeof want, "%s changed since its header was read (size 0, expected %llu)", path1,
           (unsigned long long)size1);
  CHECK_STR(err.msg, want);
  bool none = true;
  for (size_t i = 0; i < F.plan.n_lparams; i++)
    none = none && !F.mapped[i] && (F.ptr[i] == sentinel || F.ptr[i] == NULL);
  CHECK(none);
  CHECK(maps.regions == NULL && maps.n_regions == 0);

  /* A missing file. */
  CHECK(unlink(path1) == 0);
  sl__err_clear(&err);
  st =
      sl__filemap_params(&F.cat, &F.s, &F.plan, F.skip, SL_STRATEGY_MMAP, NULL, F.ptr, F.mapped, &maps, &err);
  CHECK(st == SL_STATUS_IO);
  snprintf(want, sizeof want, "cannot open %s: No such file or directory", path1);
  CHECK_STR(err.msg, want);
  CHECK(maps.regions == NULL);

  /* Without the file-1 parameter everything else maps again. */
  F.skip[L14] = true;
  sl__err_clear(&err);
  for (size_t i = 0; i < F.plan.n_lparams; i++)
    F.mapped[i] = false;
  st =
      sl__filemap_params(&F.cat, &F.s, &F.plan, F.skip, SL_STRATEGY_MMAP, NULL, F.ptr, F.mapped, &maps, &err);
  CHECKF(st == SL_STATUS_OK, "%s", err.msg);
  CHECK_EQ_U64(maps.params_mapped, 2);
  CHECK_EQ_U64(maps.bytes_mapped, 5 * P);
  if (st == SL_STATUS_OK)
    expect_file_bytes(F.ptr[L1], 2 * P + 936, 0, 6 * P + 1000, 3 * P, "L1 again");
  sl__filemaps_free(&maps);

  sl_test_rmtree(dir);
  free(path0);
  free(path1);
  free(dir);
  return sl_test_finish();
}
