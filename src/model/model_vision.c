/*
 * model/model_vision.c — the vision tower of a multimodal checkpoint (docs/SPECS.md, "Multimodal
 * wrappers"; docs/spec/ARCHITECTURES.md §13, §24).
 *
 * With a vision spec (the spec's "vision"), the tower is loaded as vLLM shards it: each vision
 * spec parameter is built once ("all") or once per vision block ("layer", {layer} the block), in
 * the vision spec's own expression environment over the same config.json, and every pipeline
 * stage holds it (vLLM builds the tower in every stage's model). With skip_vision the tower is
 * dropped before the build (sl__spec_drop_vision) and the tensors under the vision prefixes are
 * skipped: counted as skipped, never missing. A spec that lists vision_prefixes without a vision
 * spec (its tower not described) refuses such tensors, naming them and the option, unless
 * skip_vision is set. Never silent.
 */
#include "model/model_build.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* Blocks a vision tower may have (the largest released have a few dozen): bounds the work a
 * config.json can ask for on every rank. */
#define SL_VISION_MAX_BLOCKS 100000u

/* Builds one vision spec parameter (and its companions); every parameter it adds is held by every
 * stage and belongs to no decoder layer. */
static sl_status build_one(sl__model_builder *b, const sl__spec_param *sp, int64_t block) {
  size_t first = b->params.len;
  sl_status st = sl__model_build_param(b, sp, block);
  for (size_t i = first; i < b->params.len; i++) {
    sl__mparam *p = &SL_VEC_AT(&b->params, sl__mparam, i);
    p->place = SL_PLACE_ALL;
    p->layer = -1;
  }
  return st;
}

static sl_status build_tower(sl__model_builder *b, const sl__spec *v) {
  sl__model_env_enter_layer(&b->e, -1);
  bool present = true;
  sl_status st = sl__expr_eval_bool(b->top->vision_when, sl__model_lookup, &b->e, &present, b->err);
  if (st != SL_STATUS_OK || !present) /* a text-only export of the wrapper: no tower to load */
    return st;
  uint64_t blocks = 0;
  st = sl__expr_eval_u64(v->num_layers, sl__model_lookup, &b->e, &blocks, b->err);
  if (st == SL_STATUS_OK && blocks > SL_VISION_MAX_BLOCKS)
    st = sl__err_set(b->err, SL_STATUS_MODEL_CONFIG,
                     "vision spec %s: %llu vision blocks is out of range (0 .. %u)", v->path,
                     (unsigned long long)blocks, SL_VISION_MAX_BLOCKS);
  for (size_t i = 0; i < v->n_params && st == SL_STATUS_OK; i++)
    if (v->params[i].place == SL_PLACE_ALL)
      st = build_one(b, &v->params[i], -1);
  for (uint64_t block = 0; block < blocks && st == SL_STATUS_OK; block++) {
    sl__model_env_enter_layer(&b->e, (int64_t)block);
    for (size_t i = 0; i < v->n_params && st == SL_STATUS_OK; i++)
      if (v->params[i].place == SL_PLACE_LAYER)
        st = build_one(b, &v->params[i], (int64_t)block);
  }
  return st;
}

sl_status sl__model_build_vision(sl__model_builder *b) {
  const sl__spec *v = b->top->vision;
  if (v == NULL)
    return SL_STATUS_OK;
  sl__model_env saved = b->e;
  sl__model_env e;
  memset(&e, 0, sizeof e);
  e.spec = v;
  e.config = saved.config;
  e.vars = calloc(v->n_vars + 1, sizeof *e.vars);
  e.var_state = calloc(v->n_vars + 1, 1);
  e.lvars = calloc(v->n_layer_vars + 1, sizeof *e.lvars);
  e.lvar_state = calloc(v->n_layer_vars + 1, 1);
  sl_status st = SL_STATUS_OK;
  if (e.vars == NULL || e.var_state == NULL || e.lvars == NULL || e.lvar_state == NULL)
    st = sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  b->e = e;
  /* "quantized": false: vLLM builds the tower without the checkpoint's quant_config (Llama-4's,
   * Kimi-K2.5's), so no parameter of it gets quantization companions, whatever the config says. */
  struct sl__packed_cfg *packed = b->packed;
  bool fp8 = b->m->fp8;
  bool ct_fp8 = b->m->ct_fp8;
  sl__int4_method int4 = b->m->int4;
  if (b->top->vision_unquantized) {
    b->packed = NULL;
    b->m->fp8 = b->m->ct_fp8 = false;
    b->m->int4 = SL_INT4_NONE;
  }
  if (st == SL_STATUS_OK)
    st = build_tower(b, v);
  b->packed = packed;
  b->m->fp8 = fp8;
  b->m->ct_fp8 = ct_fp8;
  b->m->int4 = int4;
  b->e = saved;
  free(e.vars);
  free(e.var_state);
  free(e.lvars);
  free(e.lvar_state);
  return st;
}

static bool under(const sl__spec *spec, const char *name) {
  for (size_t k = 0; k < spec->n_vision_prefixes; k++)
    if (sl__str_starts_with(name, spec->vision_prefixes[k]))
      return true;
  return false;
}

sl_status sl__model_vision(sl__model *m, const sl__spec *spec, const sl__catalog *cat, bool skip,
                           sl__err *err) {
  if (spec->n_vision_prefixes == 0 || m->tensor_fate == NULL)
    return SL_STATUS_OK;
  /* A described tower that is loaded: what it leaves unread is an ordinary unexpected tensor. */
  if (spec->vision != NULL && !skip)
    return SL_STATUS_OK;
  size_t count = 0;
  const char *first = NULL;
  const char *second = NULL;
  for (size_t t = 0; t < cat->n_tensors; t++) {
    if (m->tensor_fate[t] == SL_FATE_CONSUMED || !under(spec, cat->tensors[t].name))
      continue;
    if (skip) {
      m->tensor_fate[t] = SL_FATE_SKIPPED;
      continue;
    }
    count++;
    if (first == NULL)
      first = cat->tensors[t].name;
    else if (second == NULL)
      second = cat->tensors[t].name;
  }
  if (count == 0)
    return SL_STATUS_OK;
  return sl__err_set(err, SL_STATUS_ARCH,
                     "%s: the checkpoint holds %zu vision tensor%s (\"%s\"%s%s%s) under %s%s%s that are not "
                     "loaded; set skip_vision (--skip-vision) to load the text model without them",
                     spec->family, count, count == 1 ? "" : "s", first, second != NULL ? ", \"" : "",
                     second != NULL ? second : "", second != NULL ? (count > 2 ? "\", ..." : "\"") : "",
                     spec->vision_prefixes[0], spec->n_vision_prefixes > 1 ? " and " : "",
                     spec->n_vision_prefixes > 1 ? spec->vision_prefixes[1] : "");
}
