/*
 * reference.c — the independent reference of docs/spec/LAYOUTS.md's slicing rules (see reference.h).
 *
 * Organisation:
 *   1. small helpers (messages, config.json getters, segment lists, interval unions)
 *   2. the model: tensor headers through sl_model_open, Mistral renaming (docs/spec/ARCHITECTURES.md §3),
 *      config values
 *   3. the parameter definitions of each family, written from the tables of docs/spec/ARCHITECTURES.md §2–§6:
 *      one definition per (vLLM parameter, layer) with its style and its source tensors; fp8 scale
 *      companions are derived from their weights (docs/spec/ARCHITECTURES.md §6)
 *   4. a rank's table: layout (docs/spec/LAYOUTS.md §1–§2), experts (docs/spec/EXPERTS.md), then every
 *      definition the rank's stage holds, sliced by its style (docs/spec/LAYOUTS.md §3) in the vllm layout or
 *      per source tensor in the checkpoint layout (docs/spec/LAYOUTS.md §4); each parameter becomes a list of
 *      segments (source tensor + offset, or zeros)
 *   5. cluster figures from the tables of every rank
 *
 * Sizes are small (fixtures under 1 MB), so clarity wins over speed: segments are emitted row by
 * row and merged when contiguous.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference.h"
#include "reference_int4.h"

#include "values.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * 1. Helpers
 * ------------------------------------------------------------------------------------------- */

typedef enum style {
  ST_REPLICATED,
  ST_COLUMN,
  ST_ROW,
  ST_MERGED,
  ST_QKV,
  ST_VOCAB,
  ST_CONCAT,
  ST_MOE_W13,
  ST_MOE_W2,
  ST_MOE3D_W13,
  ST_MOE3D_W2,
  /* docs/spec/LAYOUTS.md §3.8–§3.10 (the later families) */
  ST_QKV_FUSED,    /* one [(Hq + 2*Hkv)*d, ...] tensor */
  ST_MERGED_FUSED, /* one [2*I, ...] tensor */
  ST_MOE3D_IL,     /* [E, 2*Im, ...] gate/up interleaved: a contiguous row range per expert */
  ST_MOE3D_BLK,    /* [E, H, C, ...]: dim 2 split */
  ST_MOE_W2BIAS,   /* [E, H]: MoE tensor-parallel rank 0 only */
  ST_GATE_UP_T,    /* Llama-4 [E, H, 2*Im]: gate and up column ranges; vllm: w13 [El, 2*Ip, H] */
  ST_DOWN_T,       /* Llama-4 [E, Im, H]: a row range per expert; vllm: w2 [El, H, Ip] */
  ST_PARTS         /* docs/spec/LAYOUTS.md §3.11: one per-tensor scale per part, [n parts] */
} style;

typedef enum place { AT_EMBED, AT_LAYER, AT_FINAL, AT_HEAD } place;

typedef enum family {
  FAM_LLAMA,
  FAM_QWEN2,
  FAM_QWEN3,
  FAM_MIXTRAL,
  FAM_QWEN2_MOE,
  FAM_QWEN3_MOE,
  FAM_DEEPSEEK,
  FAM_FUSED3D,
  FAM_PHI3,
  FAM_GEMMA3,
  FAM_GLM4_MOE,
  FAM_GPT_OSS,
  FAM_LLAMA4
} family;

#define MAX_SRC 3

typedef struct rtensor {
  char *file_name; /* name in the checkpoint file (key of the value function) */
  char *name;      /* Hugging Face name (Mistral names renamed, docs/spec/ARCHITECTURES.md §3) */
  char dtype[24];
  uint32_t bits;
  uint32_t ndim;
  uint64_t shape[SL_MAX_DIMS];
  uint64_t nbytes;
} rtensor;

typedef struct rdef {
  char *name; /* vLLM parameter name */
  style st;
  place at;
  uint32_t layer;
  int n_src;
  int src[MAX_SRC];  /* tensors read (the scale tensors for a scale companion) */
  int wsrc[MAX_SRC]; /* weights whose slice boundaries apply (== src unless scale) */
  int *esrc[2];      /* per-expert styles: tensor of expert x for part k */
  int *ewsrc[2];
  bool perm[MAX_SRC];  /* Mistral rotary row permutation (docs/spec/ARCHITECTURES.md §3) */
  uint64_t hq, hkv, d; /* qkv */
  uint64_t vocab;      /* vocab: V */
  bool scale;          /* fp8 scale companion (docs/spec/ARCHITECTURES.md §6): boundaries in blocks */
  uint64_t bn, bk;
  bool int4;                  /* GPTQ / AWQ linear (reference_int4.c): parts by weight name */
  char *int4_part[MAX_SRC];
} rdef;

struct sl_ref_model {
  char *folder;
  family fam;
  bool mistral; /* load format auto resolves to mistral (docs/spec/FILES.md §3) */
  size_t n_tensors;
  rtensor *tensors;
  int *by_name; /* tensor indices sorted by Hugging Face name */
  size_t n_defs, cap_defs;
  rdef *defs;
  /* config values */
  uint64_t H, V, L, Hq, Hkv, d, E, n_group;
  bool tie;
  bool fp8;
  bool ct; /* compressed-tensors fp8 (docs/spec/ARCHITECTURES.md §15) */
  sl_ref_int4 int4; /* GPTQ / AWQ (docs/spec/ARCHITECTURES.md §16) */
  uint64_t bn, bk;
  uint64_t nh;     /* DeepSeek: heads that TP must divide */
  const char *pre; /* prefix of every text-model name: "" or Llama-4's "language_model." */
  sl_status st;    /* first error while building */
  char msg[512];
};

static void set_msg(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void set_msg(char *msg, size_t cap, const char *fmt, ...) {
  if (msg == NULL || cap == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
}

static void model_fail(sl_ref_model *m, sl_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void model_fail(sl_ref_model *m, sl_status st, const char *fmt, ...) {
  if (m->st != SL_STATUS_OK)
    return;
  m->st = st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->msg, sizeof m->msg, fmt, ap);
  va_end(ap);
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p != NULL)
    memcpy(p, s, n);
  return p;
}

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *xprintf(const char *fmt, ...) {
  char *out = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&out, fmt, ap);
  va_end(ap);
  return n < 0 ? NULL : out;
}

/* config.json: a present, non-null number. */
static bool cfg_num(const cJSON *cfg, const char *key, uint64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (!cJSON_IsNumber(v) || v->valuedouble < 0)
    return false;
  *out = (uint64_t)v->valuedouble;
  return true;
}

static uint64_t cfg_num_or(const cJSON *cfg, const char *key, uint64_t dflt) {
  uint64_t v = 0;
  if (cfg_num(cfg, key, &v))
    return v;
  return dflt;
}

static bool cfg_bool_or(const cJSON *cfg, const char *key, bool dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (cJSON_IsBool(v))
    return cJSON_IsTrue(v);
  return dflt;
}

static bool cfg_contains(const cJSON *cfg, const char *key, uint64_t value) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cfg, key);
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, arr) {
    if (cJSON_IsNumber(item) && (uint64_t)item->valuedouble == value)
      return true;
  }
  return false;
}

/* Appends a segment to p, merging it with the previous one when both are contiguous. */
static bool seg_add(sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len, int tensor, uint64_t src) {
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

typedef struct interval {
  int tensor;
  uint64_t start, end;
} interval;

typedef struct ivec {
  size_t n, cap;
  interval *v;
} ivec;

static bool ivec_push(ivec *iv, int tensor, uint64_t start, uint64_t end) {
  if (iv->n == iv->cap) {
    size_t ncap = iv->cap == 0 ? 256 : iv->cap * 2;
    interval *n = realloc(iv->v, ncap * sizeof *n);
    if (n == NULL)
      return false;
    iv->v = n;
    iv->cap = ncap;
  }
  iv->v[iv->n] = (interval){.tensor = tensor, .start = start, .end = end};
  iv->n++;
  return true;
}

static int interval_cmp(const void *a, const void *b) {
  const interval *x = a;
  const interval *y = b;
  if (x->tensor != y->tensor)
    return x->tensor < y->tensor ? -1 : 1;
  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  return 0;
}

/* Bytes covered by the union of the intervals (sorts them). */
static uint64_t ivec_union_bytes(ivec *iv) {
  if (iv->n == 0)
    return 0;
  qsort(iv->v, iv->n, sizeof *iv->v, interval_cmp);
  uint64_t total = 0;
  int t = iv->v[0].tensor;
  uint64_t s = iv->v[0].start;
  uint64_t e = iv->v[0].end;
  for (size_t i = 1; i < iv->n; i++) {
    const interval *x = &iv->v[i];
    if (x->tensor == t && x->start <= e) {
      if (x->end > e)
        e = x->end;
      continue;
    }
    total += e - s;
    t = x->tensor;
    s = x->start;
    e = x->end;
  }
  total += e - s;
  return total;
}

/* ---------------------------------------------------------------------------------------------
 * 2. The model
 * ------------------------------------------------------------------------------------------- */

static int by_name_cmp(const void *a, const void *b, void *arg) {
  const sl_ref_model *m = arg;
  int x = *(const int *)a;
  int y = *(const int *)b;
  return strcmp(m->tensors[x].name, m->tensors[y].name);
}

/* Index of the tensor whose Hugging Face name is name, or -1. */
static int find_tensor(const sl_ref_model *m, const char *name) {
  size_t lo = 0;
  size_t hi = m->n_tensors;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(m->tensors[m->by_name[mid]].name, name);
    if (c == 0)
      return m->by_name[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

/* docs/spec/ARCHITECTURES.md §3: consolidated name → Hugging Face name (a copy; unknown names are kept). */
static char *mistral_rename(const char *raw) {
  static const char *const top[][2] = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                       {"norm.weight", "model.norm.weight"},
                                       {"output.weight", "lm_head.weight"}};
  static const char *const per_layer[][2] = {{"attention.wq.weight", "self_attn.q_proj.weight"},
                                             {"attention.wk.weight", "self_attn.k_proj.weight"},
                                             {"attention.wv.weight", "self_attn.v_proj.weight"},
                                             {"attention.wo.weight", "self_attn.o_proj.weight"},
                                             {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
                                             {"feed_forward.w2.weight", "mlp.down_proj.weight"},
                                             {"feed_forward.w3.weight", "mlp.up_proj.weight"},
                                             {"attention_norm.weight", "input_layernorm.weight"},
                                             {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
    if (strcmp(raw, top[i][0]) == 0)
      return xstrdup(top[i][1]);
  }
  if (strncmp(raw, "layers.", 7) == 0) {
    const char *p = raw + 7;
    char *end = NULL;
    unsigned long layer = strtoul(p, &end, 10);
    if (end != p && *end == '.') {
      for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
        if (strcmp(end + 1, per_layer[i][0]) == 0)
          return xprintf("model.layers.%lu.%s", layer, per_layer[i][1]);
      }
    }
  }
  return xstrdup(raw);
}

/* docs/spec/FILES.md §3 (top level only, which is where the fixtures keep their files). */
static bool has_consolidated(const char *folder) {
  DIR *dir = opendir(folder);
  if (dir == NULL)
    return false;
  bool found = false;
  const struct dirent *e = readdir(dir);
  while (e != NULL) {
    if (fnmatch("consolidated*.safetensors", e->d_name, FNM_PERIOD) == 0)
      found = true;
    e = readdir(dir);
  }
  closedir(dir);
  return found;
}

static bool load_tensors(sl_ref_model *m) {
  sl_model *sm = NULL;
  char *err = NULL;
  sl_status st = sl_model_open(m->folder, NULL, &sm, &err);
  if (st != SL_STATUS_OK) {
    model_fail(m, st, "sl_model_open(%s): %s", m->folder, err != NULL ? err : sl_status_name(st));
    free(err);
    return false;
  }
  m->n_tensors = sl_model_tensor_count(sm);
  m->tensors = calloc(m->n_tensors + 1, sizeof *m->tensors);
  m->by_name = calloc(m->n_tensors + 1, sizeof *m->by_name);
  if (m->tensors == NULL || m->by_name == NULL) {
    sl_model_close(sm);
    model_fail(m, SL_STATUS_NOMEM, "out of memory");
    return false;
  }
  for (size_t i = 0; i < m->n_tensors; i++) {
    sl_tensor_info info = SL_TENSOR_INFO_INIT;
    st = sl_model_tensor(sm, i, &info);
    if (st != SL_STATUS_OK)
      break;
    rtensor *t = &m->tensors[i];
    t->file_name = xstrdup(info.name);
    t->name = m->mistral ? mistral_rename(info.name) : xstrdup(info.name);
    snprintf(t->dtype, sizeof t->dtype, "%s", info.dtype);
    t->ndim = info.ndim;
    uint64_t numel = 1;
    for (uint32_t k = 0; k < info.ndim; k++) {
      t->shape[k] = info.shape[k];
      numel *= info.shape[k];
    }
    t->nbytes = info.nbytes;
    t->bits = numel > 0 ? (uint32_t)(info.nbytes * 8 / numel) : 8;
    m->by_name[i] = (int)i;
  }
  sl_model_close(sm);
  if (st != SL_STATUS_OK) {
    model_fail(m, st, "sl_model_tensor failed on %s", m->folder);
    return false;
  }
  qsort_r(m->by_name, m->n_tensors, sizeof *m->by_name, by_name_cmp, m);
  return true;
}

/* ---------------------------------------------------------------------------------------------
 * 3. Parameter definitions per family (docs/spec/ARCHITECTURES.md §2–§6)
 * ------------------------------------------------------------------------------------------- */

static rdef *def_new(sl_ref_model *m, style st, place at, uint32_t layer, const char *name) {
  if (m->st != SL_STATUS_OK)
    return NULL;
  if (m->n_defs == m->cap_defs) {
    size_t ncap = m->cap_defs == 0 ? 64 : m->cap_defs * 2;
    rdef *n = realloc(m->defs, ncap * sizeof *n);
    if (n == NULL) {
      model_fail(m, SL_STATUS_NOMEM, "out of memory");
      return NULL;
    }
    m->defs = n;
    m->cap_defs = ncap;
  }
  rdef *d = &m->defs[m->n_defs];
  memset(d, 0, sizeof *d);
  d->name = xstrdup(name);
  d->st = st;
  d->at = at;
  d->layer = layer;
  m->n_defs++;
  return d;
}

/* reference_int4.c's view of a checkpoint tensor. */
static bool int4_find(const void *ctx, const char *name, sl_ref_int4_tensor *out) {
  const sl_ref_model *m = ctx;
  int t = find_tensor(m, name);
  if (t < 0)
    return false;
  const rtensor *x = &m->tensors[t];
  out->index = t;
  out->name = x->name;
  out->dtype = x->dtype;
  out->bits = x->bits;
  out->ndim = x->ndim;
  memcpy(out->shape, x->shape, sizeof out->shape);
  return true;
}

static void def_src(sl_ref_model *m, rdef *d, const char *tensor, bool permute) {
  if (d == NULL || m->st != SL_STATUS_OK)
    return;
  int t = find_tensor(m, tensor);
  if (t < 0 && m->int4.method != SL_REF_INT4_NONE && d->n_src < MAX_SRC &&
      sl_ref_int4_quantized(tensor, int4_find, m)) {
    d->int4 = true;
    d->int4_part[d->n_src] = xstrdup(tensor);
    d->src[d->n_src] = -1;
    d->wsrc[d->n_src] = -1;
    d->n_src++;
    return;
  }
  if (t < 0) {
    model_fail(m, SL_STATUS_NOT_FOUND, "reference: checkpoint tensor %s (for %s) not in %s", tensor, d->name,
               m->folder);
    return;
  }
  d->src[d->n_src] = t;
  d->wsrc[d->n_src] = t;
  d->perm[d->n_src] = permute;
  d->n_src++;
}

/* Per-expert source: tensor prefix + X + suffix for X in [0, E). */
static void def_expert_src(sl_ref_model *m, rdef *d, const char *prefix, const char *suffix) {
  if (d == NULL || m->st != SL_STATUS_OK)
    return;
  int *ids = calloc(m->E + 1, sizeof *ids);
  if (ids == NULL) {
    model_fail(m, SL_STATUS_NOMEM, "out of memory");
    return;
  }
  for (uint64_t x = 0; x < m->E; x++) {
    char name[256];
    snprintf(name, sizeof name, "%s%llu%s", prefix, (unsigned long long)x, suffix);
    ids[x] = find_tensor(m, name);
    if (ids[x] < 0) {
      model_fail(m, SL_STATUS_NOT_FOUND, "reference: checkpoint tensor %s (for %s) not in %s", name, d->name,
                 m->folder);
      free(ids);
      return;
    }
  }
  d->esrc[d->n_src] = ids;
  d->ewsrc[d->n_src] = ids;
  d->n_src++;
}

/* A layer parameter with one source named like the parameter (prefix "model.layers.L."). */
static void layer_one(sl_ref_model *m, style st, uint32_t layer, const char *suffix) {
  char name[256];
  snprintf(name, sizeof name, "%smodel.layers.%u.%s", m->pre, layer, suffix);
  rdef *d = def_new(m, st, AT_LAYER, layer, name);
  def_src(m, d, name, false);
}

static void layer_merged(sl_ref_model *m, uint32_t layer, const char *vname, const char *a, const char *b) {
  char name[256];
  char s0[256];
  char s1[256];
  snprintf(name, sizeof name, "%smodel.layers.%u.%s", m->pre, layer, vname);
  snprintf(s0, sizeof s0, "%smodel.layers.%u.%s", m->pre, layer, a);
  snprintf(s1, sizeof s1, "%smodel.layers.%u.%s", m->pre, layer, b);
  rdef *d = def_new(m, ST_MERGED, AT_LAYER, layer, name);
  def_src(m, d, s0, false);
  def_src(m, d, s1, false);
}

/* docs/spec/ARCHITECTURES.md §2 attention of Llama / Mistral / Qwen2 / Qwen3 (and the MoE families that reuse
 * it). */
static void llama_attention(sl_ref_model *m, uint32_t layer, bool qkv_bias, bool o_bias, bool qk_norm) {
  layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  const char *kinds[2] = {"weight", "bias"};
  for (int k = 0; k < (qkv_bias ? 2 : 1); k++) {
    char name[256];
    snprintf(name, sizeof name, "%smodel.layers.%u.self_attn.qkv_proj.%s", m->pre, layer, kinds[k]);
    rdef *d = def_new(m, ST_QKV, AT_LAYER, layer, name);
    if (d == NULL)
      return;
    d->hq = m->Hq;
    d->hkv = m->Hkv;
    d->d = m->d;
    const char *parts[3] = {"q_proj", "k_proj", "v_proj"};
    for (int i = 0; i < 3; i++) {
      char src[256];
      snprintf(src, sizeof src, "%smodel.layers.%u.self_attn.%s.%s", m->pre, layer, parts[i], kinds[k]);
      /* docs/spec/ARCHITECTURES.md §3: wq and wk rows are permuted in the mistral format. */
      def_src(m, d, src, m->mistral && k == 0 && i < 2);
    }
  }
  layer_one(m, ST_ROW, layer, "self_attn.o_proj.weight");
  if (o_bias)
    layer_one(m, ST_REPLICATED, layer, "self_attn.o_proj.bias");
  if (qk_norm) {
    layer_one(m, ST_REPLICATED, layer, "self_attn.q_norm.weight");
    layer_one(m, ST_REPLICATED, layer, "self_attn.k_norm.weight");
  }
  layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
}

static void dense_mlp(sl_ref_model *m, uint32_t layer, bool bias) {
  layer_merged(m, layer, "mlp.gate_up_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight");
  if (bias)
    layer_merged(m, layer, "mlp.gate_up_proj.bias", "mlp.gate_proj.bias", "mlp.up_proj.bias");
  layer_one(m, ST_ROW, layer, "mlp.down_proj.weight");
  if (bias)
    layer_one(m, ST_REPLICATED, layer, "mlp.down_proj.bias");
}

/* Stacked experts: vname w13 from gate/up per expert, w2 from down (docs/spec/LAYOUTS.md §3.5). */
static void expert_pair(sl_ref_model *m, uint32_t layer, const char *vprefix, const char *w1, const char *w3,
                        const char *w2) {
  char name[256];
  char pre[256];
  char suf[128];
  snprintf(pre, sizeof pre, "model.layers.%u.%s.", layer, vprefix);
  snprintf(name, sizeof name, "model.layers.%u.%s.w13_weight", layer, vprefix);
  rdef *d = def_new(m, ST_MOE_W13, AT_LAYER, layer, name);
  snprintf(suf, sizeof suf, ".%s", w1);
  def_expert_src(m, d, pre, suf);
  snprintf(suf, sizeof suf, ".%s", w3);
  def_expert_src(m, d, pre, suf);
  snprintf(name, sizeof name, "model.layers.%u.%s.w2_weight", layer, vprefix);
  d = def_new(m, ST_MOE_W2, AT_LAYER, layer, name);
  snprintf(suf, sizeof suf, ".%s", w2);
  def_expert_src(m, d, pre, suf);
}

static void deepseek_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  uint64_t rq = cfg_num_or(cfg, "q_lora_rank", 0);
  uint64_t fkdr = cfg_num_or(cfg, "first_k_dense_replace", 0);
  uint64_t freq = cfg_num_or(cfg, "moe_layer_freq", 1);
  uint64_t shared = cfg_num_or(cfg, "n_shared_experts", 0);
  const cJSON *tm = cJSON_GetObjectItemCaseSensitive(cfg, "topk_method");
  bool noaux = cJSON_IsString(tm) && strcmp(tm->valuestring, "noaux_tc") == 0;
  layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  if (rq > 0) {
    char name[256];
    char s0[256];
    char s1[256];
    snprintf(name, sizeof name, "model.layers.%u.self_attn.fused_qkv_a_proj.weight", layer);
    snprintf(s0, sizeof s0, "model.layers.%u.self_attn.q_a_proj.weight", layer);
    snprintf(s1, sizeof s1, "model.layers.%u.self_attn.kv_a_proj_with_mqa.weight", layer);
    rdef *d = def_new(m, ST_CONCAT, AT_LAYER, layer, name);
    def_src(m, d, s0, false);
    def_src(m, d, s1, false);
    layer_one(m, ST_REPLICATED, layer, "self_attn.q_a_layernorm.weight");
    layer_one(m, ST_COLUMN, layer, "self_attn.q_b_proj.weight");
  } else {
    layer_one(m, ST_REPLICATED, layer, "self_attn.kv_a_proj_with_mqa.weight");
    layer_one(m, ST_COLUMN, layer, "self_attn.q_proj.weight");
  }
  layer_one(m, ST_REPLICATED, layer, "self_attn.kv_a_layernorm.weight");
  layer_one(m, ST_COLUMN, layer, "self_attn.kv_b_proj.weight");
  layer_one(m, ST_ROW, layer, "self_attn.o_proj.weight");
  layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
  bool moe = m->E > 0 && layer >= fkdr && freq > 0 && layer % freq == 0;
  if (!moe) {
    dense_mlp(m, layer, false);
    return;
  }
  layer_one(m, ST_REPLICATED, layer, "mlp.gate.weight");
  expert_pair(m, layer, "mlp.experts", "gate_proj.weight", "up_proj.weight", "down_proj.weight");
  if (noaux)
    layer_one(m, ST_REPLICATED, layer, "mlp.gate.e_score_correction_bias");
  if (shared > 0) {
    layer_merged(m, layer, "mlp.shared_experts.gate_up_proj.weight", "mlp.shared_experts.gate_proj.weight",
                 "mlp.shared_experts.up_proj.weight");
    layer_one(m, ST_ROW, layer, "mlp.shared_experts.down_proj.weight");
  }
}

/* docs/spec/ARCHITECTURES.md §9: q/k/v and gate/up fused in the checkpoint. */
static void phi3_layer(sl_ref_model *m, uint32_t layer) {
  char name[256];
  layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  snprintf(name, sizeof name, "model.layers.%u.self_attn.qkv_proj.weight", layer);
  rdef *d = def_new(m, ST_QKV_FUSED, AT_LAYER, layer, name);
  def_src(m, d, name, false);
  if (d != NULL) {
    d->hq = m->Hq;
    d->hkv = m->Hkv;
    d->d = m->d;
  }
  layer_one(m, ST_ROW, layer, "self_attn.o_proj.weight");
  layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
  layer_one(m, ST_MERGED_FUSED, layer, "mlp.gate_up_proj.weight");
  layer_one(m, ST_ROW, layer, "mlp.down_proj.weight");
}

/* docs/spec/ARCHITECTURES.md §10: Qwen3-like attention, four norms. */
static void gemma3_layer(sl_ref_model *m, uint32_t layer) {
  llama_attention(m, layer, false, false, true);
  layer_one(m, ST_REPLICATED, layer, "pre_feedforward_layernorm.weight");
  dense_mlp(m, layer, false);
  layer_one(m, ST_REPLICATED, layer, "post_feedforward_layernorm.weight");
}

/* docs/spec/ARCHITECTURES.md §11. */
static void glm4_moe_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  llama_attention(m, layer, cfg_bool_or(cfg, "attention_bias", false), false,
                  cfg_bool_or(cfg, "use_qk_norm", false));
  if (m->E == 0 || layer < cfg_num_or(cfg, "first_k_dense_replace", 0)) {
    dense_mlp(m, layer, false);
    return;
  }
  layer_one(m, ST_REPLICATED, layer, "mlp.gate.weight");
  layer_one(m, ST_REPLICATED, layer, "mlp.gate.e_score_correction_bias");
  expert_pair(m, layer, "mlp.experts", "gate_proj.weight", "up_proj.weight", "down_proj.weight");
  if (cfg_num_or(cfg, "n_shared_experts", 0) > 0) {
    layer_merged(m, layer, "mlp.shared_experts.gate_up_proj.weight", "mlp.shared_experts.gate_proj.weight",
                 "mlp.shared_experts.up_proj.weight");
    layer_one(m, ST_ROW, layer, "mlp.shared_experts.down_proj.weight");
  }
}

/* A layer parameter vname (prefix "model.layers.L.") fed by the one tensor sname. */
static rdef *layer_renamed(sl_ref_model *m, style st, uint32_t layer, const char *vname, const char *sname) {
  char name[256];
  char src[256];
  snprintf(name, sizeof name, "model.layers.%u.%s", layer, vname);
  snprintf(src, sizeof src, "model.layers.%u.%s", layer, sname);
  rdef *d = def_new(m, st, AT_LAYER, layer, name);
  def_src(m, d, src, false);
  return d;
}

/* docs/spec/ARCHITECTURES.md §12: vLLM's attention is "attn", fed by "self_attn" tensors. */
static void gpt_oss_layer(sl_ref_model *m, uint32_t layer) {
  layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  const char *kinds[2] = {"weight", "bias"};
  const char *parts[3] = {"q_proj", "k_proj", "v_proj"};
  for (int k = 0; k < 2; k++) {
    char name[256];
    snprintf(name, sizeof name, "model.layers.%u.attn.qkv_proj.%s", layer, kinds[k]);
    rdef *d = def_new(m, ST_QKV, AT_LAYER, layer, name);
    if (d == NULL)
      return;
    d->hq = m->Hq;
    d->hkv = m->Hkv;
    d->d = m->d;
    for (int i = 0; i < 3; i++) {
      char src[256];
      snprintf(src, sizeof src, "model.layers.%u.self_attn.%s.%s", layer, parts[i], kinds[k]);
      def_src(m, d, src, false);
    }
  }
  layer_renamed(m, ST_ROW, layer, "attn.o_proj.weight", "self_attn.o_proj.weight");
  layer_renamed(m, ST_REPLICATED, layer, "attn.o_proj.bias", "self_attn.o_proj.bias");
  layer_renamed(m, ST_COLUMN, layer, "attn.sinks", "self_attn.sinks");
  layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
  layer_one(m, ST_REPLICATED, layer, "mlp.router.weight");
  layer_one(m, ST_REPLICATED, layer, "mlp.router.bias");
  layer_renamed(m, ST_MOE3D_IL, layer, "mlp.experts.w13_weight", "mlp.experts.gate_up_proj_blocks");
  layer_renamed(m, ST_MOE3D_IL, layer, "mlp.experts.w13_weight_scale", "mlp.experts.gate_up_proj_scales");
  layer_renamed(m, ST_MOE3D_IL, layer, "mlp.experts.w13_bias", "mlp.experts.gate_up_proj_bias");
  layer_renamed(m, ST_MOE3D_BLK, layer, "mlp.experts.w2_weight", "mlp.experts.down_proj_blocks");
  layer_renamed(m, ST_MOE3D_BLK, layer, "mlp.experts.w2_weight_scale", "mlp.experts.down_proj_scales");
  layer_renamed(m, ST_MOE_W2BIAS, layer, "mlp.experts.w2_bias", "mlp.experts.down_proj_bias");
}

/* A Llama-4 layer parameter vname fed by the one tensor sname (both under m->pre). */
static void llama4_renamed(sl_ref_model *m, style st, uint32_t layer, const char *vname, const char *sname) {
  char name[256];
  char src[256];
  snprintf(name, sizeof name, "%smodel.layers.%u.%s", m->pre, layer, vname);
  snprintf(src, sizeof src, "%smodel.layers.%u.%s", m->pre, layer, sname);
  rdef *d = def_new(m, st, AT_LAYER, layer, name);
  def_src(m, d, src, false);
}

/* docs/spec/ARCHITECTURES.md §13: Llama-4 text layers (names under "language_model."); routed experts
 * every interleave_moe_layer_step layers, fused and stored transposed against vLLM's w13_weight /
 * w2_weight, plus a shared expert; a dense feed_forward on the other layers. cfg is text_config. */
static void llama4_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  llama_attention(m, layer, false, false, false);
  uint64_t step = cfg_num_or(cfg, "interleave_moe_layer_step", 1);
  if (m->E == 0 || step == 0 || (layer + 1) % step != 0) {
    layer_merged(m, layer, "feed_forward.gate_up_proj.weight", "feed_forward.gate_proj.weight",
                 "feed_forward.up_proj.weight");
    layer_one(m, ST_ROW, layer, "feed_forward.down_proj.weight");
    return;
  }
  layer_one(m, ST_REPLICATED, layer, "feed_forward.router.weight");
  llama4_renamed(m, ST_GATE_UP_T, layer, "feed_forward.experts.w13_weight", "feed_forward.experts.gate_up_proj");
  llama4_renamed(m, ST_DOWN_T, layer, "feed_forward.experts.w2_weight", "feed_forward.experts.down_proj");
  layer_merged(m, layer, "feed_forward.shared_expert.gate_up_proj.weight",
               "feed_forward.shared_expert.gate_proj.weight", "feed_forward.shared_expert.up_proj.weight");
  layer_one(m, ST_ROW, layer, "feed_forward.shared_expert.down_proj.weight");
}

static void family_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  bool attn_bias = cfg_bool_or(cfg, "attention_bias", false);
  bool mlp_bias = cfg_bool_or(cfg, "mlp_bias", false);
  uint64_t step = cfg_num_or(cfg, "decoder_sparse_step", 1);
  bool qwen_sparse =
      m->E > 0 && !cfg_contains(cfg, "mlp_only_layers", layer) && step > 0 && (layer + 1) % step == 0;
  char name[256];
  switch (m->fam) {
  case FAM_LLAMA:
    llama_attention(m, layer, attn_bias, attn_bias, false);
    dense_mlp(m, layer, mlp_bias);
    break;
  case FAM_QWEN2:
    llama_attention(m, layer, true, false, false);
    dense_mlp(m, layer, false);
    break;
  case FAM_QWEN3:
    llama_attention(m, layer, attn_bias, false, true);
    dense_mlp(m, layer, false);
    break;
  case FAM_MIXTRAL:
    llama_attention(m, layer, attn_bias, attn_bias, false);
    layer_one(m, ST_REPLICATED, layer, "block_sparse_moe.gate.weight");
    expert_pair(m, layer, "block_sparse_moe.experts", "w1.weight", "w3.weight", "w2.weight");
    break;
  case FAM_QWEN2_MOE:
  case FAM_QWEN3_MOE:
    if (m->fam == FAM_QWEN2_MOE)
      llama_attention(m, layer, true, false, false);
    else
      llama_attention(m, layer, attn_bias, false, true);
    if (!qwen_sparse) {
      dense_mlp(m, layer, false);
      break;
    }
    layer_one(m, ST_REPLICATED, layer, "mlp.gate.weight");
    expert_pair(m, layer, "mlp.experts", "gate_proj.weight", "up_proj.weight", "down_proj.weight");
    if (m->fam == FAM_QWEN2_MOE && cfg_num_or(cfg, "shared_expert_intermediate_size", 0) > 0) {
      layer_merged(m, layer, "mlp.shared_expert.gate_up_proj.weight", "mlp.shared_expert.gate_proj.weight",
                   "mlp.shared_expert.up_proj.weight");
      layer_one(m, ST_ROW, layer, "mlp.shared_expert.down_proj.weight");
      layer_one(m, ST_REPLICATED, layer, "mlp.shared_expert_gate.weight");
    }
    break;
  case FAM_DEEPSEEK:
    deepseek_layer(m, cfg, layer);
    break;
  case FAM_FUSED3D: {
    llama_attention(m, layer, false, false, false);
    layer_one(m, ST_REPLICATED, layer, "mlp.router.weight");
    char src[256];
    snprintf(name, sizeof name, "model.layers.%u.mlp.experts.w13_weight", layer);
    snprintf(src, sizeof src, "model.layers.%u.mlp.experts.gate_up_proj", layer);
    rdef *d = def_new(m, ST_MOE3D_W13, AT_LAYER, layer, name);
    def_src(m, d, src, false);
    snprintf(name, sizeof name, "model.layers.%u.mlp.experts.w2_weight", layer);
    snprintf(src, sizeof src, "model.layers.%u.mlp.experts.down_proj", layer);
    d = def_new(m, ST_MOE3D_W2, AT_LAYER, layer, name);
    def_src(m, d, src, false);
    break;
  }
  case FAM_PHI3:
    phi3_layer(m, layer);
    break;
  case FAM_GEMMA3:
    gemma3_layer(m, layer);
    break;
  case FAM_GLM4_MOE:
    glm4_moe_layer(m, cfg, layer);
    break;
  case FAM_GPT_OSS:
    gpt_oss_layer(m, layer);
    break;
  case FAM_LLAMA4:
    llama4_layer(m, cfg, layer);
    break;
  }
}

/* docs/spec/ARCHITECTURES.md §6: each F8 weight gets a companion "<name>_scale_inv" following the weight's
 * style in blocks. */
static void add_scales(sl_ref_model *m) {
  size_t n = m->n_defs;
  for (size_t i = 0; i < n && m->st == SL_STATUS_OK; i++) {
    rdef w = m->defs[i];
    int first = w.esrc[0] != NULL ? w.esrc[0][0] : w.src[0];
    if (strncmp(m->tensors[first].dtype, "F8_", 3) != 0)
      continue;
    char *name = xprintf("%s_scale_inv", w.name);
    rdef *s = def_new(m, w.st, w.at, w.layer, name);
    free(name);
    if (s == NULL)
      return;
    s->scale = true;
    s->bn = m->bn;
    s->bk = m->bk;
    s->hq = w.hq;
    s->hkv = w.hkv;
    s->d = w.d;
    s->vocab = w.vocab;
    for (int k = 0; k < w.n_src; k++) {
      if (w.esrc[k] != NULL) {
        int *ids = calloc(m->E + 1, sizeof *ids);
        if (ids == NULL) {
          model_fail(m, SL_STATUS_NOMEM, "out of memory");
          return;
        }
        for (uint64_t x = 0; x < m->E; x++) {
          char *sn = xprintf("%s_scale_inv", m->tensors[w.esrc[k][x]].name);
          ids[x] = sn != NULL ? find_tensor(m, sn) : -1;
          if (ids[x] < 0)
            model_fail(m, SL_STATUS_QUANTIZATION, "reference: F8 weight %s has no scale %s",
                       m->tensors[w.esrc[k][x]].name, sn != NULL ? sn : "?");
          free(sn);
        }
        s->esrc[k] = ids;
        s->ewsrc[k] = w.esrc[k];
      } else {
        char *sn = xprintf("%s_scale_inv", m->tensors[w.src[k]].name);
        int t = sn != NULL ? find_tensor(m, sn) : -1;
        if (t < 0)
          model_fail(m, SL_STATUS_QUANTIZATION, "reference: F8 weight %s has no scale %s",
                     m->tensors[w.src[k]].name, sn != NULL ? sn : "?");
        free(sn);
        s->src[k] = t;
        s->wsrc[k] = w.src[k];
      }
    }
    s->n_src = w.n_src;
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
    char *sn = xprintf("%.*s.%s", (int)(len > 7 ? len - 7 : 0), wt->name, suffix);
    ids[k] = sn != NULL ? find_tensor(m, sn) : -1;
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
    model_fail(m, SL_STATUS_QUANTIZATION, "reference: %s lacks or mixes %s scales", w->name, suffix);
    return;
  }
  size_t len = strlen(w->name);
  char *name = xprintf("%.*s.%s", (int)(len - 7), w->name, suffix);
  style st = channel == 0 ? ST_PARTS : (w->st == ST_ROW ? ST_REPLICATED : w->st);
  rdef *s = def_new(m, st, w->at, w->layer, name);
  free(name);
  if (s == NULL)
    return;
  s->hq = w->hq;
  s->hkv = w->hkv;
  s->d = w->d;
  for (int k = 0; k < w->n_src; k++) {
    s->src[k] = ids[k];
    s->wsrc[k] = ids[k];
  }
  s->n_src = w->n_src;
}

static void add_ct_scales(sl_ref_model *m) {
  size_t n = m->n_defs;
  for (size_t i = 0; i < n && m->st == SL_STATUS_OK; i++) {
    rdef w = m->defs[i];
    if (w.esrc[0] != NULL || strncmp(m->tensors[w.src[0]].dtype, "F8_", 3) != 0)
      continue;
    if (w.st != ST_COLUMN && w.st != ST_ROW && w.st != ST_MERGED && w.st != ST_QKV) {
      model_fail(m, SL_STATUS_QUANTIZATION, "reference: fp8 %s of this style is not modelled", w.name);
      return;
    }
    add_ct_companion(m, &w, "weight_scale", false);
    add_ct_companion(m, &w, "input_scale", true);
  }
}

static bool pick_family(sl_ref_model *m, const char *arch, const char *override) {
  static const struct {
    const char *arch;
    family fam;
  } table[] = {{"LlamaForCausalLM", FAM_LLAMA},
               {"MistralForCausalLM", FAM_LLAMA},
               {"Qwen2ForCausalLM", FAM_QWEN2},
               {"Qwen3ForCausalLM", FAM_QWEN3},
               {"MixtralForCausalLM", FAM_MIXTRAL},
               {"Qwen2MoeForCausalLM", FAM_QWEN2_MOE},
               {"Qwen3MoeForCausalLM", FAM_QWEN3_MOE},
               {"DeepseekV2ForCausalLM", FAM_DEEPSEEK},
               {"DeepseekV3ForCausalLM", FAM_DEEPSEEK},
               {"Fused3dMoeForCausalLM", FAM_FUSED3D},
               {"Phi3ForCausalLM", FAM_PHI3},
               {"Gemma3ForCausalLM", FAM_GEMMA3},
               {"Glm4MoeForCausalLM", FAM_GLM4_MOE},
               {"GptOssForCausalLM", FAM_GPT_OSS},
               {"Llama4ForConditionalGeneration", FAM_LLAMA4}};
  if (override != NULL && strcmp(override, "fused3d") == 0) {
    m->fam = FAM_FUSED3D;
    return true;
  }
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (arch != NULL && strcmp(arch, table[i].arch) == 0) {
      m->fam = table[i].fam;
      return true;
    }
  }
  return false;
}

/* The object holding the text model's sizes: Llama-4 nests them under text_config. */
static const cJSON *text_cfg(const sl_ref_model *m, const cJSON *cfg) {
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
  return m->fam == FAM_LLAMA4 && cJSON_IsObject(tc) ? tc : cfg;
}

static bool read_config(sl_ref_model *m, const cJSON *top, const char *override) {
  const cJSON *archs = cJSON_GetObjectItemCaseSensitive(top, "architectures");
  const cJSON *a0 = cJSON_GetArrayItem(archs, 0);
  const char *arch = cJSON_IsString(a0) ? a0->valuestring : NULL;
  if (!pick_family(m, arch, override)) {
    model_fail(m, SL_STATUS_ARCH, "reference: unknown architecture %s in %s", arch != NULL ? arch : "(none)",
               m->folder);
    return false;
  }
  m->pre = m->fam == FAM_LLAMA4 ? "language_model." : "";
  const cJSON *cfg = text_cfg(m, top);
  bool ok = cfg_num(cfg, "hidden_size", &m->H) && cfg_num(cfg, "vocab_size", &m->V) &&
            cfg_num(cfg, "num_hidden_layers", &m->L) && cfg_num(cfg, "num_attention_heads", &m->Hq);
  if (!ok || m->Hq == 0) {
    model_fail(m, SL_STATUS_MODEL_CONFIG, "reference: %s/config.json lacks a required size", m->folder);
    return false;
  }
  m->Hkv = cfg_num_or(cfg, "num_key_value_heads", m->Hq);
  m->d = cfg_num_or(cfg, "head_dim", m->H / m->Hq);
  m->nh = m->Hq;
  static const char *const ekeys[] = {"num_experts", "moe_num_experts", "n_routed_experts",
                                      "num_local_experts"};
  m->E = 0;
  for (size_t i = 0; i < 4; i++) {
    if (cfg_num(cfg, ekeys[i], &m->E))
      break;
  }
  m->n_group = cfg_num_or(cfg, "n_group", 1);
  /* Gemma-3 ties unless told otherwise (docs/spec/ARCHITECTURES.md §10). */
  m->tie = cfg_bool_or(top, "tie_word_embeddings", m->fam == FAM_GEMMA3);
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
  if (cJSON_IsObject(q)) {
    const cJSON *qm = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    const cJSON *blk = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    /* MXFP4 (GPT-OSS): blocks and scales are listed tensors, nothing derived. */
    if (cJSON_IsString(qm) && strcmp(qm->valuestring, "mxfp4") == 0)
      return true;
    if (cJSON_IsString(qm) && (strcmp(qm->valuestring, "gptq") == 0 || strcmp(qm->valuestring, "awq") == 0)) {
      sl_status st = sl_ref_int4_config(q, qm->valuestring, &m->int4, m->msg, sizeof m->msg);
      if (st != SL_STATUS_OK)
        m->st = st;
      return st == SL_STATUS_OK;
    }
    if (cJSON_IsString(qm) && strcmp(qm->valuestring, "compressed-tensors") == 0) {
      const cJSON *g = NULL;
      cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(q, "config_groups")) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(w, "num_bits");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(w, "type");
        if (w != NULL && (!cJSON_IsNumber(bits) || bits->valuedouble != 8 || !cJSON_IsString(type) ||
                          strcmp(type->valuestring, "float") != 0)) {
          model_fail(m, SL_STATUS_QUANTIZATION, "reference: compressed-tensors other than fp8 (%s)",
                     m->folder);
          return false;
        }
      }
      m->ct = true;
      return true;
    }
    if (!cJSON_IsString(qm) || strcmp(qm->valuestring, "fp8") != 0 || cJSON_GetArraySize(blk) != 2) {
      model_fail(m, SL_STATUS_QUANTIZATION, "reference: only fp8 block quantization is modelled (%s)",
                 m->folder);
      return false;
    }
    m->fp8 = true;
    m->bn = (uint64_t)cJSON_GetArrayItem(blk, 0)->valuedouble;
    m->bk = (uint64_t)cJSON_GetArrayItem(blk, 1)->valuedouble;
  }
  return true;
}

static void build_defs(sl_ref_model *m, const cJSON *top) {
  const cJSON *cfg = text_cfg(m, top);
  char embed[96];
  char norm[96];
  char head[96];
  snprintf(embed, sizeof embed, "%smodel.embed_tokens.weight", m->pre);
  snprintf(norm, sizeof norm, "%smodel.norm.weight", m->pre);
  snprintf(head, sizeof head, "%slm_head.weight", m->pre);
  /* GPT-OSS calls its embedding "embedding" in vLLM (docs/spec/ARCHITECTURES.md §12). */
  rdef *d = def_new(m, ST_VOCAB, AT_EMBED, 0, m->fam == FAM_GPT_OSS ? "model.embedding.weight" : embed);
  def_src(m, d, embed, false);
  if (d != NULL)
    d->vocab = m->V;
  for (uint32_t layer = 0; layer < m->L; layer++)
    family_layer(m, cfg, layer);
  d = def_new(m, ST_REPLICATED, AT_FINAL, 0, norm);
  def_src(m, d, norm, false);
  if (!m->tie) {
    d = def_new(m, ST_VOCAB, AT_HEAD, 0, head);
    def_src(m, d, head, false);
    if (d != NULL)
      d->vocab = m->V;
  }
  if (m->fp8)
    add_scales(m);
  if (m->ct)
    add_ct_scales(m);
}

sl_status sl_ref_model_open(const char *folder, const char *arch_family, sl_ref_model **out, char *msg,
                            size_t cap) {
  *out = NULL;
  sl_ref_model *m = calloc(1, sizeof *m);
  if (m == NULL)
    return SL_STATUS_NOMEM;
  m->folder = xstrdup(folder);
  m->mistral = has_consolidated(folder);
  char *path = xprintf("%s/config.json", folder);
  FILE *f = path != NULL ? fopen(path, "rb") : NULL;
  char *text = NULL;
  if (f != NULL) {
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc(1, n > 0 ? (size_t)n + 1 : 1);
    if (text != NULL && n > 0 && fread(text, 1, (size_t)n, f) != (size_t)n) {
      free(text);
      text = NULL;
    }
    fclose(f);
  }
  cJSON *cfg = text != NULL ? cJSON_Parse(text) : NULL;
  free(text);
  if (cfg == NULL)
    model_fail(m, SL_STATUS_MODEL_CONFIG, "reference: cannot read %s", path != NULL ? path : folder);
  free(path);
  if (cfg != NULL && read_config(m, cfg, arch_family) && load_tensors(m))
    build_defs(m, cfg);
  cJSON_Delete(cfg);
  if (m->st != SL_STATUS_OK) {
    sl_status st = m->st;
    set_msg(msg, cap, "%s", m->msg);
    sl_ref_model_close(m);
    return st;
  }
  *out = m;
  return SL_STATUS_OK;
}

void sl_ref_model_close(sl_ref_model *m) {
  if (m == NULL)
    return;
  for (size_t i = 0; i < m->n_tensors; i++) {
    free(m->tensors[i].file_name);
    free(m->tensors[i].name);
  }
  for (size_t i = 0; i < m->n_defs; i++) {
    free(m->defs[i].name);
    /* esrc is owned by its definition; a scale's ewsrc borrows its weight's esrc. */
    for (int k = 0; k < 2; k++)
      free(m->defs[i].esrc[k]);
    for (int k = 0; k < MAX_SRC; k++)
      free(m->defs[i].int4_part[k]);
  }
  free(m->defs);
  free(m->tensors);
  free(m->by_name);
  free(m->folder);
  free(m);
}

const char *sl_ref_tensor_name(const sl_ref_model *m, int tensor) {
  if (tensor < 0 || (size_t)tensor >= m->n_tensors)
    return "(zero padding)";
  return m->tensors[tensor].file_name;
}

uint64_t sl_ref_tensor_nbytes(const sl_ref_model *m, int tensor) {
  if (tensor < 0 || (size_t)tensor >= m->n_tensors)
    return 0;
  return m->tensors[tensor].nbytes;
}

size_t sl_ref_tensor_count(const sl_ref_model *m) {
  return m->n_tensors;
}
uint32_t sl_ref_num_layers(const sl_ref_model *m) {
  return (uint32_t)m->L;
}
uint32_t sl_ref_num_experts(const sl_ref_model *m) {
  return (uint32_t)m->E;
}
bool sl_ref_mistral_format(const sl_ref_model *m) {
  return m->mistral;
}

/* ---------------------------------------------------------------------------------------------
 * 4. A rank's table
 * ------------------------------------------------------------------------------------------- */

uint32_t sl_ref_expert_set(uint32_t experts, uint32_t ep_size, uint32_t ep_rank, bool round_robin,
                           uint32_t *ids, uint32_t cap) {
  uint32_t n = 0;
  if (ep_size <= 1) {
    for (uint32_t x = 0; x < experts && n < cap; x++)
      ids[n++] = x;
    return n;
  }
  if (round_robin) {
    for (uint32_t x = ep_rank; x < experts && n < cap; x += ep_size)
      ids[n++] = x;
    return n;
  }
  uint32_t base = experts / ep_size;
  uint32_t rem = experts % ep_size;
  uint32_t start = ep_rank * base + (ep_rank < rem ? ep_rank : rem);
  uint32_t count = base + (ep_rank < rem ? 1 : 0);
  for (uint32_t x = start; x < start + count && n < cap; x++)
    ids[n++] = x;
  return n;
}

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

/* What a table build needs besides the model. */
typedef struct ctx {
  const sl_ref_model *m;
  uint64_t T, r;   /* dense TP size and rank */
  uint64_t Mt, mr; /* MoE TP size and rank (docs/spec/EXPERTS.md §1) */
  uint32_t n_local;
  const uint32_t *local; /* local expert ids */
  bool ckpt;
  sl_ref_table *tab;
  size_t cap_params;
  sl_status st;
  char *msg;
  size_t cap;
} ctx;

static void ctx_fail(ctx *c, sl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void ctx_fail(ctx *c, sl_status st, const char *fmt, ...) {
  if (c->st != SL_STATUS_OK)
    return;
  c->st = st;
  va_list ap;
  va_start(ap, fmt);
  if (c->msg != NULL && c->cap > 0)
    vsnprintf(c->msg, c->cap, fmt, ap);
  va_end(ap);
}

static const rtensor *tens(const ctx *c, int t) {
  return &c->m->tensors[t];
}

static uint64_t row_bytes(const rtensor *t) {
  return t->ndim == 0 || t->shape[0] == 0 ? 0 : t->nbytes / t->shape[0];
}

static uint64_t pad64(uint64_t x) {
  return (x + 63) / 64 * 64;
}

/* Block conversion of a weight boundary (rows with bn, columns with bk) for scale companions. */
static uint64_t cv(const rdef *d, uint64_t x, bool cols) {
  if (!d->scale)
    return x;
  return x / (cols ? d->bk : d->bn);
}

/* A new table entry; segs are added by the caller. */
static sl_ref_param *entry_new(ctx *c, const char *name, const rtensor *t, uint32_t ndim,
                               const uint64_t *global, const uint64_t *local) {
  if (c->st != SL_STATUS_OK)
    return NULL;
  sl_ref_table *tab = c->tab;
  if (tab->count == c->cap_params) {
    size_t ncap = c->cap_params == 0 ? 64 : c->cap_params * 2;
    sl_ref_param *n = realloc(tab->params, ncap * sizeof *n);
    if (n == NULL) {
      ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
      return NULL;
    }
    tab->params = n;
    c->cap_params = ncap;
  }
  sl_ref_param *p = &tab->params[tab->count];
  memset(p, 0, sizeof *p);
  p->name = xstrdup(name);
  p->dtype = t->dtype;
  p->dtype_bits = t->bits;
  p->ndim = ndim;
  uint64_t numel = 1;
  for (uint32_t k = 0; k < ndim; k++) {
    p->global_shape[k] = global[k];
    p->local_shape[k] = local[k];
    numel *= local[k];
  }
  p->nbytes = numel * t->bits / 8;
  tab->count++;
  return p;
}

/* Rows [row0, row0 + n) of tensor t (rows of row_bytes bytes from byte base), placed at dst.
 * perm_d > 0: Mistral rotary permutation within heads of perm_d rows (docs/spec/ARCHITECTURES.md §3). */
static void copy_rows(ctx *c, sl_ref_param *p, size_t *cap, int t, uint64_t base, uint64_t rb, uint64_t row0,
                      uint64_t n, uint64_t dst, uint64_t perm_d) {
  if (p == NULL)
    return;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t g = row0 + i;
    if (perm_d > 1) {
      uint64_t h = g / perm_d;
      uint64_t o = g % perm_d;
      uint64_t half = perm_d / 2;
      g = h * perm_d + 2 * (o % half) + o / half;
    }
    if (!seg_add(p, cap, dst + i * rb, rb, t, base + g * rb))
      ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
  }
}

/* Bytes [colb0, colb0 + colb) of each of n rows of rb bytes (from byte base), packed at dst. */
static void copy_cols(ctx *c, sl_ref_param *p, size_t *cap, int t, uint64_t base, uint64_t n, uint64_t rb,
                      uint64_t colb0, uint64_t colb, uint64_t dst) {
  if (p == NULL)
    return;
  for (uint64_t i = 0; i < n; i++) {
    if (!seg_add(p, cap, dst + i * colb, colb, t, base + i * rb + colb0))
      ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
  }
}

static void zero_fill(ctx *c, sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len) {
  if (p != NULL && !seg_add(p, cap, dst, len, -1, 0))
    ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
}

static void whole(ctx *c, const char *name, int t) {
  const rtensor *x = tens(c, t);
  sl_ref_param *p = entry_new(c, name, x, x->ndim, x->shape, x->shape);
  size_t cap = 0;
  if (p != NULL && !seg_add(p, &cap, 0, x->nbytes, t, 0))
    ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
}

/* Shape [a, rest of t]. */
static void shape_rows(const rtensor *t, uint64_t rows, uint64_t *out) {
  out[0] = rows;
  for (uint32_t k = 1; k < t->ndim; k++)
    out[k] = t->shape[k];
}

/* Divisibility checks of docs/spec/LAYOUTS.md §3 for one definition (every rank checks every definition). */
static void check_def(ctx *c, const rdef *d) {
  uint64_t T = c->T;
  switch (d->st) {
  case ST_COLUMN: {
    const rtensor *w = tens(c, d->wsrc[0]);
    if (w->shape[0] % T != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: dim 0 (size %llu) not divisible by %llu", w->name,
               (unsigned long long)w->shape[0], (unsigned long long)T);
    else if (d->scale && (w->shape[0] / T) % d->bn != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu rows per rank not a multiple of the block %llu", w->name,
               (unsigned long long)(w->shape[0] / T), (unsigned long long)d->bn);
    break;
  }
  case ST_ROW: {
    const rtensor *w = tens(c, d->wsrc[0]);
    if (w->ndim < 2)
      break;
    if (w->shape[1] % T != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: dim 1 (size %llu) not divisible by %llu", w->name,
               (unsigned long long)w->shape[1], (unsigned long long)T);
    else if (d->scale && (w->shape[1] / T) % d->bk != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu columns per rank not a multiple of the block %llu",
               w->name, (unsigned long long)(w->shape[1] / T), (unsigned long long)d->bk);
    break;
  }
  case ST_MERGED:
    for (int k = 0; k < d->n_src; k++) {
      const rtensor *w = tens(c, d->wsrc[k]);
      if (w->shape[0] % T != 0)
        ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: dim 0 (size %llu) not divisible by %llu", w->name,
                 (unsigned long long)w->shape[0], (unsigned long long)T);
      else if (d->scale && (w->shape[0] / T) % d->bn != 0)
        ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu rows per rank not a multiple of the block %llu",
                 w->name, (unsigned long long)(w->shape[0] / T), (unsigned long long)d->bn);
    }
    break;
  case ST_QKV:
    if (d->scale)
      ctx_fail(c, SL_STATUS_UNSUPPORTED, "reference: fp8 qkv is not modelled (%s)", d->name);
    else if (d->hq % T != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu heads not divisible by %llu", d->name,
               (unsigned long long)d->hq, (unsigned long long)T);
    else if (T >= d->hkv && T % d->hkv != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: tp %llu not a multiple of %llu kv heads", d->name,
               (unsigned long long)T, (unsigned long long)d->hkv);
    else if (T < d->hkv && d->hkv % T != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu kv heads not divisible by %llu", d->name,
               (unsigned long long)d->hkv, (unsigned long long)T);
    break;
  case ST_VOCAB:
    if (d->scale)
      ctx_fail(c, SL_STATUS_UNSUPPORTED, "reference: fp8 vocab is not modelled (%s)", d->name);
    else if (pad64(d->vocab) % T != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: padded vocabulary %llu not divisible by %llu", d->name,
               (unsigned long long)pad64(d->vocab), (unsigned long long)T);
    else if (tens(c, d->src[0])->shape[0] != d->vocab)
      ctx_fail(c, SL_STATUS_SHAPE, "%s: %llu rows, vocab_size %llu", d->name,
               (unsigned long long)tens(c, d->src[0])->shape[0], (unsigned long long)d->vocab);
    break;
  case ST_MOE_W13:
  case ST_MOE_W2:
  case ST_MOE3D_W13:
  case ST_MOE3D_W2: {
    uint64_t im = 0;
    if (d->st == ST_MOE_W13)
      im = tens(c, d->ewsrc[0][0])->shape[0];
    else if (d->st == ST_MOE_W2)
      im = tens(c, d->ewsrc[0][0])->shape[1];
    else if (d->st == ST_MOE3D_W13)
      im = tens(c, d->wsrc[0])->shape[1] / 2;
    else
      im = tens(c, d->wsrc[0])->shape[2];
    if (im % c->Mt != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: expert intermediate size %llu not divisible by %llu", d->name,
               (unsigned long long)im, (unsigned long long)c->Mt);
    else if (d->scale && (im / c->Mt) % (d->st == ST_MOE_W2 ? d->bk : d->bn) != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu expert rows per rank not a multiple of the block",
               d->name, (unsigned long long)(im / c->Mt));
    break;
  }
  case ST_QKV_FUSED:
    if (d->hq % T != 0 || (T >= d->hkv && T % d->hkv != 0) || (T < d->hkv && d->hkv % T != 0))
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu heads, %llu kv heads and tp %llu", d->name,
               (unsigned long long)d->hq, (unsigned long long)d->hkv, (unsigned long long)T);
    break;
  case ST_MERGED_FUSED:
    if (tens(c, d->src[0])->shape[0] % (2 * T) != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: fused rows not divisible by 2*%llu", d->name,
               (unsigned long long)T);
    break;
  case ST_MOE3D_IL:
    if (tens(c, d->src[0])->shape[1] % (2 * c->Mt) != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: interleaved rows not divisible by 2*%llu", d->name,
               (unsigned long long)c->Mt);
    break;
  case ST_MOE3D_BLK:
    if (tens(c, d->src[0])->shape[2] % c->Mt != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: dim 2 not divisible by %llu", d->name,
               (unsigned long long)c->Mt);
    break;
  case ST_GATE_UP_T:
    if (tens(c, d->src[0])->shape[2] % (2 * c->Mt) != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: 2*Im columns not divisible by 2*%llu", d->name,
               (unsigned long long)c->Mt);
    break;
  case ST_DOWN_T:
    if (tens(c, d->src[0])->shape[1] % c->Mt != 0)
      ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: Im rows not divisible by %llu", d->name,
               (unsigned long long)c->Mt);
    break;
  case ST_REPLICATED:
  case ST_CONCAT:
  case ST_MOE_W2BIAS:
  case ST_PARTS:
    break;
  }
}

/* docs/spec/LAYOUTS.md §3.3: q rows, then k and v with GQA replication; checkpoint layout: three entries. */
static void build_qkv(ctx *c, const rdef *d) {
  uint64_t T = c->T;
  uint64_t r = c->r;
  uint64_t kvl = T >= d->hkv ? 1 : d->hkv / T;
  uint64_t R = T >= d->hkv ? T / d->hkv : 1;
  uint64_t qrows = d->hq / T * d->d;
  uint64_t kvrows = kvl * d->d;
  uint64_t start[3] = {r * qrows, (r / R) * kvrows, (r / R) * kvrows};
  uint64_t rows[3] = {qrows, kvrows, kvrows};
  uint64_t want[3] = {d->hq * d->d, d->hkv * d->d, d->hkv * d->d};
  for (int k = 0; k < 3; k++) {
    if (tens(c, d->src[k])->shape[0] != want[k]) {
      ctx_fail(c, SL_STATUS_SHAPE, "%s: %llu rows, expected %llu", tens(c, d->src[k])->name,
               (unsigned long long)tens(c, d->src[k])->shape[0], (unsigned long long)want[k]);
      return;
    }
  }
  const rtensor *q = tens(c, d->src[0]);
  uint64_t rb = row_bytes(q);
  uint64_t shape[SL_MAX_DIMS];
  uint64_t global[SL_MAX_DIMS];
  if (c->ckpt) {
    for (int k = 0; k < 3; k++) {
      const rtensor *t = tens(c, d->src[k]);
      shape_rows(t, rows[k], shape);
      sl_ref_param *p = entry_new(c, t->name, t, t->ndim, t->shape, shape);
      size_t cap = 0;
      copy_rows(c, p, &cap, d->src[k], 0, row_bytes(t), start[k], rows[k], 0, d->perm[k] ? d->d : 0);
    }
    return;
  }
  shape_rows(q, qrows + 2 * kvrows, shape);
  shape_rows(q, (d->hq + 2 * d->hkv) * d->d, global);
  sl_ref_param *p = entry_new(c, d->name, q, q->ndim, global, shape);
  size_t cap = 0;
  uint64_t at = 0;
  for (int k = 0; k < 3; k++) {
    copy_rows(c, p, &cap, d->src[k], 0, rb, start[k], rows[k], at * rb, d->perm[k] ? d->d : 0);
    at += rows[k];
  }
}

/* docs/spec/LAYOUTS.md §3.4 vocabulary: real rows then zero rows (vllm); real rows only (checkpoint). */
static void build_vocab(ctx *c, const rdef *d) {
  const rtensor *t = tens(c, d->src[0]);
  uint64_t V = d->vocab;
  uint64_t per = pad64(V) / c->T;
  uint64_t a = c->r * per < V ? c->r * per : V;
  uint64_t b = (c->r + 1) * per < V ? (c->r + 1) * per : V;
  uint64_t rb = row_bytes(t);
  uint64_t shape[SL_MAX_DIMS];
  uint64_t global[SL_MAX_DIMS];
  size_t cap = 0;
  if (c->ckpt) {
    shape_rows(t, b - a, shape);
    sl_ref_param *p = entry_new(c, t->name, t, t->ndim, t->shape, shape);
    copy_rows(c, p, &cap, d->src[0], 0, rb, a, b - a, 0, 0);
    return;
  }
  shape_rows(t, per, shape);
  shape_rows(t, pad64(V), global);
  sl_ref_param *p = entry_new(c, d->name, t, t->ndim, global, shape);
  copy_rows(c, p, &cap, d->src[0], 0, rb, a, b - a, 0, 0);
  zero_fill(c, p, &cap, (b - a) * rb, (per - (b - a)) * rb);
}

static void build_column(ctx *c, const rdef *d, const char *name) {
  const rtensor *t = tens(c, d->src[0]);
  const rtensor *w = tens(c, d->wsrc[0]);
  uint64_t n = w->shape[0] / c->T;
  uint64_t shape[SL_MAX_DIMS];
  shape_rows(t, cv(d, n, false), shape);
  sl_ref_param *p = entry_new(c, name, t, t->ndim, t->shape, shape);
  size_t cap = 0;
  copy_rows(c, p, &cap, d->src[0], 0, row_bytes(t), cv(d, c->r * n, false), cv(d, n, false), 0, 0);
}

static void build_row(ctx *c, const rdef *d, const char *name) {
  const rtensor *t = tens(c, d->src[0]);
  const rtensor *w = tens(c, d->wsrc[0]);
  if (t->ndim < 2) {
    whole(c, name, d->src[0]);
    return;
  }
  uint64_t n = w->shape[1] / c->T;
  uint64_t cols = cv(d, n, true);
  uint64_t shape[SL_MAX_DIMS] = {t->shape[0], cols};
  sl_ref_param *p = entry_new(c, name, t, 2, t->shape, shape);
  size_t cap = 0;
  uint64_t eb = t->bits / 8;
  copy_cols(c, p, &cap, d->src[0], 0, t->shape[0], row_bytes(t), cv(d, c->r * n, true) * eb, cols * eb, 0);
}

/* docs/spec/LAYOUTS.md §3 merged: part k rows [r*sk/T, +sk/T) at local row (s0+...+s(k-1))/T. */
static void build_merged(ctx *c, const rdef *d) {
  const rtensor *t0 = tens(c, d->src[0]);
  uint64_t rb = row_bytes(t0);
  uint64_t shape[SL_MAX_DIMS];
  size_t cap = 0;
  if (c->ckpt) {
    for (int k = 0; k < d->n_src; k++) {
      const rtensor *t = tens(c, d->src[k]);
      uint64_t n = tens(c, d->wsrc[k])->shape[0] / c->T;
      shape_rows(t, cv(d, n, false), shape);
      sl_ref_param *p = entry_new(c, t->name, t, t->ndim, t->shape, shape);
      cap = 0;
      copy_rows(c, p, &cap, d->src[k], 0, row_bytes(t), cv(d, c->r * n, false), cv(d, n, false), 0, 0);
    }
    return;
  }
  uint64_t local_rows = 0;
  uint64_t global_rows = 0;
  for (int k = 0; k < d->n_src; k++) {
    local_rows += cv(d, tens(c, d->wsrc[k])->shape[0] / c->T, false);
    global_rows += tens(c, d->src[k])->shape[0];
  }
  uint64_t global[SL_MAX_DIMS];
  shape_rows(t0, local_rows, shape);
  shape_rows(t0, global_rows, global);
  sl_ref_param *p = entry_new(c, d->name, t0, t0->ndim, global, shape);
  uint64_t at = 0;
  for (int k = 0; k < d->n_src; k++) {
    uint64_t n = tens(c, d->wsrc[k])->shape[0] / c->T;
    copy_rows(c, p, &cap, d->src[k], 0, rb, cv(d, c->r * n, false), cv(d, n, false), at * rb, 0);
    at += cv(d, n, false);
  }
}

/* concat: whole parts one after the other, replicated (DeepSeek fused_qkv_a_proj). */
static void build_concat(ctx *c, const rdef *d) {
  if (c->ckpt) {
    for (int k = 0; k < d->n_src; k++)
      whole(c, tens(c, d->src[k])->name, d->src[k]);
    return;
  }
  const rtensor *t0 = tens(c, d->src[0]);
  uint64_t rows = 0;
  for (int k = 0; k < d->n_src; k++)
    rows += tens(c, d->src[k])->shape[0];
  uint64_t shape[SL_MAX_DIMS];
  shape_rows(t0, rows, shape);
  sl_ref_param *p = entry_new(c, d->name, t0, t0->ndim, shape, shape);
  size_t cap = 0;
  uint64_t at = 0;
  for (int k = 0; k < d->n_src; k++) {
    const rtensor *t = tens(c, d->src[k]);
    if (p != NULL && !seg_add(p, &cap, at, t->nbytes, d->src[k], 0))
      ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
    at += t->nbytes;
  }
}

/* docs/spec/LAYOUTS.md §3.5 per-expert w1/w3 → w13 [El, 2*Ip, H]; checkpoint: one entry per local expert and
 * part. */
static void build_moe_w13(ctx *c, const rdef *d) {
  const rtensor *t0 = tens(c, d->esrc[0][0]);
  uint64_t im = tens(c, d->ewsrc[0][0])->shape[0];
  uint64_t ip = im / c->Mt;
  uint64_t rows = cv(d, ip, false);
  uint64_t row0 = cv(d, c->mr * ip, false);
  uint64_t rb = row_bytes(t0);
  uint64_t shape[SL_MAX_DIMS];
  if (c->ckpt) {
    for (uint32_t j = 0; j < c->n_local; j++) {
      for (int k = 0; k < 2; k++) {
        int ti = d->esrc[k][c->local[j]];
        const rtensor *t = tens(c, ti);
        shape_rows(t, rows, shape);
        sl_ref_param *p = entry_new(c, t->name, t, t->ndim, t->shape, shape);
        size_t cap = 0;
        copy_rows(c, p, &cap, ti, 0, rb, row0, rows, 0, 0);
      }
    }
    return;
  }
  uint64_t local[3] = {c->n_local, 2 * rows, t0->shape[1]};
  uint64_t global[3] = {c->m->E, 2 * t0->shape[0], t0->shape[1]};
  sl_ref_param *p = entry_new(c, d->name, t0, 3, global, local);
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local; j++) {
    for (int k = 0; k < 2; k++) {
      int ti = d->esrc[k][c->local[j]];
      copy_rows(c, p, &cap, ti, 0, rb, row0, rows, (j * 2 * rows + k * rows) * rb, 0);
    }
  }
}

/* docs/spec/LAYOUTS.md §3.5 per-expert w2 [H, Im] → w2 [El, H, Ip] (columns of each row). */
static void build_moe_w2(ctx *c, const rdef *d) {
  const rtensor *t0 = tens(c, d->esrc[0][0]);
  uint64_t im = tens(c, d->ewsrc[0][0])->shape[1];
  uint64_t ip = im / c->Mt;
  uint64_t cols = cv(d, ip, true);
  uint64_t eb = t0->bits / 8;
  uint64_t col0 = cv(d, c->mr * ip, true) * eb;
  uint64_t h = t0->shape[0];
  uint64_t rb = row_bytes(t0);
  if (c->ckpt) {
    for (uint32_t j = 0; j < c->n_local; j++) {
      int ti = d->esrc[0][c->local[j]];
      const rtensor *t = tens(c, ti);
      uint64_t shape[2] = {h, cols};
      sl_ref_param *p = entry_new(c, t->name, t, 2, t->shape, shape);
      size_t cap = 0;
      copy_cols(c, p, &cap, ti, 0, h, rb, col0, cols * eb, 0);
    }
    return;
  }
  uint64_t local[3] = {c->n_local, h, cols};
  uint64_t global[3] = {c->m->E, h, t0->shape[1]};
  sl_ref_param *p = entry_new(c, d->name, t0, 3, global, local);
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local; j++) {
    int ti = d->esrc[0][c->local[j]];
    copy_cols(c, p, &cap, ti, 0, h, rb, col0, cols * eb, j * h * cols * eb);
  }
}

/* docs/spec/LAYOUTS.md §3.6 fused [E, 2*Im, H] (gate rows then up rows per expert) and [E, H, Im]: each local
 * slab as docs/spec/LAYOUTS.md §3.5. The checkpoint layout keeps the source name with the same stacked
 * layout. */
static void build_moe3d(ctx *c, const rdef *d) {
  const rtensor *t = tens(c, d->src[0]);
  const char *name = c->ckpt ? t->name : d->name;
  uint64_t slab = t->nbytes / t->shape[0];
  uint64_t eb = t->bits / 8;
  size_t cap = 0;
  if (d->st == ST_MOE3D_W13) {
    uint64_t im = t->shape[1] / 2;
    uint64_t ip = im / c->Mt;
    uint64_t rb = t->shape[2] * eb;
    uint64_t local[3] = {c->n_local, 2 * ip, t->shape[2]};
    sl_ref_param *p = entry_new(c, name, t, 3, t->shape, local);
    for (uint32_t j = 0; j < c->n_local; j++) {
      uint64_t base = c->local[j] * slab;
      copy_rows(c, p, &cap, d->src[0], base, rb, c->mr * ip, ip, j * 2 * ip * rb, 0);
      copy_rows(c, p, &cap, d->src[0], base, rb, im + c->mr * ip, ip, (j * 2 * ip + ip) * rb, 0);
    }
    return;
  }
  uint64_t h = t->shape[1];
  uint64_t im = t->shape[2];
  uint64_t ip = im / c->Mt;
  uint64_t local[3] = {c->n_local, h, ip};
  sl_ref_param *p = entry_new(c, name, t, 3, t->shape, local);
  for (uint32_t j = 0; j < c->n_local; j++)
    copy_cols(c, p, &cap, d->src[0], c->local[j] * slab, h, im * eb, c->mr * ip * eb, ip * eb,
              j * h * ip * eb);
}

/* docs/spec/LAYOUTS.md §3.8: the q, k, v row ranges of §3.3 taken from one fused tensor. */
static void build_qkv_fused(ctx *c, const rdef *d) {
  const rtensor *t = tens(c, d->src[0]);
  uint64_t T = c->T;
  uint64_t kvl = T >= d->hkv ? 1 : d->hkv / T;
  uint64_t R = T >= d->hkv ? T / d->hkv : 1;
  uint64_t qrows = d->hq / T * d->d;
  uint64_t kvrows = kvl * d->d;
  if (t->shape[0] != (d->hq + 2 * d->hkv) * d->d) {
    ctx_fail(c, SL_STATUS_SHAPE, "%s: %llu rows", t->name, (unsigned long long)t->shape[0]);
    return;
  }
  uint64_t start[3] = {c->r * qrows, d->hq * d->d + (c->r / R) * kvrows,
                       (d->hq + d->hkv) * d->d + (c->r / R) * kvrows};
  uint64_t rows[3] = {qrows, kvrows, kvrows};
  uint64_t shape[SL_MAX_DIMS];
  shape_rows(t, qrows + 2 * kvrows, shape);
  sl_ref_param *p = entry_new(c, c->ckpt ? t->name : d->name, t, t->ndim, t->shape, shape);
  size_t cap = 0;
  uint64_t rb = t->ndim == 1 ? t->bits / 8 : row_bytes(t);
  uint64_t at = 0;
  for (int k = 0; k < 3; k++) {
    copy_rows(c, p, &cap, d->src[0], 0, rb, start[k], rows[k], at * rb, 0);
    at += rows[k];
  }
}

/* docs/spec/LAYOUTS.md §3.8: the gate and up row ranges of §3.2 taken from one fused tensor. */
static void build_merged_fused(ctx *c, const rdef *d) {
  const rtensor *t = tens(c, d->src[0]);
  uint64_t half = t->shape[0] / 2;
  uint64_t n = half / c->T;
  uint64_t shape[SL_MAX_DIMS];
  shape_rows(t, 2 * n, shape);
  sl_ref_param *p = entry_new(c, c->ckpt ? t->name : d->name, t, t->ndim, t->shape, shape);
  size_t cap = 0;
  uint64_t rb = row_bytes(t);
  copy_rows(c, p, &cap, d->src[0], 0, rb, c->r * n, n, 0, 0);
  copy_rows(c, p, &cap, d->src[0], 0, rb, half + c->r * n, n, n * rb, 0);
}

/* docs/spec/LAYOUTS.md §3.9: GPT-OSS experts. IL: rows [mr*n, (mr+1)*n) of dim 1 per local expert
 * (n = dim 1 / Mt); BLK: entries [mr*n, (mr+1)*n) of dim 2 in every dim-1 row; W2BIAS: whole expert
 * rows on MoE rank 0, zeros elsewhere. */
static void build_gpt_oss_experts(ctx *c, const rdef *d) {
  const rtensor *t = tens(c, d->src[0]);
  uint64_t eb = t->bits / 8;
  uint64_t slab = t->nbytes / t->shape[0];
  uint64_t shape[SL_MAX_DIMS];
  for (uint32_t k = 0; k < t->ndim; k++)
    shape[k] = t->shape[k];
  shape[0] = c->n_local;
  uint64_t rest = 1; /* elements after the split dimension */
  uint32_t split = d->st == ST_MOE3D_BLK ? 2 : 1;
  for (uint32_t k = split + 1; k < t->ndim; k++)
    rest *= t->shape[k];
  uint64_t n = d->st == ST_MOE_W2BIAS ? 0 : t->shape[split] / c->Mt;
  if (d->st != ST_MOE_W2BIAS)
    shape[split] = n;
  sl_ref_param *p = entry_new(c, c->ckpt ? t->name : d->name, t, t->ndim, t->shape, shape);
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local && p != NULL; j++) {
    uint64_t base = c->local[j] * slab;
    if (d->st == ST_MOE3D_IL) {
      if (!seg_add(p, &cap, j * n * rest * eb, n * rest * eb, d->src[0], base + c->mr * n * rest * eb))
        ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
    } else if (d->st == ST_MOE3D_BLK) {
      uint64_t rb = t->shape[2] * rest * eb;
      copy_cols(c, p, &cap, d->src[0], base, t->shape[1], rb, c->mr * n * rest * eb, n * rest * eb,
                j * t->shape[1] * n * rest * eb);
    } else if (c->mr == 0) {
      if (!seg_add(p, &cap, j * slab, slab, d->src[0], base))
        ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
    } else {
      zero_fill(c, p, &cap, j * slab, slab);
    }
  }
}

/* docs/spec/LAYOUTS.md §3.10: Llama-4 experts, n = Im/Mt. Planned in the checkpoint's orientation:
 * GATE_UP_T [El, H, 2n], row h of local expert j = gate columns [mr*n, +n) then up columns
 * Im + [mr*n, +n) of row h; DOWN_T [El, n, H], rows [mr*n, +n) of each local expert. The
 * checkpoint layout holds exactly that under the checkpoint's names; the vllm layout holds vLLM's
 * w13_weight [El, 2n, H] and w2_weight [El, H, n], the last two dimensions transposed, element by
 * element here. */
static void llama4_vllm_experts(ctx *c, const rdef *d, sl_ref_param *p, bool gu, uint64_t n) {
  const rtensor *t = tens(c, d->src[0]);
  uint64_t eb = t->bits / 8;
  uint64_t slab = t->nbytes / t->shape[0];
  uint64_t H = gu ? t->shape[1] : t->shape[2];
  uint64_t im = gu ? t->shape[2] / 2 : t->shape[1];
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local && p != NULL; j++) {
    uint64_t base = c->local[j] * slab;
    uint64_t rows = gu ? 2 * n : H; /* held [El, rows, cols] */
    uint64_t cols = gu ? H : n;
    for (uint64_t y = 0; y < rows; y++) {
      for (uint64_t x = 0; x < cols; x++) {
        /* gate_up: held (col y, row h = x) ← source row h, column y's gate or up column;
         * down: held (h = y, i = x) ← source row mr*n + i, column h */
        uint64_t src = gu ? base + (x * 2 * im + (y < n ? c->mr * n + y : im + c->mr * n + y - n)) * eb
                          : base + ((c->mr * n + x) * H + y) * eb;
        if (!seg_add(p, &cap, ((j * rows + y) * cols + x) * eb, eb, d->src[0], src)) {
          ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
          return;
        }
      }
    }
  }
}

static void build_llama4_experts(ctx *c, const rdef *d) {
  const rtensor *t = tens(c, d->src[0]);
  uint64_t eb = t->bits / 8;
  uint64_t slab = t->nbytes / t->shape[0];
  bool gu = d->st == ST_GATE_UP_T;
  uint64_t shape[SL_MAX_DIMS] = {c->n_local, t->shape[1], t->shape[2]};
  uint64_t n = gu ? t->shape[2] / 2 / c->Mt : t->shape[1] / c->Mt;
  shape[gu ? 2 : 1] = gu ? 2 * n : n;
  if (!c->ckpt) {
    uint64_t global[SL_MAX_DIMS] = {t->shape[0], t->shape[2], t->shape[1]};
    uint64_t local[SL_MAX_DIMS] = {c->n_local, shape[2], shape[1]};
    llama4_vllm_experts(c, d, entry_new(c, d->name, t, 3, global, local), gu, n);
    return;
  }
  sl_ref_param *p = entry_new(c, t->name, t, 3, t->shape, shape);
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local && p != NULL; j++) {
    uint64_t base = c->local[j] * slab;
    if (!gu) {
      uint64_t len = n * t->shape[2] * eb;
      if (!seg_add(p, &cap, j * len, len, d->src[0], base + c->mr * len))
        ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
      continue;
    }
    uint64_t H = t->shape[1];
    uint64_t im = t->shape[2] / 2;
    for (uint64_t h = 0; h < H; h++) {
      uint64_t dst = (j * H + h) * 2 * n * eb;
      uint64_t src = base + h * t->shape[2] * eb;
      if (!seg_add(p, &cap, dst, n * eb, d->src[0], src + c->mr * n * eb) ||
          !seg_add(p, &cap, dst + n * eb, n * eb, d->src[0], src + (im + c->mr * n) * eb))
        ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
    }
  }
}

/* docs/spec/LAYOUTS.md §3.11: part k's one number at element k (vllm); each scale whole (checkpoint). */
static void build_parts(ctx *c, const rdef *d) {
  if (c->ckpt) {
    for (int k = 0; k < d->n_src; k++)
      whole(c, tens(c, d->src[k])->name, d->src[k]);
    return;
  }
  const rtensor *t0 = tens(c, d->src[0]);
  uint64_t n = (uint64_t)d->n_src;
  sl_ref_param *p = entry_new(c, d->name, t0, 1, &n, &n);
  size_t cap = 0;
  for (int k = 0; k < d->n_src && p != NULL; k++) {
    if (tens(c, d->src[k])->nbytes != t0->bits / 8)
      ctx_fail(c, SL_STATUS_SHAPE, "%s: per-tensor scale is not one number", tens(c, d->src[k])->name);
    else if (!seg_add(p, &cap, (uint64_t)k * t0->bits / 8, t0->bits / 8, d->src[k], 0))
      ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
  }
}

/* A GPTQ / AWQ linear (reference_int4.c): checked only (build false) or built into the table. */
static void int4_def(ctx *c, const rdef *d, bool build) {
  sl_ref_int4_linear lin = {.name = d->name, .n_parts = d->n_src, .hq = d->hq, .hkv = d->hkv, .d = d->d};
  for (int k = 0; k < d->n_src; k++)
    lin.part[k] = d->int4_part[k];
  if (d->st == ST_COLUMN || d->st == ST_ROW || d->st == ST_MERGED || d->st == ST_QKV)
    lin.kind = d->st == ST_COLUMN ? SL_REF_INT4_COLUMN
               : d->st == ST_ROW  ? SL_REF_INT4_ROW
               : d->st == ST_MERGED ? SL_REF_INT4_MERGED
                                    : SL_REF_INT4_QKV;
  else {
    ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: int4 %s of this style is not modelled", d->name);
    return;
  }
  for (int k = 0; k < d->n_src; k++)
    if (lin.part[k] == NULL) {
      ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: %s mixes int4 and unquantized parts", d->name);
      return;
    }
  if (c->st == SL_STATUS_OK)
    c->st = sl_ref_int4_build(&c->m->int4, &lin, int4_find, c->m, c->T, c->r, c->ckpt, build ? c->tab : NULL,
                              &c->cap_params, c->msg, c->cap);
}

static void build_def(ctx *c, const rdef *d) {
  if (d->int4) {
    int4_def(c, d, true);
    return;
  }
  switch (d->st) {
  case ST_REPLICATED:
    whole(c, c->ckpt ? tens(c, d->src[0])->name : d->name, d->src[0]);
    break;
  case ST_COLUMN:
    build_column(c, d, c->ckpt ? tens(c, d->src[0])->name : d->name);
    break;
  case ST_ROW:
    build_row(c, d, c->ckpt ? tens(c, d->src[0])->name : d->name);
    break;
  case ST_MERGED:
    build_merged(c, d);
    break;
  case ST_QKV:
    build_qkv(c, d);
    break;
  case ST_VOCAB:
    build_vocab(c, d);
    break;
  case ST_CONCAT:
    build_concat(c, d);
    break;
  case ST_MOE_W13:
    build_moe_w13(c, d);
    break;
  case ST_MOE_W2:
    build_moe_w2(c, d);
    break;
  case ST_MOE3D_W13:
  case ST_MOE3D_W2:
    build_moe3d(c, d);
    break;
  case ST_QKV_FUSED:
    build_qkv_fused(c, d);
    break;
  case ST_MERGED_FUSED:
    build_merged_fused(c, d);
    break;
  case ST_MOE3D_IL:
  case ST_MOE3D_BLK:
  case ST_MOE_W2BIAS:
    build_gpt_oss_experts(c, d);
    break;
  case ST_GATE_UP_T:
  case ST_DOWN_T:
    build_llama4_experts(c, d);
    break;
  case ST_PARTS:
    build_parts(c, d);
    break;
  }
}

/* The tied head (docs/spec/LAYOUTS.md §2.3): an alias entry with the embedding's shape and content. */
static void add_tied_head(ctx *c) {
  sl_ref_table *tab = c->tab;
  size_t embed = tab->count;
  for (size_t i = 0; i < tab->count; i++) {
    if (strcmp(tab->params[i].name, "model.embed_tokens.weight") == 0)
      embed = i;
  }
  if (embed == tab->count) {
    ctx_fail(c, SL_STATUS_INTERNAL, "reference: tied head without an embedding on the last stage");
    return;
  }
  sl_ref_param e = tab->params[embed];
  const rtensor *t = tens(c, find_tensor(c->m, "model.embed_tokens.weight"));
  sl_ref_param *p = entry_new(c, "lm_head.weight", t, e.ndim, e.global_shape, e.local_shape);
  if (p == NULL)
    return;
  /* entry_new may have moved the array: take the embedding again. */
  const sl_ref_param *src = &tab->params[embed];
  p->alias_of = "model.embed_tokens.weight";
  p->segs = malloc((src->n_segs + 1) * sizeof *p->segs);
  if (p->segs == NULL) {
    ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
    return;
  }
  memcpy(p->segs, src->segs, src->n_segs * sizeof *p->segs);
  p->n_segs = src->n_segs;
}

sl_status sl_ref_table_build(const sl_ref_model *m, const sl_ref_layout *lay, sl_ref_table **out, char *msg,
                             size_t cap) {
  *out = NULL;
  uint64_t T = (uint64_t)lay->tp;
  uint64_t P = (uint64_t)lay->pp;
  uint64_t D = (uint64_t)lay->dp;
  if (lay->tp < 1 || lay->pp < 1 || lay->dp < 1 || lay->rank < 0 || (uint64_t)lay->rank >= T * P * D) {
    set_msg(msg, cap, "reference: invalid layout tp %d pp %d dp %d rank %d", lay->tp, lay->pp, lay->dp,
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
    set_msg(msg, cap, "reference: %llu layers cannot be split over %llu pipeline stages",
            (unsigned long long)m->L, (unsigned long long)P);
    return SL_STATUS_LAYOUT;
  }
  sl_ref_table *tab = calloc(1, sizeof *tab);
  if (tab == NULL)
    return SL_STATUS_NOMEM;
  tab->stage = (uint32_t)p;
  tab->layer_start = start;
  tab->layer_end = start + count;
  ctx c = {.m = m, .T = T, .r = r, .ckpt = lay->checkpoint_layout, .tab = tab, .msg = msg, .cap = cap};
  /* docs/spec/EXPERTS.md §1 / §3: expert parallelism over the stage group of D*T ranks. */
  bool ep = lay->expert_parallel && D * T > 1 && m->E > 0;
  if (ep) {
    bool rr = lay->round_robin && m->n_group > 1;
    c.Mt = 1;
    c.mr = 0;
    tab->experts_local =
        sl_ref_expert_set((uint32_t)m->E, (uint32_t)(D * T), (uint32_t)(q * T + r), rr, tab->expert_ids, 512);
  } else {
    c.Mt = D * T;
    c.mr = q * T + r;
    tab->experts_local = sl_ref_expert_set((uint32_t)m->E, 1, 0, false, tab->expert_ids, 512);
  }
  c.n_local = tab->experts_local;
  c.local = tab->expert_ids;
  if (m->fam == FAM_DEEPSEEK && m->nh % T != 0)
    ctx_fail(&c, SL_STATUS_DIVISIBILITY, "num_attention_heads %llu not divisible by tp %llu",
             (unsigned long long)m->nh, (unsigned long long)T);
  for (size_t i = 0; i < m->n_defs && c.st == SL_STATUS_OK; i++) {
    if (m->defs[i].int4)
      int4_def(&c, &m->defs[i], false);
    else
      check_def(&c, &m->defs[i]);
  }
  bool first = p == 0;
  bool last = p == P - 1;
  for (size_t i = 0; i < m->n_defs && c.st == SL_STATUS_OK; i++) {
    const rdef *d = &m->defs[i];
    bool here = false;
    if (d->at == AT_EMBED)
      here = first || (m->tie && last);
    else if (d->at == AT_LAYER)
      here = d->layer >= start && d->layer < start + count;
    else
      here = last;
    if (here)
      build_def(&c, d);
  }
  if (c.st == SL_STATUS_OK && m->tie && last)
    add_tied_head(&c);
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
  memset(out, 0, p->nbytes);
  for (size_t i = 0; i < p->n_segs; i++) {
    const sl_ref_seg *s = &p->segs[i];
    if (s->tensor >= 0 && s->dst + s->len <= p->nbytes)
      sl_value_fill(m->tensors[s->tensor].file_name, s->src, out + s->dst, s->len);
  }
}

void sl_ref_describe(const sl_ref_model *m, const sl_ref_param *p, uint64_t offset, char *buf, size_t cap) {
  for (size_t i = 0; i < p->n_segs; i++) {
    const sl_ref_seg *s = &p->segs[i];
    if (offset >= s->dst && offset < s->dst + s->len) {
      if (s->tensor < 0)
        set_msg(buf, cap, "zero padding");
      else
        set_msg(buf, cap, "%s byte %llu", m->tensors[s->tensor].file_name,
                (unsigned long long)(s->src + offset - s->dst));
      return;
    }
  }
  set_msg(buf, cap, "no source (reference gap)");
}

/* ---------------------------------------------------------------------------------------------
 * 5. Cluster figures
 * ------------------------------------------------------------------------------------------- */

sl_status sl_ref_cluster_compute(const sl_ref_model *m, const sl_ref_layout *layout, sl_ref_cluster *out,
                                 char *msg, size_t cap) {
  memset(out, 0, sizeof *out);
  int world = layout->tp * layout->pp * layout->dp;
  if (world < 1 || world > 64) {
    set_msg(msg, cap, "reference: world %d out of range", world);
    return SL_STATUS_LAYOUT;
  }
  ivec all = {0};
  bool *touched = calloc(m->n_tensors + 1, sizeof *touched);
  sl_status st = touched != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
  for (int g = 0; g < world && st == SL_STATUS_OK; g++) {
    sl_ref_layout lay = *layout;
    lay.rank = g;
    sl_ref_table *tab = NULL;
    st = sl_ref_table_build(m, &lay, &tab, msg, cap);
    if (st != SL_STATUS_OK)
      break;
    ivec mine = {0};
    memset(touched, 0, m->n_tensors * sizeof *touched);
    sl_ref_rank_stats *rs = &out->ranks[g];
    rs->params = (uint32_t)tab->count;
    rs->experts_local = tab->experts_local;
    for (size_t i = 0; i < tab->count; i++) {
      const sl_ref_param *p = &tab->params[i];
      if (p->alias_of != NULL)
        continue;
      rs->bytes_local += p->nbytes;
      for (size_t k = 0; k < p->n_segs; k++) {
        const sl_ref_seg *s = &p->segs[k];
        if (s->tensor < 0 || s->len == 0)
          continue;
        if (!ivec_push(&mine, s->tensor, s->src, s->src + s->len) ||
            !ivec_push(&all, s->tensor, s->src, s->src + s->len))
          st = SL_STATUS_NOMEM;
        touched[s->tensor] = true;
      }
    }
    for (size_t t = 0; t < m->n_tensors; t++) {
      if (touched[t])
        rs->bytes_naive += m->tensors[t].nbytes;
    }
    rs->bytes_needed = ivec_union_bytes(&mine);
    out->bytes_needed += rs->bytes_needed;
    out->bytes_naive += rs->bytes_naive;
    free(mine.v);
    sl_ref_table_free(tab);
  }
  if (st == SL_STATUS_OK) {
    out->bytes_unique = ivec_union_bytes(&all);
    out->bytes_broadcast = out->bytes_needed - out->bytes_unique;
  }
  free(all.v);
  free(touched);
  return st;
}
