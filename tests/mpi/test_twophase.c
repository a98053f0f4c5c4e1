/*
 * test_twophase.c — two-phase reads of row-parallel tensors (docs/spec/DESIGN.md §3): at tp > 1
 * the ranks needing a column block of o_proj / down_proj each read a block of whole rows and swap
 * column blocks. Every case is byte-exact on every rank against the independent reference and its
 * report is checked against the reference's cluster figures (load_check.c: read amplification
 * 1.00, bytes received = sum needed - distinct + bytes read for others). Here, in addition:
 *   - the exchanges happen (schedule.exchanges > 0, bytes_exchanged > 0) at tp > 1, never at tp 1;
 *   - no row-by-row reads: the read operations of all ranks are at most one per piece plus one
 *     per bucket (per bucket and reader with small buckets, where exchange rounds are many);
 *     a row-by-row read of the row-parallel slices alone would take more;
 *   - a small bucket (2 KiB, with the smallest staging cap, 1 MiB) forces several exchange rounds per
 *     tensor, still byte-exact;
 *   - with `two_phase_reads false` there is no exchange at any tp, still byte-exact (the per-piece
 *     path: rows merged across small gaps);
 *   - bytes_read_for_others is computed here from the checkpoint alone: each member of an
 *     exchange keeps 1/tp of the rows it reads (its column block), so of every row-parallel
 *     weight (o_proj, down_proj) a fraction 1 - 1/tp is read for others, whatever dp.
 * Layouts by world size: 1 and 3 ranks tp 1 (and tp 3 is refused by the fixture's heads);
 * 2 ranks tp 2; 4 ranks tp 4 and tp 2 dp 2.
 * These cases load with `load_strategy mmap`: an explicit strategy keeps two-phase reads for every
 * file, warm or cold (the report's two_phase true, "load_strategy mmap" its reason).
 * Under `load_strategy auto` two-phase reads are decided per file (engine/twophase_choice.h): at
 * tp = world (2 or 4 ranks), a fresh copy of the fixture (every file in the page cache) with its
 * second file evicted (fsync + POSIX_FADV_DONTNEED): byte-exact on every rank; the exchanges are
 * exactly the row-parallel tensors of the cold file (none of the resident ones: their slices are
 * copied out of the page cache); rank 0's report says per file two_phase and why, each decision
 * agreeing with its reason (a file whose pages something else on the machine dropped meanwhile is
 * cold too); and the row copies take no read operation per row. On a file system that keeps
 * evicted pages (tmpfs) every file is resident: no exchange at all.
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
#include <sys/mman.h>
#include <unistd.h>

static const char *COLD = "model-00002-of-00003.safetensors";

/* Bytes of the llama fixture's row-parallel weights (o_proj, down_proj), from its headers; *in_file
 * (when not NULL): how many of those tensors the file named `file` holds. */
static uint64_t row_parallel_bytes_of(const char *file, int *in_file) {
  char path[1024];
  lc_fixture_path("llama", path, sizeof path);
  if (in_file != NULL)
    *in_file = 0;
  sl_model *m = NULL;
  char *error = NULL;
  uint64_t sum = 0;
  CHECKF(sl_model_open(path, NULL, &m, &error) == SL_STATUS_OK, "open %s: %s", path, error ? error : "?");
  free(error);
  for (size_t i = 0; m != NULL && i < sl_model_tensor_count(m); i++) {
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    if (sl_model_tensor(m, i, &t) != SL_STATUS_OK)
      continue;
    if (strstr(t.name, "o_proj.weight") == NULL && strstr(t.name, "down_proj.weight") == NULL)
      continue;
    sum += t.nbytes;
    const char *fp = sl_model_file_path(m, t.file);
    if (in_file != NULL && fp != NULL && strstr(fp, file) != NULL)
      (*in_file)++;
  }
  sl_model_close(m);
  return sum;
}

static uint64_t row_parallel_bytes(void) {
  return row_parallel_bytes_of("", NULL);
}

static double num(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  CHECKF(cJSON_IsNumber(v), "report: no number %s", key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The report's exchange figures against the layout; small_bucket: several rounds per tensor;
 * off: two_phase_reads false. */
static void check_exchanges(const char *label, const lc_case *c, const char *json, bool small_bucket,
                            bool off) {
  cJSON *rep = json != NULL ? cJSON_Parse(json) : NULL;
  CHECKF(rep != NULL, "%s: no parsable report", label);
  if (rep == NULL)
    return;
  const cJSON *sched = cJSON_GetObjectItemCaseSensitive(rep, "schedule");
  double exchanges = num(sched, "exchanges");
  double exchanged = num(sched, "bytes_exchanged");
  double pieces = num(sched, "pieces");
  double buckets = num(sched, "buckets");
  const cJSON *key = cJSON_GetObjectItemCaseSensitive(rep, "two_phase_reads");
  CHECKF(cJSON_IsBool(key) && cJSON_IsTrue(key) == !off, "%s: the report's two_phase_reads is not %s", label,
         off ? "false" : "true");
  const cJSON *e = NULL;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rep, "strategy_choice")) {
    const cJSON *two = cJSON_GetObjectItemCaseSensitive(e, "two_phase");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(e, "two_phase_reason");
    const char *want = off ? "two_phase_reads false" : "load_strategy mmap";
    CHECKF(cJSON_IsBool(two) && cJSON_IsTrue(two) == !off && cJSON_IsString(why) &&
               strstr(why->valuestring, want) != NULL,
           "%s: a file's two_phase is not %s for \"%s\"", label, off ? "false" : "true", want);
  }
  if (off) {
    CHECKF(exchanges == 0 && exchanged == 0, "%s: %g exchanges with two_phase_reads false", label, exchanges);
    cJSON_Delete(rep);
    return;
  }
  if (c->tp > 1) {
    /* llama: o_proj and down_proj of 3 layers. */
    CHECKF(exchanges == 6, "%s: %g two-phase exchanges, expected 6 (o_proj, down_proj x 3 layers)", label,
           exchanges);
    CHECKF(exchanged > 0, "%s: no byte exchanged", label);
    /* 64 rows per weight: every member's block of whole rows is a multiple of tp rows here. */
    uint64_t rp = row_parallel_bytes();
    double want = (double)rp - (double)rp / c->tp;
    double others = num(sched, "bytes_read_for_others");
    CHECKF(rp > 0 && others == want,
           "%s: bytes_read_for_others %g, expected %g (1 - 1/%d of %llu row-parallel bytes)", label, others,
           want, c->tp, (unsigned long long)rp);
  } else {
    CHECKF(exchanges == 0 && exchanged == 0, "%s: %g exchanges at tp 1", label, exchanges);
  }
  if (small_bucket)
    CHECKF(buckets >= 2 * exchanges, "%s: %g buckets for %g exchanges: expected several rounds each", label,
           buckets, exchanges);
  double ops = 0;
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rep, "ranks");
  const cJSON *r = NULL;
  cJSON_ArrayForEach(r, ranks) ops += num(r, "read_ops");
  /* A piece is read in one operation, a bucket (or an exchange round) by each of its readers in
   * one; row by row, the 6 row-parallel tensors of 64 rows would take 64 x 6 x tp. */
  double bound = pieces + buckets * (small_bucket ? c->tp * c->dp : 1);
  CHECKF(ops <= bound, "%s: %g read operations, at most %g expected (rows read one by one?)", label, ops,
         bound);
  cJSON_Delete(rep);
}

static void run_case(int tp, int dp, bool small_bucket, bool off) {
  lc_case c = {.fixture = "llama", .tp = tp, .pp = 1, .dp = dp};
  int k = 0;
  c.extra[k++] = "load_strategy"; /* an explicit strategy: two-phase for every file, warm or cold */
  c.extra[k++] = "mmap";
  if (small_bucket) {
    c.extra[k++] = "staging_bytes";
    c.extra[k++] = "1048576";
    c.extra[k++] = "bucket_bytes";
    c.extra[k++] = "2048";
  }
  if (off) {
    c.extra[k++] = "two_phase_reads";
    c.extra[k++] = "false";
  }
  char label[128];
  lc_label(&c, label, sizeof label);
  strncat(label, small_bucket ? " small bucket" : "", sizeof label - strlen(label) - 1);
  strncat(label, off ? " two_phase_reads false" : "", sizeof label - strlen(label) - 1);
  lc_result res;
  memset(&res, 0, sizeof res);
  bool ok = lc_run(&c, &res);
  CHECKF(ok && res.status == SL_STATUS_OK, "%s: load failed: %s", label, res.message);
  const char *json = res.loader != NULL ? sl_loader_report_json(res.loader) : NULL;
  /* The report lives on rank 0; every rank checks the bytes (lc_run). */
  if (lc_rank() == 0)
    check_exchanges(label, &c, json, small_bucket, off);
  lc_result_free(&res);
}

/* Whether the page cache holds less than half of dir/name (mincore(2) on a mapping). */
static bool cold_now(const char *dir, const char *name) {
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDONLY);
  off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
  void *p = size > 0 ? mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  size_t pages = (size_t)((size + 4095) / 4096) + 1, in = 0; /* room for any page size >= 4 KiB */
  unsigned char *vec = calloc(pages, 1);
  bool ok = p != MAP_FAILED && vec != NULL && mincore(p, (size_t)size, vec) == 0;
  size_t n = (size_t)((size + sysconf(_SC_PAGESIZE) - 1) / sysconf(_SC_PAGESIZE));
  for (size_t i = 0; ok && i < n; i++)
    in += vec[i] & 1;
  free(vec);
  if (p != MAP_FAILED)
    munmap(p, (size_t)size);
  if (fd >= 0)
    close(fd);
  CHECKF(ok, "mincore of %s", path);
  return in * 2 < n;
}

/* Rank 0: the auto report's per-file decision and the exchanges. The file COLD was evicted: it is
 * read two-phase. The others were just read into the page cache: read without the exchange, unless
 * something else on the machine dropped the caches meanwhile (then their reason says they were
 * not resident); at least one of them must have been. Every entry's decision agrees with its
 * reason, and the exchanges are exactly the row-parallel tensors of the files read two-phase.
 * evicted: COLD's pages were dropped (else it is resident like the others). */
static void check_auto(const char *label, const char *json, bool evicted) {
  cJSON *rep = json != NULL ? cJSON_Parse(json) : NULL;
  CHECKF(rep != NULL, "%s: no parsable report", label);
  if (rep == NULL)
    return;
  double exchanges = num(cJSON_GetObjectItemCaseSensitive(rep, "schedule"), "exchanges");
  int files = 0, warm_resident = 0, want = 0;
  const cJSON *e = NULL;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rep, "strategy_choice")) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
    const cJSON *two = cJSON_GetObjectItemCaseSensitive(e, "two_phase");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(e, "two_phase_reason");
    if (!cJSON_IsString(f) || !cJSON_IsBool(two) || !cJSON_IsString(why)) {
      CHECKF(false, "%s: a strategy_choice entry without file, two_phase or two_phase_reason", label);
      continue;
    }
    files++;
    bool cold = evicted && strcmp(f->valuestring, COLD) == 0;
    bool said_resident =
        strstr(why->valuestring,
               "in the page cache of the ranks' one node: each rank copies its row slices") != NULL;
    bool said_cold =
        strstr(why->valuestring,
               "in the page cache: row-parallel tensors read as blocks of whole rows and exchanged") != NULL;
    CHECKF(said_resident != said_cold && cJSON_IsTrue(two) == said_cold, "%s: %s: two_phase %d for \"%s\"",
           label, f->valuestring, cJSON_IsTrue(two), why->valuestring);
    CHECKF(!cold || said_cold, "%s: the evicted %s: \"%s\"", label, f->valuestring, why->valuestring);
    warm_resident += !cold && said_resident;
    int in_file = 0;
    row_parallel_bytes_of(f->valuestring, &in_file);
    want += cJSON_IsTrue(two) ? in_file : 0;
  }
  CHECKF(files == 3, "%s: %d strategy_choice entries, expected the 3 files", label, files);
  CHECKF(warm_resident >= 1, "%s: no resident file was read without the exchange", label);
  CHECKF((want > 0 || !evicted) && exchanges == want,
         "%s: %g exchanges, expected %d (the row-parallel tensors of the files read "
         "two-phase)",
         label, exchanges, want);
  /* Row copies out of the page cache take no read operation: rank 0 reads its contiguous pieces
   * and its blocks of the cold file's rows, far fewer than one per row of its slices. */
  const cJSON *rank0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rep, "ranks"), 0);
  double ops = num(rank0, "read_ops");
  double pieces = num(cJSON_GetObjectItemCaseSensitive(rep, "schedule"), "pieces");
  CHECKF(ops <= pieces, "%s: rank 0 took %g read operations for %g pieces (rows read one by one?)", label,
         ops, pieces);
  cJSON_Delete(rep);
}

/* load_strategy auto at tp = world over a fresh copy whose file COLD is evicted. */
static void run_auto_case(int tp) {
  char *dir = lc_tmpdir("twophase_auto");
  if (dir == NULL || !lc_make_variant("llama", dir, "")) {
    lc_tmpdir_remove(dir);
    return;
  }
  lc_evict(dir, COLD); /* the other files stay as make-fixture wrote them: in the page cache */
  int evicted = lc_rank() == 0 && cold_now(dir, COLD); /* not on tmpfs: its pages are the file */
  MPI_Bcast(&evicted, 1, MPI_INT, 0, MPI_COMM_WORLD);
  lc_case c = {.fixture = "llama", .tp = tp, .pp = 1, .dp = 1, .model_dir = dir};
  char label[128];
  lc_label(&c, label, sizeof label);
  strncat(label, " auto, one file cold", sizeof label - strlen(label) - 1);
  lc_result res;
  memset(&res, 0, sizeof res);
  bool ok = lc_run(&c, &res);
  CHECKF(ok && res.status == SL_STATUS_OK, "%s: load failed: %s", label, res.message);
  if (lc_rank() == 0)
    check_auto(label, res.loader != NULL ? sl_loader_report_json(res.loader) : NULL, evicted != 0);
  lc_result_free(&res);
  lc_tmpdir_remove(dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  int world = lc_world();
  if (world == 2 || world == 4)
    run_auto_case(world);
  if (world == 2) {
    run_case(2, 1, false, false);
    run_case(2, 1, true, false);
    run_case(2, 1, false, true);
    run_case(2, 1, true, true);
  } else if (world == 4) {
    run_case(4, 1, false, false);
    run_case(4, 1, true, false);
    run_case(2, 2, false, false);
    run_case(2, 2, true, false);
    run_case(4, 1, false, true);
    run_case(2, 2, false, true);
  } else {
    run_case(1, world, false, false);
  }
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
