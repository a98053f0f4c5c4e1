/*
 * fuzz_hub_json.c — libFuzzer target for the JSON the Hub client reads from outside: the revision
 * API reply (sl__hub_parse_revision, a network reply) and trees/<commit>.json (sl__hub_parse_tree,
 * a file other clients write into the cache). Any bytes either parse or fail with a message; an
 * accepted reply has a 40-hex commit and string paths; every path a tree yields is safe to join to
 * a folder (the tree parser drops the others: they would escape the snapshot).
 */
#include "fuzz_common.h"
#include "hub/hub.h"

#include <cjson/cJSON.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  sl__err err;
  sl__err_clear(&err);
  struct cJSON *root = NULL;
  char commit[41];
  sl__vec paths;
  sl__vec_init(&paths, sizeof(const char *));
  sl_status st = sl__hub_parse_revision(text, size, "http://127.0.0.1/api/models/o/n/revision/main", &root,
                                        commit, &paths, &err);
  fuzz_check_error("fuzz_hub_json (revision)", st, &err);
  if (st == SL_STATUS_OK) {
    if (!sl__hub_is_hex(commit, 40))
      abort();
    for (size_t i = 0; i < paths.len; i++) {
      if (SL_VEC_AT(&paths, const char *, i) == NULL)
        abort();
    }
  } else if (st != SL_STATUS_HUB_METADATA && st != SL_STATUS_NOMEM) {
    abort(); /* a bad reply is "unexpected reply", nothing else */
  }
  cJSON_Delete(root);
  sl__vec_free(&paths);

  sl__err_clear(&err);
  root = NULL;
  sl__vec names;
  sl__vec_init(&names, sizeof(const char *));
  st = sl__hub_parse_tree(text, size, "trees/x.json", &root, &names, &err);
  fuzz_check_error("fuzz_hub_json (tree)", st, &err);
  if (st == SL_STATUS_OK) {
    for (size_t i = 0; i < names.len; i++) {
      if (!sl__relpath_is_safe(SL_VEC_AT(&names, const char *, i)))
        abort();
    }
    if (root == NULL && names.len != 0)
      abort();
  } else if (root != NULL || (st != SL_STATUS_HUB_METADATA && st != SL_STATUS_NOMEM)) {
    abort();
  }
  cJSON_Delete(root);
  sl__vec_free(&names);
  return 0;
}
