/*
 * test_load_auto.c — load_strategy auto chooses per file from what the page cache holds, and
 * every choice delivers the same bytes (ctest runs it at 1, 2, 3 and 4 ranks).
 *
 * The llama fixture (copied for the test), at tp = world (pp = 3 at 3 ranks): mapped parameters
 * and row-parallel slices that are copied; bytes against the reference:
 *   resident   rank 0's report names a choice for every file it reads (strategy_choice), each
 *              one mapped or read through the page cache, for the rest at least half resident;
 *   evicted    the first file's pages dropped (fsync + POSIX_FADV_DONTNEED, no privilege needed),
 *              loaded with prefault (nothing mapped): the entry's reason agrees with its resident
 *              share (through the page cache for resident bytes exactly when at least half is);
 *   mapped     evicted again, loaded without prefault: parameters are mappings (files_mapped > 0,
 *              the file's entry mmap, mmap+buffered or mmap+direct), populated from storage.
 * A small Llama-shaped bench model (random bytes, tensors up to 512 KiB), checkpoint layout,
 * dp = world, its first file evicted, loaded with prefault: every parameter equals the tensor's
 * bytes read from the file by this test; at 1 rank, where the file system takes O_DIRECT, the
 * file is read with O_DIRECT ("direct", files_direct >= 1), the resident second file through the
 * page cache; at more ranks the choice agrees with the resident share as above. Evicted again and
 * loaded without prefault, every parameter still equals the file's bytes; at 1 rank, where O_DIRECT
 * is taken, the evicted file's parameters of 256 KiB or more are not mappings (cold: O_DIRECT fills
 * them faster) — its entry reads with O_DIRECT, maps under half of its bytes and says why — while
 * the resident second file's are (bytes_mapped > 0). Then pp = world (tp 1, checkpoint layout:
 * every rank its own layers as whole tensors, the MLP weights 384 KiB), every parameter on every
 * rank equal to the file's bytes: with both files evicted, where O_DIRECT is taken, every rank's
 * record maps under half of its bytes and read a file with O_DIRECT; with both files read back
 * into the page cache, every rank maps more than half of its bytes.
 * Every rank checks its own table; rank 0 checks the report; the outcome is agreed by all.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *LLAMA1 = "model-00001-of-00003.safetensors";
static const char *BENCH1 = "model-00001-of-00002.safetensors";
static const char *BENCH2 = "model-00002-of-00002.safetensors";

/* Whether the file system under dir accepts O_DIRECT. */
static bool takes_o_direct(const char *dir, const char *name) {
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDONLY | O_DIRECT);
  if (fd >= 0)
    close(fd);
  return fd >= 0;
}

/* Rank 0's strategy_choice entry for file `name`, or NULL. */
static const cJSON *entry_for(const cJSON *rep, const char *name) {
  const cJSON *e = NULL;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rep, "strategy_choice")) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
    if (cJSON_IsString(f) && strcmp(f->valuestring, name) == 0)
      return e;
  }
  return NULL;
}

static const char *str_of(const cJSON *e, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static double num_of(const cJSON *e, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

static bool is_one_of(const char *s, const char *const *set) {
  for (; *set != NULL; set++)
    if (strcmp(s, *set) == 0)
      return true;
  return false;
}

typedef enum phase { RESIDENT, EVICTED, MAPPED } phase;

/* The choice agrees with the resident share: through the page cache for resident bytes exactly
 * when at least half of them is (mapped files aside: everything mapped needs no such choice). */
static void check_consistent(const cJSON *e) {
  const char *file = str_of(e, "file"), *strategy = str_of(e, "strategy"), *reason = str_of(e, "reason");
  double resident = num_of(e, "resident");
  CHECKF(*reason != '\0' && num_of(e, "bytes") > 0 && resident >= 0 && resident <= 1,
         "%s: entry without reason, bytes or resident share", file);
  if (strcmp(strategy, "mmap") == 0 || num_of(e, "bytes_mapped") > 0)
    return;
  bool via_cache = strstr(reason, "in the page cache: read through it") != NULL;
  CHECKF(via_cache == (resident >= 0.5), "%s: resident %.3f, reason '%s'", file, resident, reason);
  CHECKF(strcmp(strategy, "direct") != 0 || strstr(reason, "read with O_DIRECT") != NULL, "%s: %s for '%s'",
         file, strategy, reason);
}

static cJSON *parse_report(const char *report) {
  cJSON *rep = report != NULL ? cJSON_Parse(report) : NULL;
  CHECKF(rep != NULL, "no report, or not JSON");
  if (rep != NULL) {
    CHECK_CONTAINS(report, "\"load_strategy\":\"auto\"");
    CHECKF(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(rep, "strategy_choice")) >= 1,
           "strategy_choice lists no file");
  }
  return rep;
}

static void check_llama_report(const char *report, phase ph) {
  cJSON *rep = parse_report(report);
  if (rep == NULL)
    return;
  const cJSON *rank0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rep, "ranks"), 0);
  static const char *const page_cache[] = {"mmap", "mmap+buffered", "buffered", NULL};
  static const char *const mapped[] = {"mmap", "mmap+buffered", "mmap+direct", NULL};
  const cJSON *e = NULL;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rep, "strategy_choice")) {
    check_consistent(e);
    if (ph == RESIDENT)
      CHECKF(is_one_of(str_of(e, "strategy"), page_cache) && num_of(e, "resident") >= 0.5,
             "%s: resident file read with %s (%s)", str_of(e, "file"), str_of(e, "strategy"),
             str_of(e, "reason"));
  }
  if (ph == MAPPED) {
    CHECKF(num_of(rank0, "files_mapped") >= 1, "rank 0 files_mapped %.0f", num_of(rank0, "files_mapped"));
    const cJSON *ev = entry_for(rep, LLAMA1);
    if (ev != NULL)
      CHECKF(is_one_of(str_of(ev, "strategy"), mapped), "evicted file read with %s (%s)",
             str_of(ev, "strategy"), str_of(ev, "reason"));
  }
  cJSON_Delete(rep);
}

static void load_llama(const char *dir, phase ph) {
  int world = lc_world();
  /* No replica (dp 1): rank 0 alone reads what it holds, so parameters can be mappings. 8 heads do
   * not split 3 ways: one pipeline stage per layer instead. */
  lc_case c = {.fixture = dir, .tp = world, .pp = 1, .dp = 1, .extra = {"load_strategy", "auto"}};
  if (world == 3) {
    c.tp = 1;
    c.pp = 3;
  }
  if (ph == EVICTED) {
    c.extra[2] = "prefault";
    c.extra[3] = "true";
  }
  lc_result res;
  lc_run(&c, &res);
  CHECKF(res.status == SL_STATUS_OK, "llama, phase %d: %s", (int)ph, res.message);
  if (res.status == SL_STATUS_OK && lc_rank() == 0)
    check_llama_report(sl_loader_report_json(res.loader), ph);
  lc_result_free(&res);
}

/* Parameter p (checkpoint layout, tp 1: a whole tensor) against the tensor's bytes in the files. */
static void check_tensor(const char *dir, const sl_param *p) {
  for (int f = 1; f <= 2; f++) {
    char path[2048];
    snprintf(path, sizeof path, "%s/model-0000%d-of-00002.safetensors", dir, f);
    int fd = open(path, O_RDONLY);
    uint64_t hlen = 0;
    CHECK(fd >= 0 && pread(fd, &hlen, 8, 0) == 8 && hlen < (1u << 20));
    char *text = calloc(hlen + 1, 1);
    CHECK(text != NULL && pread(fd, text, hlen, 8) == (ssize_t)hlen);
    cJSON *h = cJSON_Parse(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, p->name);
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (cJSON_GetArraySize(offs) == 2) {
      uint64_t a = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
      uint64_t b = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
      uint8_t *want = malloc(b - a + 1);
      CHECKF(b - a == p->nbytes, "%s: %llu bytes, the file has %llu", p->name, (unsigned long long)p->nbytes,
             (unsigned long long)(b - a));
      CHECK(pread(fd, want, b - a, (off_t)(8 + hlen + a)) == (ssize_t)(b - a));
      CHECKF(b - a == p->nbytes && memcmp(want, p->data, b - a) == 0, "%s differs from the file", p->name);
      free(want);
      f = 3;
    } else {
      CHECKF(f < 2, "%s is in neither file", p->name);
    }
    cJSON_Delete(h);
    free(text);
    if (fd >= 0)
      close(fd);
  }
}

/* At 1 rank without prefault: the evicted file's large parameters went to O_DIRECT, the resident
 * file's stayed mappings. */
static void check_cold_not_mapped(const cJSON *rep) {
  const cJSON *ev = entry_for(rep, BENCH1), *warm = entry_for(rep, BENCH2);
  CHECKF(ev != NULL && strstr(str_of(ev, "strategy"), "direct") != NULL &&
             num_of(ev, "bytes_mapped") * 2 < num_of(ev, "bytes") &&
             strstr(str_of(ev, "reason"), "cold parameters of 256 KiB or more are not mapped") != NULL,
         "evicted bench file: %s, %.0f of %.0f bytes mapped: %s", str_of(ev, "strategy"),
         num_of(ev, "bytes_mapped"), num_of(ev, "bytes"), str_of(ev, "reason"));
  CHECKF(warm != NULL && num_of(warm, "bytes_mapped") > 0, "resident bench file: %s, %.0f bytes mapped: %s",
         str_of(warm, "strategy"), num_of(warm, "bytes_mapped"), str_of(warm, "reason"));
}

/* The bench model's loads: dp = world with prefault (first file evicted), the same without
 * prefault, and pp = world (every rank its own layers, whole tensors) with both files cold or
 * both resident. */
typedef enum bench_case { BENCH_PREFAULT, BENCH_MAPPED, BENCH_PP_COLD, BENCH_PP_WARM } bench_case;

/* On rank 0, every rank's record of a pp = world load: cold (where O_DIRECT is taken), under half
 * of its bytes mapped and a file read with O_DIRECT; warm, more than half mapped. */
static void check_pp_ranks(const cJSON *rep, bool cold, bool o_direct) {
  int n = 0;
  const cJSON *rk = NULL;
  cJSON_ArrayForEach(rk, cJSON_GetObjectItemCaseSensitive(rep, "ranks")) {
    double mapped = num_of(rk, "bytes_mapped"), local = num_of(rk, "bytes_local");
    n++;
    if (cold && o_direct)
      CHECKF(mapped * 2 < local && num_of(rk, "files_direct") >= 1,
             "cold, rank %.0f: %.0f of %.0f bytes mapped, %.0f files with O_DIRECT", num_of(rk, "rank"),
             mapped, local, num_of(rk, "files_direct"));
    if (!cold)
      CHECKF(mapped * 2 > local, "warm, rank %.0f: %.0f of %.0f bytes mapped", num_of(rk, "rank"), mapped,
             local);
  }
  CHECKF(n == lc_world(), "the report has %d rank records for %d ranks", n, lc_world());
}

static void load_bench(const char *dir, bool o_direct, bench_case bc) {
  bool pp = bc == BENCH_PP_COLD || bc == BENCH_PP_WARM;
  char world[16];
  snprintf(world, sizeof world, "%d", lc_world());
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  const char *const keys[][2] = {{"layout", "checkpoint"},
                                 {"load_strategy", "auto"},
                                 {"prefault", bc == BENCH_PREFAULT ? "true" : "false"},
                                 {pp ? "pp" : "dp", world}};
  CHECK(sl_config_set(cfg, "model", dir) == SL_STATUS_OK);
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    CHECK(sl_config_set(cfg, keys[k][0], keys[k][1]) == SL_STATUS_OK);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "bench load: %s", l != NULL ? sl_loader_error(l) : sl_config_error(cfg));
  size_t n = st == SL_STATUS_OK ? sl_loader_param_count(l) : 0;
  CHECKF(st != SL_STATUS_OK || n > (pp ? 100u / (size_t)lc_world() : 100u), "bench: %zu parameters", n);
  for (size_t i = 0; i < n; i++)
    check_tensor(dir, sl_loader_param(l, i));
  cJSON *rep = st == SL_STATUS_OK && lc_rank() == 0 ? parse_report(sl_loader_report_json(l)) : NULL;
  const cJSON *e = NULL;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rep, "strategy_choice")) check_consistent(e);
  const cJSON *ev = rep != NULL ? entry_for(rep, BENCH1) : NULL;
  if (rep != NULL && pp)
    check_pp_ranks(rep, bc == BENCH_PP_COLD, o_direct);
  if (rep != NULL && o_direct && lc_world() == 1 && bc == BENCH_MAPPED)
    check_cold_not_mapped(rep);
  if (rep != NULL && o_direct && lc_world() == 1 && bc == BENCH_PREFAULT) {
    const cJSON *rank0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rep, "ranks"), 0);
    CHECKF(ev != NULL && strcmp(str_of(ev, "strategy"), "direct") == 0, "evicted bench file read with %s: %s",
           str_of(ev, "strategy"), str_of(ev, "reason"));
    CHECKF(num_of(rank0, "files_direct") >= 1, "rank 0 files_direct %.0f", num_of(rank0, "files_direct"));
  }
  cJSON_Delete(rep);
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
}

/* Rank 0 reads dir/name through the page cache (it becomes resident); every rank waits. */
static void make_resident(const char *dir, const char *name) {
  if (lc_rank() == 0) {
    char path[2048], buf[1 << 16];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY);
    CHECKF(fd >= 0, "cannot open %s", path);
    while (fd >= 0 && read(fd, buf, sizeof buf) > 0)
      ;
    if (fd >= 0)
      close(fd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  char *dir = lc_tmpdir("auto");
  if (dir != NULL && lc_make_variant("llama", dir, "")) {
    load_llama(dir, RESIDENT);
    lc_evict(dir, LLAMA1);
    load_llama(dir, EVICTED);
    lc_evict(dir, LLAMA1);
    load_llama(dir, MAPPED);
  }
  lc_tmpdir_remove(dir);
  dir = lc_tmpdir("auto_bench");
  if (dir != NULL && lc_make_variant("bench", dir, "--size 24M")) {
    int od = lc_rank() == 0 ? takes_o_direct(dir, BENCH1) : 0;
    MPI_Bcast(&od, 1, MPI_INT, 0, MPI_COMM_WORLD);
    lc_evict(dir, BENCH1);
    load_bench(dir, od != 0, BENCH_PREFAULT);
    lc_evict(dir, BENCH1);
    load_bench(dir, od != 0, BENCH_MAPPED);
    lc_evict(dir, BENCH1);
    lc_evict(dir, BENCH2);
    load_bench(dir, od != 0, BENCH_PP_COLD);
    make_resident(dir, BENCH1);
    make_resident(dir, BENCH2);
    load_bench(dir, od != 0, BENCH_PP_WARM);
  }
  lc_tmpdir_remove(dir);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
