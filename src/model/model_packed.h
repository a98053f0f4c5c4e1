/*
 * model/model_packed.h — internals of the pack-quantized and NVFP4 model builder (the entry points
 * are in model/model_build.h), from the top down:
 *   model/model_packed.c         the dispatcher and the dense linears: a linear stored quantized
 *                                becomes its packed tensors (docs/spec/ARCHITECTURES.md §18–§19);
 *   model/model_packed_moe.c     the experts of a FusedMoE layer (WNA16 in vLLM's Marlin layout,
 *                                NVFP4 as stored);
 *   model/model_packed_part.c    what both share: a part's companion tensors found and checked,
 *                                per-part scale parameters, the ignore list applied to a module;
 *   model/model_packed_config.c  quantization_config read (compressed-tensors groups, ModelOpt);
 *   model/quant_ignore.c         the ignore / exclude_modules patterns (compressed-tensors "re:"
 *                                regular expressions, ModelOpt wildcards).
 * Each file calls only files below it.
 */
#ifndef SL_MODEL_PACKED_H
#define SL_MODEL_PACKED_H

#include "model/model_build.h"

#include <regex.h>

/* ---- ignore patterns (model/quant_ignore.c) ---- */

/* The longest pattern and the most entries read from quantization_config (real ones: a few
 * dozen of under 100 characters). */
#define SL_IGNORE_MAX_PATTERN 4096
#define SL_IGNORE_MAX_ENTRIES 65536

typedef struct sl__ignore {
  size_t n;
  char **text; /* the entries as written */
  regex_t *re; /* compressed-tensors "re:" entries, compiled (valid where is_re) */
  bool *is_re;
  bool wildcards;  /* ModelOpt: entries are shell wildcards (fnmatch), else exact names */
  const char *key; /* "quantization_config.ignore" or "...exclude_modules", for messages */
} sl__ignore;

/* Reads the list (NULL or JSON null: empty). compressed-tensors (modelopt false): "re:PATTERN" is
 * a Python regular expression matched at the start of a module name (re.match), translated to a
 * POSIX extended one; other entries are exact names. ModelOpt: exact names or wildcards. An entry
 * that is not a string, too long, or a construct the translation does not know is an error naming
 * it. */
sl_status sl__ignore_read(sl__ignore *ig, const cJSON *list, bool modelopt, const char *key, sl__err *err);
/* Index of the first entry that matches module name (exact: an entry equal to it; patterns: a
 * regular expression or wildcard matching it), or -1. */
long sl__ignore_match(const sl__ignore *ig, const char *name, bool exact, bool patterns);
void sl__ignore_free(sl__ignore *ig);
/* A Python regular expression as a POSIX extended one anchored at the start ("^(...)"); NULL with
 * err set when it uses a construct without an equivalent (exposed for the fuzzer). */
char *sl__ignore_translate(const char *pattern, sl__err *err);

/* ---- quantization_config (model/model_packed_config.c) ---- */

typedef enum sl__packed_kind { SL_PACKED_KIND_WNA16 = 1, SL_PACKED_KIND_NVFP4 } sl__packed_kind;

typedef struct sl__packed_cfg {
  sl__packed_kind kind;
  bool modelopt;     /* NVFP4 by ModelOpt: X.weight, weight_scale_2, input_scale */
  bool input_scales; /* NVFP4 W4A4: input (global) scales; W4A16 NVFP4 has none */
  uint32_t bits;     /* WNA16: 4 or 8 */
  uint64_t pack;     /* WNA16: values per int32 (32 / bits) */
  uint64_t group;    /* input channels per scale column: WNA16 group_size (0: channelwise), NVFP4 16 */
  bool symmetric;    /* WNA16: false adds weight_zero_point */
  sl__ignore ignore; /* modules left unquantized */
} sl__packed_cfg;

/* The name of the method, for messages ("compressed-tensors W4A16", "modelopt NVFP4", ...). */
const char *sl__packed_name(const sl__packed_cfg *c);

/* ---- shared by the linears and the experts (model/model_packed_part.c) ---- */

/* "A.weight" → "A" (NULL when name does not end in ".weight"; caller frees). */
char *sl__packed_stem(const char *name);
/* The companion "<stem>.<kind>" of a part: found in the catalog and checked against the expected
 * shape (ndim dims of shape) and dtype set; *out filled (name owned), tensor SL_NONE when absent
 * and optional. dtypes: a NUL-terminated list; wshape: the [out, in] of the linear part. */
sl_status sl__packed_companion(sl__model_builder *b, const char *stem, const char *kind, uint32_t ndim,
                               const uint64_t *shape, const sl__dtype *dtypes, const uint64_t *wshape,
                               bool optional, sl__msrc *out);
/* Whether weight source s ("X.weight") is stored quantized: ModelOpt's U8 X.weight (its shape the
 * stored one), or compressed-tensors' X.weight_packed instead of X.weight. */
sl_status sl__packed_stored(sl__model_builder *b, const sl__msrc *s, bool *packed);
/* A per-tensor scale "<stem>.<kind>" ([] or [1], F32): as sl__packed_companion. */
sl_status sl__packed_scalar(sl__model_builder *b, const char *stem, const char *kind, bool optional,
                            sl__msrc *out);
/* Whether module `module` (vLLM's name) and its parts (their stems) are left unquantized by the
 * ignore list; parts that disagree are an error naming them (as vLLM refuses them). */
sl_status sl__packed_ignored(sl__model_builder *b, const char *module, char *const *stems, size_t n,
                             bool *ignored);
/* Appends a parameter named name of style with the n sources src (taken over), placed like weight
 * wi; returns its index in *out (or SL_NONE on error, sources freed). */
sl_status sl__packed_push(sl__model_builder *b, size_t wi, char *name, sl__style style, sl__msrc *src,
                          size_t n, size_t *out);
void sl__packed_free_srcs(sl__msrc *src, size_t n);
/* The source among parts[0..n) whose weight_shape vLLM loads last: its files in natural order,
 * names sorted bytewise within a file (safetensors' keys()). */
size_t sl__packed_last_loaded(const sl__model_builder *b, const sl__msrc *parts, size_t n);

/* ---- experts (model/model_packed_moe.c) ---- */

/* The per-expert parameter at wi (moe_w13 or moe_w2): its packed tensors when the checkpoint holds
 * them, else checked against the ignore list and left as it is. */
sl_status sl__packed_experts(sl__model_builder *b, size_t wi);

#endif
