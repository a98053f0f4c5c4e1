/*
 * fuzz_plan_json.c — libFuzzer target for the JSON form of caller-described plans
 * (model/described_json.c) and the canonical blob ranks exchange (model/described.c,
 * model/described_parse.c): any bytes parse into a plan or fail with a message; an accepted plan
 * serializes to a blob that reads back with its counts, and writes back to JSON that parses into
 * the same blob. Input starting with the blob's magic is also read as a blob (another rank's,
 * untrusted): accepted or refused with a message, never a crash.
 */
#include "fuzz_common.h"
#include "model/described.h"

static void round_trip(struct sl_plan *p) {
  sl__err err;
  sl__err_clear(&err);
  uint8_t *blob = NULL;
  size_t len = 0;
  if (sl__plan_serialize(p, &blob, &len, &err) != SL_STATUS_OK)
    return; /* out of memory only */
  sl__dplan d;
  sl_status st = sl__dplan_parse(blob, len, "fuzz blob", &d, &err);
  if (st != SL_STATUS_OK || d.n_params != p->params.len || d.n_regions != p->regions.len)
    abort(); /* a blob the writer made must read back */
  sl__dplan_free(&d);
  char *text = sl__plan_to_json(p);
  struct sl_plan q;
  if (text != NULL && sl__plan_from_json(text, strlen(text), &q, &err) == SL_STATUS_OK) {
    uint8_t *again = NULL;
    size_t again_len = 0;
    if (sl__plan_serialize(&q, &again, &again_len, &err) == SL_STATUS_OK &&
        (again_len != len || memcmp(again, blob, len) != 0))
      abort(); /* written and read back: the same plan */
    free(again);
    sl__plan_release(&q);
  } else if (text != NULL && err.status != SL_STATUS_NOMEM) {
    abort(); /* the writer's JSON must read back */
  }
  free(text);
  free(blob);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__err err;
  sl__err_clear(&err);
  struct sl_plan p;
  sl_status st = sl__plan_from_json((const char *)data, size, &p, &err);
  fuzz_check_error("fuzz_plan_json", st, &err);
  if (st == SL_STATUS_OK) {
    round_trip(&p);
    sl__plan_release(&p);
  }
  if (size >= 8 && memcmp(data, "SLPLAN01", 8) == 0) {
    sl__dplan d;
    sl__err_clear(&err);
    st = sl__dplan_parse(data, size, "fuzz blob", &d, &err);
    fuzz_check_error("fuzz_plan_json", st, &err);
    if (st == SL_STATUS_OK)
      sl__dplan_free(&d);
  }
  return 0;
}
