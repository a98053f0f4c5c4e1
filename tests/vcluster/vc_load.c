/*
 * vc_load.c — the byte-exact loads of the mpi suite, run on the virtual cluster (scripts/vcluster):
 * ranks on several "nodes" (network + UTS + mount namespaces), TCP between nodes, shared memory
 * within a node, the fixtures read through the cluster's shared storage (sshfs) when it has one.
 *
 * Environment (set by tests/vcluster/test_vcluster.py):
 *   SL_FIXTURES       where the ranks see the fixture models
 *   SLVC_PPN          ranks per node of the job (Open MPI maps by slot: rank r on node r / ppn)
 *   SLVC_HOST_PREFIX  hostname prefix of the nodes ("slvc3-n": node i is "slvc3-n<i>")
 *   SLVC_CASES        "layouts" (default): the fixtures below at every (tp, pp, dp) of the world size;
 *                     "quick": llama and mixtral only
 *   SLVC_MODEL_ROOT   a copy of the fixtures that only node 0 sees (`vcluster up --node-local`, a
 *                     model on one machine's disk): every case loads ROOT/<fixture> with storage
 *                     auto, while the reference still reads SL_FIXTURES (seen everywhere)
 *
 * Checks, on every rank:
 *   - nodes: the hostname is the expected node's; Open MPI's node-local rank and size
 *     (OMPI_COMM_WORLD_LOCAL_RANK/SIZE) and MPI_Comm_split_type(SHARED) agree with rank % ppn and
 *     ppn; the library's own node-local rank (the default of cuda_device) is rank % ppn;
 *   - every case through lc_run (tests/mpi/load_check.c): every byte against the independent
 *     reference, the report's cluster figures against the reference's;
 *   - per node, from the report: a node's ranks read (without covering bytes) no more than the
 *     distinct bytes its ranks need, and the nodes together read every distinct byte once; with
 *     SLVC_MODEL_ROOT instead: the ranks of nodes 1.. opened no file and read 0 bytes (node 0's
 *     ranks read every distinct byte once, for all), and the report's storage says which ranks
 *     could read every file (node 0's) and which none (the others');
 *   - the report's time model: prediction.ranks_per_node against the real ranks per node (a
 *     warning unless SLVC_STRICT_RANKS_PER_NODE=1: the library takes it from the configuration,
 *     default 8, and does not derive it yet).
 */
#include "check.h"
#include "comm/comm.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int ppn = 1;
static const char *model_root; /* SLVC_MODEL_ROOT: the fixtures' copy on node 0 only, or NULL */

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

static void check_nodes(void) {
  int rank = lc_rank();
  int world = lc_world();
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const char *prefix = getenv("SLVC_HOST_PREFIX");
  int node = rank / ppn;
  if (prefix != NULL) {
    char want[300];
    snprintf(want, sizeof want, "%s%d", prefix, node);
    CHECKF(strcmp(host, want) == 0, "rank %d: hostname '%s', expected '%s'", rank, host, want);
  }
  /* Every rank's hostname: the same within a node, different between nodes. */
  char *all = calloc((size_t)world, 256);
  MPI_Allgather(host, 256, MPI_CHAR, all, 256, MPI_CHAR, MPI_COMM_WORLD);
  for (int r = 0; r < world; r++) {
    bool same = strcmp(all + (size_t)r * 256, host) == 0;
    CHECKF(same == (r / ppn == node), "rank %d (%s) and rank %d (%s): same node %d, expected %d", rank, host,
           r, all + (size_t)r * 256, same, r / ppn == node);
  }
  free(all);
  int env_local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
  int env_lsize = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", -1);
  CHECKF(env_local == rank % ppn, "rank %d: OMPI_COMM_WORLD_LOCAL_RANK %d, expected %d", rank, env_local,
         rank % ppn);
  CHECKF(env_lsize == (world - node * ppn < ppn ? world - node * ppn : ppn),
         "rank %d: OMPI_COMM_WORLD_LOCAL_SIZE %d, expected %d", rank, env_lsize, ppn);
  MPI_Comm shm;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm);
  int lr = -1, ls = -1;
  MPI_Comm_rank(shm, &lr);
  MPI_Comm_size(shm, &ls);
  MPI_Comm_free(&shm);
  CHECKF(lr == rank % ppn && ls == env_lsize, "rank %d: MPI_Comm_split_type gives local rank %d of %d", rank,
         lr, ls);
  /* The library's node-local rank: what cuda_device defaults to (backend/cuda: device =
   * local rank % device count). */
  sl__comm c;
  sl__err cerr;
  sl__err_clear(&cerr);
  CHECKF(sl__comm_init_mpi(&c, &(MPI_Comm){MPI_COMM_WORLD}, &cerr) == SL_STATUS_OK, "rank %d: %s", rank,
         cerr.msg);
  int lib_local = sl__comm_local_rank(&c);
  sl__comm_free(&c);
  CHECKF(lib_local == rank % ppn,
         "rank %d: the library's node-local rank (cuda_device default) is %d, expected %d", rank, lib_local,
         rank % ppn);
  if (rank == 0)
    printf("vc_load: %d ranks on %d node(s), %d per node, hostnames and local ranks checked\n", world,
           (world + ppn - 1) / ppn, ppn);
}

static uint64_t ju64(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : 0;
}

/* Rank 0, files on node 0 only: the report's storage says node 0's ranks could read every file and
 * the others none. */
static void check_storage(const char *label, const cJSON *rep, int world) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(rep, "storage");
  const cJSON *mode = cJSON_GetObjectItemCaseSensitive(st, "mode");
  int on0 = world < ppn ? world : ppn;
  CHECKF(cJSON_IsString(mode) && strcmp(mode->valuestring, "auto") == 0,
         "%s: report storage.mode %s, expected auto", label,
         cJSON_IsString(mode) ? mode->valuestring : "(none)");
  CHECKF(ju64(st, "ranks_reading_every_file") == (uint64_t)on0 &&
             ju64(st, "ranks_reading_no_file") == (uint64_t)(world - on0),
         "%s: report storage: %llu ranks read every file, %llu none; expected %d (node 0's) and %d", label,
         (unsigned long long)ju64(st, "ranks_reading_every_file"),
         (unsigned long long)ju64(st, "ranks_reading_no_file"), on0, world - on0);
}

/* Rank 0: per-node figures from the report (ranks r on node r / ppn). */
static void check_per_node(const char *label, sl_loader *l) {
  const char *json = sl_loader_report_json(l);
  if (json == NULL)
    return;
  cJSON *rep = cJSON_Parse(json);
  CHECKF(rep != NULL, "%s: report is not JSON", label);
  if (rep == NULL)
    return;
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rep, "ranks");
  int world = cJSON_GetArraySize(ranks);
  int nodes = (world + ppn - 1) / ppn;
  uint64_t total = 0;
  for (int n = 0; n < nodes; n++) {
    uint64_t rd = 0, cov = 0, need = 0, opened = 0;
    for (int r = n * ppn; r < world && r < (n + 1) * ppn; r++) {
      const cJSON *e = cJSON_GetArrayItem(ranks, r);
      rd += ju64(e, "bytes_read");
      cov += ju64(e, "bytes_covering");
      need += ju64(e, "bytes_needed");
      opened += ju64(e, "files_opened");
    }
    /* bytes_needed per rank counts bytes two ranks of the node share twice: an upper bound of
     * what the node needs; a node reading more would read for another node. With the files on
     * node 0 only, node 0 reads for every node and the others read nothing. */
    if (model_root == NULL)
      CHECKF(rd - cov <= need, "%s: node %d read %llu useful bytes, its ranks need %llu", label, n,
             (unsigned long long)(rd - cov), (unsigned long long)need);
    else if (n > 0)
      CHECKF(rd == 0 && opened == 0,
             "%s: node %d cannot see the checkpoint but its ranks opened %llu files, read %llu bytes", label,
             n, (unsigned long long)opened, (unsigned long long)rd);
    total += rd - cov;
  }
  if (model_root != NULL)
    check_storage(label, rep, world);
  CHECKF(total == ju64(rep, "bytes_unique"), "%s: nodes read %llu bytes, distinct %llu", label,
         (unsigned long long)total, (unsigned long long)ju64(rep, "bytes_unique"));
  const cJSON *pred = cJSON_GetObjectItemCaseSensitive(rep, "prediction");
  int rpn = (int)ju64(pred, "ranks_per_node");
  if (rpn != ppn) {
    static bool warned = false;
    if (getenv("SLVC_STRICT_RANKS_PER_NODE") != NULL && atoi(getenv("SLVC_STRICT_RANKS_PER_NODE")) == 1)
      CHECKF(rpn == ppn, "%s: report prediction.ranks_per_node %d, the job runs %d per node", label, rpn,
             ppn);
    else if (!warned)
      printf("vc_load: NOTE: the report's prediction uses ranks_per_node %d, the job runs %d per node "
             "(not derived by the library yet)\n",
             rpn, ppn);
    warned = true;
  }
  cJSON_Delete(rep);
}

static void run_case(lc_case *c) {
  char dir[2048];
  if (model_root != NULL) { /* the copy node 0 alone sees; the reference reads the fixture */
    snprintf(dir, sizeof dir, "%s/%s", model_root, c->fixture);
    c->model_dir = dir;
    c->extra[0] = "storage";
    c->extra[1] = "auto";
    c->extra[2] = NULL;
  }
  lc_result res;
  memset(&res, 0, sizeof res);
  bool ok = lc_run(c, &res);
  char label[256];
  lc_label(c, label, sizeof label);
  if (ok && res.status == SL_STATUS_OK && res.loader != NULL && lc_rank() == 0)
    check_per_node(label, res.loader);
  if (getenv("SL_TEST_VERBOSE") != NULL && lc_rank() == 0)
    printf("vc_load: %s: %s\n", label, sl_status_name(res.status));
  lc_result_free(&res);
}

typedef struct vc_fixture {
  const char *name;
  int modes; /* bit 0: without EP; bit 1: EP linear; bit 2: EP round_robin */
  int world; /* 0: any world size; else only this one */
} vc_fixture;

/* A cut of the mpi suite's matrix (that suite runs every fixture and mode at 1-4 ranks): dense,
 * tied, vocabulary-padded tp=3, and the three expert placements. */
static const vc_fixture fixtures[] = {{"llama", 1, 0},   {"qwen3", 1, 0},       {"qwen2", 1, 3},
                                      {"mixtral", 7, 0}, {"deepseek_v3", 4, 0}, {"qwen2_moe", 2, 0}};

static int run_layouts(void) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  int cases = 0;
  const char *sel = getenv("SLVC_CASES");
  bool quick = sel != NULL && strcmp(sel, "quick") == 0;
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    if (quick && strcmp(fixtures[f].name, "llama") != 0 && strcmp(fixtures[f].name, "mixtral") != 0)
      continue;
    if (fixtures[f].world != 0 && fixtures[f].world != lc_world())
      continue;
    for (int i = 0; i < n; i++) {
      for (int mode = 0; mode < 3; mode++) {
        if (!(fixtures[f].modes & (1 << mode)) || (mode > 0 && lays[i][0] * lays[i][2] == 1))
          continue; /* EP of size 1: same as without */
        lc_case c = {.fixture = fixtures[f].name,
                     .tp = lays[i][0],
                     .pp = lays[i][1],
                     .dp = lays[i][2],
                     .ep = mode > 0,
                     .round_robin = mode == 2,
                     .no_coalesce = mode > 0};
        run_case(&c);
        cases++;
      }
    }
  }
  /* The checkpoint layout once per family kind. */
  lc_case ck = {.fixture = "llama",
                .tp = lc_world() % 2 == 0 ? 2 : 1,
                .pp = 1,
                .dp = lc_world() % 2 == 0 ? lc_world() / 2 : lc_world(),
                .checkpoint = true};
  run_case(&ck);
  lc_case cm = {.fixture = "mixtral",
                .tp = 1,
                .pp = 1,
                .dp = lc_world(),
                .ep = true,
                .checkpoint = true,
                .no_coalesce = true};
  run_case(&cm);
  return cases + 2;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  ppn = env_int("SLVC_PPN", 1);
  model_root = getenv("SLVC_MODEL_ROOT") != NULL && *getenv("SLVC_MODEL_ROOT") != '\0'
                   ? getenv("SLVC_MODEL_ROOT")
                   : NULL;
  if (ppn < 1)
    ppn = 1;
  check_nodes();
  int cases = run_layouts();
  if (lc_rank() == 0)
    printf("vc_load: %d load cases at world %d%s%s\n", cases, lc_world(), model_root != NULL ? ", from " : "",
           model_root != NULL ? model_root : "");
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
