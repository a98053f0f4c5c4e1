/*
 * reference.c — the independent reference of docs/spec/LAYOUTS.md's slicing rules (see reference.h):
 * the table of one rank. The layout gives the rank's tensor-parallel rank, pipeline stage and data
 * parallel replica (docs/spec/LAYOUTS.md §1–§2) and its experts (docs/spec/EXPERTS.md); every
 * definition is checked on every rank, and each one the rank's stage holds becomes table entries
 * (reference_slice.c). The model is opened by reference_model.c, the cluster figures come from
 * reference_cluster.c; reference_internal.h lists every part.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference_internal.h"

#include "values.h"

#include <stdlib.h>
#include <string.h>

bool sl_ref_stage_layers(uint32_t layers, uint32_t stages, uint32_t stage, uint32_t *start, uint32_t *count) {
  if (stages == 0 || layers < stages || stage >= stages)
    return false;
  uint32_t base = layers / stages;
  uint32_t rem = layers % stages;
  uint32_t s = 0;
  for (uint32_t p = 0; p <= stage; p++) {
    /* Stages P-2, P-3, ..., P-1-rem get one more layer; the last stage never. */
    uint32_t c = base + ((p + 1 < stages && p + 1 + rem >= stages) ? 1 : 0);
    if (p == stage) {
      *start = s;
      *count = c;
      return true;
    }
    s += c;
  }
  return false;
}

/* The tied head (docs/spec/LAYOUTS.md §2.3): an alias entry with the embedding's shape and content. */
static void add_tied_head(ctx *c) {
  sl_ref_table *tab = c->tab;
  const sl_ref_model *m = c->m;
  /* the embedding's entry (checkpoint layout: its tensor's name), the head's name, the tensor:
   * under the text model's roots, unless the family names them (Qwen3.5) */
  char vembed[128];
  char sembed[128];
  snprintf(vembed, sizeof vembed, "%sembed_tokens.weight", m->embed_v[0] != '\0' ? "" : m->vroot);
  snprintf(sembed, sizeof sembed, "%sembed_tokens.weight", m->embed_s[0] != '\0' ? "" : m->sroot);
  const char *ev = m->embed_v[0] != '\0' ? m->embed_v : vembed;
  const char *tname = m->embed_s[0] != '\0' ? m->embed_s : sembed;
  const char *ename = c->ckpt ? tname : ev;
  const char *hname = m->head_v[0] != '\0' ? m->head_v : m->vhead;
  size_t embed = tab->count;
  for (size_t i = 0; i < tab->count; i++) {
    if (strcmp(tab->params[i].name, ename) == 0)
      embed = i;
  }
  if (embed == tab->count) {
    ref_ctx_fail(c, SL_STATUS_INTERNAL, "reference: tied head without an embedding on the last stage");
    return;
  }
  sl_ref_param e = tab->params[embed];
  const rtensor *t = ref_tens(c, ref_find_tensor(c->m, tname));
  sl_ref_param *p = ref_entry_new(c, hname, t, e.ndim, e.global_shape, e.local_shape);
  if (p == NULL)
    return;
  /* ref_entry_new may have moved the array: take the embedding again. */
  const sl_ref_param *src = &tab->params[embed];
  p->alias_of = tab->params[embed].name;
  p->segs = malloc((src->n_segs + 1) * sizeof *p->segs);
  if (p->segs == NULL) {
    ref_ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
    return;
  }
  memcpy(p->segs, src->segs, src->n_segs * sizeof *p->segs);
  p->n_segs = src->n_segs;
}

/* docs/spec/EXPERTS.md §1 / §3: with expert parallelism the stage group of D*T ranks shares the
 * experts out (each whole); without it, every rank holds every expert, split over D*T. */
static void place_experts(ctx *c, const sl_ref_layout *lay, uint64_t D, uint64_t q, bool ep) {
  const sl_ref_model *m = c->m;
  sl_ref_table *tab = c->tab;
  if (ep) {
    bool rr = lay->round_robin && m->n_group > 1;
    c->Mt = 1;
    c->mr = 0;
    tab->experts_local = sl_ref_expert_set((uint32_t)m->E, (uint32_t)(D * c->T), (uint32_t)(q * c->T + c->r),
                                           rr, tab->expert_ids, 512);
  } else {
    c->Mt = D * c->T;
    c->mr = q * c->T + c->r;
    tab->experts_local = sl_ref_expert_set((uint32_t)m->E, 1, 0, false, tab->expert_ids, 512);
  }
  c->n_local = tab->experts_local;
  c->local = tab->expert_ids;
}

/* Every definition checked, then those the rank's stage holds built (embedding on the first stage,
 * and on the last when the head is tied; final norm and head on the last; AT_ALL on every stage). */
static void build_stage(ctx *c, bool first, bool last) {
  const sl_ref_model *m = c->m;
  const sl_ref_table *tab = c->tab;
  if ((m->fam == FAM_DEEPSEEK || m->fam == FAM_DSA || m->fam == FAM_DSA_MTP || m->fam == FAM_DSV4 ||
       ref_is_qwen_next(m->fam)) &&
      m->nh % c->T != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "num_attention_heads %llu not divisible by tp %llu",
                 (unsigned long long)m->nh, (unsigned long long)c->T);
  if (c->st == SL_STATUS_OK && m->ng != 0 && m->ng % c->T != 0) /* DeepSeek-V4's wo_a / wo_b */
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "o_groups %llu not divisible by tp %llu",
                 (unsigned long long)m->ng, (unsigned long long)c->T);
  for (size_t i = 0; i < m->n_defs && c->st == SL_STATUS_OK; i++) {
    if (m->defs[i].vision && c->skip_vision)
      continue;
    if (m->defs[i].packed)
      ref_packed_def(c, &m->defs[i], false);
    else if (m->defs[i].int4)
      ref_int4_def(c, &m->defs[i], false);
    else
      ref_check_def(c, &m->defs[i]);
  }
  for (size_t i = 0; i < m->n_defs && c->st == SL_STATUS_OK; i++) {
    const rdef *d = &m->defs[i];
    bool here = false;
    if (d->vision && c->skip_vision)
      here = false;
    else if (d->at == AT_EMBED)
      here = first || (m->tie && last);
    else if (d->at == AT_LAYER)
      here = d->layer >= tab->layer_start && d->layer < tab->layer_end;
    else if (d->at == AT_ALL)
      here = true; /* docs/spec/ARCHITECTURES.md §23, §24: every stage */
    else
      here = last;
    if (here)
      ref_build_def(c, d);
  }
  if (c->st == SL_STATUS_OK && m->tie && last && !m->embed_everywhere)
    add_tied_head(c);
}

sl_status sl_ref_table_build(const sl_ref_model *m, const sl_ref_layout *lay, sl_ref_table **out, char *msg,
                             size_t cap) {
  *out = NULL;
  uint64_t T = (uint64_t)lay->tp;
  uint64_t P = (uint64_t)lay->pp;
  uint64_t D = (uint64_t)lay->dp;
  if (lay->tp < 1 || lay->pp < 1 || lay->dp < 1 || lay->rank < 0 || (uint64_t)lay->rank >= T * P * D) {
    ref_msg(msg, cap, "reference: invalid layout tp %d pp %d dp %d rank %d", lay->tp, lay->pp, lay->dp,
            lay->rank);
    return SL_STATUS_LAYOUT;
  }
  uint64_t g = (uint64_t)lay->rank;
  uint64_t r = g % T;
  uint64_t p = (g / T) % P;
  uint64_t q = g / (P * T);
  uint32_t start = 0;
  uint32_t count = 0;
  if (!sl_ref_stage_layers((uint32_t)m->L, (uint32_t)P, (uint32_t)p, &start, &count)) {
    ref_msg(msg, cap, "reference: %llu layers cannot be split over %llu pipeline stages",
            (unsigned long long)m->L, (unsigned long long)P);
    return SL_STATUS_LAYOUT;
  }
  sl_ref_table *tab = calloc(1, sizeof *tab);
  if (tab == NULL)
    return SL_STATUS_NOMEM;
  tab->stage = (uint32_t)p;
  tab->layer_start = start;
  tab->layer_end = start + count;
  ctx c = {.m = m,
           .T = T,
           .r = r,
           .ckpt = lay->checkpoint_layout,
           .skip_vision = lay->skip_vision,
           .tab = tab,
           .msg = msg,
           .cap = cap};
  bool ep = lay->expert_parallel && D * T > 1 && m->E > 0;
  place_experts(&c, lay, D, q, ep);
  build_stage(&c, p == 0, p == P - 1);
  if (!ep && m->E == 0)
    tab->experts_local = 0;
  if (c.st != SL_STATUS_OK) {
    sl_ref_table_free(tab);
    return c.st;
  }
  *out = tab;
  return SL_STATUS_OK;
}

void sl_ref_table_free(sl_ref_table *t) {
  if (t == NULL)
    return;
  for (size_t i = 0; i < t->count; i++) {
    free(t->params[i].name);
    free(t->params[i].segs);
  }
  free(t->params);
  free(t);
}

const sl_ref_param *sl_ref_table_find(const sl_ref_table *t, const char *name) {
  for (size_t i = 0; i < t->count; i++) {
    if (strcmp(t->params[i].name, name) == 0)
      return &t->params[i];
  }
  return NULL;
}

void sl_ref_param_fill(const sl_ref_model *m, const sl_ref_param *p, uint8_t *out) {
  if (p->src_dtype != NULL) {
    ref_fill_held(m, p, out);
    return;
  }
  memset(out, 0, p->nbytes);
  for (size_t i = 0; i < p->n_segs; i++) {
    const sl_ref_seg *s = &p->segs[i];
    if (s->tensor >= 0 && s->dst + s->len <= p->nbytes && m->tensors[s->tensor].literal)
      memcpy(out + s->dst, m->tensors[s->tensor].lit + s->src, s->len);
    else if (s->tensor >= 0 && s->dst + s->len <= p->nbytes)
      sl_value_fill(m->tensors[s->tensor].file_name, s->src, out + s->dst, s->len);
  }
}

void sl_ref_describe(const sl_ref_model *m, const sl_ref_param *p, uint64_t offset, char *buf, size_t cap) {
  if (p->src_dtype != NULL) /* held converted: the source byte of the element */
    offset = offset / (p->dtype_bits / 8) * (p->src_bits / 8);
  for (size_t i = 0; i < p->n_segs; i++) {
    const sl_ref_seg *s = &p->segs[i];
    if (offset >= s->dst && offset < s->dst + s->len) {
      if (s->tensor < 0)
        ref_msg(buf, cap, "zero padding");
      else
        ref_msg(buf, cap, "%s byte %llu", m->tensors[s->tensor].file_name,
                (unsigned long long)(s->src + offset - s->dst));
      return;
    }
  }
  ref_msg(buf, cap, "no source (reference gap)");
}
