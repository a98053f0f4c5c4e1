/*
 * model/model_vision.c — the vision tower of a multimodal checkpoint (docs/SPECS.md `vision_prefixes`,
 * docs/spec/ARCHITECTURES.md §13). shardload loads the text model only; a spec names the prefixes
 * of the vision tensors, and a checkpoint holding such tensors is refused, naming them and the
 * option, unless skip_vision is set: then they are skipped like rotary buffers. Never silent.
 */
#include "model/model.h"

#include "base/util.h"

#include <string.h>

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
