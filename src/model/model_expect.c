/*
 * model/model_expect.c — what the tracking of docs/spec/TRACKING.md §1–§3 checks a load against: the expected
 * set of checkpoint tensors (every source of every parameter but fp8 scales, sorted bytewise, each
 * feeding exactly one parameter) and the fate of the catalog tensors no parameter consumes
 * (silently skipped, listed as ignored, or unexpected); the spec's layer-conditional skips are
 * model/model_skip.c's.
 */
#include "base/hashmap.h"
#include "model/model_build.h"

#include <stdlib.h>
#include <string.h>

static int cmp_cstr(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

sl_status sl__model_build_units(sl__model_builder *b) {
  sl__model *m = b->m;
  size_t n = 0;
  for (size_t i = 0; i < m->n_params; i++)
    if (m->params[i].block_rows == 0)
      n += m->params[i].n_src;
  m->units = calloc(n + 1, sizeof *m->units);
  m->unit_param = calloc(n + 1, sizeof *m->unit_param);
  if (m->units == NULL || m->unit_param == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < m->n_params; i++) {
    if (m->params[i].block_rows != 0)
      continue;
    for (size_t j = 0; j < m->params[i].n_src; j++) {
      m->units[m->n_units] = sl__strdup(m->params[i].src[j].name);
      if (m->units[m->n_units] == NULL)
        return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
      m->n_units++;
    }
  }
  qsort(m->units, m->n_units, sizeof *m->units, cmp_cstr);
  sl__hashmap map;
  sl__hashmap_init(&map, SL_HASHMAP_BORROW);
  for (size_t i = 0; i < m->n_units; i++) {
    uint64_t prev = 0;
    bool oom = false;
    if (!sl__hashmap_put(&map, m->units[i], strlen(m->units[i]), i, &prev, &oom)) {
      sl__hashmap_free(&map);
      if (oom)
        return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
      return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: checkpoint tensor '%s' feeds two parameters",
                         b->e.spec->path, m->units[i]);
    }
  }
  for (size_t i = 0; i < m->n_params; i++) {
    if (m->params[i].block_rows != 0)
      continue;
    for (size_t j = 0; j < m->params[i].n_src; j++) {
      sl__msrc *s = &m->params[i].src[j];
      uint64_t u = SL_NONE;
      sl__hashmap_get(&map, s->name, strlen(s->name), &u);
      s->unit = (uint32_t)u;
      m->unit_param[u] = (uint32_t)i;
    }
  }
  sl__hashmap_free(&map);
  return SL_STATUS_OK;
}

static const char *const always_skipped[] = {"rotary_emb.inv_freq", "rotary_emb.cos_cached",
                                             "rotary_emb.sin_cached"};

sl_status sl__model_build_fates(sl__model_builder *b) {
  sl__model *m = b->m;
  const sl__catalog *cat = b->cat;
  m->tensor_fate = calloc(cat->n_tensors + 1, 1);
  if (m->tensor_fate == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < m->n_params; i++)
    for (size_t j = 0; j < m->params[i].n_src; j++)
      if (m->params[i].src[j].tensor != SL_NONE)
        m->tensor_fate[m->params[i].src[j].tensor] = SL_FATE_CONSUMED;
  uint64_t mtp_from = 0;
  uint64_t mtp_count = 0;
  const char *mtp_prefix =
      b->e.spec->skip_layers_prefix != NULL ? b->e.spec->skip_layers_prefix : "model.layers.";
  sl__model_env_enter_layer(&b->e, -1);
  if (b->e.spec->skip_layers_from != NULL) {
    sl_status st = sl__expr_eval_u64(b->e.spec->skip_layers_from, sl__model_lookup, &b->e, &mtp_from, b->err);
    if (st == SL_STATUS_OK)
      st = sl__expr_eval_u64(b->e.spec->skip_layers_count, sl__model_lookup, &b->e, &mtp_count, b->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  uint8_t *holds = NULL;
  sl_status st = sl__model_skip_rules(b, &holds);
  if (st != SL_STATUS_OK)
    return st;
  for (size_t t = 0; t < cat->n_tensors; t++) {
    if (m->tensor_fate[t] == SL_FATE_CONSUMED)
      continue;
    const char *name = cat->tensors[t].name;
    bool skip = false;
    for (size_t k = 0; k < sizeof always_skipped / sizeof always_skipped[0]; k++)
      skip = skip || strstr(name, always_skipped[k]) != NULL;
    for (size_t k = 0; k < b->e.spec->n_skip_contains; k++)
      skip = skip || strstr(name, b->e.spec->skip_contains[k]) != NULL;
    if (m->tied && sl__str_starts_with(name, "lm_head."))
      skip = true;
    /* GPTQ: the vllm layout reads a fused linear's g_idx from its first part (model/model_quant.c). */
    if (m->int4 == SL_INT4_GPTQ && m->layout == SL_LAYOUT_VLLM && sl__str_ends_with(name, ".g_idx"))
      skip = true;
    /* Pack-quantized: the vllm layout holds the weight_shape of the part vLLM loads last
     * (model/model_packed.c); the other parts' are read by vLLM and overwritten. */
    if (m->packed && m->layout == SL_LAYOUT_VLLM && sl__str_ends_with(name, ".weight_shape"))
      skip = true;
    if (mtp_count > 0 && sl__str_starts_with(name, mtp_prefix)) {
      uint64_t k = 0;
      const char *d = name + strlen(mtp_prefix);
      const char *e = d;
      while (*e >= '0' && *e <= '9') {
        k = k * 10 + (uint64_t)(*e - '0');
        e++;
      }
      if (e > d && e - d < 10 && *e == '.' && k >= mtp_from && k < mtp_from + mtp_count)
        skip = true;
    }
    skip = skip || sl__model_skip_match(b->e.spec, holds, m->n_layers, name);
    if (skip) {
      m->tensor_fate[t] = SL_FATE_SKIPPED;
      continue;
    }
    if (sl__str_ends_with(name, ".bias")) {
      size_t len = strlen(name);
      char *w = sl__asprintf("%.*s.weight", (int)(len - 5), name);
      /* the weight of an int4 linear is its qweight (GPTQ checkpoints often carry biases) */
      char *qw = sl__asprintf("%.*s.%s", (int)(len - 5), name, m->packed ? "weight_packed" : "qweight");
      if (w == NULL || qw == NULL) {
        free(w);
        free(qw);
        free(holds);
        return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
      }
      uint32_t wt = sl__catalog_find(cat, w);
      if (wt == SL_NONE && (m->int4 != SL_INT4_NONE || m->packed))
        wt = sl__catalog_find(cat, qw);
      free(w);
      free(qw);
      if (wt != SL_NONE && m->tensor_fate[wt] == SL_FATE_CONSUMED)
        m->tensor_fate[t] = SL_FATE_IGNORED;
    }
  }
  free(holds);
  return SL_STATUS_OK;
}
