/*
 * reference_packed.c — the independent reference of pack-quantized (compressed-tensors W4A16 /
 * W8A16) and NVFP4 (ModelOpt, compressed-tensors) checkpoints, written from
 * docs/spec/ARCHITECTURES.md §18–§19 and docs/spec/LAYOUTS.md §3.14 (not from the library).
 *
 * A linear part "P" (a ".weight" the checkpoint stores quantized: absent with a P.weight_packed
 * beside it, or ModelOpt's U8 P.weight) has, with out / in its unpacked size:
 *   W4A16 / W8A16  weight_packed [out, in/pack], weight_scale [out, in/G] ([out, 1] per channel),
 *                  weight_zero_point [out/pack, in/G] (asymmetric), weight_shape [2] = {out, in}
 *   NVFP4          weight_packed or weight [out, in/2], weight_scale [out, in/16], two per-tensor
 *                  F32 scales (weight_global_scale / input_global_scale, ModelOpt: weight_scale_2 /
 *                  input_scale)
 * Column-like linears give each rank the output rows of docs/spec/LAYOUTS.md §3.1–§3.3 (zero
 * points in packs of output rows), parts one under the other; concat/replicated linears their
 * parts whole; row-parallel ones the rank's input columns, whole per channel; per-tensor scales one
 * per part; weight_shape the one of the part read last (files in order, names sorted) in the vllm
 * layout. Experts: W4A16 in vLLM's Marlin layout, the MoE rank's gate/up rows and down columns held
 * with their last two dimensions transposed; NVFP4 as stored; weight_shape and per-tensor scales
 * per expert. The checkpoint layout keeps every tensor under its own name, in its stored
 * orientation. A rank boundary cutting a pack, a group or 16 NVFP4 inputs is DIVISIBILITY.
 */
#include "reference_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *item(const cJSON *o, const char *k) {
  return cJSON_GetObjectItemCaseSensitive(o, k);
}

static bool is_str(const cJSON *v, const char *s) {
  return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

/* ---- configuration -------------------------------------------------------------------------- */

static bool ct_config(sl_ref_model *m, const cJSON *q) {
  const cJSON *g = NULL;
  cJSON_ArrayForEach(g, item(q, "config_groups")) {
    const cJSON *w = item(g, "weights");
    const cJSON *bits = item(w, "num_bits");
    if (!cJSON_IsNumber(bits))
      continue;
    if (is_str(item(w, "type"), "int")) {
      m->pk.kind = 1;
      m->pk.pack = 32 / (uint64_t)bits->valuedouble;
      const cJSON *gs = item(w, "group_size");
      m->pk.group =
          is_str(item(w, "strategy"), "group") && cJSON_IsNumber(gs) ? (uint64_t)gs->valuedouble : 0;
      m->pk.symmetric = !cJSON_IsFalse(item(w, "symmetric"));
    } else if (is_str(item(w, "type"), "float") && bits->valuedouble == 4) {
      m->pk.kind = 2;
      m->pk.group = 16;
      m->pk.input_scales = cJSON_IsObject(item(g, "input_activations"));
    }
  }
  return m->pk.kind != 0;
}

/* folder/hf_quant_config.json parsed, or NULL. */
static cJSON *quant_file(const sl_ref_model *m) {
  char *path = ref_printf("%s/hf_quant_config.json", m->folder);
  FILE *f = path != NULL ? fopen(path, "rb") : NULL;
  free(path);
  if (f == NULL)
    return NULL;
  char buf[65536];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return cJSON_Parse(buf);
}

bool ref_packed_config(sl_ref_model *m, const cJSON *q) {
  cJSON *file = q == NULL ? quant_file(m) : NULL;
  if (q == NULL)
    q = file;
  if (q == NULL)
    return false;
  const cJSON *method = item(q, "quant_method");
  bool modelopt = is_str(method, "modelopt") || is_str(method, "modelopt_fp4") ||
                  (method == NULL && is_str(item(item(q, "producer"), "name"), "modelopt"));
  bool taken = false;
  if (is_str(method, "compressed-tensors")) {
    taken = ct_config(m, q);
  } else if (modelopt) {
    const cJSON *inner = cJSON_IsObject(item(q, "quantization")) ? item(q, "quantization") : q;
    taken = true;
    if (!is_str(item(inner, "quant_algo"), "NVFP4"))
      ref_model_fail(m, SL_STATUS_QUANTIZATION, "reference: modelopt other than NVFP4 (%s)", m->folder);
    m->pk.kind = 2;
    m->pk.modelopt = true;
    m->pk.group = 16;
    m->pk.input_scales = true;
  }
  cJSON_Delete(file);
  return taken;
}

void ref_packed_literals(sl_ref_model *m) {
  if (m->pk.kind != 1)
    return;
  for (size_t i = 0; i < m->n_tensors; i++) {
    rtensor *t = &m->tensors[i];
    size_t n = strlen(t->name);
    const char *tail = ".weight_shape";
    if (n <= strlen(tail) || strcmp(t->name + n - strlen(tail), tail) != 0)
      continue;
    char *w = ref_printf("%.*s.weight_packed", (int)(n - strlen(tail)), t->name);
    int k = w != NULL ? ref_find_tensor(m, w) : -1;
    free(w);
    uint64_t eb = t->bits / 8;
    if (k < 0 || t->nbytes != 2 * eb || (eb != 4 && eb != 8))
      continue;
    uint64_t v[2] = {m->tensors[k].shape[0], m->tensors[k].shape[1] * m->pk.pack};
    for (int j = 0; j < 2; j++)
      for (uint64_t b = 0; b < eb; b++)
        t->lit[j * eb + b] = (uint8_t)(v[j] >> (8 * b));
    t->literal = true;
  }
}

/* Whether weight `name` ("P.weight") is stored quantized. */
static bool stored_packed(const sl_ref_model *m, const char *name) {
  size_t n = strlen(name);
  if (n < 8 || strcmp(name + n - 7, ".weight") != 0)
    return false;
  int t = ref_find_tensor(m, name);
  if (m->pk.modelopt)
    return t >= 0 && strcmp(m->tensors[t].dtype, "U8") == 0 && m->tensors[t].ndim == 2;
  char *w = ref_printf("%.*s.weight_packed", (int)(n - 7), name);
  bool q = t < 0 && w != NULL && ref_find_tensor(m, w) >= 0;
  free(w);
  return q;
}

bool ref_packed_src(sl_ref_model *m, rdef *d, const char *tensor) {
  if (d->n_src >= MAX_SRC || !stored_packed(m, tensor))
    return false;
  d->packed = true;
  d->pk_stem[d->n_src] = ref_printf("%.*s", (int)(strlen(tensor) - 7), tensor);
  d->src[d->n_src] = -1;
  d->wsrc[d->n_src] = -1;
  d->n_src++;
  return true;
}

bool ref_packed_expert_src(sl_ref_model *m, rdef *d, const char *prefix, const char *suffix) {
  char *first = ref_printf("%s0%s", prefix, suffix);
  bool q = first != NULL && d->n_src < 2 && stored_packed(m, first);
  free(first);
  if (!q)
    return false;
  d->packed = true;
  d->pk_pre[d->n_src] = ref_strdup(prefix);
  d->pk_suf[d->n_src] = ref_printf("%.*s", (int)(strlen(suffix) - 7), suffix);
  d->n_src++;
  return true;
}

/* ---- the tensor kinds ---------------------------------------------------------------------- */

enum { K_TENSOR, K_SCALAR, K_SHAPE };

typedef struct kind {
  const char *name;
  uint64_t po;   /* output channels per row (packed zero points) */
  uint64_t iu;   /* input channels per column; 0: one column (per channel) */
  uint64_t rule; /* a rank's split input (or expert intermediate) channels must be a multiple of this */
  int what;
} kind;

static int kinds_of(const sl_ref_model *m, kind *k) {
  int n = 0;
  if (m->pk.kind == 2) {
    k[n++] = (kind){m->pk.modelopt ? "weight" : "weight_packed", 1, 2, 16, K_TENSOR};
    k[n++] = (kind){"weight_scale", 1, 16, 16, K_TENSOR};
    k[n++] = (kind){m->pk.modelopt ? "weight_scale_2" : "weight_global_scale", 1, 1, 1, K_SCALAR};
    if (m->pk.input_scales)
      k[n++] = (kind){m->pk.modelopt ? "input_scale" : "input_global_scale", 1, 1, 1, K_SCALAR};
    return n;
  }
  uint64_t g = m->pk.group;
  k[n++] = (kind){"weight_packed", 1, m->pk.pack, m->pk.pack, K_TENSOR};
  k[n++] = (kind){"weight_scale", 1, g, g, K_TENSOR};
  if (!m->pk.symmetric)
    k[n++] = (kind){"weight_zero_point", m->pk.pack, g, g, K_TENSOR};
  k[n++] = (kind){"weight_shape", 1, 1, 1, K_SHAPE};
  return n;
}

/* The tensor "<stem>.<kind>", or -1 with the failure recorded. */
static int tensor_of(ctx *c, const char *stem, const char *suffix) {
  char *name = ref_printf("%s.%s", stem, suffix);
  int t = name != NULL ? ref_find_tensor(c->m, name) : -1;
  if (t < 0)
    ref_ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: %s.%s not in the checkpoint", stem, suffix);
  free(name);
  return t;
}

static uint64_t div_fail(ctx *c, const char *what, uint64_t a, uint64_t b) {
  ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu not a multiple of %llu", what, (unsigned long long)a,
               (unsigned long long)b);
  return 0;
}

/* ---- linears ------------------------------------------------------------------------------- */

typedef struct lin {
  int n;
  uint64_t out[MAX_SRC], in;
  uint64_t a[MAX_SRC], cnt[MAX_SRC]; /* the rank's output channels per part (column-like) */
  char vstem[256];                   /* vLLM's module name */
} lin;

static void out_ranges(ctx *c, const rdef *d, lin *l) {
  uint64_t T = c->T;
  for (int k = 0; k < l->n && c->st == SL_STATUS_OK; k++) {
    if (d->st == ST_CONCAT || d->st == ST_REPLICATED) {
      l->a[k] = 0;
      l->cnt[k] = l->out[k];
    } else if (d->st == ST_QKV) {
      if (d->hq % T != 0 || (T >= d->hkv ? T % d->hkv != 0 : d->hkv % T != 0)) {
        ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: heads %llu/%llu over tp %llu", d->name,
                     (unsigned long long)d->hq, (unsigned long long)d->hkv, (unsigned long long)T);
        return;
      }
      uint64_t kvl = T >= d->hkv ? 1 : d->hkv / T;
      uint64_t R = T >= d->hkv ? T / d->hkv : 1;
      l->cnt[k] = k == 0 ? d->hq / T * d->d : kvl * d->d;
      l->a[k] = k == 0 ? c->r * l->cnt[k] : c->r / R * l->cnt[k];
    } else if (l->out[k] % T != 0 || (d->hq != 0 && d->hq % T != 0)) {
      div_fail(c, d->name, l->out[k], T);
    } else {
      l->cnt[k] = l->out[k] / T;
      l->a[k] = c->r * l->cnt[k];
    }
  }
}

/* Rows [a, +n) of tensor t whole, placed at row `at` of a p entry of the same columns. */
static void put_rows(ctx *c, sl_ref_param *p, size_t *cap, int t, uint64_t a, uint64_t n, uint64_t at) {
  uint64_t rb = ref_row_bytes(ref_tens(c, t));
  ref_put(c, p, cap, at * rb, n * rb, t, a * rb);
}

/* Columns [c0, +nc) of every row of tensor t, into p (nc columns per row). */
static void put_cols(ctx *c, sl_ref_param *p, size_t *cap, int t, uint64_t c0, uint64_t nc) {
  const rtensor *x = ref_tens(c, t);
  uint64_t eb = x->bits / 8;
  uint64_t cols = x->ndim > 1 ? x->shape[1] : 1;
  for (uint64_t i = 0; i < x->shape[0]; i++)
    ref_put(c, p, cap, i * nc * eb, nc * eb, t, (i * cols + c0) * eb);
}

/* One 2-D kind of a linear: its entries on this rank. */
static void lin_tensor(ctx *c, const rdef *d, const lin *l, const kind *k, const int *t, bool build) {
  bool row = d->st == ST_ROW;
  if (row && k->iu != 0 && c->T > 1) {
    uint64_t per = l->in % c->T == 0 ? l->in / c->T : div_fail(c, d->name, l->in, c->T);
    if (c->st == SL_STATUS_OK && per % k->rule != 0)
      div_fail(c, k->name, per, k->rule);
    if (c->st != SL_STATUS_OK || !build)
      return;
    const rtensor *x = ref_tens(c, t[0]);
    uint64_t nc = per / k->iu;
    uint64_t local[2] = {x->shape[0], nc};
    char *name = c->ckpt ? ref_strdup(x->name) : ref_printf("%s.%s", l->vstem, k->name);
    sl_ref_param *p = ref_entry_new(c, name, x, 2, x->shape, local);
    free(name);
    size_t cap = 0;
    if (p != NULL)
      put_cols(c, p, &cap, t[0], c->r * per / k->iu, nc);
    return;
  }
  for (int i = 0; i < l->n && !row; i++)
    if (l->a[i] % k->po != 0 || l->cnt[i] % k->po != 0)
      div_fail(c, k->name, l->cnt[i], k->po);
  if (c->st != SL_STATUS_OK || !build)
    return;
  for (int first = 0; first < l->n; first += c->ckpt ? 1 : l->n) {
    int last = c->ckpt ? first + 1 : l->n;
    const rtensor *x = ref_tens(c, t[first]);
    uint64_t rows = 0, grows = 0;
    for (int i = first; i < last; i++) {
      rows += row ? l->out[i] / k->po : l->cnt[i] / k->po;
      grows += ref_tens(c, t[i])->shape[0];
    }
    uint64_t global[2] = {grows, x->shape[1]};
    uint64_t local[2] = {rows, x->shape[1]};
    char *name = c->ckpt ? ref_strdup(x->name) : ref_printf("%s.%s", l->vstem, k->name);
    sl_ref_param *p = ref_entry_new(c, name, x, 2, global, local);
    free(name);
    size_t cap = 0;
    uint64_t at = 0;
    for (int i = first; i < last && p != NULL; i++) {
      uint64_t n = row ? l->out[i] / k->po : l->cnt[i] / k->po;
      put_rows(c, p, &cap, t[i], row ? 0 : l->a[i] / k->po, n, at);
      at += n;
    }
  }
}

/* Per-tensor scales: [n parts] (vllm) or each whole (checkpoint). */
static void lin_scalars(ctx *c, const lin *l, const kind *k, const int *t) {
  if (c->ckpt) {
    for (int i = 0; i < l->n; i++) {
      const rtensor *x = ref_tens(c, t[i]);
      sl_ref_param *p = ref_entry_new(c, x->name, x, x->ndim, x->shape, x->shape);
      size_t cap = 0;
      ref_put(c, p, &cap, 0, x->nbytes, t[i], 0);
    }
    return;
  }
  uint64_t n = (uint64_t)l->n;
  char *name = ref_printf("%s.%s", l->vstem, k->name);
  sl_ref_param *p = ref_entry_new(c, name, ref_tens(c, t[0]), 1, &n, &n);
  free(name);
  size_t cap = 0;
  for (int i = 0; i < l->n && p != NULL; i++)
    ref_put(c, p, &cap, (uint64_t)i * 4, 4, t[i], 0);
}

/* The part whose tensor vLLM reads last: files in order, names sorted within a file. */
static int read_last(ctx *c, const int *t, int n) {
  int best = 0;
  for (int i = 1; i < n; i++) {
    const rtensor *a = ref_tens(c, t[best]);
    const rtensor *b = ref_tens(c, t[i]);
    if (b->file > a->file || (b->file == a->file && strcmp(b->name, a->name) > 0))
      best = i;
  }
  return best;
}

static void whole_entry(ctx *c, const char *name, int t) {
  const rtensor *x = ref_tens(c, t);
  sl_ref_param *p = ref_entry_new(c, name, x, x->ndim, x->shape, x->shape);
  size_t cap = 0;
  ref_put(c, p, &cap, 0, x->nbytes, t, 0);
}

static void lin_shapes(ctx *c, const lin *l, const kind *k, const int *t) {
  if (c->ckpt) {
    for (int i = 0; i < l->n; i++)
      whole_entry(c, ref_tens(c, t[i])->name, t[i]);
    return;
  }
  char *name = ref_printf("%s.%s", l->vstem, k->name);
  if (name != NULL)
    whole_entry(c, name, t[read_last(c, t, l->n)]);
  free(name);
}

static void linear_def(ctx *c, const rdef *d, bool build) {
  kind k[5];
  int nk = kinds_of(c->m, k);
  lin l = {.n = d->n_src};
  snprintf(l.vstem, sizeof l.vstem, "%.*s", (int)strlen(d->name) - 7, d->name);
  int t[5][MAX_SRC];
  for (int j = 0; j < nk && c->st == SL_STATUS_OK; j++)
    for (int i = 0; i < l.n && c->st == SL_STATUS_OK; i++)
      t[j][i] = tensor_of(c, d->pk_stem[i], k[j].name);
  if (c->st != SL_STATUS_OK)
    return;
  for (int i = 0; i < l.n; i++) {
    const rtensor *w = ref_tens(c, t[0][i]);
    l.out[i] = w->shape[0];
    l.in = w->shape[1] * k[0].iu;
  }
  if (l.in % k[0].rule != 0 || (k[1].iu != 0 && l.in % k[1].iu != 0))
    div_fail(c, d->name, l.in, k[1].iu);
  if (d->st != ST_ROW)
    out_ranges(c, d, &l);
  else if (d->hq != 0 && d->hq % c->T != 0)
    div_fail(c, d->name, d->hq, c->T);
  for (int j = 0; j < nk && c->st == SL_STATUS_OK; j++) {
    if (k[j].what == K_TENSOR)
      lin_tensor(c, d, &l, &k[j], t[j], build);
    else if (build && k[j].what == K_SCALAR)
      lin_scalars(c, &l, &k[j], t[j]);
    else if (build)
      lin_shapes(c, &l, &k[j], t[j]);
  }
}

/* ---- experts (reference_packed_moe.c) --------------------------------------------------------- */

void ref_packed_experts(ctx *c, const rdef *d, bool build);

void ref_packed_def(ctx *c, const rdef *d, bool build) {
  if (d->st == ST_MOE_W13 || d->st == ST_MOE_W2) {
    ref_packed_experts(c, d, build);
    return;
  }
  if (d->st != ST_COLUMN && d->st != ST_ROW && d->st != ST_MERGED && d->st != ST_QKV && d->st != ST_CONCAT &&
      d->st != ST_REPLICATED) {
    ref_ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: quantized %s of this style is not modelled", d->name);
    return;
  }
  for (int i = 0; i < d->n_src; i++)
    if (d->pk_stem[i] == NULL) {
      ref_ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: %s mixes quantized and unquantized parts", d->name);
      return;
    }
  linear_def(c, d, build);
}
