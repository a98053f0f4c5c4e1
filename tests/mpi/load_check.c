/*
 * load_check.c — the shared driver of the byte-exact multi-rank tests (see load_check.h).
 *
 * lc_run, on every rank: build the reference table of the rank; create a loader from the case;
 * load; then
 *   - invalid layout (the reference says so): the loader must fail on every rank with the same
 *     status as the reference, before any data is read (no report);
 *   - otherwise: the load succeeds on every rank; the rank's table holds exactly the reference's
 *     names (no missing, no extra, no duplicate); for each entry dtype, shapes, size, device,
 *     alias and EVERY byte equal the reference (first differing byte reported with its origin);
 *   - rank 0 parses its JSON report and compares the cluster figures with the reference's
 *     (read once: amplification 1.00, bytes read minus covering equal the distinct bytes; per
 *     rank bytes read equal to the plan, bytes needed / local / naive, params, local experts;
 *     broadcast volume = sum needed - distinct; no missing or unexpected weights).
 */
#include "load_check.h"

#include "check.h"
#include "values.h"

#include <cjson/cJSON.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct cached_model {
  char key[512];
  sl_ref_model *model;
} cached_model;

static cached_model cache[32];
static int n_cache;

int lc_rank(void) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int lc_world(void) {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void lc_quiet_logs(void) {
  if (getenv("SHARDLOAD_LOG") == NULL)
    sl_log_set_level(SL_LOG_ERROR);
}

char *lc_tmpdir(const char *tag) {
  char path[1024] = "";
  if (lc_rank() == 0) {
    char *d = sl_test_mkdtemp(tag);
    snprintf(path, sizeof path, "%s", d != NULL ? d : "");
    free(d);
  }
  MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  CHECKF(path[0] != '\0', "cannot make a temporary folder for %s", tag);
  return path[0] != '\0' ? strdup(path) : NULL;
}

void lc_tmpdir_remove(char *dir) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (dir != NULL && lc_rank() == 0)
    sl_test_rmtree(dir);
  free(dir);
}

void lc_evict(const char *dir, const char *name) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (lc_rank() == 0) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY);
    CHECKF(fd >= 0, "cannot open %s", path);
    if (fd >= 0) {
      CHECKF(fsync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0, "evicting %s", path);
      close(fd);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

bool lc_make_variant(const char *fixture, const char *dir, const char *args) {
  int rc = 0;
  if (lc_rank() == 0) {
    size_t cap = strlen(args) + strlen(dir) + 2048;
    char *cmd = malloc(cap);
    if (cmd != NULL) {
      snprintf(cmd, cap, "'%s/scripts/make-fixture' %s '%s' %s >/dev/null", sl_test_env("SL_SOURCE_DIR", "."),
               fixture, dir, args);
      rc = system(cmd);
      free(cmd);
    } else {
      rc = -1;
    }
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  CHECKF(rc == 0, "make-fixture %s %s %s failed (status %d)", fixture, dir, args, rc);
  return rc == 0;
}

typedef struct tiny_tensor {
  char name[96];
  uint64_t shape[2];
  uint32_t ndim;
} tiny_tensor;

static size_t tiny_tensors(tiny_tensor *t) {
  static const struct {
    const char *suffix;
    uint64_t rows, cols;
  } per_layer[] = {{"input_layernorm.weight", 16, 0},   {"self_attn.q_proj.weight", 16, 16},
                   {"self_attn.k_proj.weight", 8, 16},  {"self_attn.v_proj.weight", 8, 16},
                   {"self_attn.o_proj.weight", 16, 16}, {"post_attention_layernorm.weight", 16, 0},
                   {"mlp.gate_proj.weight", 32, 16},    {"mlp.up_proj.weight", 32, 16},
                   {"mlp.down_proj.weight", 16, 32}};
  size_t n = 0;
  t[n++] = (tiny_tensor){.name = "model.embed_tokens.weight", .shape = {65, 16}, .ndim = 2};
  for (int layer = 0; layer < 2; layer++) {
    for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
      snprintf(t[n].name, sizeof t[n].name, "model.layers.%d.%s", layer, per_layer[i].suffix);
      t[n].shape[0] = per_layer[i].rows;
      t[n].shape[1] = per_layer[i].cols;
      t[n].ndim = per_layer[i].cols > 0 ? 2 : 1;
      n++;
    }
  }
  t[n++] = (tiny_tensor){.name = "model.norm.weight", .shape = {16, 0}, .ndim = 1};
  t[n++] = (tiny_tensor){.name = "lm_head.weight", .shape = {65, 16}, .ndim = 2};
  return n;
}

/* A safetensors file: LE64 header length, JSON header padded with spaces to 8 bytes, data. */
static bool write_tiny(const char *dir) {
  tiny_tensor t[32];
  size_t n = tiny_tensors(t);
  cJSON *hdr = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(hdr, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "pt");
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    cJSON *e = cJSON_AddObjectToObject(hdr, t[i].name);
    cJSON_AddStringToObject(e, "dtype", "BF16");
    cJSON *shape = cJSON_AddArrayToObject(e, "shape");
    uint64_t bytes = 2;
    for (uint32_t k = 0; k < t[i].ndim; k++) {
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[k]));
      bytes *= t[i].shape[k];
    }
    cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
    off += bytes;
  }
  char *json = cJSON_PrintUnformatted(hdr);
  cJSON_Delete(hdr);
  if (json == NULL)
    return false;
  size_t jl = strlen(json);
  size_t padded = (jl + 7) / 8 * 8;
  size_t total = 8 + padded + off;
  uint8_t *buf = calloc(1, total);
  bool ok = buf != NULL;
  if (ok) {
    for (int b = 0; b < 8; b++)
      buf[b] = (uint8_t)((uint64_t)padded >> (8 * b));
    memcpy(buf + 8, json, jl);
    memset(buf + 8 + jl, ' ', padded - jl);
    uint64_t at = 8 + padded;
    for (size_t i = 0; i < n; i++) {
      uint64_t bytes = 2 * t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
      sl_value_fill(t[i].name, 0, buf + at, (size_t)bytes);
      at += bytes;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ok = sl_test_write_file(path, buf, total) == 0;
  }
  free(buf);
  free(json);
  static const char config[] =
      "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16, \"num_hidden_layers\": 2,\n"
      " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 32,\n"
      " \"vocab_size\": 65, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}\n";
  char path[1024];
  snprintf(path, sizeof path, "%s/config.json", dir);
  return ok && sl_test_write_file(path, config, sizeof config - 1) == 0;
}

bool lc_write_tiny_vocab65(const char *dir) {
  int ok = 1;
  if (lc_rank() == 0)
    ok = write_tiny(dir) ? 1 : 0;
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  CHECKF(ok == 1, "cannot write the tiny vocabulary-65 checkpoint into %s", dir);
  return ok == 1;
}

void lc_fixture_path(const char *name, char *out, size_t cap) {
  if (name[0] == '/')
    snprintf(out, cap, "%s", name);
  else
    snprintf(out, cap, "%s/%s", sl_test_env("SL_FIXTURES", "fixtures"), name);
}

sl_ref_model *lc_model(const char *fixture, const char *arch_family) {
  char key[512];
  snprintf(key, sizeof key, "%s|%s", fixture, arch_family != NULL ? arch_family : "");
  for (int i = 0; i < n_cache; i++) {
    if (strcmp(cache[i].key, key) == 0)
      return cache[i].model;
  }
  char path[1024];
  char msg[1024] = "";
  lc_fixture_path(fixture, path, sizeof path);
  sl_ref_model *m = NULL;
  sl_status st = sl_ref_model_open(path, arch_family, &m, msg, sizeof msg);
  CHECKF(st == SL_STATUS_OK, "reference model of %s: %s: %s", path, sl_status_name(st), msg);
  if (st != SL_STATUS_OK)
    return NULL;
  if (n_cache < (int)(sizeof cache / sizeof cache[0])) {
    snprintf(cache[n_cache].key, sizeof cache[n_cache].key, "%s", key);
    cache[n_cache].model = m;
    n_cache++;
  }
  return m;
}

void lc_models_close(void) {
  for (int i = 0; i < n_cache; i++)
    sl_ref_model_close(cache[i].model);
  n_cache = 0;
}

void lc_label(const lc_case *c, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s tp%d pp%d dp%d%s%s %s", c->fixture, c->tp, c->pp, c->dp, c->ep ? " ep" : "",
                   c->ep && c->round_robin ? " round_robin" : "", c->checkpoint ? "checkpoint" : "vllm");
  for (int i = 0; i + 1 < 8 && c->extra[i] != NULL && n >= 0 && (size_t)n < cap; i += 2)
    n += snprintf(out + n, cap - (size_t)n, " %s=%s", c->extra[i], c->extra[i + 1]);
}

int lc_layouts(int world, int out[][3], int cap) {
  int n = 0;
  for (int tp = world; tp >= 1; tp--) {
    for (int pp = 1; pp <= world; pp++) {
      for (int dp = 1; dp <= world; dp++) {
        if (tp * pp * dp == world && n < cap) {
          out[n][0] = tp;
          out[n][1] = pp;
          out[n][2] = dp;
          n++;
        }
      }
    }
  }
  return n;
}

void lc_run_layouts(const char *const *fixtures, size_t n) {
  int lays[16][3];
  int nl = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < n; f++)
    for (int i = 0; i < nl; i++)
      for (int ep = 0; ep < 2; ep++)
        for (int ckpt = 0; ckpt < 2; ckpt++) {
          lc_case c = {.fixture = fixtures[f],
                       .tp = lays[i][0],
                       .pp = lays[i][1],
                       .dp = lays[i][2],
                       .ep = ep == 1,
                       .checkpoint = ckpt == 1,
                       .no_coalesce = ep == 1};
          lc_run(&c, NULL);
        }
}

static void set_cfg(sl_config *cfg, const char *key, const char *value) {
  sl_status st = sl_config_set(cfg, key, value);
  CHECKF(st == SL_STATUS_OK, "sl_config_set(%s, %s): %s", key, value, sl_config_error(cfg));
}

static sl_config *make_config(const lc_case *c, const char *folder) {
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return NULL;
  char num[32];
  set_cfg(cfg, "model", folder);
  snprintf(num, sizeof num, "%d", c->tp);
  set_cfg(cfg, "tp", num);
  snprintf(num, sizeof num, "%d", c->pp);
  set_cfg(cfg, "pp", num);
  snprintf(num, sizeof num, "%d", c->dp);
  set_cfg(cfg, "dp", num);
  set_cfg(cfg, "layout", c->checkpoint ? "checkpoint" : "vllm");
  set_cfg(cfg, "enable_expert_parallel", c->ep ? "true" : "false");
  set_cfg(cfg, "expert_placement", c->round_robin ? "round_robin" : "linear");
  set_cfg(cfg, "quiet", "true");
  set_cfg(cfg, "threads", "2");
  if (c->no_coalesce)
    set_cfg(cfg, "coalesce_gap_bytes", "0");
  if (c->arch_family != NULL && strcmp(c->arch_family, "fused3d") == 0) {
    char spec[1024];
    snprintf(spec, sizeof spec, "%s/tests/data/fused3d_spec.json", sl_test_env("SL_SOURCE_DIR", "."));
    set_cfg(cfg, "arch", spec);
  }
  for (int i = 0; i + 1 < 8 && c->extra[i] != NULL; i += 2)
    set_cfg(cfg, c->extra[i], c->extra[i + 1]);
  return cfg;
}

static void shape_str(uint32_t ndim, const uint64_t *shape, char *out, size_t cap) {
  size_t n = 0;
  n += (size_t)snprintf(out + n, cap - n, "[");
  for (uint32_t k = 0; k < ndim && n < cap; k++)
    n += (size_t)snprintf(out + n, cap - n, "%s%llu", k > 0 ? ", " : "", (unsigned long long)shape[k]);
  if (n < cap)
    snprintf(out + n, cap - n, "]");
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One loader entry against its reference entry. */
void lc_check_param(const char *label, const sl_ref_model *m, const sl_loader *l, const sl_param *p,
                    const sl_ref_param *e) {
  CHECKF(strcmp(p->dtype, e->dtype) == 0, "%s: %s dtype %s, expected %s", label, p->name, p->dtype, e->dtype);
  CHECKF(p->dtype_bits == e->dtype_bits, "%s: %s dtype_bits %u, expected %u", label, p->name, p->dtype_bits,
         e->dtype_bits);
  bool same_local = p->ndim == e->ndim;
  bool same_global = p->ndim == e->ndim;
  for (uint32_t k = 0; k < e->ndim && k < SL_MAX_DIMS && same_local; k++)
    same_local = p->local_shape[k] == e->local_shape[k];
  for (uint32_t k = 0; k < e->ndim && k < SL_MAX_DIMS && same_global; k++)
    same_global = p->global_shape[k] == e->global_shape[k];
  char got[128];
  char want[128];
  if (!same_local) {
    shape_str(p->ndim, p->local_shape, got, sizeof got);
    shape_str(e->ndim, e->local_shape, want, sizeof want);
  }
  CHECKF(same_local, "%s: %s local shape %s, expected %s", label, p->name, got, want);
  if (!same_global) {
    shape_str(p->ndim, p->global_shape, got, sizeof got);
    shape_str(e->ndim, e->global_shape, want, sizeof want);
  }
  CHECKF(same_global, "%s: %s global shape %s, expected %s", label, p->name, got, want);
  CHECKF(p->nbytes == e->nbytes, "%s: %s nbytes %llu, expected %llu", label, p->name,
         (unsigned long long)p->nbytes, (unsigned long long)e->nbytes);
  CHECKF(p->device == -1, "%s: %s device %d, expected host (-1)", label, p->name, p->device);
  if (e->alias_of == NULL) {
    CHECKF(p->alias_of == NULL, "%s: %s is an alias of %s, expected its own memory", label, p->name,
           p->alias_of);
  } else {
    CHECKF(p->alias_of != NULL && strcmp(p->alias_of, e->alias_of) == 0, "%s: %s alias_of %s, expected %s",
           label, p->name, p->alias_of != NULL ? p->alias_of : "(none)", e->alias_of);
    const sl_param *target = sl_loader_find(l, e->alias_of);
    CHECKF(target != NULL && target->data == p->data, "%s: %s does not share the memory of %s", label,
           p->name, e->alias_of);
  }
  if (p->nbytes != e->nbytes || e->nbytes == 0)
    return;
  CHECKF(p->data != NULL, "%s: %s has no data", label, p->name);
  if (p->data == NULL)
    return;
  uint8_t *want_bytes = malloc(e->nbytes);
  if (want_bytes == NULL)
    return;
  sl_ref_param_fill(m, e, want_bytes);
  const uint8_t *have = p->data;
  bool equal = memcmp(have, want_bytes, e->nbytes) == 0;
  sl_test_checks++;
  if (!equal) {
    uint64_t at = 0;
    while (at < e->nbytes && have[at] == want_bytes[at])
      at++;
    uint64_t ndiff = 0;
    for (uint64_t i = at; i < e->nbytes; i++)
      ndiff += have[i] != want_bytes[i];
    char origin[256];
    sl_ref_describe(m, e, at, origin, sizeof origin);
    sl_test_fail(__FILE__, __LINE__,
                 "%s: %s differs at byte %llu of %llu (%llu bytes differ): got 0x%02x, expected 0x%02x = %s",
                 label, p->name, (unsigned long long)at, (unsigned long long)e->nbytes,
                 (unsigned long long)ndiff, have[at], want_bytes[at], origin);
  }
  free(want_bytes);
}

void lc_check_table(const char *label, const sl_ref_model *m, const sl_loader *l, const sl_ref_table *ref) {
  size_t n = sl_loader_param_count(l);
  CHECKF(n == ref->count, "%s: %zu parameters, expected %zu", label, n, ref->count);
  const char **names = calloc(n + 1, sizeof *names);
  for (size_t i = 0; i < n; i++) {
    const sl_param *p = sl_loader_param(l, i);
    CHECKF(p != NULL && p->name != NULL, "%s: parameter %zu is NULL", label, i);
    if (p == NULL || p->name == NULL)
      continue;
    if (names != NULL)
      names[i] = p->name;
    const sl_ref_param *e = sl_ref_table_find(ref, p->name);
    CHECKF(e != NULL, "%s: unexpected parameter %s (%s) on this rank", label, p->name,
           p->shard != NULL ? p->shard : "");
    if (e != NULL)
      lc_check_param(label, m, l, p, e);
  }
  if (names != NULL) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      if (names[i] != NULL)
        names[k++] = names[i];
    }
    qsort(names, k, sizeof *names, cmp_str);
    for (size_t i = 1; i < k; i++)
      CHECKF(strcmp(names[i - 1], names[i]) != 0, "%s: parameter %s appears twice", label, names[i]);
    free(names);
  }
  for (size_t i = 0; i < ref->count; i++) {
    const sl_ref_param *e = &ref->params[i];
    CHECKF(sl_loader_find(l, e->name) != NULL, "%s: missing parameter %s on this rank", label, e->name);
  }
}

static uint64_t json_u64(const cJSON *obj, const char *key, bool *ok) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(v)) {
    *ok = false;
    return 0;
  }
  return (uint64_t)v->valuedouble;
}

static double json_double(const cJSON *obj, const char *key, bool *ok) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(v)) {
    *ok = false;
    return 0;
  }
  return v->valuedouble;
}

/* Whether the case sets skip_vision, or its vLLM spelling language_model_only (the reference then
 * leaves the vision tower out). */
static bool lc_skips_vision(const lc_case *c) {
  for (int i = 0; i + 1 < 8 && c->extra[i] != NULL; i += 2)
    if (strcmp(c->extra[i], "skip_vision") == 0 || strcmp(c->extra[i], "language_model_only") == 0)
      return strcmp(c->extra[i + 1], "true") == 0;
  return false;
}

/* Rank 0: the report against the reference's cluster figures. */
void lc_check_report(const char *label, const lc_case *c, const sl_ref_model *m, const char *json) {
  bool aligned = false; /* an O_DIRECT strategy */
  for (int i = 0; i + 1 < 8 && c->extra[i] != NULL; i += 2)
    aligned =
        aligned || (strcmp(c->extra[i], "load_strategy") == 0 &&
                    (strcmp(c->extra[i + 1], "direct") == 0 || strcmp(c->extra[i + 1], "io_uring") == 0));
  CHECKF(json != NULL, "%s: no report after a successful load", label);
  if (json == NULL)
    return;
  cJSON *rep = cJSON_Parse(json);
  CHECKF(rep != NULL, "%s: the report is not valid JSON", label);
  if (rep == NULL)
    return;
  sl_ref_layout lay = {.tp = c->tp,
                       .pp = c->pp,
                       .dp = c->dp,
                       .expert_parallel = c->ep,
                       .round_robin = c->round_robin,
                       .checkpoint_layout = c->checkpoint,
                       .skip_vision = lc_skips_vision(c)};
  sl_ref_cluster *cl = calloc(1, sizeof *cl);
  char msg[512] = "";
  sl_status st = cl != NULL ? sl_ref_cluster_compute(m, &lay, cl, msg, sizeof msg) : SL_STATUS_NOMEM;
  CHECKF(st == SL_STATUS_OK, "%s: reference cluster figures: %s", label, msg);
  if (st != SL_STATUS_OK) {
    free(cl);
    cJSON_Delete(rep);
    return;
  }
  bool ok = true;
  uint64_t unique = json_u64(rep, "bytes_unique", &ok);
  uint64_t needed = json_u64(rep, "bytes_needed", &ok);
  uint64_t read = json_u64(rep, "bytes_read", &ok);
  uint64_t covering = json_u64(rep, "bytes_covering", &ok);
  uint64_t bcast = json_u64(rep, "bytes_broadcast", &ok);
  uint64_t naive = json_u64(rep, "bytes_naive", &ok);
  double amp = json_double(rep, "read_amplification", &ok);
  double naive_amp = json_double(rep, "naive_read_amplification", &ok);
  uint64_t world = json_u64(rep, "world", &ok);
  CHECKF(ok, "%s: the report lacks a cluster figure", label);
  int nranks = c->tp * c->pp * c->dp;
  CHECK_EQ_U64(world, nranks);
  CHECKF(unique == cl->bytes_unique, "%s: bytes_unique %llu, reference %llu", label,
         (unsigned long long)unique, (unsigned long long)cl->bytes_unique);
  CHECKF(read - covering == unique,
         "%s: bytes_read %llu - covering %llu != distinct %llu (read more than once)", label,
         (unsigned long long)read, (unsigned long long)covering, (unsigned long long)unique);
  CHECKF(fabs(amp - 1.0) < 1e-9, "%s: read_amplification %.4f, expected 1.00", label, amp);
  CHECKF(needed == cl->bytes_needed, "%s: bytes_needed %llu, reference %llu", label,
         (unsigned long long)needed, (unsigned long long)cl->bytes_needed);
  /* Two-phase reads (docs/spec/DESIGN.md §3): a rank also receives the columns another rank read
   * for it, whole rows at a time; those bytes were read once, by a rank that only sent them. */
  const cJSON *sched = cJSON_GetObjectItemCaseSensitive(rep, "schedule");
  uint64_t for_others = json_u64(sched, "bytes_read_for_others", &ok);
  CHECKF(ok, "%s: the report lacks schedule.bytes_read_for_others", label);
  CHECKF(for_others <= unique, "%s: bytes_read_for_others %llu exceeds the distinct bytes %llu", label,
         (unsigned long long)for_others, (unsigned long long)unique);
  CHECKF(bcast == cl->bytes_broadcast + for_others,
         "%s: bytes_broadcast %llu, reference (sum needed - distinct) %llu + read for others %llu", label,
         (unsigned long long)bcast, (unsigned long long)cl->bytes_broadcast, (unsigned long long)for_others);
  /* Dense model, data parallel only: every replica needs the whole checkpoint once. (With
   * experts, slices differ between replicas, docs/spec/EXPERTS.md §1.) */
  if (c->tp == 1 && c->pp == 1 && c->dp > 1 && sl_ref_num_experts(m) == 0)
    CHECKF(bcast == (uint64_t)(c->dp - 1) * unique, "%s: bytes_broadcast %llu != (dp-1) x %llu", label,
           (unsigned long long)bcast, (unsigned long long)unique);
  CHECKF(naive == cl->bytes_naive, "%s: bytes_naive %llu, reference %llu", label, (unsigned long long)naive,
         (unsigned long long)cl->bytes_naive);
  double want_naive = cl->bytes_unique > 0 ? (double)cl->bytes_naive / (double)cl->bytes_unique : 0.0;
  CHECKF(fabs(naive_amp - want_naive) < 1e-4, "%s: naive_read_amplification %.4f, reference %.4f", label,
         naive_amp, want_naive);
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(rep, "ranks");
  CHECKF(cJSON_GetArraySize(ranks) == nranks, "%s: report has %d rank entries, expected %d", label,
         cJSON_GetArraySize(ranks), nranks);
  for (int g = 0; g < nranks && g < cJSON_GetArraySize(ranks); g++) {
    const cJSON *r = cJSON_GetArrayItem(ranks, g);
    const sl_ref_rank_stats *e = &cl->ranks[g];
    bool rok = true;
    uint64_t rread = json_u64(r, "bytes_read", &rok);
    uint64_t planned = json_u64(r, "bytes_read_planned", &rok);
    uint64_t rcover = json_u64(r, "bytes_covering", &rok);
    uint64_t rneed = json_u64(r, "bytes_needed", &rok);
    uint64_t rlocal = json_u64(r, "bytes_local", &rok);
    uint64_t rnaive = json_u64(r, "bytes_naive", &rok);
    uint64_t params = json_u64(r, "params", &rok);
    uint64_t experts = json_u64(r, "experts_local", &rok);
    uint64_t rrank = json_u64(r, "rank", &rok);
    CHECKF(rok, "%s: report rank entry %d lacks a field", label, g);
    CHECK_EQ_U64(rrank, g);
    /* auto reads the files it finds cold with O_DIRECT (the rank's files_direct). */
    uint64_t direct_files = json_u64(r, "files_direct", &rok);
    if (aligned || direct_files > 0) {
      /* O_DIRECT widens every read to 4 KiB blocks (at most one block on each side). */
      uint64_t ops = json_u64(r, "read_ops", &rok);
      CHECKF(rread >= planned && rread - planned <= 2 * 4096 * ops,
             "%s: rank %d bytes_read %llu, planned %llu + at most 8 KiB of alignment per read (%llu reads)",
             label, g, (unsigned long long)rread, (unsigned long long)planned, (unsigned long long)ops);
    } else {
      CHECKF(rread == planned, "%s: rank %d bytes_read %llu != bytes_read_planned %llu", label, g,
             (unsigned long long)rread, (unsigned long long)planned);
    }
    CHECKF(rneed == e->bytes_needed, "%s: rank %d bytes_needed %llu, reference %llu", label, g,
           (unsigned long long)rneed, (unsigned long long)e->bytes_needed);
    CHECKF(rlocal == e->bytes_local, "%s: rank %d bytes_local %llu, reference %llu", label, g,
           (unsigned long long)rlocal, (unsigned long long)e->bytes_local);
    CHECKF(rnaive == e->bytes_naive, "%s: rank %d bytes_naive %llu, reference %llu", label, g,
           (unsigned long long)rnaive, (unsigned long long)e->bytes_naive);
    CHECKF(params == e->params, "%s: rank %d params %llu, reference %u", label, g, (unsigned long long)params,
           e->params);
    CHECKF(experts == e->experts_local, "%s: rank %d experts_local %llu, reference %u", label, g,
           (unsigned long long)experts, e->experts_local);
    /* A rank reads only bytes it needs itself (others get theirs by broadcast): with coalescing
     * off, no byte of a non-local expert or of another rank's slice is read. */
    if (c->model_dir == NULL)
      CHECKF(rread - rcover <= rneed, "%s: rank %d read %llu useful bytes but needs only %llu", label, g,
             (unsigned long long)(rread - rcover), (unsigned long long)rneed);
    if (c->no_coalesce)
      CHECKF(rcover == 0, "%s: rank %d read %llu covering bytes with coalescing off", label, g,
             (unsigned long long)rcover);
  }
  const cJSON *missing = cJSON_GetObjectItemCaseSensitive(rep, "missing");
  const cJSON *unexpected = cJSON_GetObjectItemCaseSensitive(rep, "unexpected");
  CHECKF(cJSON_IsArray(missing) && cJSON_GetArraySize(missing) == 0, "%s: report lists missing weights",
         label);
  CHECKF(cJSON_IsArray(unexpected) && cJSON_GetArraySize(unexpected) == 0,
         "%s: report lists unexpected weights", label);
  free(cl);
  cJSON_Delete(rep);
}

bool lc_run(const lc_case *c, lc_result *keep) {
  char label[256];
  char folder[1024];
  lc_label(c, label, sizeof label);
  lc_fixture_path(c->fixture, folder, sizeof folder);
  int rank = lc_rank();
  char rlabel[300];
  snprintf(rlabel, sizeof rlabel, "%s rank %d", label, rank);
  if (keep != NULL)
    memset(keep, 0, sizeof *keep);
  /* An expected failure needs no reference (the reference may refuse the fixture itself). */
  sl_ref_model *m = c->expect != SL_STATUS_OK ? NULL : lc_model(c->fixture, c->arch_family);
  /* Every rank must take part in the collectives below even without a reference model. */
  sl_ref_table *ref = NULL;
  char refmsg[512] = "";
  sl_status ref_st = SL_STATUS_INTERNAL;
  if (m != NULL) {
    sl_ref_layout lay = {.tp = c->tp,
                         .pp = c->pp,
                         .dp = c->dp,
                         .rank = rank,
                         .expert_parallel = c->ep,
                         .round_robin = c->round_robin,
                         .checkpoint_layout = c->checkpoint,
                         .skip_vision = lc_skips_vision(c)};
    ref_st = sl_ref_table_build(m, &lay, &ref, refmsg, sizeof refmsg);
  }
  sl_config *cfg = make_config(c, c->model_dir != NULL ? c->model_dir : folder);
  sl_loader *l = NULL;
  sl_status st = cfg != NULL ? sl_loader_create(cfg, MPI_COMM_WORLD, &l) : SL_STATUS_NOMEM;
  CHECKF(st == SL_STATUS_OK, "%s: sl_loader_create: %s: %s", rlabel, sl_status_name(st),
         cfg != NULL ? sl_config_error(cfg) : "");
  char message[2048] = "";
  if (st == SL_STATUS_OK) {
    st = sl_loader_load(l);
    snprintf(message, sizeof message, "%s", st == SL_STATUS_OK ? "" : sl_loader_error(l));
  }
  /* Every rank returns the same status. */
  int mine = (int)st;
  int lo = 0;
  int hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECKF(lo == hi, "%s: ranks disagree on the load status (%s here)", rlabel, sl_status_name(st));
  bool good = false;
  if (c->expect != SL_STATUS_OK) {
    /* A failure the reference does not model (e.g. EPLB slots not divisible, docs/spec/EXPERTS.md §4). */
    CHECKF(st == c->expect, "%s: load returned %s (%s), expected %s", rlabel, sl_status_name(st), message,
           sl_status_name(c->expect));
    if (c->expect_text != NULL)
      CHECK_CONTAINS(message, c->expect_text);
    good = st == c->expect;
  } else if (m == NULL) {
    good = false;
  } else if (ref_st != SL_STATUS_OK) {
    /* The reference says the layout is invalid: the loader must refuse it up front. */
    CHECKF(st == ref_st, "%s: load returned %s (%s), the reference expects %s (%s)", rlabel,
           sl_status_name(st), message, sl_status_name(ref_st), refmsg);
    if (l != NULL)
      CHECKF(sl_loader_report_json(l) == NULL, "%s: a report exists after a refused layout", rlabel);
    good = st == ref_st;
  } else {
    CHECKF(st == SL_STATUS_OK, "%s: load failed: %s: %s", rlabel, sl_status_name(st), message);
    if (st == SL_STATUS_OK) {
      lc_check_table(rlabel, m, l, ref);
      if (rank == 0)
        lc_check_report(label, c, m, sl_loader_report_json(l));
      good = true;
    }
  }
  if (rank == 0 && getenv("SL_TEST_VERBOSE") != NULL)
    fprintf(stderr, "case %s: %s%s%s\n", label, sl_status_name(st), message[0] != '\0' ? ": " : "", message);
  if (keep != NULL) {
    keep->status = st;
    keep->loader = l;
    keep->ref = ref;
    snprintf(keep->message, sizeof keep->message, "%s", message);
  } else {
    sl_loader_destroy(l);
    sl_ref_table_free(ref);
  }
  sl_config_destroy(cfg);
  return good;
}

void lc_result_free(lc_result *r) {
  if (r == NULL)
    return;
  sl_loader_destroy(r->loader);
  sl_ref_table_free(r->ref);
  r->loader = NULL;
  r->ref = NULL;
}
