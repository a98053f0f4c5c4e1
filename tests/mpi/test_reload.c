/*
 * test_reload.c — sl_loader_reload (docs/spec/DESIGN.md §10) under mpirun at 1, 2, 3 and 4 ranks, on
 * the llama fixture at every valid (tp, pp, dp) of the world size. The second checkpoint is the
 * fixture with every weight byte inverted (XOR 0xFF: the same shapes, other values), so the
 * independent reference (tests/common/reference.h) gives its expected bytes too: the reference's
 * bytes inverted wherever a segment comes from the checkpoint, zero padding kept.
 *
 *   in place   load, retain every parameter (sl_loader_param_retain), reload the inverted copy:
 *              every byte on every rank equals the reference's inverted, at the same data pointers
 *              (the table's and the retained references'), rank 0's report read every byte once
 *              (the load's figures, each rank's reads as planned); the same tensors saved in one
 *              file instead of three (other files and offsets), the inverted copy again, the
 *              original, each equal to its reference; every parameter's state SL_RELOAD_NEW
 *   refused    a dtype change (model.norm.weight stored F16), a shape change (intermediate_size
 *              128 → 192, tensors and config.json), a name-set change (the qwen2 fixture), a folder
 *              that does not exist: every rank fails with the same cause (SHAPE naming the
 *              parameter for the first two), the checksum of every parameter unchanged, every
 *              state SL_RELOAD_OLD, and the loader still reloads after
 *   bound      every parameter in the caller's buffers (model.norm.weight as F32 through
 *              sl_loader_bind_as): the reload lands in them, the conversion applied again
 *   mapped     load_strategy mmap (parameters that map the files): the reload writes into the
 *              mappings at the same addresses, bytes_mapped falls to 0, and reloading the
 *              original is byte-exact again (the private mappings never wrote the files)
 *   torn       SHARDLOAD_INJECT_READ_ERROR on the last rank during a reload: every rank fails,
 *              the table stays, and each parameter holds what sl_loader_reload_state says (NEW:
 *              the new bytes, OLD: the old ones, PARTIAL: each byte one of the two); the failing
 *              rank has a parameter that is not NEW; a later reload is refused
 */
#include "check.h"
#include "load_check.h"
#include "reference.h"
#include "values.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the second checkpoints, written by rank 0 ------------------------------------------------ */

enum variant { V_XOR, V_DTYPE, V_SHAPE };
#define SHAPE_INTER 192 /* intermediate_size of V_SHAPE (the fixture's is 128) */

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static bool ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && strcmp(s + a - b, tail) == 0;
}

/* A tensor's new shape and dtype under variant v (shape[] and dtype edited in place). */
static void edit_tensor(enum variant v, const char *name, cJSON *t) {
  cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
  if (v == V_DTYPE && strcmp(name, "model.norm.weight") == 0)
    cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString("F16"));
  if (v == V_SHAPE && (ends_with(name, "mlp.gate_proj.weight") || ends_with(name, "mlp.up_proj.weight")))
    cJSON_ReplaceItemInArray(shape, 0, cJSON_CreateNumber(SHAPE_INTER));
  if (v == V_SHAPE && ends_with(name, "mlp.down_proj.weight"))
    cJSON_ReplaceItemInArray(shape, 1, cJSON_CreateNumber(SHAPE_INTER));
}

static uint64_t elements(const cJSON *shape) {
  uint64_t n = 1;
  const cJSON *d = NULL;
  cJSON_ArrayForEach(d, shape) n *= (uint64_t)d->valuedouble;
  return n;
}

/* One weight file of variant v: the header edited, the data laid out again in header order; data
 * of unchanged size copied (inverted for V_XOR), of a new size from the value function. */
static bool rewrite_weights(const char *src, const char *dst, enum variant v) {
  size_t len = 0;
  uint8_t *in = (uint8_t *)sl_test_read_file(src, &len);
  if (in == NULL || len < 8)
    return false;
  uint64_t hlen = le64(in);
  cJSON *h = cJSON_ParseWithLength((const char *)in + 8, (size_t)hlen);
  const uint8_t *data = in + 8 + hlen;
  uint8_t *out = malloc(len * 2 + 4096);
  uint64_t off = 0;
  cJSON *t = NULL;
  bool ok = h != NULL && out != NULL;
  cJSON_ArrayForEach(t, h) {
    if (!ok || strcmp(t->string, "__metadata__") == 0)
      continue;
    cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    uint64_t b = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
    uint64_t e = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
    uint64_t before = elements(cJSON_GetObjectItemCaseSensitive(t, "shape"));
    edit_tensor(v, t->string, t);
    uint64_t after = elements(cJSON_GetObjectItemCaseSensitive(t, "shape"));
    uint64_t n = before > 0 ? (e - b) / before * after : e - b;
    if (n == e - b) {
      memcpy(out + off, data + b, (size_t)n);
      for (uint64_t i = 0; v == V_XOR && i < n; i++)
        out[off + i] ^= 0xFF;
    } else {
      sl_value_fill(t->string, 0, out + off, (size_t)n);
    }
    cJSON_ReplaceItemInArray(offs, 0, cJSON_CreateNumber((double)off));
    cJSON_ReplaceItemInArray(offs, 1, cJSON_CreateNumber((double)(off + n)));
    off += n;
  }
  char *text = ok ? cJSON_PrintUnformatted(h) : NULL;
  ok = ok && text != NULL;
  if (ok) {
    size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
    uint8_t *file = malloc(8 + padded + off);
    ok = file != NULL;
    if (ok) {
      for (int i = 0; i < 8; i++)
        file[i] = (uint8_t)((uint64_t)padded >> (8 * i));
      memset(file + 8, ' ', padded);
      memcpy(file + 8, text, tl);
      memcpy(file + 8 + padded, out, (size_t)off);
      ok = sl_test_write_file(dst, file, 8 + padded + off) == 0;
      free(file);
    }
  }
  free(text);
  cJSON_Delete(h);
  free(out);
  free(in);
  return ok;
}

static bool rewrite_config(const char *src, const char *dst) {
  char *text = sl_test_read_file(src, NULL);
  cJSON *c = text != NULL ? cJSON_Parse(text) : NULL;
  bool ok = c != NULL;
  if (ok)
    cJSON_ReplaceItemInObjectCaseSensitive(c, "intermediate_size", cJSON_CreateNumber(SHAPE_INTER));
  char *out = ok ? cJSON_Print(c) : NULL;
  ok = out != NULL && sl_test_write_file(dst, out, strlen(out)) == 0;
  free(out);
  cJSON_Delete(c);
  free(text);
  return ok;
}

/* COLLECTIVE: rank 0 writes variant v of folder `from` into `dir`: every file copied, the weights
 * (and for V_SHAPE config.json) rewritten. */
static bool make_variant(const char *from, const char *dir, enum variant v) {
  int ok = 1;
  if (lc_rank() == 0) {
    DIR *d = opendir(from);
    ok = d != NULL;
    for (struct dirent *e = d != NULL ? readdir(d) : NULL; ok && e != NULL; e = readdir(d)) {
      if (e->d_name[0] == '.')
        continue;
      char s[4096], t[4096];
      snprintf(s, sizeof s, "%s/%s", from, e->d_name);
      snprintf(t, sizeof t, "%s/%s", dir, e->d_name);
      if (ends_with(e->d_name, ".safetensors")) {
        ok = rewrite_weights(s, t, v);
      } else if (v == V_SHAPE && strcmp(e->d_name, "config.json") == 0) {
        ok = rewrite_config(s, t);
      } else {
        size_t n = 0;
        char *bytes = sl_test_read_file(s, &n);
        ok = bytes != NULL && sl_test_write_file(t, bytes, n) == 0;
        free(bytes);
      }
    }
    if (d != NULL)
      closedir(d);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  CHECKF(ok, "cannot write variant %d of %s into %s", (int)v, from, dir);
  return ok;
}

/* ---- expectations ------------------------------------------------------------------------------ */

/* The bytes of reference entry e in the checkpoint whose weight bytes are XORed with x. */
static void expected(const sl_ref_model *m, const sl_ref_param *e, uint8_t x, uint8_t *out) {
  sl_ref_param_fill(m, e, out);
  for (size_t s = 0; s < e->n_segs; s++)
    for (uint64_t i = 0; e->segs[s].tensor >= 0 && i < e->segs[s].len; i++)
      out[e->segs[s].dst + i] ^= x;
}

/* Every entry of l's table against the reference with weight bytes XORed with x, at the pointers
 * `at` recorded after the load (NULL: not checked). */
static void check_values(const char *label, const sl_ref_model *m, sl_loader *l, const sl_ref_table *ref,
                         uint8_t x, void *const *at) {
  size_t n = sl_loader_param_count(l);
  CHECKF(n == ref->count, "%s: %zu parameters, the reference %zu", label, n, ref->count);
  for (size_t i = 0; i < n; i++) {
    const sl_param *p = sl_loader_param(l, i);
    const sl_ref_param *e = sl_ref_table_find(ref, p->name);
    CHECKF(e != NULL, "%s: %s is not in the reference", label, p->name);
    if (at != NULL)
      CHECKF(p->data == at[i], "%s: %s moved from %p to %p", label, p->name, at[i], p->data);
    if (e == NULL || p->alias_of != NULL || e->nbytes != p->nbytes || p->nbytes == 0)
      continue;
    uint8_t *want = malloc(e->nbytes);
    expected(m, e, x, want);
    const uint8_t *have = p->data;
    uint64_t k = 0;
    while (k < e->nbytes && have[k] == want[k])
      k++;
    CHECKF(k == e->nbytes, "%s: %s differs at byte %llu of %llu: 0x%02x, expected 0x%02x", label, p->name,
           (unsigned long long)k, (unsigned long long)e->nbytes, k < e->nbytes ? have[k] : 0,
           k < e->nbytes ? want[k] : 0);
    free(want);
  }
}

/* FNV-1a over every parameter's pointer and bytes. */
static uint64_t checksum(sl_loader *l) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    const uint8_t *d = p->data;
    h = (h ^ (uint64_t)(uintptr_t)p->data) * 1099511628211ULL;
    for (uint64_t k = 0; d != NULL && k < p->nbytes; k++)
      h = (h ^ d[k]) * 1099511628211ULL;
  }
  return h;
}

static void check_states(const char *label, sl_loader *l, sl_reload_state want) {
  for (size_t i = 0; i < sl_loader_param_count(l); i++) {
    sl_reload_state s = SL_RELOAD_PARTIAL;
    CHECK(sl_loader_reload_state(l, i, &s) == SL_STATUS_OK);
    CHECKF(s == want, "%s: %s state %d, expected %d", label, sl_loader_param(l, i)->name, (int)s, (int)want);
  }
}

/* Every rank: the same value (the minimum and the maximum over ranks agree). */
static bool agreed(int v) {
  int lo = v, hi = v;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/* A reload that must be refused before any byte is written: the cause `want` on every rank (0:
 * any failure), its message containing `text` (NULL: not checked); nothing changed. */
static void check_refused(const char *label, sl_loader *l, const char *model, sl_status want,
                          const char *text) {
  uint64_t before = checksum(l);
  size_t n = sl_loader_param_count(l);
  const char *report = sl_loader_report_json(l);
  char *report_before = report != NULL ? strdup(report) : NULL;
  sl_status st = sl_loader_reload(l, model, NULL);
  int cause_rank = -1;
  sl_status cause = st == SL_STATUS_PEER_FAILED ? sl_loader_error_cause(l, &cause_rank) : st;
  CHECKF(st != SL_STATUS_OK, "%s: the reload of %s was not refused", label, model);
  CHECKF(want == SL_STATUS_OK || cause == want, "%s: cause %s, expected %s: %s", label, sl_status_name(cause),
         sl_status_name(want), sl_loader_error(l));
  CHECKF(agreed((int)cause), "%s: the ranks disagree on the cause (%s here)", label, sl_status_name(cause));
  if (text != NULL)
    CHECK_CONTAINS(sl_loader_error(l), text);
  CHECKF(checksum(l) == before, "%s: a refused reload changed the parameters", label);
  CHECK(sl_loader_param_count(l) == n);
  check_states(label, l, SL_RELOAD_OLD);
  const char *after = sl_loader_report_json(l);
  CHECKF(report_before == NULL ? after == NULL : after != NULL && strcmp(report_before, after) == 0,
         "%s: a refused reload changed the report", label);
  free(report_before);
}

/* ---- cases ------------------------------------------------------------------------------------- */

typedef struct folders {
  char orig[1024], inverted[1024], dtype[1024], shape[1024], qwen2[1024], none[1100], one_file[1100];
} folders;

/* The reload of `to` (XOR x against the original) in place: values, pointers, retained memory,
 * states and the report. */
static void reload_checked(const char *label, const lc_case *c, const sl_ref_model *m, sl_loader *l,
                           const sl_ref_table *ref, const char *to, uint8_t x, void *const *at,
                           sl_param_ref *const *refs) {
  sl_status st = sl_loader_reload(l, to, NULL);
  CHECKF(st == SL_STATUS_OK, "%s: reload of %s: %s", label, to, sl_loader_error(l));
  if (st != SL_STATUS_OK)
    return;
  check_values(label, m, l, ref, x, at);
  check_states(label, l, SL_RELOAD_NEW);
  for (size_t i = 0; refs != NULL && i < sl_loader_param_count(l); i++)
    CHECKF(refs[i] == NULL || sl_param_ref_data(refs[i]) == at[i], "%s: a retained reference moved", label);
  if (lc_rank() == 0)
    lc_check_report(label, c, m, sl_loader_report_json(l));
}

static void test_in_place(const lc_case *c, const folders *f) {
  char label[256];
  lc_label(c, label, sizeof label);
  lc_result r;
  if (!lc_run(c, &r) || r.status != SL_STATUS_OK || r.ref == NULL) {
    lc_result_free(&r);
    return;
  }
  sl_ref_model *m = lc_model(c->fixture, NULL);
  size_t n = sl_loader_param_count(r.loader);
  void **at = calloc(n + 1, sizeof *at);
  sl_param_ref **refs = calloc(n + 1, sizeof *refs);
  for (size_t i = 0; i < n; i++) {
    at[i] = sl_loader_param(r.loader, i)->data;
    if (sl_loader_param(r.loader, i)->alias_of == NULL)
      CHECK(sl_loader_param_retain(r.loader, i, &refs[i]) == SL_STATUS_OK);
  }
  check_states(label, r.loader, SL_RELOAD_OLD); /* never reloaded */
  char what[400];
  snprintf(what, sizeof what, "%s, reload inverted", label);
  reload_checked(what, c, m, r.loader, r.ref, f->inverted, 0xFF, at, refs);
  snprintf(what, sizeof what, "%s, refused", label);
  check_refused(what, r.loader, f->dtype, SL_STATUS_SHAPE,
                "parameter model.norm.weight: dtype BF16 loaded, F16");
  check_refused(what, r.loader, f->shape, SL_STATUS_SHAPE, "local shape");
  check_refused(what, r.loader, f->none, SL_STATUS_NOT_FOUND, "no such folder");
  if (c->pp <= 2) /* qwen2 has two layers */
    check_refused(what, r.loader, f->qwen2, SL_STATUS_SHAPE, "which the loaded checkpoint has not");
  check_values(what, m, r.loader, r.ref, 0xFF, at); /* still the inverted values */
  /* The same tensors in one file instead of three: other files, other offsets, the same memory. */
  snprintf(what, sizeof what, "%s, reload one file", label);
  reload_checked(what, c, m, r.loader, r.ref, f->one_file, 0x00, at, refs);
  snprintf(what, sizeof what, "%s, reload inverted again", label);
  reload_checked(what, c, m, r.loader, r.ref, f->inverted, 0xFF, at, refs);
  snprintf(what, sizeof what, "%s, reload original", label);
  reload_checked(what, c, m, r.loader, r.ref, f->orig, 0x00, at, refs);
  /* The loader's own model when none is given: the original again. */
  reload_checked(what, c, m, r.loader, r.ref, NULL, 0x00, at, refs);
  lc_result_free(&r);
  /* The retained memory outlives the loader and holds the last values. */
  for (size_t i = 0; i < n; i++)
    sl_param_ref_release(refs[i]);
  free(refs);
  free(at);
}

static const sl_ref_param *ref_find(const sl_ref_table *t, const char *name) {
  return t != NULL ? sl_ref_table_find(t, name) : NULL;
}

/* Every parameter in the caller's buffers, model.norm.weight converted to F32. */
static void test_bound(const lc_case *c, const folders *f) {
  sl_ref_model *m = lc_model(c->fixture, NULL);
  sl_ref_layout lay = {.tp = c->tp, .pp = c->pp, .dp = c->dp, .rank = lc_rank()};
  sl_ref_table *ref = NULL;
  char msg[512];
  if (m == NULL || sl_ref_table_build(m, &lay, &ref, msg, sizeof msg) != SL_STATUS_OK)
    return;
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  char v[16];
  sl_config_set(cfg, "model", f->orig);
  sl_config_set(cfg, "quiet", "true");
  snprintf(v, sizeof v, "%d", c->tp);
  sl_config_set(cfg, "tp", v);
  snprintf(v, sizeof v, "%d", c->pp);
  sl_config_set(cfg, "pp", v);
  snprintf(v, sizeof v, "%d", c->dp);
  sl_config_set(cfg, "dp", v);
  sl_loader *l = NULL;
  CHECK(sl_loader_create(cfg, MPI_COMM_WORLD, &l) == SL_STATUS_OK);
  CHECK(sl_loader_plan(l) == SL_STATUS_OK);
  size_t n = sl_loader_param_count(l);
  void **buf = calloc(n + 1, sizeof *buf);
  for (size_t i = 0; i < n; i++) {
    const sl_param *p = sl_loader_param(l, i);
    if (p->alias_of != NULL)
      continue;
    bool f32 = strcmp(p->name, "model.norm.weight") == 0;
    uint64_t bytes = f32 ? p->nbytes * 2 : p->nbytes;
    buf[i] = malloc(bytes + 1);
    memset(buf[i], 0x5A, bytes);
    CHECK((f32 ? sl_loader_bind_as(l, p->name, buf[i], bytes, SL_DTYPE_F32)
               : sl_loader_bind(l, p->name, buf[i], bytes)) == SL_STATUS_OK);
  }
  CHECK(sl_loader_load(l) == SL_STATUS_OK);
  CHECKF(sl_loader_reload(l, f->inverted, NULL) == SL_STATUS_OK, "bound reload: %s", sl_loader_error(l));
  for (size_t i = 0; i < n; i++) {
    const sl_param *p = sl_loader_param(l, i);
    const sl_ref_param *e = ref_find(ref, p->name);
    CHECKF(e != NULL, "bound: %s not in the reference", p->name);
    if (e == NULL || p->alias_of != NULL || e->nbytes == 0)
      continue;
    CHECKF(p->data == buf[i], "bound: %s is no longer the caller's buffer", p->name);
    uint8_t *want = malloc(e->nbytes);
    expected(m, e, 0xFF, want);
    bool same = true;
    if (strcmp(p->name, "model.norm.weight") == 0) { /* BF16 → F32: the high half of each word */
      const uint32_t *have = buf[i];
      for (uint64_t k = 0; k < e->nbytes / 2 && same; k++)
        same = have[k] == ((uint32_t)want[2 * k] | (uint32_t)want[2 * k + 1] << 8) << 16;
    } else {
      same = memcmp(buf[i], want, e->nbytes) == 0;
    }
    CHECKF(same, "bound: %s does not hold the reloaded bytes", p->name);
    free(want);
  }
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  for (size_t i = 0; i < n; i++)
    free(buf[i]);
  free(buf);
  sl_ref_table_free(ref);
}

static unsigned long long rank0_mapped(sl_loader *l) {
  unsigned long long total = 0;
  const char *report = sl_loader_report_json(l);
  cJSON *rep = lc_rank() == 0 && report != NULL ? cJSON_Parse(report) : NULL;
  const cJSON *r = NULL;
  cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(rep, "ranks")) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, "bytes_mapped");
    total += cJSON_IsNumber(v) ? (unsigned long long)v->valuedouble : 0;
  }
  cJSON_Delete(rep);
  return total;
}

/* load_strategy mmap: the reload writes into the mappings, at the same addresses. */
static void test_mapped(const folders *f) {
  int world = lc_world();
  lc_case c = {.fixture = "llama",
               .tp = world == 3 ? 1 : world,
               .pp = world == 3 ? 3 : 1,
               .dp = 1,
               .extra = {"load_strategy", "mmap"}};
  lc_result r;
  if (!lc_run(&c, &r) || r.status != SL_STATUS_OK || r.ref == NULL) {
    lc_result_free(&r);
    return;
  }
  sl_ref_model *m = lc_model(c.fixture, NULL);
  if (lc_rank() == 0)
    CHECKF(rank0_mapped(r.loader) > 0, "mmap: nothing was mapped (%llu bytes)", rank0_mapped(r.loader));
  size_t n = sl_loader_param_count(r.loader);
  void **at = calloc(n + 1, sizeof *at);
  for (size_t i = 0; i < n; i++)
    at[i] = sl_loader_param(r.loader, i)->data;
  reload_checked("mmap, reload inverted", &c, m, r.loader, r.ref, f->inverted, 0xFF, at, NULL);
  if (lc_rank() == 0)
    CHECKF(rank0_mapped(r.loader) == 0, "mmap: %llu bytes still mapped after the reload",
           rank0_mapped(r.loader));
  reload_checked("mmap, reload original", &c, m, r.loader, r.ref, f->orig, 0x00, at, NULL);
  free(at);
  lc_result_free(&r);
}

/* A reload that fails mid-way: each parameter is what its state says. */
static void test_torn(const lc_case *c, const folders *f) {
  lc_result r;
  if (!lc_run(c, &r) || r.status != SL_STATUS_OK || r.ref == NULL) {
    lc_result_free(&r);
    return;
  }
  sl_ref_model *m = lc_model(c->fixture, NULL);
  int victim = lc_world() - 1;
  char v[16];
  snprintf(v, sizeof v, "%d", victim);
  setenv("SHARDLOAD_INJECT_READ_ERROR", v, 1);
  sl_status st = sl_loader_reload(r.loader, f->inverted, NULL);
  unsetenv("SHARDLOAD_INJECT_READ_ERROR");
  CHECKF(st == (lc_rank() == victim ? SL_STATUS_IO : SL_STATUS_PEER_FAILED), "torn: status %s: %s",
         sl_status_name(st), sl_loader_error(r.loader));
  CHECK_CONTAINS(sl_loader_error(r.loader), "reload failed: on this rank");
  size_t n = sl_loader_param_count(r.loader);
  CHECKF(n == r.ref->count, "torn: the table has %zu entries, expected %zu", n, r.ref->count);
  int not_new = 0;
  for (size_t i = 0; i < n; i++) {
    const sl_param *p = sl_loader_param(r.loader, i);
    const sl_ref_param *e = sl_ref_table_find(r.ref, p->name);
    sl_reload_state s = SL_RELOAD_OLD;
    CHECK(sl_loader_reload_state(r.loader, i, &s) == SL_STATUS_OK);
    not_new += s != SL_RELOAD_NEW;
    if (e == NULL || p->nbytes == 0 || p->alias_of != NULL)
      continue;
    uint8_t *was = malloc(e->nbytes), *now = malloc(e->nbytes);
    expected(m, e, 0x00, was);
    expected(m, e, 0xFF, now);
    const uint8_t *have = p->data;
    bool ok = true;
    for (uint64_t k = 0; k < e->nbytes && ok; k++)
      ok = s == SL_RELOAD_NEW   ? have[k] == now[k]
           : s == SL_RELOAD_OLD ? have[k] == was[k]
                                : (have[k] == was[k] || have[k] == now[k]);
    CHECKF(ok, "torn: %s (state %d) holds bytes of neither or the wrong checkpoint", p->name, (int)s);
    free(was);
    free(now);
  }
  if (lc_rank() == victim)
    CHECKF(not_new > 0, "torn: every parameter of the failing rank is new");
  CHECK(sl_loader_reload(r.loader, f->orig, NULL) == SL_STATUS_INVALID_ARGUMENT);
  lc_result_free(&r);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  folders f;
  lc_fixture_path("llama", f.orig, sizeof f.orig);
  lc_fixture_path("qwen2", f.qwen2, sizeof f.qwen2);
  char *tmp = lc_tmpdir("reload");
  snprintf(f.inverted, sizeof f.inverted, "%s/inverted", tmp != NULL ? tmp : ".");
  snprintf(f.dtype, sizeof f.dtype, "%s/dtype", tmp != NULL ? tmp : ".");
  snprintf(f.shape, sizeof f.shape, "%s/shape", tmp != NULL ? tmp : ".");
  snprintf(f.none, sizeof f.none, "%s/absent", tmp != NULL ? tmp : ".");
  snprintf(f.one_file, sizeof f.one_file, "%s/one_file", tmp != NULL ? tmp : ".");
  if (tmp != NULL && make_variant(f.orig, f.inverted, V_XOR) && make_variant(f.orig, f.dtype, V_DTYPE) &&
      make_variant(f.orig, f.shape, V_SHAPE) && lc_make_variant("llama", f.one_file, "--shards 1")) {
    int layouts[32][3];
    int nl = lc_layouts(lc_world(), layouts, 32);
    for (int i = 0; i < nl; i++) {
      lc_case c = {.fixture = "llama",
                   .tp = layouts[i][0],
                   .pp = layouts[i][1],
                   .dp = layouts[i][2],
                   .extra = {"quiet", "true"}};
      if (c.tp == 3 || c.pp > 3) /* 8 heads over 3; 3 layers */
        continue;
      test_in_place(&c, &f);
      if (i == 0)
        test_bound(&c, &f);
    }
    test_mapped(&f);
    lc_case c = {.fixture = "llama", .tp = 1, .pp = 1, .dp = lc_world(), .extra = {"quiet", "true"}};
    test_torn(&c, &f);
  }
  lc_models_close();
  lc_tmpdir_remove(tmp);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
