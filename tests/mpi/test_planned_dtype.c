/*
 * test_planned_dtype.c — a parameter held in another dtype than its checkpoint tensors (the spec key
 * "dtype", docs/SPECS.md): the llama fixture (BF16) with a copy of specs/llama.json whose three kinds
 * of norm (input_layernorm, post_attention_layernorm, model.norm: replicated) say "dtype": "F32"
 * (written into the build tree by tests/mpi/planned_dtype.cmake).
 * In every layout of the world size (tp, pp, dp) each rank's table must hold the norms as F32 (dtype,
 * bits, twice the bytes, the same shapes) with every element equal to an independent conversion of
 * the reference's BF16 bytes (BF16 → F32 is exact: the BF16 bits are the upper 16 bits), and every
 * other parameter byte-exact against the reference (tests/common/reference.h). Then, in one layout:
 * load_strategy mmap (the norms are never file mappings), the caller's buffers on top (a plain bind
 * takes F32, sl_loader_bind_as F64 converts from the checkpoint's BF16 once, sl_loader_bind_as BF16
 * takes the checkpoint's bytes as they are), sl_loader_save_sharded (each norm saved as held or as
 * bound), and a
 * reload into the same memory. Run at 1, 2, 3 and 4 ranks.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the planned table holds name in F32 (one of the norms above). */
static bool converted(const char *name) {
  size_t n = strlen(name);
  static const char *const ends[] = {"input_layernorm.weight", "post_attention_layernorm.weight"};
  for (int i = 0; i < 2; i++) {
    size_t k = strlen(ends[i]);
    if (n >= k && strcmp(name + n - k, ends[i]) == 0)
      return true;
  }
  return strcmp(name, "model.norm.weight") == 0;
}

static sl_loader *open_loader(const char *spec, int tp, int pp, int dp, const char *strategy) {
  char model[1024];
  char num[16];
  lc_fixture_path("llama", model, sizeof model);
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", model);
  sl_config_set(cfg, "arch", spec);
  sl_config_set(cfg, "load_strategy", strategy);
  sl_config_set(cfg, "quiet", "true");
  snprintf(num, sizeof num, "%d", tp);
  sl_config_set(cfg, "tp", num);
  snprintf(num, sizeof num, "%d", pp);
  sl_config_set(cfg, "pp", num);
  snprintf(num, sizeof num, "%d", dp);
  sl_config_set(cfg, "dp", num);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  CHECKF(st == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  return st == SL_STATUS_OK ? l : NULL;
}

static uint32_t bf16_to_f32_bits(const uint8_t *b) {
  return (uint32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8) << 16;
}

/* data (held as `dtype`) against reference entry e (BF16) converted independently: F32 and F64
 * exactly, BF16 as the checkpoint's bytes. */
static void check_converted(const char *label, const sl_ref_model *m, const sl_ref_param *e, const void *data,
                            const char *dtype) {
  uint8_t *want = malloc(e->nbytes + 1);
  sl_ref_param_fill(m, e, want);
  uint64_t n = e->nbytes / 2;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint32_t f = bf16_to_f32_bits(want + 2 * i);
    if (strcmp(dtype, "F32") == 0) {
      uint32_t have;
      memcpy(&have, (const uint8_t *)data + 4 * i, 4);
      bad += have != f;
    } else if (strcmp(dtype, "F64") == 0) {
      float x;
      double have;
      memcpy(&x, &f, 4);
      memcpy(&have, (const uint8_t *)data + 8 * i, 8);
      bad += memcmp(&have, &(double){(double)x}, 8) != 0;
    } else {
      bad += memcmp((const uint8_t *)data + 2 * i, want + 2 * i, 2) != 0;
    }
  }
  CHECKF(bad == 0, "%s: %s as %s: %llu of %llu elements differ from the checkpoint's converted", label,
         e->name, dtype, (unsigned long long)bad, (unsigned long long)n);
  free(want);
}

/* The table of loader l against the reference of its layout: norms in F32, the rest as planned. */
static void check_table(const char *label, const sl_ref_model *m, sl_loader *l, const sl_ref_table *ref) {
  CHECKF(sl_loader_param_count(l) == ref->count, "%s: %zu parameters, expected %zu", label,
         sl_loader_param_count(l), ref->count);
  int norms = 0;
  for (size_t i = 0; i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    const sl_ref_param *e = sl_ref_table_find(ref, p->name);
    CHECKF(e != NULL, "%s: unexpected parameter %s", label, p->name);
    if (e == NULL)
      continue;
    if (!converted(p->name)) {
      lc_check_param(label, m, l, p, e);
      continue;
    }
    norms++;
    CHECK_STR(e->dtype, "BF16");
    CHECK_STR(p->dtype, "F32");
    CHECK_EQ_U64(p->dtype_bits, 32);
    CHECK_EQ_U64(p->nbytes, 2 * e->nbytes);
    CHECK(p->ndim == e->ndim && memcmp(p->local_shape, e->local_shape, sizeof p->local_shape) == 0);
    sl_param_source src = SL_PARAM_SOURCE_INIT;
    CHECK(sl_loader_param_source(l, i, 0, &src) == SL_STATUS_OK && src.dtype == SL_DTYPE_BF16);
    if (p->data != NULL)
      check_converted(label, m, e, p->data, "F32");
  }
  CHECKF(norms > 0, "%s: no norm on this rank", label);
}

/* The reference table of this rank in the layout, or NULL where the layout does not fit the
 * fixture (tp 3: 8 heads). */
static sl_ref_table *reference(const sl_ref_model *m, int tp, int pp, int dp) {
  sl_ref_layout lay = {.tp = tp, .pp = pp, .dp = dp, .rank = lc_rank()};
  sl_ref_table *ref = NULL;
  char msg[512];
  return sl_ref_table_build(m, &lay, &ref, msg, sizeof msg) == SL_STATUS_OK ? ref : NULL;
}

/* The saved copy of this rank's norms: as held, F32, or in the dtype of the buffer bound (as[j] for
 * bound[j], j < n). */
static void check_saved(const char *dir, const sl_ref_model *m, const sl_ref_table *ref,
                        const sl_ref_param *const *bound, const char *const *as, int n) {
  char file[2048];
  snprintf(file, sizeof file, "%s/model-rank-%d-part-0.safetensors", dir, lc_rank());
  sl_model *sm = NULL;
  CHECKF(sl_model_open(file, NULL, &sm, NULL) == SL_STATUS_OK, "cannot open %s", file);
  int seen = 0;
  for (size_t t = 0; sm != NULL && t < sl_model_tensor_count(sm); t++) {
    sl_tensor_info ti = SL_TENSOR_INFO_INIT;
    sl_model_tensor(sm, t, &ti);
    const sl_ref_param *e = sl_ref_table_find(ref, ti.name);
    if (e == NULL || !converted(ti.name))
      continue;
    seen++;
    const char *dtype = "F32";
    for (int j = 0; j < n; j++)
      dtype = bound[j] == e ? as[j] : dtype;
    uint64_t size = strcmp(dtype, "F64") == 0 ? 4 : strcmp(dtype, "F32") == 0 ? 2 : 1;
    CHECK_STR(ti.dtype, dtype);
    CHECK_EQ_U64(ti.nbytes, size * e->nbytes);
    uint8_t *bytes = malloc(ti.nbytes + 1);
    FILE *f = fopen(file, "rb");
    bool read =
        f != NULL && fseek(f, (long)ti.offset, SEEK_SET) == 0 && fread(bytes, 1, ti.nbytes, f) == ti.nbytes;
    CHECK(read);
    if (read)
      check_converted("saved", m, e, bytes, dtype);
    if (f != NULL)
      fclose(f);
    free(bytes);
  }
  CHECK(seen > 0);
  sl_model_close(sm);
}

/* One layout with the caller's buffers, mmap, the saved copy and a reload. */
static void with_buffers(const char *spec, const sl_ref_model *m, int tp, int pp, int dp) {
  sl_loader *l = open_loader(spec, tp, pp, dp, "mmap");
  sl_ref_table *ref = reference(m, tp, pp, dp);
  if (l == NULL || ref == NULL)
    return;
  CHECK(sl_loader_plan(l) == SL_STATUS_OK);
  /* the norms in table order: the first bound as F32, the second as F64, the third as BF16 */
  static const char *const as[3] = {"F32", "F64", "BF16"};
  void *buf[3] = {NULL, NULL, NULL};
  const sl_ref_param *ent[3] = {NULL, NULL, NULL};
  int k = 0;
  for (size_t i = 0; i < sl_loader_param_count(l) && k < 3; i++) {
    const sl_param *p = sl_loader_param(l, i);
    if (!converted(p->name))
      continue;
    ent[k] = sl_ref_table_find(ref, p->name);
    uint64_t elems = p->nbytes / 4;
    buf[k] = calloc(elems + 1, 8);
    if (k == 0) {
      CHECKF(sl_loader_bind(l, p->name, buf[k], p->nbytes) == SL_STATUS_OK, "bind: %s", sl_loader_error(l));
      CHECK(sl_loader_bind(l, p->name, buf[k], elems * 2) == SL_STATUS_INVALID_ARGUMENT);
      CHECK_CONTAINS(sl_loader_error(l), "needs a buffer of");
      CHECK(sl_loader_bind(l, p->name, buf[k], p->nbytes) == SL_STATUS_OK);
    } else {
      sl_dtype dt = k == 1 ? SL_DTYPE_F64 : SL_DTYPE_BF16;
      uint64_t nb = elems * (k == 1 ? 8 : 2);
      CHECKF(sl_loader_bind_as(l, p->name, buf[k], nb, dt) == SL_STATUS_OK, "bind_as: %s",
             sl_loader_error(l));
      CHECK_STR(sl_loader_param(l, i)->dtype, as[k]);
      CHECK_EQ_U64(sl_loader_param(l, i)->nbytes, nb);
    }
    k++;
  }
  CHECKF(sl_loader_load(l) == SL_STATUS_OK, "load: %s", sl_loader_error(l));
  for (int j = 0; j < k; j++)
    if (ent[j] != NULL)
      check_converted("bound", m, ent[j], buf[j], as[j]);
  /* the unbound norms (and the rest) as in any layout */
  for (size_t i = 0; i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    const sl_ref_param *e = sl_ref_table_find(ref, p->name);
    bool bound = false;
    for (int j = 0; j < k; j++)
      bound = bound || (ent[j] != NULL && strcmp(ent[j]->name, p->name) == 0);
    if (e != NULL && converted(p->name) && !bound)
      check_converted("mmap", m, e, p->data, "F32");
    else if (e != NULL && !bound)
      lc_check_param("mmap", m, l, p, e);
  }
  char *dir = lc_tmpdir("planned_dtype_save");
  char out[1200];
  snprintf(out, sizeof out, "%s/saved", dir != NULL ? dir : "/nonexistent");
  CHECKF(sl_loader_save_sharded(l, out) == SL_STATUS_OK, "save: %s", sl_loader_error(l));
  check_saved(out, m, ref, ent, as, k);
  /* a reload converts again into the same memory */
  memset(buf[0], 0, 4);
  CHECKF(sl_loader_reload(l, NULL, NULL) == SL_STATUS_OK, "reload: %s", sl_loader_error(l));
  if (ent[0] != NULL)
    check_converted("reloaded", m, ent[0], buf[0], "F32");
  sl_loader_destroy(l);
  lc_tmpdir_remove(dir);
  for (int j = 0; j < 3; j++)
    free(buf[j]);
  sl_ref_table_free(ref);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  const char *spec = SL_TEST_F32_NORMS_SPEC; /* written by tests/mpi/planned_dtype.cmake */
  sl_ref_model *m = lc_model("llama", NULL);
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  int first = -1;
  for (int i = 0; i < n && m != NULL; i++) {
    int tp = lays[i][0], pp = lays[i][1], dp = lays[i][2];
    sl_ref_table *ref = reference(m, tp, pp, dp);
    if (ref == NULL) /* a layout the fixture does not fit (tp 3, pp 4): the loads tests refuse it */
      continue;
    first = first < 0 ? i : first;
    char label[64];
    snprintf(label, sizeof label, "llama f32 norms tp%d pp%d dp%d", tp, pp, dp);
    sl_loader *l = open_loader(spec, tp, pp, dp, "auto");
    if (l != NULL) {
      CHECKF(sl_loader_load(l) == SL_STATUS_OK, "%s: %s", label, sl_loader_error(l));
      check_table(label, m, l, ref);
    }
    sl_loader_destroy(l);
    sl_ref_table_free(ref);
  }
  CHECK(first >= 0);
  if (first >= 0)
    with_buffers(spec, m, lays[first][0], lays[first][1], lays[first][2]);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
