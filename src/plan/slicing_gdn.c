/*
 * plan/slicing_gdn.c — the slicing style of the gated DeltaNet (linear attention) layers of
 * Qwen3-Next and Qwen3.5 (docs/spec/LAYOUTS.md §3.13), registered in plan/slicing.c's style table,
 * and the check that a tensor-parallel size keeps their heads whole.
 *
 * Each source names its part (model/gdn.h), a list of row sections: every section is split into
 * tp equal row blocks and rank r takes block r of each, in order; the sources follow one another.
 * That one rule gives what vLLM's loaders put on each rank: Qwen3-Next's in_proj_qkvz / in_proj_ba
 * as contiguous row blocks of whole key-head groups (a ColumnParallelLinear of one output), the
 * q, k and v sections of conv1d each cut separately (mamba_v2_sharded_weight_loader), Qwen3.5's
 * in_proj_qkv + in_proj_z and in_proj_b + in_proj_a stacked into in_proj_qkvz and in_proj_ba (a
 * MergedColumnParallelLinear of four and of two outputs), A_log and dt_bias by value heads.
 * A rank that would cut a head (or a key-head group) is refused before anything is read
 * (sl__gdn_check_tp), naming the tensor and the rule.
 */
#include "model/gdn.h"
#include "plan/slicing_styles.h"

#include "base/util.h"

#include <stdio.h>
#include <string.h>

static sl__gdn_dims dims_of(const sl__mparam *p) {
  sl__gdn_dims d = {.nk = p->q_heads, .nv = p->kv_heads, .dk = p->head_dim, .dv = p->v_head_dim};
  return d;
}

/* The refusal of a tensor-parallel size that does not divide a head count. */
static sl_status cut_heads(sl__err *err, const char *name, uint64_t heads, const char *what, uint32_t tp) {
  return sl__err_set(err, SL_STATUS_DIVISIBILITY,
                     "%s: the gated DeltaNet's %llu %s cannot be split evenly over tensor-parallel size %u: "
                     "every rank must hold whole key-head groups (the q, k, v and z rows of a key head and "
                     "of its value heads, as vLLM's in_proj_qkvz, in_proj_ba and conv1d loaders require), "
                     "so tp must divide %llu",
                     name, (unsigned long long)heads, what, tp, (unsigned long long)heads);
}

sl_status sl__gdn_check_tp(const sl__model *m, uint32_t tp, sl__err *err) {
  for (size_t i = 0; i < m->n_params; i++) {
    const sl__mparam *p = &m->params[i];
    if (p->style != SL_STYLE_GDN || p->owned)
      continue;
    if (p->q_heads == 0 || p->kv_heads == 0 || p->kv_heads % p->q_heads != 0)
      return sl__err_set(err, SL_STATUS_MODEL_CONFIG,
                         "%s: the gated DeltaNet needs key heads (linear_num_key_heads, %llu) that divide "
                         "its value heads (linear_num_value_heads, %llu)",
                         p->name, (unsigned long long)p->q_heads, (unsigned long long)p->kv_heads);
    if (p->q_heads % tp != 0)
      return cut_heads(err, p->name, p->q_heads, "key heads (linear_num_key_heads)", tp);
    if (p->kv_heads % tp != 0)
      return cut_heads(err, p->name, p->kv_heads, "value heads (linear_num_value_heads)", tp);
  }
  return SL_STATUS_OK;
}

/* Source k: each of its sections' block r, at local row *at onwards. */
static sl_status slice_source(sl__slicer *s, uint32_t k, uint64_t *at, char *desc, size_t dcap, size_t *off) {
  const sl__mparam *p = s->p;
  const sl__msrc *src = &p->src[k];
  uint32_t T = s->x->tp;
  uint64_t r = s->x->r;
  sl__gdn_dims d = dims_of(p);
  sl__gdn_section sec[SL_GDN_MAX_SECTIONS];
  size_t n = sl__gdn_sections(src->part, &d, sec);
  uint64_t total = 0;
  bool overflow = false;
  for (size_t j = 0; j < n; j++)
    overflow = overflow || sl__add_overflow(total, sec[j].rows, &total);
  if (n == 0 || overflow || sl__src_view_rows(src) != total || sl__src_cols(src) != s->lcols)
    return sl__err_set(s->err, SL_STATUS_SHAPE,
                       "%s: part %s of %s needs %llu rows of %llu elements (from the heads %llu, %llu and "
                       "head sizes %llu, %llu)",
                       src->name, sl__gdn_part_name(src->part), p->name, (unsigned long long)total,
                       (unsigned long long)s->lcols, (unsigned long long)d.nk, (unsigned long long)d.nv,
                       (unsigned long long)d.dk, (unsigned long long)d.dv);
  uint64_t base = 0;
  for (size_t j = 0; j < n; j++) {
    if (sec[j].heads == 0 || sec[j].heads % T != 0 || sec[j].rows % sec[j].heads != 0)
      return cut_heads(s->err, src->name, sec[j].heads, "heads of one section", T);
    uint64_t per = sec[j].rows / T;
    sl_status st = sl__slab(s, k, base + r * per, per, 1, 0, s->lcols, *at, 0);
    if (st != SL_STATUS_OK)
      return st;
    if (*off < dcap)
      *off +=
          (size_t)snprintf(desc + *off, dcap - *off, " %s rows [%llu, %llu);", sl__gdn_part_name(src->part),
                           (unsigned long long)(base + r * per), (unsigned long long)(base + r * per + per));
    *at += per;
    base += sec[j].rows;
  }
  return SL_STATUS_OK;
}

sl_status sl__slice_gdn(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  if (sl__param_is_scale(p))
    return sl__err_set(s->err, SL_STATUS_QUANTIZATION,
                       "%s: quantized gated DeltaNet weights are not supported", p->src[0].name);
  sl__shape_like(ls, &p->src[0]);
  s->lcols = sl__src_cols(&p->src[0]);
  uint64_t at = 0;
  size_t off = (size_t)snprintf(desc, dcap, "gdn:");
  for (uint32_t k = 0; k < p->n_src; k++) {
    sl_status st = slice_source(s, k, &at, desc, dcap, &off);
    if (st != SL_STATUS_OK)
      return st;
  }
  ls->shape[0] = at;
  return SL_STATUS_OK;
}
