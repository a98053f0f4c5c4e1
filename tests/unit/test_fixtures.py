#!/usr/bin/env python3
"""test_fixtures.py -- checks scripts/make-fixture from the outside.

Generates every fixture into a temporary folder and reads it back with its own small safetensors
parser (nothing imported from scripts/fixtures/): every file parses, its header is the reference
serializer's (dtype order descending, then name; no spaces; space-padded to a multiple of 8),
offsets are contiguous, the index maps exactly the tensors of each shard, tensor bytes equal the
value function (known constants computed with tests/common/values.c), config.json fields are the
documented ones, the variation options work, `all` is idempotent, header-only files are sparse,
bench output is sized and incompressible. Exit 0 = pass, 1 = fail.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SL_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
GENERATOR = os.path.join(SOURCE_DIR, "scripts", "make-fixture")

FAILURES = []
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what)
    return cond


# ---------------------------------------------------------------------------------------------
# Value function, written independently of scripts/fixtures/values.py (byte at a time).

def value_byte(name, index):
    h = 2166136261
    for b in name.encode("utf-8"):
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    w = (h + (index // 4) * 0x9E3779B9) & 0xFFFFFFFF
    w ^= w >> 16
    w = (w * 0x85EBCA6B) & 0xFFFFFFFF
    w ^= w >> 13
    w = (w * 0xC2B2AE35) & 0xFFFFFFFF
    w ^= w >> 16
    return (w >> (8 * (index % 4))) & 0xFF


# Computed by a C program linked against tests/common/values.c (sl_value_fill).
KNOWN_VALUES = {
    ("a", 0): bytes([0xB3, 0xB1, 0x80, 0x1A, 0xC1, 0xDA, 0x0A, 0x7C]),
    ("a", 1000001): bytes([0x3A, 0xA3, 0xA7, 0x44]),
    ("model.embed_tokens.weight", 0): bytes([0xAB, 0x4E, 0x82, 0xBE, 0xE1, 0x75, 0xE6, 0x39]),
    ("model.embed_tokens.weight", 1000001): bytes([0x67, 0x6E, 0x2D, 0x21]),
    ("", 0): bytes([0x0B, 0x7C, 0x3E, 0xAB, 0x8C, 0xF7, 0xCE, 0x09]),
    ("\u00e9", 0): bytes([0xC7, 0x56, 0x47, 0x8E, 0xCF, 0x4E, 0x43, 0x7F]),
}


def test_value_function():
    for (name, start), expect in KNOWN_VALUES.items():
        got = bytes(value_byte(name, start + i) for i in range(len(expect)))
        check(got == expect, "value function of %r at %d: %s, values.c gives %s"
              % (name, start, got.hex(), expect.hex()))


# ---------------------------------------------------------------------------------------------
# Independent safetensors reader.

DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}
# Writer order, lowest first (docs/spec/SAFETENSORS.md §2).
DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
               "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
               "C64", "F64", "I64", "U64"]


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key in %r" % keys)
    return dict(pairs)


def parse_file(path):
    """{name: (dtype, shape, begin, end)} and metadata of one file; records failures."""
    where = os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path)
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if not check(len(head) == 8, "%s: shorter than 8 bytes" % where):
            return {}, {}
        n = struct.unpack("<Q", head)[0]
        if not check(n <= 100000000 and 8 + n <= size, "%s: header length %d" % (where, n)):
            return {}, {}
        header = f.read(n)
    check(n % 8 == 0, "%s: header length %d is not a multiple of 8" % (where, n))
    text = header.rstrip(b" ")
    check(len(header) - len(text) < 8, "%s: more than 7 padding spaces" % where)
    check(text.startswith(b"{") and text.endswith(b"}"), "%s: header is not a bare object" % where)
    try:
        obj = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except ValueError as e:
        check(False, "%s: header JSON: %s" % (where, e))
        return {}, {}
    meta = obj.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in obj.items():
        check(set(info) == {"dtype", "shape", "data_offsets"},
              "%s: tensor %s has fields %s" % (where, name, sorted(info)))
        dtype = info["dtype"]
        shape = info["shape"]
        begin, end = info["data_offsets"]
        check(dtype in DTYPE_BITS, "%s: tensor %s dtype %s" % (where, name, dtype))
        count = 1
        for d in shape:
            count *= d
        bits = count * DTYPE_BITS.get(dtype, 8)
        check(bits % 8 == 0 and end - begin == bits // 8,
              "%s: tensor %s %s %r has %d bytes" % (where, name, dtype, shape, end - begin))
        tensors[name] = (dtype, shape, begin, end)
    # Offsets contiguous from 0 in writer order, and the header byte-identical to the
    # reference serializer's.
    order = sorted(tensors, key=lambda k: (-DTYPE_ORDER.index(tensors[k][0]), k.encode()))
    pos = 0
    parts = []
    if meta:
        parts.append('"__metadata__":{' + ",".join(
            json.dumps(k, ensure_ascii=False) + ":" + json.dumps(v, ensure_ascii=False)
            for k, v in sorted(meta.items())) + "}")
    for name in order:
        dtype, shape, begin, end = tensors[name]
        check(begin == pos, "%s: tensor %s begins at %d, expected %d" % (where, name, begin, pos))
        pos = end
        parts.append('%s:{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}'
                     % (json.dumps(name, ensure_ascii=False), dtype,
                        ",".join(str(d) for d in shape), begin, end))
    canonical = ("{" + ",".join(parts) + "}").encode("utf-8")
    check(text == canonical, "%s: header differs from the reference serializer's layout" % where)
    check(size == 8 + n + pos, "%s: file has %d bytes, header says %d" % (where, size, 8 + n + pos))
    return tensors, meta


def check_values(path, name, begin, nbytes, full=False):
    """Spot-checks (or fully checks) the bytes of one tensor against the value function."""
    n = struct.unpack("<Q", open(path, "rb").read(8))[0]
    base = 8 + n + begin
    if full:
        offsets = range(nbytes)
    else:
        offsets = sorted({i for i in (0, 1, 2, 3, 4, 5, 6, 7, nbytes // 3, nbytes // 2,
                                      nbytes - 2, nbytes - 1) if 0 <= i < nbytes})
    with open(path, "rb") as f:
        f.seek(base)
        data = f.read(nbytes)
    bad = [i for i in offsets if data[i] != value_byte(name, i)]
    return check(not bad, "%s: tensor %s differs from the value function at byte %s"
                 % (os.path.basename(path), name, bad[:1]))


def read_model(folder, stem="model"):
    """{name: (file, dtype, shape, begin, end)} over all weight files, checking the index."""
    where = os.path.basename(folder)
    index_path = os.path.join(folder, stem + ".safetensors.index.json")
    single = os.path.join(folder, stem + ".safetensors")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    tensors = {}
    per_file = {}
    for fname in files:
        table, meta = parse_file(os.path.join(folder, fname))
        check(meta == {"format": "pt"}, "%s/%s: metadata %r" % (where, fname, meta))
        per_file[fname] = table
        for name, (dtype, shape, begin, end) in table.items():
            check(name not in tensors, "%s: tensor %s in two files" % (where, name))
            tensors[name] = (fname, dtype, shape, begin, end)
    if os.path.exists(index_path):
        check(not os.path.exists(single), "%s: both an index and %s" % (where, single))
        index = json.load(open(index_path))
        wm = index.get("weight_map", {})
        check(wm == {k: v[0] for k, v in tensors.items()},
              "%s: index weight_map does not map exactly the tensors of each shard" % where)
        total = sum(v[4] - v[3] for v in tensors.values())
        check(index.get("metadata", {}).get("total_size") == total,
              "%s: index total_size %r, tensors hold %d" % (where, index.get("metadata"), total))
        k = len(files)
        pattern = re.compile(r"^%s-(\d{5})-of-(\d{5,6})\.safetensors$" % re.escape(stem))
        for i, fname in enumerate(files):
            m = pattern.match(fname)
            check(m is not None and int(m.group(1)) == i + 1 and int(m.group(2)) == k,
                  "%s: shard name %s" % (where, fname))
    return tensors, per_file


# ---------------------------------------------------------------------------------------------
# Expected fixtures (docs/FIXTURES.md): tensor counts, config fields, selected shapes.

EXPECTED = {
    "llama": (31, 3, {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 250, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}, {
        "model.layers.0.self_attn.rotary_emb.inv_freq": ("F32", [4]),
        "model.layers.2.self_attn.k_proj.weight": ("BF16", [16, 64]),
        "lm_head.weight": ("BF16", [250, 64])}),
    "llama_bias": (35, 2, {
        "attention_bias": True, "mlp_bias": True, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
        "vocab_size": 100}, {
        "model.layers.1.self_attn.o_proj.bias": ("BF16", [32]),
        "model.layers.1.self_attn.k_proj.bias": ("BF16", [16]),
        "model.layers.0.mlp.up_proj.bias": ("BF16", [64]),
        "model.layers.0.mlp.down_proj.bias": ("BF16", [32])}),
    "qwen2": (28, 2, {
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 48, "num_attention_heads": 12,
        "num_key_value_heads": 1, "intermediate_size": 96, "vocab_size": 190}, {
        "model.layers.0.self_attn.o_proj.bias": ("BF16", [48]),
        "model.layers.1.self_attn.k_proj.weight": ("BF16", [4, 48]),
        "model.layers.1.self_attn.q_proj.bias": ("BF16", [48]),
        "model.embed_tokens.weight": ("BF16", [190, 48])}),
    "qwen3": (25, 1, {
        "architectures": ["Qwen3ForCausalLM"], "head_dim": 16, "tie_word_embeddings": True,
        "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 256}, {
        "lm_head.weight": ("BF16", [256, 64]),
        "model.layers.1.self_attn.q_norm.weight": ("BF16", [16]),
        "model.layers.1.self_attn.q_proj.weight": ("BF16", [128, 64]),
        "model.layers.0.self_attn.o_proj.weight": ("BF16", [64, 128])}),
    "mistral": (21, 2, {
        "architectures": ["MistralForCausalLM"], "hidden_size": 64, "num_key_value_heads": 4,
        "intermediate_size": 128, "vocab_size": 256}, {
        "model.layers.1.mlp.down_proj.weight": ("BF16", [64, 128])}),
    "mistral_consolidated": (21, 1, {"architectures": ["MistralForCausalLM"]}, {
        "tok_embeddings.weight": ("BF16", [256, 64]), "output.weight": ("BF16", [256, 64]),
        "layers.1.attention.wk.weight": ("BF16", [32, 64]),
        "layers.0.feed_forward.w2.weight": ("BF16", [64, 128]),
        "layers.0.ffn_norm.weight": ("BF16", [64])}),
    "mixtral": (65, 3, {
        "architectures": ["MixtralForCausalLM"], "num_local_experts": 8,
        "num_experts_per_tok": 2, "intermediate_size": 64, "vocab_size": 128}, {
        "model.layers.1.block_sparse_moe.gate.weight": ("BF16", [8, 32]),
        "model.layers.1.block_sparse_moe.experts.7.w3.weight": ("BF16", [64, 32]),
        "model.layers.0.block_sparse_moe.experts.0.w2.weight": ("BF16", [32, 64])}),
    "qwen2_moe": (79, 3, {
        "architectures": ["Qwen2MoeForCausalLM"], "num_experts": 6,
        "moe_intermediate_size": 24, "shared_expert_intermediate_size": 48,
        "intermediate_size": 96, "decoder_sparse_step": 1, "mlp_only_layers": [1]}, {
        "model.layers.0.mlp.experts.5.down_proj.weight": ("BF16", [32, 24]),
        "model.layers.2.mlp.shared_expert.up_proj.weight": ("BF16", [48, 32]),
        "model.layers.2.mlp.shared_expert_gate.weight": ("BF16", [1, 32]),
        "model.layers.1.mlp.gate_proj.weight": ("BF16", [96, 32])}),
    "qwen3_moe": (69, 2, {
        "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8, "head_dim": 16,
        "moe_intermediate_size": 16, "mlp_only_layers": [], "decoder_sparse_step": 1}, {
        "model.layers.1.mlp.experts.7.up_proj.weight": ("BF16", [16, 32]),
        "model.layers.0.self_attn.k_norm.weight": ("BF16", [16]),
        "model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 32])}),
    "deepseek_v2_lite": (83, 3, {
        "architectures": ["DeepseekV2ForCausalLM"], "q_lora_rank": None, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8,
        "n_shared_experts": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "topk_method": "greedy", "n_group": 1, "topk_group": 1, "num_experts_per_tok": 2,
        "moe_intermediate_size": 24, "intermediate_size": 96, "vocab_size": 190}, {
        "model.layers.0.self_attn.q_proj.weight": ("BF16", [96, 64]),
        "model.layers.1.self_attn.kv_a_proj_with_mqa.weight": ("BF16", [40, 64]),
        "model.layers.1.self_attn.kv_b_proj.weight": ("BF16", [128, 32]),
        "model.layers.2.self_attn.o_proj.weight": ("BF16", [64, 64]),
        "model.layers.0.mlp.down_proj.weight": ("BF16", [64, 96]),
        "model.layers.2.mlp.shared_experts.gate_proj.weight": ("BF16", [48, 64]),
        "model.layers.2.mlp.experts.7.down_proj.weight": ("BF16", [64, 24])}),
    "deepseek_v3": (135, 3, {
        "architectures": ["DeepseekV3ForCausalLM"], "q_lora_rank": 48, "n_shared_experts": 1,
        "topk_method": "noaux_tc", "n_group": 2, "topk_group": 1,
        "num_nextn_predict_layers": 1, "moe_intermediate_size": 32}, {
        "model.layers.0.self_attn.q_a_proj.weight": ("BF16", [48, 64]),
        "model.layers.0.self_attn.q_b_proj.weight": ("BF16", [96, 48]),
        "model.layers.1.mlp.gate.e_score_correction_bias": ("F32", [8]),
        "model.layers.3.eh_proj.weight": ("BF16", [64, 128]),
        "model.layers.3.shared_head.head.weight": ("BF16", [190, 64]),
        "model.layers.3.embed_tokens.weight": ("BF16", [190, 64]),
        "model.layers.3.mlp.experts.0.gate_proj.weight": ("BF16", [32, 64])}),
    "deepseek_v3_fp8": (239, 3, {
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                "activation_scheme": "dynamic", "weight_block_size": [16, 16]}}, {
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": ("F8_E4M3", [40, 64]),
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv": ("F32", [3, 4]),
        "model.layers.0.mlp.down_proj.weight_scale_inv": ("F32", [4, 6]),
        "model.layers.1.mlp.gate.weight": ("BF16", [8, 64]),
        "lm_head.weight": ("BF16", [190, 64])}),
    "fused3d": (21, 2, {
        "architectures": ["Fused3dMoeForCausalLM"], "num_local_experts": 8,
        "intermediate_size": 16, "tie_word_embeddings": False}, {
        "model.layers.1.mlp.router.weight": ("BF16", [8, 32]),
        "model.layers.1.mlp.experts.gate_up_proj": ("BF16", [8, 32, 32]),
        "model.layers.0.mlp.experts.down_proj": ("BF16", [8, 32, 16])}),
}


def llama_expected_names():
    names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
             "model.layers.0.self_attn.rotary_emb.inv_freq"}
    for layer in range(3):
        for part in ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                     "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                     "mlp.up_proj", "mlp.down_proj"):
            names.add("model.layers.%d.%s.weight" % (layer, part))
    return names


def check_fixture(folder, name, full_check=()):
    count, shards, config_fields, shapes = EXPECTED[name]
    stem = "consolidated" if name == "mistral_consolidated" else "model"
    tensors, per_file = read_model(folder, stem)
    check(len(tensors) == count, "%s: %d tensors, expected %d" % (name, len(tensors), count))
    check(len(per_file) == shards, "%s: %d weight files, expected %d"
          % (name, len(per_file), shards))
    if shards > 1:
        sizes = [sum(e - b for _, _, b, e in t.values()) for t in per_file.values()]
        avg = sum(sizes) / len(sizes)
        check(max(sizes) <= 1.5 * avg and min(sizes) >= 0.5 * avg,
              "%s: shard sizes %s are not roughly equal" % (name, sizes))
    config = json.load(open(os.path.join(folder, "config.json")))
    for key, want in config_fields.items():
        check(config.get(key, "<absent>") == want,
              "%s: config.json %s = %r, expected %r" % (name, key, config.get(key), want))
    for key in ("rms_norm_eps", "rope_theta", "max_position_embeddings", "torch_dtype"):
        check(key in config, "%s: config.json lacks %s" % (name, key))
    for extra in ("generation_config.json", "tokenizer_config.json"):
        path = os.path.join(folder, extra)
        check(os.path.isfile(path) and isinstance(json.load(open(path)), dict),
              "%s: %s missing or not an object" % (name, extra))
    for tname, (dtype, shape) in shapes.items():
        got = tensors.get(tname)
        check(got is not None and (got[1], got[2]) == (dtype, shape),
              "%s: tensor %s is %r, expected %s %r"
              % (name, tname, got and (got[1], got[2]), dtype, shape))
    total_files = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    check(total_files < 1000000,
          "%s: %d bytes, tiny fixtures stay under 1 MB" % (name, total_files))
    for tname, (fname, dtype, shape, begin, end) in tensors.items():
        check_values(os.path.join(folder, fname), tname, begin, end - begin,
                     full=tname in full_check)
    return tensors, config


def test_all(base):
    out = os.path.join(base, "all")
    t0 = time.time()
    r = run(["all", out])
    elapsed = time.time() - t0
    check(r.returncode == 0, "make-fixture all failed: %s" % r.stderr)
    check(elapsed < 15, "make-fixture all took %.1f s (limit 15)" % elapsed)
    stamp = open(os.path.join(out, ".stamp")).read().strip()
    check(re.match(r"^[0-9a-f]{64}$", stamp) is not None, "bad stamp %r" % stamp)
    for name in EXPECTED:
        folder = os.path.join(out, name)
        if not check(os.path.isdir(folder), "fixture %s not written" % name):
            continue
        full = {"model.embed_tokens.weight", "model.layers.0.self_attn.rotary_emb.inv_freq",
                "model.layers.1.mlp.gate.e_score_correction_bias",
                "model.layers.0.self_attn.q_a_proj.weight_scale_inv"}
        tensors, _ = check_fixture(folder, name, full)
        if name == "llama":
            check(set(tensors) == llama_expected_names(), "llama: tensor names differ: %s"
                  % sorted(set(tensors) ^ llama_expected_names()))
            layer_files = {}
            for tname, entry in tensors.items():
                m = re.match(r"model\.layers\.(\d+)\.", tname)
                if m:
                    layer_files.setdefault(m.group(1), set()).add(entry[0])
            check(any(len(v) > 1 for v in layer_files.values()),
                  "llama: no layer straddles two shards")
            path = os.path.join(folder, tensors["model.embed_tokens.weight"][0])
            begin = tensors["model.embed_tokens.weight"][3]
            n = struct.unpack("<Q", open(path, "rb").read(8))[0]
            with open(path, "rb") as f:
                f.seek(8 + n + begin)
                first = f.read(8)
            check(first == KNOWN_VALUES[("model.embed_tokens.weight", 0)],
                  "llama: embed_tokens starts with %s" % first.hex())
        if name == "deepseek_v3_fp8":
            check_fp8(name, tensors)
        if name == "deepseek_v3":
            check(all(t[1] != "F8_E4M3" for t in tensors.values()), "deepseek_v3 has F8 tensors")
    params = json.load(open(os.path.join(out, "mistral_consolidated", "params.json")))
    check(params == {"dim": 64, "n_layers": 2, "n_heads": 8, "n_kv_heads": 4, "hidden_dim": 128,
                     "vocab_size": 256, "head_dim": 8, "norm_eps": 1e-5},
          "mistral_consolidated: params.json %r" % params)
    # Idempotent: a second run writes nothing; a missing fixture is regenerated.
    probe = os.path.join(out, "llama", "config.json")
    mtime = os.stat(probe).st_mtime_ns
    r = run(["all", out])
    check(r.returncode == 0 and "up to date" in r.stdout, "second 'all' did not skip: %s"
          % r.stdout)
    check(os.stat(probe).st_mtime_ns == mtime, "second 'all' rewrote llama/config.json")
    shutil.rmtree(os.path.join(out, "qwen3"))
    r = run(["all", out])
    check(r.returncode == 0 and os.path.isfile(os.path.join(out, "qwen3", "model.safetensors")),
          "'all' did not regenerate a deleted fixture")
    leftovers = [f for _, _, fs in os.walk(out) for f in fs if f.endswith(".tmp")]
    check(not leftovers, "temporary files left behind: %s" % leftovers)


def check_fp8(name, tensors):
    f8 = {k for k, v in tensors.items() if v[1] == "F8_E4M3"}
    check(len(f8) == 104, "%s: %d F8_E4M3 tensors, expected 104" % (name, len(f8)))
    for k in f8:
        s = tensors.get(k + "_scale_inv")
        rows, cols = tensors[k][2]
        want = [-(-rows // 16), -(-cols // 16)]
        check(s is not None and s[1] == "F32" and s[2] == want,
              "%s: %s_scale_inv is %r, expected F32 %r" % (name, k, s and s[1:3], want))
        check(re.search(r"(proj|proj_with_mqa)\.weight$", k) is not None,
              "%s: %s should not be F8" % (name, k))
    scales = {k for k in tensors if k.endswith("_scale_inv")}
    check(scales == {k + "_scale_inv" for k in f8}, "%s: scale_inv without F8 weight" % name)
    for k in ("model.embed_tokens.weight", "model.layers.3.eh_proj.weight",
              "model.layers.3.shared_head.head.weight", "model.layers.2.mlp.gate.weight"):
        check(tensors[k][1] == "BF16", "%s: %s is %s, expected BF16" % (name, k, tensors[k][1]))


# ---------------------------------------------------------------------------------------------
# Variations, errors, header-only, bench.

def run(args):
    return subprocess.run([sys.executable, GENERATOR] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)


def test_variations(base):
    out = os.path.join(base, "var")
    r = run(["llama", out, "--shards", "2", "--drop", "model.layers.1.mlp.up_proj.weight",
             "--extra", "extra.scalar:F32:", "--extra", "extra.w:F4:3,4",
             "--extra", "model.layers.9.x:I64:2,0,3",
             "--set-config", "tie_word_embeddings=true",
             "--set-config", 'quantization_config.quant_method="awq"',
             "--unset-config", "num_key_value_heads"])
    check(r.returncode == 0, "variation run failed: %s" % r.stderr)
    tensors, per_file = read_model(out)
    check(len(per_file) == 2, "--shards 2 gave %d files" % len(per_file))
    check("model.layers.1.mlp.up_proj.weight" not in tensors, "--drop kept the tensor")
    check(len(tensors) == 31 - 1 + 3, "variation: %d tensors" % len(tensors))
    for tname, dtype, shape, nbytes in (("extra.scalar", "F32", [], 4),
                                        ("extra.w", "F4", [3, 4], 6),
                                        ("model.layers.9.x", "I64", [2, 0, 3], 0)):
        got = tensors.get(tname)
        if check(got is not None and got[1:3] == (dtype, shape) and got[4] - got[3] == nbytes,
                 "--extra %s: got %r" % (tname, got)):
            check_values(os.path.join(out, got[0]), tname, got[3], nbytes, full=True)
    config = json.load(open(os.path.join(out, "config.json")))
    check(config.get("tie_word_embeddings") is True, "--set-config tie_word_embeddings")
    check(config.get("quantization_config") == {"quant_method": "awq"},
          "--set-config dotted key: %r" % config.get("quantization_config"))
    check("num_key_value_heads" not in config, "--unset-config num_key_value_heads")
    # Rewriting the folder with another layout removes the earlier shards.
    r = run(["llama", out, "--shards", "4", "--no-index"])
    check(r.returncode == 0, "--no-index run failed: %s" % r.stderr)
    files = sorted(f for f in os.listdir(out) if "safetensors" in f)
    check(files == ["model-%05d-of-00004.safetensors" % i for i in range(1, 5)],
          "--shards 4 --no-index left %s" % files)
    tensors, _ = read_model(out)
    check(len(tensors) == 31, "--shards 4: %d tensors" % len(tensors))
    r = run(["qwen3", out, "--shards", "1"])
    files = sorted(f for f in os.listdir(out) if "safetensors" in f)
    check(r.returncode == 0 and files == ["model.safetensors"], "single file: %s" % files)
    r = run(["mistral_consolidated", os.path.join(base, "cons2"), "--shards", "2"])
    files = sorted(os.listdir(os.path.join(base, "cons2")))
    check(r.returncode == 0 and "consolidated.safetensors.index.json" in files
          and "consolidated-00002-of-00002.safetensors" in files,
          "consolidated --shards 2: %s" % files)
    errors = [
        (["llama", out, "--drop", "no.such.tensor"], "no.such.tensor"),
        (["llama", out, "--extra", "bad:F4:3"], "bad"),
        (["llama", out, "--extra", "bad:F33:3"], "F33"),
        (["llama", out, "--extra", "lm_head.weight:F32:1"], "lm_head.weight"),
        (["llama", out, "--set-config", "hidden_size=notjson"], "hidden_size"),
        (["llama", out, "--shards", "0"], "shards"),
        (["no_such_fixture", out], "no_such_fixture"),
        (["deepseek_v3_full", out], "header-only"),
        (["bench", out], "size"),
        (["bench", out, "--size", "12X"], "12X"),
        (["all", out, "--drop", "x"], "all"),
    ]
    for args, word in errors:
        r = run(args)
        check(r.returncode == 2 and word in r.stderr,
              "make-fixture %s: exit %d, stderr %r" % (" ".join(args[:1] + args[2:]),
                                                       r.returncode, r.stderr.strip()))
    tensors, _ = read_model(out)
    check(len(tensors) == 25, "a failed run changed the folder (%d tensors)" % len(tensors))
    r = run(["--list"])
    for name in list(EXPECTED) + ["deepseek_v3_full", "bench"]:
        check(re.search(r"^%s\s+\S" % name, r.stdout, re.M) is not None,
              "--list lacks %s" % name)


def sparse_supported(base):
    path = os.path.join(base, "sparse-probe")
    with open(path, "wb") as f:
        f.truncate(1 << 30)
    st = os.stat(path)
    os.unlink(path)
    return st.st_blocks * 512 < (1 << 20)


def test_header_only(base):
    if not sparse_supported(base):
        print("SKIP: header-only checks: this filesystem does not keep sparse files")
        return
    out = os.path.join(base, "dsv3")
    t0 = time.time()
    r = run(["deepseek_v3_full", out, "--header-only"])
    elapsed = time.time() - t0
    check(r.returncode == 0, "deepseek_v3_full failed: %s" % r.stderr)
    check(elapsed < 60, "deepseek_v3_full took %.1f s (limit 60)" % elapsed)
    files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    check(files == ["model-%05d-of-000163.safetensors" % i for i in range(1, 164)],
          "deepseek_v3_full: %d shard files, first %s" % (len(files), files[:1]))
    tensors, _ = read_model(out)
    total = sum(e - b for _, _, _, b, e in tensors.values())
    check(len(tensors) == 91991, "deepseek_v3_full: %d tensors, expected 91991" % len(tensors))
    check(total == 688574839360, "deepseek_v3_full: %d data bytes, expected 688574839360" % total)
    apparent = 0
    used = 0
    for fname in files:
        st = os.stat(os.path.join(out, fname))
        apparent += st.st_size
        used += st.st_blocks * 512
    check(used * 1000 < apparent, "deepseek_v3_full is not sparse: %d of %d bytes allocated"
          % (used, apparent))
    check(used < 64 << 20, "deepseek_v3_full uses %d bytes of disk" % used)
    want = {
        "model.embed_tokens.weight": ("BF16", [129280, 7168]),
        "lm_head.weight": ("BF16", [129280, 7168]),
        "model.layers.0.self_attn.q_a_proj.weight": ("F8_E4M3", [1536, 7168]),
        "model.layers.0.self_attn.q_a_proj.weight_scale_inv": ("F32", [12, 56]),
        "model.layers.0.self_attn.q_b_proj.weight_scale_inv": ("F32", [192, 12]),
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv": ("F32", [5, 56]),
        "model.layers.0.self_attn.kv_b_proj.weight": ("F8_E4M3", [32768, 512]),
        "model.layers.0.self_attn.o_proj.weight_scale_inv": ("F32", [56, 128]),
        "model.layers.2.mlp.down_proj.weight": ("F8_E4M3", [7168, 18432]),
        "model.layers.3.mlp.gate.weight": ("BF16", [256, 7168]),
        "model.layers.3.mlp.gate.e_score_correction_bias": ("F32", [256]),
        "model.layers.60.mlp.experts.255.down_proj.weight_scale_inv": ("F32", [56, 16]),
        "model.layers.60.mlp.shared_experts.up_proj.weight": ("F8_E4M3", [2048, 7168]),
        "model.layers.61.eh_proj.weight": ("BF16", [7168, 14336]),
        "model.layers.61.shared_head.head.weight": ("BF16", [129280, 7168]),
        "model.layers.61.embed_tokens.weight": ("BF16", [129280, 7168]),
        "model.layers.61.mlp.experts.0.gate_proj.weight": ("F8_E4M3", [2048, 7168]),
    }
    for tname, (dtype, shape) in want.items():
        got = tensors.get(tname)
        check(got is not None and (got[1], got[2]) == (dtype, shape),
              "deepseek_v3_full: %s is %r" % (tname, got and got[1:3]))
    config = json.load(open(os.path.join(out, "config.json")))
    for key, value in (("hidden_size", 7168), ("num_hidden_layers", 61), ("q_lora_rank", 1536),
                       ("n_routed_experts", 256), ("first_k_dense_replace", 3),
                       ("vocab_size", 129280), ("n_group", 8), ("topk_group", 4),
                       ("num_nextn_predict_layers", 1), ("tie_word_embeddings", False)):
        check(config.get(key) == value, "deepseek_v3_full: config %s = %r" % (key, config.get(key)))
    check(config.get("quantization_config", {}).get("weight_block_size") == [128, 128],
          "deepseek_v3_full: weight_block_size")


def test_bench(base):
    out = os.path.join(base, "bench")
    r = run(["bench", out, "--size", "3M"])
    check(r.returncode == 0, "bench failed: %s" % r.stderr)
    files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    check(len(files) >= 2, "bench: %d shard files" % len(files))
    tensors, _ = read_model(out)
    total = sum(e - b for _, _, _, b, e in tensors.values())
    check(abs(total - (3 << 20)) < (3 << 20) // 50, "bench: %d bytes for --size 3M" % total)
    check(all(t[1] == "BF16" for t in tensors.values()), "bench: non-BF16 tensors")
    config = json.load(open(os.path.join(out, "config.json")))
    check(config.get("architectures") == ["LlamaForCausalLM"]
          and config["num_key_value_heads"] < config["num_attention_heads"],
          "bench: config %r" % config)
    data = open(os.path.join(out, files[0]), "rb").read()[-(1 << 20):]
    check(len(zlib.compress(data, 6)) > len(data) * 0.99, "bench content compresses")
    r = run(["bench", out, "--size", "1M", "--shards", "1"])
    check(r.returncode == 2, "bench --shards 1 accepted")


def main():
    if not os.path.isfile(GENERATOR):
        print("generator not found: " + GENERATOR)
        return 1
    check(os.access(GENERATOR, os.X_OK), "scripts/make-fixture is not executable")
    with open(GENERATOR, "rb") as f:
        check(f.readline().startswith(b"#!/usr/bin/env python3"), "make-fixture shebang")
    base = tempfile.mkdtemp(prefix="sl-fixtures-")
    try:
        test_value_function()
        test_all(base)
        test_variations(base)
        test_header_only(base)
        test_bench(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("%d checks, %d failed" % (CHECKS[0], len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
