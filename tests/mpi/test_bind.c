/*
 * test_bind.c — caller-owned buffers (sl_loader_plan, then sl_loader_bind, then sl_loader_load):
 * the bound parameters land in the caller's memory, byte-identical to a load into the loader's
 * own memory; binding errors name the problem (unknown name, wrong size, an alias, too late); the
 * table is visible after planning; padded vocabulary rows of a bound buffer come back zeroed.
 * Runs at 1, 2, 3 and 4 ranks on the qwen3 fixture (tied
 * embeddings: lm_head.weight is an alias), tp = 1 or 2, dp = the rest; with the auto strategy and
 * with mmap (whose other parameters may be mappings of the files); and on the llama fixture (a
 * vocabulary of 250 padded to 256).
 */
#include "check.h"

#include "shardload/shardload.h"

#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sl_loader *make(const char *model, int tp, int dp, const char *strategy, sl_config **cfg_out) {
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  char v[16];
  sl_config_set(cfg, "model", model);
  sl_config_set(cfg, "load_strategy", strategy);
  snprintf(v, sizeof v, "%d", tp);
  sl_config_set(cfg, "tp", v);
  snprintf(v, sizeof v, "%d", dp);
  sl_config_set(cfg, "dp", v);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  CHECKF(st == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  *cfg_out = cfg;
  return l;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  int tp = size % 2 == 0 ? 2 : 1;
  int dp = size / tp;
  /* qwen3: tied embeddings (an alias); llama: a vocabulary of 250 padded to 256, whose padded rows
   * no copy writes — a bound buffer must come back with them zeroed like the loader's own. */
  static const char *const fixtures[2] = {"qwen3", "llama"};
  for (int f = 0; f < 2; f++) {
    char model[4096];
    snprintf(model, sizeof model, "%s/%s", sl_test_env("SL_FIXTURES", "fixtures"), fixtures[f]);
    bool tied = f == 0;

    sl_config *cfg_ref = NULL;
    sl_loader *ref = make(model, tp, dp, "auto", &cfg_ref);
    CHECK(sl_loader_load(ref) == SL_STATUS_OK);

    /* mmap: the unbound parameters may be mappings of the files, the bound ones never are. */
    static const char *const strategies[2] = {"auto", "mmap"};
    for (int k = 0; k < 2; k++) {
      sl_config *cfg = NULL;
      sl_loader *l = make(model, tp, dp, strategies[k], &cfg);
      CHECK(sl_loader_param_count(l) == 0); /* nothing before the plan */
      CHECK(sl_loader_plan(l) == SL_STATUS_OK);
      size_t n = sl_loader_param_count(l);
      CHECK(n == sl_loader_param_count(ref) && n > 0);
      /* bind every other non-alias parameter */
      void **mine = calloc(n, sizeof *mine);
      for (size_t i = 0; i < n; i++) {
        const sl_param *p = sl_loader_param(l, i);
        CHECK(p->data == NULL);
        if (p->alias_of != NULL || i % 2 == 1)
          continue;
        mine[i] = malloc(p->nbytes + 1);
        memset(mine[i], 0x5A, p->nbytes); /* the load must overwrite (or zero) every byte */
        CHECKF(sl_loader_bind(l, p->name, mine[i], p->nbytes) == SL_STATUS_OK, "bind %s: %s", p->name,
               sl_loader_error(l));
      }
      /* errors */
      const sl_param *first = sl_loader_param(l, 0);
      CHECK(sl_loader_bind(l, "no.such.weight", mine[0], 4) == SL_STATUS_NOT_FOUND);
      CHECK_CONTAINS(sl_loader_error(l), "no.such.weight");
      char small[8];
      CHECK(sl_loader_bind(l, first->name, small, first->nbytes - 1) == SL_STATUS_INVALID_ARGUMENT);
      CHECK_CONTAINS(sl_loader_error(l), "needs a buffer of");
      const sl_param *head = sl_loader_find(l, "lm_head.weight");
      if (head != NULL && tied) {
        CHECK(head->alias_of != NULL && strcmp(head->alias_of, "model.embed_tokens.weight") == 0);
        CHECK(sl_loader_bind(l, "lm_head.weight", small, head->nbytes) == SL_STATUS_INVALID_ARGUMENT);
        CHECK_CONTAINS(sl_loader_error(l), "bind that one instead");
      }
      CHECK(sl_loader_load(l) == SL_STATUS_OK);
      for (size_t i = 0; i < n; i++) {
        const sl_param *p = sl_loader_param(l, i);
        const sl_param *q = sl_loader_find(ref, p->name);
        CHECKF(q != NULL && q->nbytes == p->nbytes, "%s in both tables", p->name);
        if (mine[i] != NULL)
          CHECKF(p->data == mine[i], "%s loaded into the caller's buffer", p->name);
        if (q != NULL && p->data != NULL)
          CHECKF(memcmp(p->data, q->data, (size_t)p->nbytes) == 0, "%s: %s: bound load differs",
                 strategies[k], p->name);
        if (p->alias_of != NULL) {
          const sl_param *target = sl_loader_find(l, p->alias_of);
          CHECK(target != NULL && target->data == p->data);
        }
      }
      /* too late */
      CHECK(sl_loader_bind(l, first->name, mine[0] != NULL ? mine[0] : small, first->nbytes) ==
            SL_STATUS_INVALID_ARGUMENT);
      CHECK_CONTAINS(sl_loader_error(l), "before sl_loader_load");
      sl_loader_destroy(l);
      /* the caller's buffers survive the loader */
      for (size_t i = 0; i < n; i++)
        free(mine[i]);
      free(mine);
      sl_config_destroy(cfg);
    }
    sl_loader_destroy(ref);
    sl_config_destroy(cfg_ref);
  }
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
