#!/usr/bin/env python3
"""test_plan_multimodal.py -- the real Qwen3-VL-235B-A22B layout (header-only sparse files from
scripts/make-fixture qwen3_vl_235b_full) planned by `shardload plan --json` at tp 8 x pp 2 and at
tp 8 x dp 2 with expert parallelism (16 ranks), with its vision tower and with --skip-vision:
every byte read once (read amplification 1.00, no covering bytes, bytes read = the distinct bytes
of the job), and every rank's bytes equal to the slices docs/spec/ARCHITECTURES.md §24 and
docs/spec/LAYOUTS.md give it, computed here from the headers alone (independently of the library):

  text, layers of stage p: base = L // P, the stages before the last get the remainder
  (docs/spec/LAYOUTS.md §2.1); the embedding on the first stage, the final norm and lm_head on the
  last (untied); norms, router (mlp.gate) and q/k norms whole; q_proj, o_proj and the vocabulary
  (151936 rows: a multiple of 64): 1/tp; k_proj, v_proj with 4 key/value heads at tp 8: one
  head's rows (1/4); the fused experts (gate_up_proj [E, H, 2Im], down_proj [E, Im, H]) with EP
  over the stage's dp*tp ranks: 128 / (dp*tp) whole experts per rank;
  vision tower on every stage: patch embedding, position embedding and LayerNorms whole; attn.qkv
  (weight and bias), mlp.linear_fc1 and the mergers' linear_fc1 (weight and bias) 1/tp;
  attn.proj, mlp.linear_fc2 and the mergers' linear_fc2: weight 1/tp, bias whole.

With --skip-vision the tower's tensors are neither read nor counted. Also refused: the tower's 16
heads at tp 32. Environment (set by ctest): SL_CLI, SL_SOURCE_DIR. Standard library only."""

import json
import os
import re
import subprocess
import sys
import tempfile

from plan_headers import check, check_plan, finish, header_fixture, nbytes, stage_of_layer

MODEL = "qwen3_vl_235b_full"
LAYOUTS = [(8, 2, 1), (8, 1, 2)]


def vision_share(name, tp):
    split = ("attn.qkv.weight", "attn.qkv.bias", "linear_fc1.weight", "linear_fc1.bias", "attn.proj.weight",
             "linear_fc2.weight")
    return 1.0 / tp if name.endswith(split) else 1.0


def text_share(name, tp, ep_size):
    whole = ("layernorm.weight", "norm.weight", "mlp.gate.weight", "q_norm.weight", "k_norm.weight")
    if ".experts." in name:
        return 1.0 / ep_size
    if name.endswith(whole):
        return 1.0
    if name.endswith(("k_proj.weight", "v_proj.weight")):
        return 1.0 / 4        # 4 key/value heads, tp 8: each rank holds one
    return 1.0 / tp


def expected(tensors, config, tp, pp, dp, vision):
    """{rank: bytes} of the layout, and the distinct bytes of the job."""
    layers = config["text_config"]["num_hidden_layers"]
    per_rank = {}
    unique = 0
    for name, t in tensors.items():
        tower = name.startswith("model.visual.")
        if tower and not vision:
            continue
        unique += nbytes(t)
        m = re.search(r"layers\.(\d+)\.", name)
        if tower:
            stages, f = range(pp), vision_share(name, tp)
        elif m:
            stages, f = [stage_of_layer(int(m.group(1)), layers, pp)], text_share(name, tp, dp * tp)
        elif "embed_tokens" in name:
            stages, f = [0], 1.0 / tp
        else:
            stages, f = [pp - 1], text_share(name, tp, dp * tp)
        for p in stages:
            for q in range(dp):
                for r in range(tp):
                    g = q * pp * tp + p * tp + r
                    per_rank[g] = per_rank.get(g, 0) + int(nbytes(t) * f)
    return per_rank, unique


def main():
    cli, source = os.environ["SL_CLI"], os.environ["SL_SOURCE_DIR"]
    with tempfile.TemporaryDirectory(prefix="sl-plan-mm-") as tmp:
        folder = os.path.join(tmp, MODEL)
        tensors, config = header_fixture(source, MODEL, folder)
        experts = config["text_config"]["num_experts"]
        for tp, pp, dp in LAYOUTS:
            for vision in (True, False):
                label = "%s tp %d pp %d dp %d ep%s" % (MODEL, tp, pp, dp, "" if vision else " skip_vision")
                args = [cli, "plan", folder, "--world", str(tp * pp * dp), "--tp", str(tp), "--pp", str(pp),
                        "--dp", str(dp), "--enable-expert-parallel", "--json"] + ([] if vision else ["--skip-vision"])
                r = subprocess.run(args, capture_output=True, text=True, timeout=240)
                if not check(r.returncode == 0, "%s: %s" % (label, r.stderr.strip()[-400:])):
                    continue
                doc = json.loads(r.stdout)
                want, unique = expected(tensors, config, tp, pp, dp, vision)
                check_plan(label, doc, want, unique, experts // (tp * dp), covering_allowed=False)
        r = subprocess.run([cli, "plan", folder, "--world", "32", "--tp", "32"], capture_output=True, text=True,
                           timeout=240)
        check(r.returncode != 0 and "visual.blocks.0.attn.qkv" in r.stderr, "tp 32: %s" % r.stderr.strip()[-300:])
    return finish("test_plan_multimodal")


if __name__ == "__main__":
    sys.exit(main())
