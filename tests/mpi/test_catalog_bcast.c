/*
 * test_catalog_bcast.c — rank 0 builds the catalog of several fixture models and broadcasts it
 * as one blob; every rank deserializes it, re-serializes it, and must obtain rank 0's blob byte
 * for byte (and the same tensors, files and config.json). A malformed blob is rejected. A failure
 * on rank 0 (a folder without weights) is agreed on by every rank. Runs at 1, 2, 3 and 4 ranks.
 */
#include "check.h"
#include "comm/comm.h"
#include "model/catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_model(sl__comm *c, const char *name) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", sl_test_env("SL_FIXTURES", "fixtures"), name);
  sl__err err;
  sl__err_clear(&err);
  sl__catalog cat;
  memset(&cat, 0, sizeof cat);
  uint8_t *blob = NULL;
  size_t len = 0;
  sl_status st = SL_STATUS_OK;
  if (c->rank == 0) {
    sl__catalog_opts o = {.folder = dir,
                          .what = name,
                          .select = {.format = SL_FORMAT_AUTO, .fall_back_to_pt = true},
                          .require_config = true};
    st = sl__catalog_build(&o, &cat, &err);
    if (st == SL_STATUS_OK)
      st = sl__catalog_serialize(&cat, &blob, &len, &err);
  }
  st = sl__comm_agree(c, st, &err, "building the catalog");
  CHECKF(st == SL_STATUS_OK, "%s: %s", name, err.msg);
  if (st != SL_STATUS_OK)
    return;
  /* rank 0's blob, as sent */
  uint8_t *sent = blob;
  size_t sent_len = len;
  CHECK(sl__comm_bcast_blob(c, &sent, &sent_len, 0, &err) == SL_STATUS_OK);
  sl__catalog got;
  st = sl__catalog_deserialize(sent, sent_len, &got, &err);
  CHECKF(st == SL_STATUS_OK, "%s: deserialize on rank %d: %s", name, c->rank, err.msg);
  uint8_t *again = NULL;
  size_t again_len = 0;
  if (st == SL_STATUS_OK)
    CHECK(sl__catalog_serialize(&got, &again, &again_len, &err) == SL_STATUS_OK);
  /* compare with a second, independent broadcast of rank 0's original bytes */
  uint8_t *ref = c->rank == 0 ? blob : NULL;
  size_t ref_len = len;
  CHECK(sl__comm_bcast_blob(c, &ref, &ref_len, 0, &err) == SL_STATUS_OK);
  CHECKF(again_len == ref_len && again != NULL && memcmp(again, ref, ref_len) == 0,
         "%s: rank %d's catalog differs from rank 0's (%zu vs %zu bytes)", name, c->rank, again_len, ref_len);
  if (st == SL_STATUS_OK) {
    CHECK(got.n_tensors > 0 && got.n_files > 0 && got.config_json != NULL);
    for (size_t i = 0; i < got.n_tensors; i++)
      CHECK(sl__catalog_find(&got, got.tensors[i].name) == i);
    for (size_t i = 1; i < got.n_tensors; i++) {
      const sl__cat_tensor *a = &got.tensors[i - 1];
      const sl__cat_tensor *b = &got.tensors[i];
      CHECK(a->file < b->file || (a->file == b->file && a->offset + a->nbytes <= b->offset));
    }
    /* a truncated or corrupted blob is refused, not trusted */
    sl__catalog bad;
    sl__err berr;
    sl__err_clear(&berr);
    CHECK(sl__catalog_deserialize(sent, sent_len - 5, &bad, &berr) != SL_STATUS_OK);
    uint8_t *copy = malloc(sent_len);
    memcpy(copy, sent, sent_len);
    memset(copy + 16, 0xff, 8); /* the folder name's length: huge */
    sl__err_clear(&berr);
    CHECK(sl__catalog_deserialize(copy, sent_len, &bad, &berr) != SL_STATUS_OK);
    free(copy);
    sl__catalog_free(&got);
  }
  free(again);
  if (c->rank != 0) {
    free(sent);
    free(ref);
  }
  free(blob);
  sl__catalog_free(&cat);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl__comm c;
  sl__err err;
  sl__err_clear(&err);
  if (sl__comm_init_mpi(&c, &(MPI_Comm){MPI_COMM_WORLD}, &err) != SL_STATUS_OK) {
    fprintf(stderr, "%s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  sl_test_rank = c.rank;
  static const char *const models[] = {"llama", "qwen3", "mixtral", "deepseek_v3_fp8",
                                       "mistral_consolidated"};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    check_model(&c, models[i]);
  /* rank 0 fails: everybody agrees, with rank 0's message */
  sl__err_clear(&err);
  sl_status st = SL_STATUS_OK;
  if (c.rank == 0)
    st = sl__err_set(&err, SL_STATUS_NO_WEIGHTS, "Cannot find any model weights with 'nothing'");
  st = sl__comm_agree(&c, st, &err, "resolving the model");
  CHECK(st == (c.rank == 0 ? SL_STATUS_NO_WEIGHTS : SL_STATUS_PEER_FAILED));
  CHECK_CONTAINS(err.msg, "Cannot find any model weights with 'nothing'");
  if (c.rank != 0)
    CHECK_CONTAINS(err.msg, "another rank failed while resolving the model: rank 0");
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  sl__comm_free(&c);
  MPI_Finalize();
  return rc;
}
