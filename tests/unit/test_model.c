/*
 * test_model.c — expressions, spec files and model instantiation (no MPI): expression goldens
 * and errors; spec validation errors; every built-in spec instantiated on its fixture with the
 * expected parameter names in both layouts; errors that name what is wrong (unknown architecture,
 * missing config field, shape mismatch with the config fields behind it, unsupported
 * quantization).
 */
#include "check.h"
#include "model/catalog.h"
#include "model/expr.h"
#include "model/model.h"
#include "model/spec.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- expressions ---- */

typedef struct env {
  cJSON *cfg;
} env;

static bool lookup(void *ctx, const char *name, sl__val *out, sl__err *err) {
  (void)err;
  env *e = ctx;
  memset(out, 0, sizeof *out);
  out->origin = name;
  cJSON *v = cJSON_GetObjectItemCaseSensitive(e->cfg, name);
  if (v == NULL)
    out->kind = SL_VAL_MISSING;
  else if (cJSON_IsNull(v))
    out->kind = SL_VAL_NULL;
  else if (cJSON_IsBool(v)) {
    out->kind = SL_VAL_BOOL;
    out->i = cJSON_IsTrue(v);
  } else if (cJSON_IsNumber(v)) {
    out->kind = SL_VAL_INT;
    out->i = (int64_t)v->valuedouble;
  } else if (cJSON_IsString(v)) {
    out->kind = SL_VAL_STR;
    out->s = v->valuestring;
  } else if (cJSON_IsArray(v)) {
    out->kind = SL_VAL_LIST;
    out->list = v;
  }
  return true;
}

static void check_int(env *e, const char *text, int64_t want) {
  sl__expr *x = NULL;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__expr_compile(text, "test", &x, &err);
  CHECKF(st == SL_STATUS_OK, "compile '%s': %s", text, err.msg);
  if (st != SL_STATUS_OK)
    return;
  sl__val v;
  st = sl__expr_eval(x, lookup, e, &v, &err);
  CHECKF(st == SL_STATUS_OK && (v.kind == SL_VAL_INT || v.kind == SL_VAL_BOOL) && v.i == want,
         "'%s' = %lld (kind %d, %s), want %lld", text, (long long)v.i, v.kind, err.msg, (long long)want);
  sl__expr_free(x);
}

static void check_eval_error(env *e, const char *text, const char *needle) {
  sl__expr *x = NULL;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__expr_compile(text, "test", &x, &err);
  if (st == SL_STATUS_OK) {
    sl__val v;
    st = sl__expr_eval(x, lookup, e, &v, &err);
    sl__expr_free(x);
  }
  CHECKF(st != SL_STATUS_OK, "'%s' must fail", text);
  CHECK_CONTAINS(err.msg, needle);
}

static void test_expressions(void) {
  env e = {.cfg = cJSON_Parse("{\"h\":4096,\"n\":32,\"kv\":8,\"nul\":null,\"list\":[1,3],\"t\":true,"
                              "\"m\":\"noaux_tc\"}")};
  check_int(&e, "h / n", 128);
  check_int(&e, "h // 3", 1365);
  check_int(&e, "h % 3", 1);
  check_int(&e, "-7 // 2", -4);
  check_int(&e, "2 + 3 * 4", 14);
  check_int(&e, "(2 + 3) * 4", 20);
  check_int(&e, "default(absent, nul, kv)", 8);
  check_int(&e, "default(head_dim, h // n)", 128);
  check_int(&e, "contains(list, 3)", 1);
  check_int(&e, "contains(list, 2)", 0);
  check_int(&e, "contains(absent, 2)", 0);
  check_int(&e, "len(list)", 2);
  check_int(&e, "ceil_div(40, 16)", 3);
  check_int(&e, "pad(1010, 64)", 1024);
  check_int(&e, "min(3, 5) + max(3, 5)", 8);
  check_int(&e, "t && n > 4 || false", 1);
  check_int(&e, "!t", 0);
  check_int(&e, "m == 'noaux_tc'", 1);
  check_int(&e, "default(nul, 0) > 0", 0);
  check_int(&e, "nul == null", 1);
  check_int(&e, "absent != null", 0);
  check_eval_error(&e, "h / 3", "not divisible");
  check_eval_error(&e, "absent + 1", "no field 'absent'");
  check_eval_error(&e, "nul * 2", "'nul' is null");
  check_eval_error(&e, "n / 0", "division by zero");
  check_eval_error(&e, "9223372036854775807 + 1", "overflow");
  check_eval_error(&e, "h +", "invalid expression");
  check_eval_error(&e, "foo(1)", "unknown function");
  check_eval_error(&e, "(h", "expected ')'");
  check_eval_error(&e, "h h", "trailing");
  cJSON_Delete(e.cfg);
}

/* ---- specs ---- */

static void check_spec_error(const char *json, const char *needle) {
  sl__spec *s = NULL;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__spec_parse(json, strlen(json), "bad.json", &s, &err);
  CHECKF(st == SL_STATUS_ARCH, "spec must be rejected: %s", json);
  CHECK_CONTAINS(err.msg, needle);
  CHECK_CONTAINS(err.msg, "bad.json");
  sl__spec_free(s);
}

static void test_spec_errors(void) {
  const char *head = "{\"family\":\"x\",\"architectures\":[\"X\"],";
  char buf[2048];
  check_spec_error("[]", "expected an object");
  snprintf(buf, sizeof buf, "%s\"params\":[], \"colour\":1}", head);
  check_spec_error(buf, "unknown key 'colour'");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a\",\"place\":\"nowhere\",\"style\":\"replicated\","
           "\"sources\":[{\"tensor\":\"a\",\"shape\":[1]}]}]}",
           head);
  check_spec_error(buf, "'place' must be one of");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a\",\"place\":\"embed\",\"style\":\"diagonal\","
           "\"sources\":[{\"tensor\":\"a\",\"shape\":[1]}]}]}",
           head);
  check_spec_error(buf, "'style' must be one of");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a\",\"place\":\"embed\",\"style\":\"qkv\","
           "\"sources\":[{\"tensor\":\"a\",\"shape\":[1]}]}]}",
           head);
  check_spec_error(buf, "qkv takes three sources");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a\",\"place\":\"embed\",\"style\":\"replicated\","
           "\"sources\":[{\"tensor\":\"a\",\"shape\":[\"1 +\"]}]}]}",
           head);
  check_spec_error(buf, "invalid expression");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a\",\"place\":\"layer\",\"style\":\"replicated\","
           "\"sources\":[{\"tensor\":\"a\",\"shape\":[1]}]}]}",
           head);
  check_spec_error(buf, "needs {layer}");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a.{layer}\",\"place\":\"layer\",\"style\":\"moe_w2\","
           "\"sources\":[{\"tensor\":\"a.{layer}\",\"shape\":[1,1]}]}]}",
           head);
  check_spec_error(buf, "{expert}");
  /* "transpose": a boolean, and only for the styles whose sources are stored transposed */
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a.{layer}\",\"place\":\"layer\",\"style\":\"moe3d_w2_transposed\","
           "\"transpose\":\"yes\",\"sources\":[{\"tensor\":\"a.{layer}\",\"shape\":[1,1,1]}]}]}",
           head);
  check_spec_error(buf, "'transpose' must be true or false");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a.{layer}\",\"place\":\"layer\",\"style\":\"moe3d_w2\","
           "\"transpose\":true,\"sources\":[{\"tensor\":\"a.{layer}\",\"shape\":[1,1,1]}]}]}",
           head);
  check_spec_error(buf, "'transpose' is only supported with styles moe3d_w13_transposed, moe3d_w2_transposed "
                        "and moe3d_w13_interleaved_transposed, not moe3d_w2");
  /* gdn (docs/spec/LAYOUTS.md §3.13): every source names its part, and the heads are given */
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a.{layer}\",\"place\":\"layer\",\"style\":\"gdn\","
           "\"sources\":[{\"tensor\":\"a.{layer}\",\"part\":\"q\",\"shape\":[1]}]}]}",
           head);
  check_spec_error(buf, "every gdn source needs a part among qkvz, ba, qkv, z, b, a, v_heads");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a.{layer}\",\"place\":\"layer\",\"style\":\"gdn\","
           "\"heads\":{\"q\":1,\"kv\":1},\"sources\":[{\"tensor\":\"a.{layer}\",\"part\":\"qkvz\",\"shape\":["
           "1]}]}]}",
           head);
  check_spec_error(buf, "gdn needs \"heads\"");
  sl__spec *ok = NULL;
  sl__err err;
  sl__err_clear(&err);
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a.{layer}\",\"place\":\"layer\",\"style\":\"moe3d_w2_transposed\","
           "\"transpose\":false,\"sources\":[{\"tensor\":\"a.{layer}\",\"shape\":[1,1,1]}]}]}",
           head);
  CHECKF(sl__spec_parse(buf, strlen(buf), "ok.json", &ok, &err) == SL_STATUS_OK, "transpose false: %s",
         err.msg);
  CHECK(ok != NULL && ok->n_params == 1 && !ok->params[0].transpose);
  sl__spec_free(ok);
  check_spec_error("{\"family\":", "invalid JSON");
  /* skip_tensors (model/spec_skip.c) and the kv_heads style */
  const char *rep = "\"params\":[{\"name\":\"a\",\"place\":\"embed\",\"style\":\"replicated\","
                    "\"sources\":[{\"tensor\":\"a\",\"shape\":[1]}]}]";
  snprintf(buf, sizeof buf, "%s\"skip_tensors\":{},%s}", head, rep);
  check_spec_error(buf, "skip_tensors: expected an array of rules");
  snprintf(buf, sizeof buf, "%s\"skip_tensors\":[{\"prefix\":\"x.\",\"when\":\"true\"}],%s}", head, rep);
  check_spec_error(buf, "skip_tensors[0]: 'prefix' must hold {layer} exactly once");
  snprintf(buf, sizeof buf, "%s\"skip_tensors\":[{\"prefix\":\"{layer}.{layer}\",\"when\":true}],%s}", head,
           rep);
  check_spec_error(buf, "exactly once");
  snprintf(buf, sizeof buf, "%s\"skip_tensors\":[{\"prefix\":\"l.{layer}.\",\"if\":true}],%s}", head, rep);
  check_spec_error(buf, "skip_tensors[0]: unknown key 'if'");
  snprintf(buf, sizeof buf, "%s\"skip_tensors\":[{\"prefix\":\"l.{layer}.\",\"when\":\"layer >\"}],%s}", head,
           rep);
  check_spec_error(buf, "skip_tensors[0].when");
  snprintf(buf, sizeof buf,
           "%s\"params\":[{\"name\":\"a.{layer}\",\"place\":\"layer\",\"style\":\"kv_heads\","
           "\"heads\":{\"kv\":2},\"sources\":[{\"tensor\":\"a.{layer}\",\"shape\":[4]}]}]}",
           head);
  check_spec_error(buf, "kv_heads takes one source and \"heads\": {\"kv\", \"head_dim\"}");
  snprintf(buf, sizeof buf,
           "%s\"skip_tensors\":[{\"prefix\":\"l.{layer}.x.\",\"when\":\"layer > 0\"}],"
           "\"params\":[{\"name\":\"e\",\"place\":\"layer\",\"when\":\"layer == 1\",\"style\":\"replicated\","
           "\"sources\":[{\"tensor\":\"l.{layer}.e\",\"shape\":[1]}]}]}",
           head);
  sl__err_clear(&err);
  CHECKF(sl__spec_parse(buf, strlen(buf), "ok.json", &ok, &err) == SL_STATUS_OK, "skip_tensors: %s", err.msg);
  CHECK(ok != NULL && ok->n_skip_tensors == 1 && strcmp(ok->skip_tensors[0].prefix, "l.{layer}.x.") == 0);
  sl__spec_free(ok);
  /* DeepSeek-V4: fp8_scale_name and the place "all" */
  static const char *const bad_names[] = {"\"{stem}.{weight}\"", "\".scale\"", "\"{stem}.{x}\"", "3",
                                          "\"{stem\""};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    snprintf(buf, sizeof buf, "%s\"fp8_scale_name\":%s,%s}", head, bad_names[i], rep);
    check_spec_error(buf, "fp8_scale_name: expected a string holding {weight} or {stem} once");
  }
  snprintf(buf, sizeof buf,
           "%s\"fp8_scale_name\":\"{stem}.scale\",\"params\":[{\"name\":\"h\",\"place\":\"all\","
           "\"style\":\"replicated\",\"sources\":[{\"tensor\":\"h\",\"shape\":[1]}]}]}",
           head);
  sl__err_clear(&err);
  CHECKF(sl__spec_parse(buf, strlen(buf), "ok.json", &ok, &err) == SL_STATUS_OK, "place all: %s", err.msg);
  CHECK(ok != NULL && ok->params[0].place == SL_PLACE_ALL && strcmp(ok->fp8_scale_name, "{stem}.scale") == 0);
  sl__spec_free(ok);
}

/* ---- models on the fixtures ---- */

typedef struct loaded {
  sl__catalog cat;
  sl__spec *spec;
} loaded;

static sl_status load_fixture(const char *name, const char *folder_override, loaded *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  char dir[4096];
  if (folder_override != NULL)
    snprintf(dir, sizeof dir, "%s", folder_override);
  else
    snprintf(dir, sizeof dir, "%s/%s", sl_test_env("SL_FIXTURES", "fixtures"), name);
  char cfgpath[4200];
  snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
  char *text = sl_test_read_file(cfgpath, NULL);
  cJSON *cfg = text != NULL ? cJSON_Parse(text) : NULL;
  free(text);
  const char *arch = NULL;
  sl_status st = sl__model_architecture(cfg, &arch, err);
  if (st == SL_STATUS_OK)
    st = sl__spec_find(arch, &out->spec, err);
  cJSON_Delete(cfg);
  if (st != SL_STATUS_OK)
    return st;
  sl__catalog_opts co = {.folder = dir,
                         .what = dir,
                         .select = {.format = SL_FORMAT_AUTO, .fall_back_to_pt = out->spec->fall_back_to_pt},
                         .require_config = true,
                         .n_renames = out->spec->n_rename,
                         .rename_from = (const char *const *)out->spec->rename_from,
                         .rename_to = (const char *const *)out->spec->rename_to,
                         .rename_format = out->spec->rename_format};
  return sl__catalog_build(&co, &out->cat, err);
}

static void free_loaded(loaded *l) {
  sl__catalog_free(&l->cat);
  sl__spec_free(l->spec);
}

static bool has_param(const sl__model *m, const char *name) {
  for (size_t i = 0; i < m->n_params; i++)
    if (strcmp(m->params[i].name, name) == 0)
      return true;
  return false;
}

static void test_fixture_models(void) {
  static const struct {
    const char *fixture;
    const char *vllm_name;
    const char *ckpt_name;
    size_t units;
  } cases[] = {
      {"llama", "model.layers.2.self_attn.qkv_proj.weight", "model.layers.2.self_attn.k_proj.weight", 30},
      {"llama_bias", "model.layers.1.mlp.gate_up_proj.bias", "model.layers.1.mlp.up_proj.bias", 35},
      {"qwen2", "model.layers.1.self_attn.qkv_proj.bias", "model.layers.1.self_attn.v_proj.bias", 27},
      {"qwen3", "model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_norm.weight", 24},
      {"mistral_consolidated", "model.layers.1.mlp.gate_up_proj.weight",
       "model.layers.1.mlp.gate_proj.weight", 21},
      {"mixtral", "model.layers.1.block_sparse_moe.experts.w13_weight",
       "model.layers.1.block_sparse_moe.experts.7.w3.weight", 65},
      {"qwen2_moe", "model.layers.2.mlp.shared_expert.gate_up_proj.weight",
       "model.layers.1.mlp.down_proj.weight", 79},
      {"qwen3_moe", "model.layers.1.mlp.experts.w2_weight", "model.layers.1.mlp.experts.0.down_proj.weight",
       69},
      {"deepseek_v2_lite", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
       "model.layers.2.mlp.shared_experts.up_proj.weight", 83},
      {"deepseek_v3", "model.layers.1.self_attn.fused_qkv_a_proj.weight",
       "model.layers.1.self_attn.q_a_proj.weight", 91},
      {"deepseek_v3_fp8", "model.layers.1.self_attn.fused_qkv_a_proj.weight_scale_inv",
       "model.layers.1.mlp.experts.3.up_proj.weight_scale_inv", 91},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loaded l;
    sl__err err;
    sl__err_clear(&err);
    sl_status st = load_fixture(cases[i].fixture, NULL, &l, &err);
    CHECKF(st == SL_STATUS_OK, "%s: %s", cases[i].fixture, err.msg);
    if (st != SL_STATUS_OK)
      continue;
    for (int layout = 0; layout < 2; layout++) {
      sl__model m;
      sl__err_clear(&err);
      st = sl__model_build(l.spec, &l.cat, layout == 0 ? SL_LAYOUT_VLLM : SL_LAYOUT_CHECKPOINT, &m, &err);
      CHECKF(st == SL_STATUS_OK, "%s layout %d: %s", cases[i].fixture, layout, err.msg);
      if (st != SL_STATUS_OK)
        continue;
      const char *want = layout == 0 ? cases[i].vllm_name : cases[i].ckpt_name;
      CHECKF(has_param(&m, want), "%s layout %d has no parameter %s", cases[i].fixture, layout, want);
      CHECKF(m.n_units == cases[i].units, "%s: %zu expected tensors, want %zu", cases[i].fixture, m.n_units,
             cases[i].units);
      /* every catalog tensor is consumed, skipped or ignored: nothing unexpected in the fixtures */
      size_t none = 0;
      for (size_t t = 0; t < l.cat.n_tensors; t++)
        none += m.tensor_fate[t] == SL_FATE_NONE;
      CHECKF(none == 0, "%s: %zu catalog tensors consumed by no parameter", cases[i].fixture, none);
      sl__model_free(&m);
    }
    free_loaded(&l);
  }
}

/* A fixture variant made by the generator. */
static char *variant(const char *name, const char *args) {
  char *dir = sl_test_mkdtemp("model");
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s/scripts/make-fixture' %s '%s/m' %s >/dev/null",
           sl_test_env("SL_SOURCE_DIR", "."), name, dir, args);
  if (system(cmd) != 0) {
    sl_test_rmtree(dir);
    free(dir);
    return NULL;
  }
  return dir;
}

static void check_model_error(const char *fixture, const char *args, sl_status want, const char *n1,
                              const char *n2) {
  char *dir = variant(fixture, args);
  CHECKF(dir != NULL, "make-fixture %s %s", fixture, args);
  if (dir == NULL)
    return;
  char folder[4200];
  snprintf(folder, sizeof folder, "%s/m", dir);
  loaded l;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = load_fixture(fixture, folder, &l, &err);
  if (st == SL_STATUS_OK) {
    sl__model m;
    st = sl__model_build(l.spec, &l.cat, SL_LAYOUT_VLLM, &m, &err);
    if (st == SL_STATUS_OK)
      sl__model_free(&m);
    free_loaded(&l);
  }
  CHECKF(st == want, "%s %s: status %s, want %s (%s)", fixture, args, sl_status_name(st),
         sl_status_name(want), err.msg);
  CHECK_CONTAINS(err.msg, n1);
  if (n2 != NULL)
    CHECK_CONTAINS(err.msg, n2);
  sl_test_rmtree(dir);
  free(dir);
}

static void test_errors(void) {
  check_model_error("llama", "--set-config 'architectures=[\"GPT2LMHeadModel\"]'", SL_STATUS_ARCH,
                    "unknown architecture 'GPT2LMHeadModel'", "--arch FILE.json");
  check_model_error("llama", "--set-config intermediate_size=100", SL_STATUS_SHAPE,
                    "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64]", "intermediate_size");
  check_model_error("llama", "--unset-config vocab_size", SL_STATUS_MODEL_CONFIG, "no field 'vocab_size'",
                    NULL);
  check_model_error("deepseek_v3", "--set-config 'quantization_config={\"quant_method\":\"bitsandbytes\"}'",
                    SL_STATUS_QUANTIZATION, "unsupported quantization method 'bitsandbytes'", NULL);
  check_model_error("deepseek_v3_fp8", "--drop model.layers.1.self_attn.o_proj.weight_scale_inv",
                    SL_STATUS_QUANTIZATION, "model.layers.1.self_attn.o_proj.weight_scale_inv", NULL);
}

int main(void) {
  test_expressions();
  test_spec_errors();
  test_fixture_models();
  test_errors();
  return sl_test_finish();
}
