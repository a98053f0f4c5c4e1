/*
 * engine/coverage.c — missing/unexpected weight tracking (see engine/coverage.h).
 */
#include "engine/coverage.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

#define SHOW_NAMES 20

void sl__track_free(sl__track *t) {
  if (t == NULL)
    return;
  free(t->missing);
  free(t->unexpected);
  free(t->ignored);
  memset(t, 0, sizeof *t);
}

static bool bit(const uint8_t *b, size_t i) {
  return (b[i / 8] >> (i % 8)) & 1u;
}
static void set_bit(uint8_t *b, size_t i) {
  b[i / 8] |= (uint8_t)(1u << (i % 8));
}

/* The catalog is qsort_r's context: loaders on several threads of one process check coverage at
 * once. */
static int cmp_tensor_name(const void *a, const void *b, void *ctx) {
  const sl__catalog *cat = ctx;
  return strcmp(cat->tensors[*(const uint32_t *)a].name, cat->tensors[*(const uint32_t *)b].name);
}

/* Builds the lists from NEED, FAIL (may be NULL) and USED. */
static sl_status verdict(const sl__model *m, const sl__catalog *cat, const uint8_t *need, const uint8_t *fail,
                         const uint8_t *used, sl__track *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  out->missing = calloc(m->n_units + 1, sizeof *out->missing);
  out->unexpected = calloc(cat->n_tensors + 1, sizeof *out->unexpected);
  out->ignored = calloc(cat->n_tensors + 1, sizeof *out->ignored);
  if (out->missing == NULL || out->unexpected == NULL || out->ignored == NULL) {
    sl__track_free(out);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory tracking weights");
  }
  /* Units are sorted by name already. */
  for (size_t u = 0; u < m->n_units; u++)
    if (!bit(need, u) || (fail != NULL && bit(fail, u)))
      out->missing[out->n_missing++] = (uint32_t)u;
  for (size_t t = 0; t < cat->n_tensors; t++) {
    uint8_t fate = m->tensor_fate[t];
    if (fate == SL_FATE_SKIPPED)
      out->n_skipped++;
    else if (fate == SL_FATE_IGNORED)
      out->ignored[out->n_ignored++] = (uint32_t)t;
    else if (!bit(used, t))
      out->unexpected[out->n_unexpected++] = (uint32_t)t;
  }
  qsort_r(out->unexpected, out->n_unexpected, sizeof *out->unexpected, cmp_tensor_name, (void *)cat);
  qsort_r(out->ignored, out->n_ignored, sizeof *out->ignored, cmp_tensor_name, (void *)cat);
  return SL_STATUS_OK;
}

sl_status sl__track_precheck(const sl__model *m, const sl__catalog *cat, const sl__schedule *s,
                             sl__track *out, sl__err *err) {
  return verdict(m, cat, s->unit_needed, NULL, s->tensor_used, out, err);
}

sl_status sl__track_reduce(sl__comm *c, const sl__model *m, const sl__catalog *cat, const sl__schedule *s,
                           const sl__rank_plan *plan, _Atomic uint64_t *copy_done, sl__track *out,
                           sl__err *err) {
  size_t nu = m->n_units / 8 + 1;
  size_t nt = cat->n_tensors / 8 + 1;
  /* One buffer: NEED | FAIL | USED, reduced with a single allreduce. */
  uint8_t *bits = calloc(2 * nu + nt, 1);
  if (bits == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory tracking weights");
  uint8_t *need = bits;
  uint8_t *fail = bits + nu;
  uint8_t *used = bits + 2 * nu;
  uint32_t me = (uint32_t)c->rank;
  for (size_t i = 0; i < plan->n_copies; i++) {
    const sl__copy *cp = &plan->copies[i];
    if (cp->unit == SL_NONE)
      continue;
    set_bit(need, cp->unit);
    if (atomic_load(&copy_done[i]) != cp->rows * cp->row_bytes)
      set_bit(fail, cp->unit);
  }
  for (size_t k = 0; k < s->n_pieces; k++)
    if (s->pieces[k].reader == me)
      set_bit(used, s->pieces[k].tensor);
  sl_status st = sl__comm_allreduce_bor(c, bits, 2 * nu + nt, err);
  if (st == SL_STATUS_OK)
    st = verdict(m, cat, need, fail, used, out, err);
  free(bits);
  return st;
}

static void list(sl__buf *b, size_t n, const char *(*name)(const void *, size_t, char *, size_t),
                 const void *ctx) {
  char extra[512];
  for (size_t i = 0; i < n && i < SHOW_NAMES; i++)
    sl__buf_appendf(b, "%s%s", i > 0 ? ", " : "", name(ctx, i, extra, sizeof extra));
  if (n > SHOW_NAMES)
    sl__buf_appendf(b, ", … and %zu more", n - SHOW_NAMES);
}

typedef struct name_ctx {
  const sl__model *m;
  const sl__catalog *cat;
  const sl__track *t;
} name_ctx;

static const char *missing_name(const void *p, size_t i, char *buf, size_t cap) {
  const name_ctx *c = p;
  uint32_t u = c->t->missing[i];
  const char *param = c->m->params[c->m->unit_param[u]].name;
  if (strcmp(param, c->m->units[u]) == 0)
    return c->m->units[u];
  snprintf(buf, cap, "%s (→ %s)", c->m->units[u], param);
  return buf;
}

static const char *unexpected_name(const void *p, size_t i, char *buf, size_t cap) {
  (void)buf;
  (void)cap;
  const name_ctx *c = p;
  return c->cat->tensors[c->t->unexpected[i]].name;
}

bool sl__track_message(const sl__model *m, const sl__catalog *cat, const sl__track *t, char *buf, size_t cap,
                       sl_status *status) {
  if (t->n_missing == 0 && t->n_unexpected == 0)
    return false;
  name_ctx ctx = {.m = m, .cat = cat, .t = t};
  sl__buf b;
  sl__buf_init(&b, 0);
  if (t->n_missing > 0) {
    sl__buf_appendf(&b, "%zu weight%s not initialized from checkpoint: ", t->n_missing,
                    t->n_missing == 1 ? "" : "s");
    list(&b, t->n_missing, missing_name, &ctx);
    *status = SL_STATUS_MISSING_WEIGHTS;
  }
  if (t->n_unexpected > 0) {
    sl__buf_appendf(&b, "%s%zu checkpoint tensor%s consumed by no rank: ", t->n_missing > 0 ? "; " : "",
                    t->n_unexpected, t->n_unexpected == 1 ? "" : "s");
    list(&b, t->n_unexpected, unexpected_name, &ctx);
    if (t->n_missing == 0)
      *status = SL_STATUS_UNEXPECTED_WEIGHTS;
  }
  snprintf(buf, cap, "%s", sl__buf_str(&b));
  sl__buf_free(&b);
  return true;
}

void sl__track_json(const sl__model *m, const sl__catalog *cat, const sl__track *t, sl__buf *b) {
  sl__buf_appendf(b, "\"missing\":[");
  for (size_t i = 0; i < t->n_missing; i++) {
    uint32_t u = t->missing[i];
    sl__buf_appendf(b, "%s{\"tensor\":", i > 0 ? "," : "");
    sl__buf_json_str(b, m->units[u]);
    sl__buf_appendf(b, ",\"param\":");
    sl__buf_json_str(b, m->params[m->unit_param[u]].name);
    sl__buf_putc(b, '}');
  }
  sl__buf_appendf(b, "],\"unexpected\":[");
  for (size_t i = 0; i < t->n_unexpected; i++) {
    if (i > 0)
      sl__buf_putc(b, ',');
    sl__buf_json_str(b, cat->tensors[t->unexpected[i]].name);
  }
  sl__buf_appendf(b, "],\"ignored\":[");
  for (size_t i = 0; i < t->n_ignored; i++) {
    if (i > 0)
      sl__buf_putc(b, ',');
    sl__buf_json_str(b, cat->tensors[t->ignored[i]].name);
  }
  sl__buf_appendf(b, "],\"skipped_count\":%zu", t->n_skipped);
}
