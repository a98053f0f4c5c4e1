/*
 * test_load_pt.c — PyTorch checkpoints (docs/spec/FILES.md §8) loaded byte-exact at the world size
 * it runs with.
 *
 * Rank 0 re-saves the llama and mixtral safetensors fixtures with torch.save
 * (scripts/fixtures/to_torch.py): llama as one pytorch_model.bin, as model.pt, and as two shards
 * whose tensors are views into one storage per dtype plus an index and a stray file the index
 * leaves out; mixtral as shards. Each copy is loaded in every (tp, pp, dp) layout of the world
 * (and with expert parallelism for mixtral) and every rank's table is compared, byte for byte,
 * with the independent reference computed from the original safetensors fixture: the pickle path
 * must deliver exactly what the safetensors path does. Formats: auto for .bin, pt for model.pt,
 * and hf for the sharded copy. Without torch for /usr/bin/python3 (or $PYTHON) the test is
 * skipped (exit 77).
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pt_case {
  const char *fixture; /* the safetensors original under $SL_FIXTURES */
  const char *mode;    /* to_torch.py mode */
  const char *format;  /* --load-format */
  bool moe;
} pt_case;

static const pt_case k_cases[] = {
    {"llama", "bin", "auto", false},
    {"llama", "pt", "pt", false},
    {"llama", "sharded", "hf", false},
    {"mixtral", "sharded", "auto", true},
};

/* COLLECTIVE. Rank 0 converts every case into dir/<k> with one python (torch imports slowly); the
 * other ranks wait without spinning (oversubscribed runs share few cores). Returns the exit status
 * every rank agrees on (77: no torch). */
static int convert_all(const char *dir) {
  int rc = 0;
  if (lc_rank() == 0) {
    char cmd[8192];
    const char *py = sl_test_env("PT_PYTHON", "/usr/bin/python3");
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' 2>/dev/null", py);
    if (system(cmd) != 0) {
      rc = 77;
    } else {
      int n = snprintf(cmd, sizeof cmd, "'%s' '%s/scripts/fixtures/to_torch.py'", py,
                       sl_test_env("SL_SOURCE_DIR", "."));
      for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0] && n > 0 && (size_t)n < sizeof cmd; k++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s/%s' '%s/%zu' %s",
                      sl_test_env("SL_FIXTURES", "fixtures"), k_cases[k].fixture, dir, k, k_cases[k].mode);
      rc = system(cmd) == 0 ? 0 : 1;
    }
  }
  MPI_Request req;
  MPI_Ibcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
  for (int done = 0; !done;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done)
      usleep(20000);
  }
  return rc;
}

static void set(sl_config *cfg, const char *k, const char *v) {
  CHECKF(sl_config_set(cfg, k, v) == SL_STATUS_OK, "set %s=%s: %s", k, v, sl_config_error(cfg));
}

/* COLLECTIVE. One load of folder in one layout, checked against the reference of the original. */
static void run_layout(const pt_case *c, const char *folder, int tp, int pp, int dp, bool ep) {
  char label[256];
  snprintf(label, sizeof label, "%s/%s tp%d pp%d dp%d%s rank %d", c->fixture, c->mode, tp, pp, dp,
           ep ? " ep" : "", lc_rank());
  sl_ref_model *m = lc_model(c->fixture, NULL);
  sl_ref_table *ref = NULL;
  char msg[512] = "";
  sl_ref_layout lay = {.tp = tp, .pp = pp, .dp = dp, .rank = lc_rank(), .expert_parallel = ep};
  sl_status ref_st = m != NULL ? sl_ref_table_build(m, &lay, &ref, msg, sizeof msg) : SL_STATUS_INTERNAL;
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char num[16];
  set(cfg, "model", folder);
  set(cfg, "load_format", c->format);
  snprintf(num, sizeof num, "%d", tp);
  set(cfg, "tp", num);
  snprintf(num, sizeof num, "%d", pp);
  set(cfg, "pp", num);
  snprintf(num, sizeof num, "%d", dp);
  set(cfg, "dp", num);
  set(cfg, "enable_expert_parallel", ep ? "true" : "false");
  set(cfg, "quiet", "true");
  set(cfg, "threads", "2");
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  if (ref_st != SL_STATUS_OK) {
    CHECKF(st == ref_st, "%s: load returned %s, the reference expects %s (%s)", label, sl_status_name(st),
           sl_status_name(ref_st), msg);
  } else {
    CHECKF(st == SL_STATUS_OK, "%s: load failed: %s: %s", label, sl_status_name(st),
           l != NULL ? sl_loader_error(l) : sl_config_error(cfg));
    if (st == SL_STATUS_OK)
      lc_check_table(label, m, l, ref);
  }
  sl_loader_destroy(l);
  sl_ref_table_free(ref);
  sl_config_destroy(cfg);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  int layouts[16][3];
  int n = lc_layouts(lc_world(), layouts, 16);
  char *dir = lc_tmpdir("pt");
  int rc = dir != NULL ? convert_all(dir) : 1;
  CHECKF(rc == 0 || rc == 77, "scripts/fixtures/to_torch.py failed");
  for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0] && rc == 0; k++) {
    const pt_case *c = &k_cases[k];
    char folder[1024];
    snprintf(folder, sizeof folder, "%s/%zu", dir, k);
    for (int i = 0; i < n; i++) {
      run_layout(c, folder, layouts[i][0], layouts[i][1], layouts[i][2], false);
      if (c->moe)
        run_layout(c, folder, layouts[i][0], layouts[i][1], layouts[i][2], true);
    }
  }
  lc_tmpdir_remove(dir);
  int skipped = rc == 77;
  lc_models_close();
  int frc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  if (skipped && frc == 0) {
    if (lc_rank() == 0)
      printf("torch is not available to python: test skipped\n");
    return 77;
  }
  return frc;
}
