/*
 * model/gdn.h — the sources of the gated DeltaNet (linear attention) layers of Qwen3-Next and
 * Qwen3.5 (docs/spec/ARCHITECTURES.md §17, docs/spec/LAYOUTS.md §3.13): each source of a parameter of
 * style `gdn` names its part, and a part is a list of row sections, each split evenly over the
 * tensor-parallel ranks by whole heads. Pure: names, codes and sizes; the slicing is
 * plan/slicing_gdn.c.
 *
 * With nk key heads of dk rows and nv value heads of dv rows (K = nk*dk, V = nv*dv):
 *   qkvz     Qwen3-Next's fused projection [2K + 2V, H]: one section, nk key-head groups
 *   ba       Qwen3-Next's fused b/a projection [2*nv, H]: one section, nk key-head groups
 *   qkv      q, k and v rows [K | K | V] (Qwen3.5's in_proj_qkv; conv1d of both): three sections
 *   z        [V] (Qwen3.5's in_proj_z): one section of nv heads
 *   b, a     [nv] each (Qwen3.5's in_proj_b, in_proj_a): one section of nv heads
 *   v_heads  [nv] (A_log, dt_bias): one section of nv heads
 */
#ifndef SL_MODEL_GDN_H
#define SL_MODEL_GDN_H

#include "model/spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sl__gdn_part {
  SL_GDN_QKVZ = 0,
  SL_GDN_BA,
  SL_GDN_QKV,
  SL_GDN_Z,
  SL_GDN_B,
  SL_GDN_A,
  SL_GDN_V_HEADS,
  SL_GDN_PART_COUNT
} sl__gdn_part;

/* At most this many sections in one part (qkv). */
#define SL_GDN_MAX_SECTIONS 3

/* The head counts and head sizes of a layer (the spec's "heads": q = nk, kv = nv, head_dim = dk,
 * v_head_dim = dv). */
typedef struct sl__gdn_dims {
  uint64_t nk, nv, dk, dv;
} sl__gdn_dims;

/* One section: its rows, and the heads (or key-head groups) they hold, which the ranks split. */
typedef struct sl__gdn_section {
  uint64_t rows;
  uint64_t heads;
} sl__gdn_section;

/* The code of a part name; false when the name is none of the parts above. */
bool sl__gdn_part_parse(const char *name, uint32_t *out);
/* The name of a part code ("?" when out of range). */
const char *sl__gdn_part_name(uint32_t part);
/* The sections of a part into out (up to SL_GDN_MAX_SECTIONS); returns their count, 0 for an
 * unknown part or a size that overflows. */
size_t sl__gdn_sections(uint32_t part, const sl__gdn_dims *d, sl__gdn_section out[SL_GDN_MAX_SECTIONS]);

/* What a spec parameter of style gdn lacks, as a message for the spec's error (NULL when it is
 * well formed): every source has one of the parts, and "heads" gives q, kv, head_dim and
 * v_head_dim. */
const char *sl__gdn_spec_check(const sl__spec_param *p);

#endif
