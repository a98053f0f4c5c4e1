#!/usr/bin/env python3
"""make_fixtures.py OUTDIR -- the checkpoints of the vLLM plugin tests, from scripts/make-fixture:
llama_f32, mixtral_f32, qwen3 (tied head, BF16), llama (BF16), gpt_oss (MXFP4 experts),
llama4_text (transposed fused experts), deepseek_v3 and deepseek_v2_lite (MLA, experts), qwen3_next,
qwen3_5, qwen3_5_moe, qwen3_5_moe_text (gated DeltaNet layers; the Qwen3.5 wrappers with a vision
tower), the pack-quantized and NVFP4 ones (ct_w4a16, ct_w4a16_g128, ct_w8a16, ct_nvfp4,
modelopt_nvfp4, mixtral_w4a16, mixtral_modelopt), deepseek_v32 and glm5 (MLA + indexer + MoE, MTP
layer), minimax_m2 (q/k norms over every head, router in float32), deepseek_v4 and deepseek_v4_fp8e
(FP4 or FP8 experts, block fp8), qwen3_vl, gemma3_mm, gemma3_mm_legacy, kimi_k25_w4a16 (multimodal
wrappers with their vision towers; Kimi-K2.5 with W4A16 routed experts), and variants:
  mixtral_ng2  mixtral_f32 whose config.json declares n_group 2 (expert groups, as DeepSeek's
               does), so that round_robin expert placement is in effect in shardload and vLLM;
  llama_kv     llama_f32 with KV-cache scales under the checkpoint names FP8 checkpoints use
               (self_attn.k_proj.k_scale / v_proj.v_scale, and self_attn.k_scale / v_scale), and
               kv_spec.json, shardload's llama spec plus those scales as replicated parameters;
  eagle_draft  llama_f32 whose config.json names an architecture shardload has no spec for;
  llama_arith  llama_f32 as ArithLlamaForCausalLM (weight loaders doing arithmetic: fallback);
  llama_sparsity llama_f32 as SparsityLlamaForCausalLM (load_weights reads every tensor's values:
               the recording fails, vLLM's own loader loads it);
  llama_stray  llama_f32 as StrayLlamaForCausalLM (a loader writing outside its parameter).
Architectures shardload has no spec for, loaded through recorded plans (scripts/fixtures/
recorded.py): internlm2, starcoder2."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SL_SOURCE_DIR", os.path.join(HERE, "..", ".."))
MAKE = os.path.join(SOURCE, "scripts", "make-fixture")
KV = ["model.layers.0.self_attn.k_proj.k_scale", "model.layers.0.self_attn.v_proj.v_scale",
      "model.layers.1.self_attn.k_scale", "model.layers.1.self_attn.v_scale"]


def make(name, out, *args):
    subprocess.run([MAKE, name, out] + list(args), check=True, stdout=subprocess.DEVNULL)


def kv_spec(path):
    with open(os.path.join(SOURCE, "specs", "llama.json")) as f:
        spec = json.load(f)
    spec["_comment"] = "tests/vllm: the llama spec plus KV-cache scales (replicated scalars)"
    for layer, names in ((0, ("k_proj.k_scale", "v_proj.v_scale")), (1, ("k_scale", "v_scale"))):
        for n in names:
            name = "model.layers.{layer}.self_attn." + n
            spec["params"].append({"name": name, "place": "layer", "style": "replicated",
                                   "when": "layer == %d" % layer,
                                   "sources": [{"tensor": name, "shape": []}]})
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)


def recorded(out):
    """The architectures without a spec (scripts/fixtures/recorded.py), written as make-fixture
    writes a fixture (value-function content, the builder's shard count, an index)."""
    sys.path.insert(0, os.path.join(SOURCE, "scripts", "fixtures"))
    import recorded as builders
    from stwriter import remove_stale, write_json, write_weights
    for name, builder, _ in builders.RECORDED:
        model = builder()
        folder = os.path.join(out, name)
        written = write_weights(folder, model.tensors, model.shards, stem=model.stem,
                                metadata={"format": "pt"}, of_digits=model.of_digits)
        write_json(os.path.join(folder, "config.json"), model.config)
        for extra, obj in sorted(model.extra_json.items()):
            write_json(os.path.join(folder, extra), obj)
        remove_stale(folder, set(written))


def main(out):
    os.makedirs(out, exist_ok=True)
    for name in ("llama_f32", "mixtral_f32", "qwen3", "llama", "gpt_oss", "llama4_text", "qwen3_next",
                 "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text", "ct_w4a16", "ct_w4a16_g128", "ct_w8a16",
                 "ct_nvfp4", "modelopt_nvfp4", "mixtral_w4a16", "mixtral_modelopt", "deepseek_v32",
                 "glm5", "minimax_m2", "deepseek_v4", "deepseek_v4_fp8e", "qwen3_vl", "gemma3_mm",
                 "gemma3_mm_legacy", "kimi_k25_w4a16", "deepseek_v3", "deepseek_v2_lite"):
        make(name, os.path.join(out, name))
    make("mixtral_f32", os.path.join(out, "mixtral_ng2"), "--set-config", "n_group=2")
    make("llama_f32", os.path.join(out, "llama_kv"), *sum((["--extra", n + ":F32:"] for n in KV), []))
    kv_spec(os.path.join(out, "kv_spec.json"))
    make("llama_f32", os.path.join(out, "eagle_draft"),
         "--set-config", 'architectures=["EagleLlamaForCausalLM"]')
    make("llama_f32", os.path.join(out, "llama_arith"),
         "--set-config", 'architectures=["ArithLlamaForCausalLM"]')
    make("llama_f32", os.path.join(out, "llama_sparsity"),
         "--set-config", 'architectures=["SparsityLlamaForCausalLM"]')
    make("llama_f32", os.path.join(out, "llama_stray"),
         "--set-config", 'architectures=["StrayLlamaForCausalLM"]')
    recorded(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures-vllm")
