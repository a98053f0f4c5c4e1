/*
 * model/model_skip.c — the spec's "skip_tensors" rules (model/spec_skip.c) against a model: which
 * layers each rule holds in (its `when` evaluated per layer, with the layer vars), and whether a
 * catalog tensor falls under a rule that holds in its own layer. model/model_expect.c skips such
 * tensors silently, as it does the multi-token-prediction layers.
 */
#include "model/model_build.h"

#include <stdlib.h>
#include <string.h>

sl_status sl__model_skip_rules(sl__model_builder *b, uint8_t **out) {
  const sl__spec *spec = b->e.spec;
  uint32_t layers = b->m->n_layers;
  *out = NULL;
  if (spec->n_skip_tensors == 0)
    return SL_STATUS_OK;
  uint8_t *holds = calloc(spec->n_skip_tensors * (size_t)layers + 1, 1);
  if (holds == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  sl_status st = SL_STATUS_OK;
  for (uint32_t layer = 0; layer < layers && st == SL_STATUS_OK; layer++) {
    sl__model_env_enter_layer(&b->e, (int64_t)layer);
    for (size_t k = 0; k < spec->n_skip_tensors && st == SL_STATUS_OK; k++) {
      bool on = false;
      st = sl__expr_eval_bool(spec->skip_tensors[k].when, sl__model_lookup, &b->e, &on, b->err);
      holds[k * layers + layer] = on;
    }
  }
  sl__model_env_enter_layer(&b->e, -1);
  if (st != SL_STATUS_OK) {
    free(holds);
    return st;
  }
  *out = holds;
  return SL_STATUS_OK;
}

/* Whether name is prefix rule `tmpl` ("head{layer}tail") rendered at a layer; that layer in *layer. */
static bool under(const char *tmpl, const char *name, uint64_t *layer) {
  const char *at = strstr(tmpl, "{layer}");
  size_t head = (size_t)(at - tmpl);
  if (strncmp(name, tmpl, head) != 0)
    return false;
  const char *d = name + head;
  const char *e = d;
  uint64_t k = 0;
  while (*e >= '0' && *e <= '9' && e - d < 10) {
    k = k * 10 + (uint64_t)(*e - '0');
    e++;
  }
  const char *tail = at + strlen("{layer}");
  if (e == d || (*e >= '0' && *e <= '9') || strncmp(e, tail, strlen(tail)) != 0)
    return false;
  *layer = k;
  return true;
}

bool sl__model_skip_match(const sl__spec *spec, const uint8_t *holds, uint32_t layers, const char *name) {
  for (size_t k = 0; holds != NULL && k < spec->n_skip_tensors; k++) {
    uint64_t layer = 0;
    if (under(spec->skip_tensors[k].prefix, name, &layer) && layer < layers && holds[k * layers + layer])
      return true;
  }
  return false;
}
