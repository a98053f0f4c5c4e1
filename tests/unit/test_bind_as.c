/*
 * test_bind_as.c — the checks and the record of sl_loader_bind / sl_loader_bind_as (src/api/bind.c)
 * on a hand-made plan, no MPI: a conversion sets the table entry (dtype, bits, nbytes) and the cast
 * array, a plain bind afterwards restores them; a wrong size, an unsupported pair, an unknown
 * dtype, an alias, an unknown name, a size that overflows and device=cuda (conversions are host
 * only) are refused with messages naming the parameter and both dtypes; an alias follows its
 * target's dtype when the load finishes the bindings; a parameter the plan holds in another dtype
 * than its sources' is bound at the held dtype, or converted once from the sources' one.
 */
#include "check.h"

#include "api/bind.h"

#include <stdlib.h>
#include <string.h>

enum { W, TIED, Q, BIG, N };

typedef struct fake {
  sl__lparam lparams[N];
  sl__copy copies[1];
  sl__rank_plan plan;
  sl_param table[N];
  void *ptr[N];
  bool bound[N];
  bool mapped[N];
  sl__mparam mparams[N]; /* each parameter held in its sources' dtype */
  sl__model model;
  sl__param_store store; /* over the arrays above */
  sl__err err;
  sl__loader_view v;
} fake;

static void make(fake *f, bool cuda) {
  memset(f, 0, sizeof *f);
  static const char *const names[N] = {"w", "tied", "q", "big"};
  static const char *const dtypes[N] = {"BF16", "BF16", "F8_E4M3", "BF16"};
  static const sl__dtype ids[N] = {SL_DT_BF16, SL_DT_BF16, SL_DT_F8_E4M3, SL_DT_BF16};
  static const uint64_t nbytes[N] = {12, 12, 4, 1ull << 63};
  for (int i = 0; i < N; i++) {
    f->mparams[i] = (sl__mparam){.dtype = ids[i], .held_dtype = ids[i], .alias_of = SL_NONE};
    f->lparams[i].mparam = (uint32_t)i;
    f->lparams[i].nbytes = nbytes[i];
    f->lparams[i].alias_of = i == TIED ? W : SL_NONE;
    f->table[i] = (sl_param){.name = names[i],
                             .dtype = dtypes[i],
                             .dtype_bits = strcmp(dtypes[i], "BF16") == 0 ? 16 : 8,
                             .nbytes = nbytes[i],
                             .alias_of = i == TIED ? "w" : NULL};
  }
  /* w is written whole by one copy: finishing zeroes nothing (no backend needed) */
  f->copies[0] = (sl__copy){.lparam = W, .rows = 1, .row_bytes = 12};
  f->plan = (sl__rank_plan){.n_lparams = N, .lparams = f->lparams, .n_copies = 1, .copies = f->copies};
  f->store =
      (sl__param_store){.table = f->table, .param_ptr = f->ptr, .bound = f->bound, .mapped = f->mapped};
  f->model = (sl__model){.n_params = N, .params = f->mparams};
  f->v = (sl__loader_view){.store = &f->store,
                           .err = &f->err,
                           .planned = true,
                           .plan = &f->plan,
                           .model = &f->model,
                           .cuda = cuda};
}

static sl_status bind_as(fake *f, const char *name, void *data, uint64_t nbytes, sl_dtype dtype) {
  sl__err_clear(&f->err);
  return sl__bind(&f->v, "sl_loader_bind_as", name, data, nbytes, true, dtype);
}

static sl_status bind(fake *f, const char *name, void *data, uint64_t nbytes) {
  sl__err_clear(&f->err);
  return sl__bind(&f->v, "sl_loader_bind", name, data, nbytes, false, SL_DTYPE_COUNT);
}

static void host(void) {
  fake f;
  make(&f, false);
  float buf[6];
  /* a conversion: the table describes the caller's memory */
  CHECK(bind_as(&f, "w", buf, sizeof buf, SL_DTYPE_F32) == SL_STATUS_OK);
  CHECK(f.bound[W] && f.ptr[W] == buf);
  CHECK_STR(f.table[W].dtype, "F32");
  CHECK_EQ_U64(f.table[W].dtype_bits, 32);
  CHECK_EQ_U64(f.table[W].nbytes, 24);
  CHECK(f.store.cast != NULL && f.store.cast[W].from == SL_DT_BF16 && f.store.cast[W].to == SL_DT_F32);
  CHECK(f.store.cast != NULL && f.store.cast[Q].from == SL_DT_F8_E4M3 && f.store.cast[Q].to == SL_DT_F8_E4M3);
  /* the wrong size for the buffer's dtype */
  CHECK(bind_as(&f, "w", buf, 12, SL_DTYPE_F32) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(f.err.msg, "sl_loader_bind_as(w)");
  CHECK_CONTAINS(f.err.msg, "BF16");
  CHECK_CONTAINS(f.err.msg, "F32");
  CHECK_CONTAINS(f.err.msg, "24 bytes");
  /* a plain bind replaces the conversion */
  uint16_t raw[6];
  CHECK(bind(&f, "w", raw, sizeof raw) == SL_STATUS_OK);
  CHECK_STR(f.table[W].dtype, "BF16");
  CHECK_EQ_U64(f.table[W].nbytes, 12);
  CHECK(f.store.cast[W].to == SL_DT_BF16 && f.ptr[W] == raw);
  CHECK(bind(&f, "w", raw, 24) == SL_STATUS_INVALID_ARGUMENT);
  /* the planned dtype through bind_as is a plain bind */
  CHECK(bind_as(&f, "w", raw, sizeof raw, SL_DTYPE_BF16) == SL_STATUS_OK);
  CHECK(f.store.cast[W].to == SL_DT_BF16);
  /* refused pairs, dtypes, names */
  CHECK(bind_as(&f, "w", buf, 24, SL_DTYPE_I32) == SL_STATUS_UNSUPPORTED);
  CHECK_CONTAINS(f.err.msg, "BF16");
  CHECK_CONTAINS(f.err.msg, "I32");
  CHECK(bind_as(&f, "q", buf, 16, SL_DTYPE_F32) == SL_STATUS_UNSUPPORTED);
  CHECK_CONTAINS(f.err.msg, "F8_E4M3");
  CHECK(bind_as(&f, "w", buf, 24, (sl_dtype)99) == SL_STATUS_INVALID_ARGUMENT);
  CHECK(bind_as(&f, "w", buf, 24, SL_DTYPE_COUNT) == SL_STATUS_INVALID_ARGUMENT);
  CHECK(bind_as(&f, "tied", buf, 24, SL_DTYPE_F32) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(f.err.msg, "bind that one instead");
  CHECK(bind_as(&f, "nothing", buf, 24, SL_DTYPE_F32) == SL_STATUS_NOT_FOUND);
  /* 2^62 elements as F64 overflow 64 bits: refused before anything is recorded */
  CHECK(bind_as(&f, "big", buf, 0, SL_DTYPE_F64) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(f.err.msg, "big");
  CHECK(!f.bound[BIG]);
  /* finishing: the alias follows its target */
  uint16_t half[6];
  CHECK(bind_as(&f, "w", half, sizeof half, SL_DTYPE_F16) == SL_STATUS_OK);
  CHECK(sl__bind_finish(&f.v) == SL_STATUS_OK);
  CHECK_STR(f.table[TIED].dtype, "F16");
  CHECK_EQ_U64(f.table[TIED].nbytes, 12);
  CHECK(f.store.cast[TIED].to == SL_DT_F16);
  free(f.store.cast);
}

static void cuda(void) {
  fake f;
  make(&f, true);
  float buf[6];
  CHECK(bind_as(&f, "w", buf, sizeof buf, SL_DTYPE_F32) == SL_STATUS_UNSUPPORTED);
  CHECK_CONTAINS(f.err.msg, "CUDA");
  CHECK_CONTAINS(f.err.msg, "host");
  CHECK(!f.bound[W] && f.store.cast == NULL);
  CHECK(bind_as(&f, "w", buf, 12, SL_DTYPE_BF16) == SL_STATUS_OK); /* no conversion: fine */
  CHECK(bind(&f, "w", buf, 12) == SL_STATUS_OK);
  free(f.store.cast);
}

/* A parameter the plan holds in F32 from BF16 sources (sl__mparam.held_dtype): the table and the
 * cast array say so from the start (api/loader.c makes them); a plain bind takes the held dtype,
 * sl_loader_bind_as converts from the sources' dtype (BF16 itself: no conversion at all). */
static void held(bool on_cuda) {
  fake f;
  make(&f, on_cuda);
  sl__mparam mp[N];
  memset(mp, 0, sizeof mp);
  for (int i = 0; i < N; i++)
    mp[i] = (sl__mparam){.dtype = SL_DT_BF16, .held_dtype = SL_DT_BF16, .alias_of = SL_NONE};
  mp[W].held_dtype = SL_DT_F32;
  mp[Q].dtype = mp[Q].held_dtype = SL_DT_F8_E4M3;
  sl__model model = {.n_params = N, .params = mp};
  for (int i = 0; i < N; i++)
    f.lparams[i].mparam = (uint32_t)i;
  f.lparams[W].nbytes = 24; /* 6 elements held as F32 */
  f.table[W] = (sl_param){.name = "w", .dtype = "F32", .dtype_bits = 32, .nbytes = 24};
  sl__cast_pair cast[N];
  for (int i = 0; i < N; i++)
    cast[i] = (sl__cast_pair){.from = mp[i].dtype, .to = mp[i].held_dtype};
  f.store.cast = cast;
  f.v.model = &model;
  float buf[6];
  double wide[6];
  uint16_t raw[6];
  if (on_cuda) {
    CHECK(bind(&f, "w", buf, sizeof buf) == SL_STATUS_UNSUPPORTED);
    CHECK_CONTAINS(f.err.msg, "BF16");
    CHECK_CONTAINS(f.err.msg, "host memory only");
    CHECK(bind_as(&f, "w", raw, sizeof raw, SL_DTYPE_BF16) == SL_STATUS_OK);
    CHECK(cast[W].from == SL_DT_BF16 && cast[W].to == SL_DT_BF16);
    return;
  }
  CHECK(bind(&f, "w", buf, 12) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(f.err.msg, "24 bytes");
  CHECK(bind(&f, "w", buf, sizeof buf) == SL_STATUS_OK);
  CHECK(cast[W].from == SL_DT_BF16 && cast[W].to == SL_DT_F32);
  CHECK_STR(f.table[W].dtype, "F32");
  CHECK(bind_as(&f, "w", wide, 24, SL_DTYPE_F64) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(f.err.msg, "the plan holds F32; as F64 it needs a buffer of 48 bytes");
  CHECK(bind_as(&f, "w", wide, sizeof wide, SL_DTYPE_F64) == SL_STATUS_OK);
  CHECK(cast[W].from == SL_DT_BF16 && cast[W].to == SL_DT_F64); /* one conversion, from the sources' */
  CHECK_EQ_U64(f.table[W].nbytes, 48);
  CHECK(bind_as(&f, "w", raw, sizeof raw, SL_DTYPE_BF16) == SL_STATUS_OK);
  CHECK(cast[W].to == SL_DT_BF16);
  CHECK_EQ_U64(f.table[W].nbytes, 12);
  CHECK(bind(&f, "w", buf, sizeof buf) == SL_STATUS_OK); /* back to the held dtype */
  CHECK(cast[W].to == SL_DT_F32);
  CHECK_STR(f.table[W].dtype, "F32");
  CHECK_EQ_U64(f.table[W].nbytes, 24);
}

int main(void) {
  host();
  cuda();
  held(false);
  held(true);
  return sl_test_finish();
}
