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
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of the llama fixture's row-parallel weights (o_proj, down_proj), from its headers. */
static uint64_t row_parallel_bytes(void) {
  char path[1024];
  lc_fixture_path("llama", path, sizeof path);
  sl_model *m = NULL;
  char *error = NULL;
  uint64_t sum = 0;
  CHECKF(sl_model_open(path, NULL, &m, &error) == SL_STATUS_OK, "open %s: %s", path, error ? error : "?");
  free(error);
  for (size_t i = 0; m != NULL && i < sl_model_tensor_count(m); i++) {
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    if (sl_model_tensor(m, i, &t) != SL_STATUS_OK)
      continue;
    if (strstr(t.name, "o_proj.weight") != NULL || strstr(t.name, "down_proj.weight") != NULL)
      sum += t.nbytes;
  }
  sl_model_close(m);
  return sum;
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

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  int world = lc_world();
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
