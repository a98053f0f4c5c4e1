/*
 * model/model_names.c — sources found under vLLM's hf_to_vllm_mapper prefixes (the spec's
 * hf_to_vllm_prefixes, docs/SPECS.md). A spec names its sources as the newest checkpoints store
 * them (a Gemma-3 saved by transformers 4.52 or later: model.language_model.…); vLLM maps those
 * names onto its own (language_model.model.…), which is also how older checkpoints of the same
 * model store them. A source missing under its own name is therefore looked for under the name
 * the mapper would give it, so that both generations load; the source then carries the name the
 * checkpoint has (the checkpoint layout's parameter, the expected set, every message).
 */
#include "model/model_build.h"

#include <stdlib.h>
#include <string.h>

sl_status sl__model_find_mapped(sl__model_builder *b, sl__msrc *out) {
  const sl__spec *top = b->top;
  for (size_t i = 0; top != NULL && i < top->n_prefix_map && out->tensor == SL_NONE; i++) {
    const char *from = top->prefix_from[i];
    if (!sl__str_starts_with(out->name, from))
      continue;
    char *alt = sl__asprintf("%s%s", top->prefix_to[i], out->name + strlen(from));
    if (alt == NULL)
      return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
    uint32_t t = sl__catalog_find(b->cat, alt);
    if (t == SL_NONE) {
      free(alt);
      continue;
    }
    free(out->name);
    out->name = alt;
    out->tensor = t;
  }
  return SL_STATUS_OK;
}
