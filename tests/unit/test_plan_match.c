/*
 * test_plan_match.c — the reload's check that a new checkpoint writes exactly the loaded memory
 * (src/plan/plan_match.c, docs/spec/DESIGN.md §10 item 3), on a hand-made model of three
 * parameters (a BF16 [4, 8] weight from two tensors, a BF16 [8] norm, an alias of the weight) and
 * its rank plan. The same plan matches, and so does one whose sources differ (other tensors, other
 * offsets); each single difference is refused with SL_STATUS_SHAPE and a message naming the
 * parameter: a name only the new table has, a name only the loaded one has, the same names in
 * another order, a dtype (naming the checkpoint tensor too), a local shape, a global shape, a
 * size, an alias, an orientation, a copy's destination, a copy more.
 */
#include "check.h"
#include "plan/plan_match.h"

#include <stdio.h>
#include <string.h>

/* One side, built in place from a template and edited by each case. */
typedef struct side {
  sl__mparam mp[4];
  sl__lparam lp[4];
  sl__copy cp[4];
  sl__cat_tensor t[3];
  sl__model model;
  sl__catalog cat;
  sl__rank_plan plan;
  sl__plan_side s;
} side;

static void init(side *x) {
  memset(x, 0, sizeof *x);
  static char *names[3] = {"w.weight", "norm.weight", "head.weight"};
  static char *tensors[3] = {"w_a.weight", "w_b.weight", "norm.weight"};
  for (int i = 0; i < 3; i++) {
    x->mp[i] = (sl__mparam){.name = names[i],
                            .dtype = SL_DT_BF16,
                            .held_dtype = SL_DT_BF16,
                            .ndim = 2,
                            .shape = {4, 8},
                            .alias_of = SL_NONE};
    x->lp[i] =
        (sl__lparam){.mparam = (uint32_t)i, .ndim = 2, .shape = {4, 8}, .nbytes = 64, .alias_of = SL_NONE};
    x->t[i] =
        (sl__cat_tensor){.name = tensors[i], .dtype = SL_DT_BF16, .ndim = 2, .shape = {2, 8}, .nbytes = 32};
  }
  x->mp[1].ndim = x->lp[1].ndim = 1;
  x->mp[1].shape[0] = x->lp[1].shape[0] = 8;
  x->mp[1].shape[1] = x->lp[1].shape[1] = 0;
  x->lp[1].nbytes = 16;
  x->mp[2].alias_of = 0;
  x->lp[2].alias_of = 0;
  /* the weight: two halves from two tensors; the norm whole */
  x->cp[0] = (sl__copy){.lparam = 0, .tensor = 0, .row_bytes = 32, .rows = 1, .dst_off = 0, .unit = SL_NONE};
  x->cp[1] = (sl__copy){.lparam = 0, .tensor = 1, .row_bytes = 32, .rows = 1, .dst_off = 32, .unit = SL_NONE};
  x->cp[2] = (sl__copy){.lparam = 1, .tensor = 2, .row_bytes = 16, .rows = 1, .dst_off = 0, .unit = SL_NONE};
  x->model = (sl__model){.n_params = 3, .params = x->mp};
  x->cat = (sl__catalog){.n_tensors = 3, .tensors = x->t};
  x->plan = (sl__rank_plan){.n_lparams = 3, .lparams = x->lp, .n_copies = 3, .copies = x->cp};
  x->s = (sl__plan_side){.model = &x->model, .cat = &x->cat, .plan = &x->plan};
}

/* was against now: OK, or SHAPE with a message containing every one of texts (NULL-terminated). */
static void expect(const char *what, side *was, side *now, bool ok, const char *const *texts) {
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__plan_match(&was->s, &now->s, "/ckpt/b", &err);
  CHECKF(ok ? st == SL_STATUS_OK : st == SL_STATUS_SHAPE, "%s: status %s (%s)", what, sl_status_name(st),
         err.msg);
  for (int i = 0; texts != NULL && texts[i] != NULL; i++)
    CHECKF(strstr(err.msg, texts[i]) != NULL, "%s: \"%s\" does not contain \"%s\"", what, err.msg, texts[i]);
}

#define TEXTS(...) ((const char *const[]){__VA_ARGS__, NULL})

int main(void) {
  static side was, now;
  init(&was);
  init(&now);
  expect("the same plan", &was, &now, true, NULL);
  /* Sources may differ: another tensor order in the catalog, other offsets and strides in them. */
  now.cp[0].tensor = 1;
  now.cp[1].tensor = 0;
  now.cp[1].src_off = 64;
  now.cp[2].src_stride = 999;
  expect("other sources", &was, &now, true, NULL);

  init(&now);
  now.mp[1].name = "norm.bias";
  expect("a name only the new table has", &was, &now, false, TEXTS("/ckpt/b holds parameter norm.bias"));
  init(&now);
  now.plan.n_lparams = 2;
  now.plan.n_copies = 3;
  expect("a name only the loaded table has", &was, &now, false,
         TEXTS("the loaded parameter head.weight is not in /ckpt/b"));
  init(&now);
  now.lp[0].mparam = 1;
  now.lp[1].mparam = 0;
  expect("another order", &was, &now, false, TEXTS("another order", "norm.weight at position 0"));
  init(&now);
  now.mp[1].dtype = SL_DT_F16;
  expect("a dtype", &was, &now, false,
         TEXTS("parameter norm.weight: dtype BF16 loaded, F16 in /ckpt/b", "tensor norm.weight"));
  init(&now);
  now.mp[1].held_dtype = SL_DT_F32;
  expect("a held dtype", &was, &now, false,
         TEXTS("parameter norm.weight: held in BF16 loaded, in F32 in /ckpt/b", "tensor norm.weight"));
  init(&now);
  now.lp[0].shape[0] = 2;
  expect("a local shape", &was, &now, false,
         TEXTS("w.weight: local shape [4, 8] loaded, [2, 8]", "w_a.weight"));
  init(&now);
  now.mp[0].shape[0] = 8;
  expect("a global shape", &was, &now, false, TEXTS("w.weight: global shape [4, 8] loaded, [8, 8]"));
  init(&now);
  now.lp[1].nbytes = 32;
  expect("a size", &was, &now, false, TEXTS("norm.weight: 16 bytes loaded, 32 bytes"));
  init(&now);
  now.lp[2].alias_of = SL_NONE;
  expect("an alias", &was, &now, false, TEXTS("head.weight: 64 bytes, an alias loaded, 64 bytes in"));
  init(&now);
  now.lp[0].transposed = 2;
  expect("an orientation", &was, &now, false, TEXTS("w.weight", "transposed in /ckpt/b"));
  init(&now);
  now.cp[1].dst_off = 16;
  expect("a destination", &was, &now, false,
         TEXTS("parameter w.weight: /ckpt/b writes it in other pieces", "copy 1"));
  init(&now);
  now.cp[1].rows = 2;
  now.cp[1].row_bytes = 16;
  expect("a row split", &was, &now, false, TEXTS("parameter w.weight", "copy 1"));
  init(&now);
  now.cp[3] = now.cp[2];
  now.plan.n_copies = 4;
  expect("a copy more", &was, &now, false, TEXTS("parameter norm.weight", "copy 3"));
  return sl_test_finish();
}
