/*
 * reference_util.c — the small helpers every part of the reference uses (reference_internal.h):
 * messages, strings, config.json getters, and the segment list of a table entry.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ref_msg(char *msg, size_t cap, const char *fmt, ...) {
  if (msg == NULL || cap == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
}

void ref_model_fail(sl_ref_model *m, sl_status st, const char *fmt, ...) {
  if (m->st != SL_STATUS_OK)
    return;
  m->st = st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->msg, sizeof m->msg, fmt, ap);
  va_end(ap);
}

char *ref_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p != NULL)
    memcpy(p, s, n);
  return p;
}

char *ref_printf(const char *fmt, ...) {
  char *out = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&out, fmt, ap);
  va_end(ap);
  return n < 0 ? NULL : out;
}

bool ref_cfg_num(const cJSON *cfg, const char *key, uint64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (!cJSON_IsNumber(v) || v->valuedouble < 0)
    return false;
  *out = (uint64_t)v->valuedouble;
  return true;
}

uint64_t ref_cfg_num_or(const cJSON *cfg, const char *key, uint64_t dflt) {
  uint64_t v = 0;
  if (ref_cfg_num(cfg, key, &v))
    return v;
  return dflt;
}

bool ref_cfg_bool_or(const cJSON *cfg, const char *key, bool dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (cJSON_IsBool(v))
    return cJSON_IsTrue(v);
  return dflt;
}

bool ref_cfg_contains(const cJSON *cfg, const char *key, uint64_t value) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cfg, key);
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, arr) {
    if (cJSON_IsNumber(item) && (uint64_t)item->valuedouble == value)
      return true;
  }
  return false;
}

bool ref_seg_add(sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len, int tensor, uint64_t src) {
  if (len == 0)
    return true;
  if (p->n_segs > 0) {
    sl_ref_seg *last = &p->segs[p->n_segs - 1];
    bool same = last->tensor == tensor && last->dst + last->len == dst;
    if (same && (tensor < 0 || last->src + last->len == src)) {
      last->len += len;
      return true;
    }
  }
  if (p->n_segs == *cap) {
    size_t ncap = *cap == 0 ? 16 : *cap * 2;
    sl_ref_seg *n = realloc(p->segs, ncap * sizeof *n);
    if (n == NULL)
      return false;
    p->segs = n;
    *cap = ncap;
  }
  p->segs[p->n_segs] = (sl_ref_seg){.dst = dst, .len = len, .tensor = tensor, .src = src};
  p->n_segs++;
  return true;
}
