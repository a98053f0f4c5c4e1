/*
 * output/report_fill.c — how the job's parameters were filled (the reports' "fill", docs/REPORT.md):
 * by an architecture spec's plan, or by caller-described plans as described ("recorded") or as
 * whole checkpoint tensors the caller loads itself ("fallback"), each way counted in parameters and
 * bytes over every rank of the job, the fallback parameters named.
 */
#include "output/report.h"

#include "base/bytes_fmt.h"
#include "model/described.h"

#include <string.h>

void sl__fill_totals_of(const sl__model *m, const sl__schedule *s, sl__fill_totals *out) {
  memset(out, 0, sizeof *out);
  const sl__described *d = m->described;
  if (d == NULL) { /* a spec's plan: every rank's table (aliases counted, their bytes once) */
    for (uint32_t r = 0; r < s->world; r++) {
      out->params[SL_FILL_SPEC] += s->stats[r].params;
      out->bytes[SL_FILL_SPEC] += s->stats[r].bytes_local;
    }
    return;
  }
  for (uint32_t c = 0; c < d->n_classes; c++) {
    const sl__dplan *p = &d->plans[c];
    for (uint32_t i = 0; i < p->n_params; i++) {
      const sl__dparam *dp = &p->params[i];
      uint64_t elems = 1;
      for (uint32_t j = 0; j < dp->ndim; j++)
        elems *= dp->shape[j]; /* bounded by the model build */
      uint8_t f = dp->fill < 3 ? dp->fill : SL_FILL_RECORDED;
      out->params[f] += d->class_size[c];
      out->bytes[f] += elems * sl__dtype_bits(dp->dtype) / 8 * d->class_size[c];
    }
  }
}

void sl__report_fill_json(sl__buf *b, const sl__model *m, const sl__fill_totals *t) {
  sl__buf_appendf(
      b,
      "\"fill\":{\"spec\":{\"params\":%llu,\"bytes\":%llu},\"recorded\":{\"params\":%llu,\"bytes\":%llu},"
      "\"fallback\":{\"params\":%llu,\"bytes\":%llu,\"names\":[",
      (unsigned long long)t->params[SL_FILL_SPEC], (unsigned long long)t->bytes[SL_FILL_SPEC],
      (unsigned long long)t->params[SL_FILL_RECORDED], (unsigned long long)t->bytes[SL_FILL_RECORDED],
      (unsigned long long)t->params[SL_FILL_FALLBACK], (unsigned long long)t->bytes[SL_FILL_FALLBACK]);
  bool first = true;
  for (size_t i = 0; i < m->n_params; i++) { /* the union of the ranks' names: each once */
    if (m->params[i].fill != SL_FILL_FALLBACK)
      continue;
    if (!first)
      sl__buf_putc(b, ',');
    sl__buf_json_str(b, m->params[i].name);
    first = false;
  }
  sl__buf_appendf(b, "]}},");
}

void sl__report_fill_summary(sl__buf *b, const char *indent, const sl__model *m, const sl__fill_totals *t) {
  if (m->described == NULL)
    return; /* a spec's load: every parameter by the spec, as ever */
  char rec[32], fb[32];
  sl__fmt_bytes(rec, sizeof rec, t->bytes[SL_FILL_RECORDED]);
  sl__fmt_bytes(fb, sizeof fb, t->bytes[SL_FILL_FALLBACK]);
  sl__buf_appendf(b, "%sfilled: %llu recorded (%s), %llu fallback (%s), from caller-described plans\n",
                  indent, (unsigned long long)t->params[SL_FILL_RECORDED], rec,
                  (unsigned long long)t->params[SL_FILL_FALLBACK], fb);
}
