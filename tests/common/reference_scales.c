/*
 * reference_scales.c — the reference's fp8 scale companions: block fp8, where each F8 weight gets a
 * "<name>_scale_inv" sliced like the weight in blocks (docs/spec/ARCHITECTURES.md §6), and
 * compressed-tensors fp8, whose weight_scale / input_scale are kept per part or sliced with their
 * weight (docs/spec/ARCHITECTURES.md §15).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference_internal.h"

#include <stdlib.h>
#include <string.h>

/* The scale tensor of F8 weight w, or -1 (the failure recorded): "<name>_scale_inv", or DeepSeek-V4's
 * "<name without .weight>.scale" (docs/spec/ARCHITECTURES.md §23). */
static int scale_of(sl_ref_model *m, int w) {
  const char *wn = m->tensors[w].name;
  size_t len = strlen(wn);
  bool stem = m->fam == FAM_DSV4 && len > 7 && strcmp(wn + len - 7, ".weight") == 0;
  char *sn = stem ? ref_printf("%.*s.scale", (int)(len - 7), wn) : ref_printf("%s_scale_inv", wn);
  int t = sn != NULL ? ref_find_tensor(m, sn) : -1;
  if (t < 0)
    ref_model_fail(m, SL_STATUS_QUANTIZATION, "reference: F8 weight %s has no scale %s", m->tensors[w].name,
                   sn != NULL ? sn : "?");
  free(sn);
  return t;
}

/* The scale companion s of weight w: its sources are the weight's scales, its boundaries the weight's. */
static bool scale_sources(sl_ref_model *m, const rdef *w, rdef *s) {
  for (int k = 0; k < w->n_src; k++) {
    /* per-expert parts are at most two (esrc[2]); a qkv weight's third source is never one */
    if (k >= 2 || w->esrc[k] == NULL) {
      s->src[k] = scale_of(m, w->src[k]);
      s->wsrc[k] = w->src[k];
      continue;
    }
    int *ids = calloc(m->E + 1, sizeof *ids);
    if (ids == NULL) {
      ref_model_fail(m, SL_STATUS_NOMEM, "out of memory");
      return false;
    }
    for (uint64_t x = 0; x < m->E; x++)
      ids[x] = scale_of(m, w->esrc[k][x]);
    s->esrc[k] = ids;
    s->ewsrc[k] = w->esrc[k];
  }
  s->n_src = w->n_src;
  return true;
}

void ref_add_scales(sl_ref_model *m) {
  size_t n = m->n_defs;
  for (size_t i = 0; i < n && m->st == SL_STATUS_OK; i++) {
    rdef w = m->defs[i];
    int first = w.esrc[0] != NULL ? w.esrc[0][0] : w.src[0];
    /* an fp8 weight; F8_E8M0 holds scales (DeepSeek-V4's), never weights */
    if (strncmp(m->tensors[first].dtype, "F8_", 3) != 0 || strcmp(m->tensors[first].dtype, "F8_E8M0") == 0)
      continue;
    char *name = ref_printf("%s_scale_inv", w.name);
    rdef *s = ref_def_new(m, w.st, w.at, w.layer, name);
    free(name);
    if (s == NULL)
      return;
    s->scale = true;
    s->bn = m->bn;
    s->bk = m->bk;
    ref_def_heads(s, w.hq, w.hkv, w.d);
    s->vocab = w.vocab;
    if (!scale_sources(m, &w, s))
      return;
  }
}

/* docs/spec/ARCHITECTURES.md §15: compressed-tensors fp8 weight "X.weight" → "X.<suffix>", kept per part
 * ([n parts]) when each part's scale is one number, sliced like the weight when it is [out, 1] (a
 * row-parallel weight's: whole). */
static void add_ct_companion(sl_ref_model *m, const rdef *w, const char *suffix, bool optional) {
  int ids[MAX_SRC];
  int found = 0;
  int channel = 0;
  for (int k = 0; k < w->n_src; k++) {
    const rtensor *wt = &m->tensors[w->src[k]];
    size_t len = strlen(wt->name);
    char *sn = ref_printf("%.*s.%s", (int)(len > 7 ? len - 7 : 0), wt->name, suffix);
    ids[k] = sn != NULL ? ref_find_tensor(m, sn) : -1;
    free(sn);
    if (ids[k] < 0)
      continue;
    found++;
    const rtensor *t = &m->tensors[ids[k]];
    if (t->ndim == 2 && t->shape[1] == 1 && t->shape[0] == wt->shape[0])
      channel++;
  }
  if (found == 0 && optional)
    return;
  if (found != w->n_src || (channel != 0 && channel != found)) {
    ref_model_fail(m, SL_STATUS_QUANTIZATION, "reference: %s lacks or mixes %s scales", w->name, suffix);
    return;
  }
  size_t len = strlen(w->name);
  char *name = ref_printf("%.*s.%s", (int)(len - 7), w->name, suffix);
  style st = channel == 0 ? ST_PARTS : (w->st == ST_ROW ? ST_REPLICATED : w->st);
  rdef *s = ref_def_new(m, st, w->at, w->layer, name);
  free(name);
  if (s == NULL)
    return;
  ref_def_heads(s, w->hq, w->hkv, w->d);
  for (int k = 0; k < w->n_src; k++) {
    s->src[k] = ids[k];
    s->wsrc[k] = ids[k];
  }
  s->n_src = w->n_src;
}

void ref_add_ct_scales(sl_ref_model *m) {
  size_t n = m->n_defs;
  for (size_t i = 0; i < n && m->st == SL_STATUS_OK; i++) {
    rdef w = m->defs[i];
    if (w.esrc[0] != NULL || strncmp(m->tensors[w.src[0]].dtype, "F8_", 3) != 0)
      continue;
    if (w.st != ST_COLUMN && w.st != ST_ROW && w.st != ST_MERGED && w.st != ST_QKV) {
      ref_model_fail(m, SL_STATUS_QUANTIZATION, "reference: fp8 %s of this style is not modelled", w.name);
      return;
    }
    add_ct_companion(m, &w, "weight_scale", false);
    add_ct_companion(m, &w, "input_scale", true);
  }
}
