/*
 * test_quant_ignore.c — the ignore lists of pack-quantized and NVFP4 configs (model/quant_ignore.c)
 * match as vLLM's Python matches them (docs/spec/ARCHITECTURES.md §18): compressed-tensors "re:"
 * entries with re.match (anchored at the start only, Python syntax), other entries exactly;
 * ModelOpt entries exactly or as fnmatch wildcards over the whole name. The expected answers are
 * Python's (re.match, fnmatch.fnmatchcase). Constructs without a POSIX equivalent, and patterns
 * whose compiled form could grow without bound, are errors naming the pattern.
 */
#include "check.h"
#include "model/model_packed.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static void expect(const char *entry, bool modelopt, const char *name, bool hit) {
  cJSON *list = cJSON_CreateArray();
  cJSON_AddItemToArray(list, cJSON_CreateString(entry));
  sl__ignore ig;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__ignore_read(&ig, list, modelopt, "quantization_config.ignore", &err);
  CHECKF(st == SL_STATUS_OK, "%s: %s", entry, err.msg);
  if (st == SL_STATUS_OK)
    CHECKF((sl__ignore_match(&ig, name, true, true) >= 0) == hit, "%s %s %s", entry,
           hit ? "should match" : "matches", name);
  sl__ignore_free(&ig);
  cJSON_Delete(list);
}

static void refused(const char *entry, const char *why) {
  cJSON *list = cJSON_CreateArray();
  cJSON_AddItemToArray(list, cJSON_CreateString(entry));
  sl__ignore ig;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__ignore_read(&ig, list, false, "quantization_config.ignore", &err);
  CHECKF(st == SL_STATUS_QUANTIZATION && strstr(err.msg, why) != NULL && strstr(err.msg, entry + 3) != NULL,
         "%s: status %d, message '%s' (expected one naming it and '%s')", entry, (int)st, err.msg, why);
  sl__ignore_free(&ig);
  cJSON_Delete(list);
}

int main(void) {
  /* compressed-tensors: Kimi-K2-Thinking's list */
  expect("re:.*self_attn.*", false, "model.layers.3.self_attn.q_a_proj", true);
  expect("re:.*mlp\\.(gate|up|gate_up|down)_proj.*", false, "model.layers.0.mlp.gate_proj", true);
  expect("re:.*mlp\\.(gate|up|gate_up|down)_proj.*", false, "model.layers.1.mlp.experts", false);
  expect("re:.*shared_experts.*", false, "model.layers.1.mlp.experts", false);
  expect("lm_head", false, "lm_head", true);
  expect("lm_head", false, "model.lm_head", false);
  /* re.match anchors at the start only */
  expect("re:mlp", false, "model.layers.0.mlp.down_proj", false);
  expect("re:model\\.layers\\.0", false, "model.layers.0.mlp.down_proj", true);
  expect("re:.*gate$", false, "model.layers.0.mlp.gate", true);
  expect("re:.*gate$", false, "model.layers.0.mlp.gate_proj", false);
  /* Python syntax: \d, (?:...), lazy quantifiers, classes */
  expect("re:model\\.layers\\.\\d+\\.self_attn\\.o_proj", false, "model.layers.12.self_attn.o_proj", true);
  expect("re:model\\.layers\\.\\d+\\.self_attn\\.o_proj", false, "model.layers.x.self_attn.o_proj", false);
  expect("re:(?:model\\.)?layers\\.1\\.", false, "layers.1.mlp", true);
  expect("re:.*?experts", false, "model.layers.2.mlp.experts", true);
  expect("re:[\\w.]+\\.k_proj", false, "model.layers.2.self_attn.k_proj", true);
  expect("re:.*\\.(q|k|v)_proj", false, "model.layers.2.self_attn.o_proj", false);
  /* a plain entry is never a pattern for compressed-tensors */
  expect("model.layers.*", false, "model.layers.0.mlp", false);
  /* ModelOpt: exact names and wildcards over the whole name */
  expect("model.layers.*.self_attn*", true, "model.layers.1.self_attn.qkv_proj", true);
  expect("model.layers.1.self_attn*", true, "model.layers.11.self_attn.qkv_proj", false);
  expect("*mlp.gate", true, "model.layers.4.mlp.gate", true);
  expect("*mlp.gate", true, "model.layers.4.mlp.gate_up_proj", false);
  /* refused with the pattern named */
  refused("re:(?=x)y", "(?...)");
  refused("re:(?P<n>x)", "(?...)");
  refused("re:a\\bc", "letter or digit escape");
  refused("re:(a)\\1", "letter or digit escape");
  refused("re:a**", "multiple repeat");
  refused("re:a{2,3}", "counted repetition");
  refused("re:((((((x)+)+)+)+)+)+", "repeated groups");
  refused("re:[a", "unterminated bracket");
  return sl_test_finish();
}
