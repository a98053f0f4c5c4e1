/*
 * model/gdn.c — the parts of a gated DeltaNet parameter and their row sections (model/gdn.h):
 * which rows of a source each tensor-parallel rank takes follows from them (plan/slicing_gdn.c).
 */
#include "model/gdn.h"

#include "base/util.h"

#include <string.h>

static const char *const part_names[SL_GDN_PART_COUNT] = {"qkvz", "ba", "qkv", "z", "b", "a", "v_heads"};

bool sl__gdn_part_parse(const char *name, uint32_t *out) {
  for (uint32_t k = 0; name != NULL && k < SL_GDN_PART_COUNT; k++) {
    if (strcmp(name, part_names[k]) == 0) {
      *out = k;
      return true;
    }
  }
  return false;
}

const char *sl__gdn_part_name(uint32_t part) {
  return part < SL_GDN_PART_COUNT ? part_names[part] : "?";
}

size_t sl__gdn_sections(uint32_t part, const sl__gdn_dims *d, sl__gdn_section out[SL_GDN_MAX_SECTIONS]) {
  uint64_t K = 0;
  uint64_t V = 0;
  uint64_t twice = 0;
  uint64_t nv2 = 0;
  if (sl__mul_overflow(d->nk, d->dk, &K) || sl__mul_overflow(d->nv, d->dv, &V) ||
      sl__add_overflow(K, V, &twice) || sl__mul_overflow(twice, 2, &twice) ||
      sl__mul_overflow(d->nv, 2, &nv2))
    return 0;
  switch ((sl__gdn_part)part) {
  case SL_GDN_QKVZ: /* per key head: q, k, then its value heads' v and z rows */
    out[0] = (sl__gdn_section){twice, d->nk};
    return 1;
  case SL_GDN_BA: /* per key head: its value heads' b, then their a */
    out[0] = (sl__gdn_section){nv2, d->nk};
    return 1;
  case SL_GDN_QKV:
    out[0] = (sl__gdn_section){K, d->nk};
    out[1] = (sl__gdn_section){K, d->nk};
    out[2] = (sl__gdn_section){V, d->nv};
    return 3;
  case SL_GDN_Z:
    out[0] = (sl__gdn_section){V, d->nv};
    return 1;
  case SL_GDN_B:
  case SL_GDN_A:
  case SL_GDN_V_HEADS:
    out[0] = (sl__gdn_section){d->nv, d->nv};
    return 1;
  case SL_GDN_PART_COUNT:
    break;
  }
  return 0;
}

const char *sl__gdn_spec_check(const sl__spec_param *p) {
  if (p->n_sources < 1 || p->n_sources > 4)
    return "gdn takes one to four sources";
  for (size_t i = 0; i < p->n_sources; i++) {
    uint32_t code = 0;
    if (!sl__gdn_part_parse(p->sources[i].part, &code))
      return "every gdn source needs a part among qkvz, ba, qkv, z, b, a, v_heads";
  }
  if (p->q_heads == NULL || p->kv_heads == NULL || p->head_dim == NULL || p->v_head_dim == NULL)
    return "gdn needs \"heads\": {\"q\" (key heads), \"kv\" (value heads), \"head_dim\" (key head "
           "size), \"v_head_dim\" (value head size)}";
  return NULL;
}
