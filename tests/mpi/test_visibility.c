/*
 * test_visibility.c — loads with ranks that cannot see the checkpoint (docs/spec/STORAGE.md), run
 * by tests/mpi/test_visibility.sh under tests/mpi/hide_files.sh, which hides the copy ROOT from some
 * ranks (or puts another file at one of its paths):
 *
 *   test_visibility ROOT UNSEEN [shared|caught]
 *
 * ROOT holds copies of the llama, mixtral and deepseek_v3 fixtures; UNSEEN lists the ranks that see
 * none of ROOT ("-": none). Every (tp, pp, dp) of the world size, MoE with expert parallelism, with
 * storage auto: every rank's bytes equal the reference's (which reads the fixtures themselves); the
 * report's cluster figures as in a load with shared storage (read amplification 1.00); a rank of
 * UNSEEN reads 0 bytes from storage and receives every byte it needs. With `shared`: storage shared
 * fails on every rank with an error naming the file a rank could not open. With `caught`: rank 1,
 * on rank 0's node, holds another file at the path of llama's second shard; a load of llama at
 * tp = world (pp = 3 at 3 ranks) with storage auto fails on every rank, rank 1 with the identity
 * check's error naming the file (IO), the others PEER_FAILED.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
  const char *name;
  bool moe;
} fixture;

static const fixture fixtures[] = {{"llama", false}, {"mixtral", true}, {"deepseek_v3", true}};

static bool listed(const char *list, int rank) {
  char want[16];
  snprintf(want, sizeof want, "%d", rank);
  size_t n = strlen(want);
  for (const char *p = list; *p != '\0';) {
    const char *end = strchr(p, ',');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, want, n) == 0)
      return true;
    p += len + (end != NULL);
  }
  return false;
}

/* Rank 0: the ranks of UNSEEN read nothing and receive exactly what they need, once. */
static void check_unseen(const char *label, const char *report, const char *unseen) {
  cJSON *rep = cJSON_Parse(report);
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rep, "ranks");
  CHECKF(cJSON_IsArray(ranks), "%s: the report has no ranks", label);
  for (int g = 0; g < cJSON_GetArraySize(ranks); g++) {
    if (!listed(unseen, g))
      continue;
    const cJSON *r = cJSON_GetArrayItem(ranks, g);
    double read = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "bytes_read"));
    double received = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "bytes_received"));
    double needed = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "bytes_needed"));
    CHECKF(read == 0, "%s: rank %d cannot see the files but read %.0f bytes", label, g, read);
    CHECKF(received == needed, "%s: rank %d received %.0f bytes, needs exactly %.0f", label, g, received,
           needed);
  }
  cJSON_Delete(rep);
}

static void load_all(const char *root, const char *unseen) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/%s", root, fixtures[f].name);
    for (int i = 0; i < n; i++) {
      lc_case c = {.fixture = fixtures[f].name,
                   .model_dir = dir,
                   .tp = lays[i][0],
                   .pp = lays[i][1],
                   .dp = lays[i][2],
                   .ep = fixtures[f].moe,
                   .extra = {"storage", "auto", NULL}};
      lc_result r;
      char label[256];
      lc_label(&c, label, sizeof label);
      /* (a layout the model refuses is refused as with shared storage: no report) */
      if (lc_run(&c, &r) && lc_rank() == 0 && r.status == SL_STATUS_OK)
        check_unseen(label, sl_loader_report_json(r.loader), unseen);
      lc_result_free(&r);
    }
  }
}

/* storage shared: every rank fails, naming a file a rank could not open (the rank that could not
 * says IO; the others PEER_FAILED with its message). */
static void shared_fails(const char *root) {
  char dir[2048];
  snprintf(dir, sizeof dir, "%s/llama", root);
  char dp[16];
  snprintf(dp, sizeof dp, "%d", lc_world());
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "model", dir) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "dp", dp) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "storage", "shared") == SL_STATUS_OK);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  CHECKF(st == SL_STATUS_OK, "sl_loader_create: %s", sl_config_error(cfg));
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_IO || st == SL_STATUS_PEER_FAILED,
         "rank %d: load returned %s, expected IO or PEER_FAILED", lc_rank(), sl_status_name(st));
  if (l != NULL) {
    CHECK_CONTAINS(sl_loader_error(l), "cannot open");
    CHECK_CONTAINS(sl_loader_error(l), dir);
  }
  int io = st == SL_STATUS_IO;
  int n_io = 0;
  MPI_Allreduce(&io, &n_io, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECKF(n_io >= 1, "no rank reports the file it could not open (%d)", n_io);
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
}

/* storage auto, rank 1's copy of a shard not its node's: caught when rank 1 opens it for reading,
 * the same error on rank 1 (IO) as in a file changed under a load, carried to the others. */
static void copy_caught(const char *root) {
  char dir[2048];
  snprintf(dir, sizeof dir, "%s/llama", root);
  /* Rank 1 reads from that shard: its slices of layers 0 and 1 at tp = world, or layer 1's MLP as
   * the second of 3 pipeline stages (llama's 8 heads do not split 3 ways). */
  char n[16];
  snprintf(n, sizeof n, "%d", lc_world());
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "model", dir) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, lc_world() % 2 == 0 ? "tp" : "pp", n) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "storage", "auto") == SL_STATUS_OK);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  CHECKF(st == SL_STATUS_OK, "sl_loader_create: %s", sl_config_error(cfg));
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  sl_status want = lc_rank() == 1 ? SL_STATUS_IO : SL_STATUS_PEER_FAILED;
  CHECKF(st == want, "rank %d: load returned %s, expected %s: %s", lc_rank(), sl_status_name(st),
         sl_status_name(want), l != NULL ? sl_loader_error(l) : "");
  if (l != NULL) {
    CHECK_CONTAINS(sl_loader_error(l),
                   "/llama/model-00002-of-00003.safetensors changed since its header was read");
    CHECKF(sl_loader_report_json(l) == NULL, "rank %d: a report exists after a failed load", lc_rank());
  }
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  lc_quiet_logs();
  if (argc < 3) {
    fprintf(stderr, "usage: test_visibility ROOT UNSEEN [shared]\n");
    MPI_Finalize();
    return 2;
  }
  if (argc > 3 && strcmp(argv[3], "shared") == 0)
    shared_fails(argv[1]);
  else if (argc > 3 && strcmp(argv[3], "caught") == 0)
    copy_caught(argv[1]);
  else
    load_all(argv[1], strcmp(argv[2], "-") == 0 ? "" : argv[2]);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
