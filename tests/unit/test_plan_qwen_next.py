#!/usr/bin/env python3
"""test_plan_qwen_next.py -- the real Qwen3-Next-80B-A3B and Qwen3.5-397B-A17B layouts (header-only
sparse files from scripts/make-fixture) planned by `shardload plan --json` at tp 8 x pp 2 with expert
parallelism (16 ranks, 8 per stage) and at tp 8 x dp 2 with it: every byte read once (read
amplification 1.00, bytes read = distinct bytes = the bytes of every tensor but the MTP layer's and
the vision tower's), and every rank's bytes equal to the slices docs/spec/LAYOUTS.md gives it,
computed here from the headers alone (independently of the library):

  layers of stage p: base = L // P, the stages before the last get the remainder (docs/spec/LAYOUTS.md §2.1); the
  embedding on the first stage, the final norm and lm_head on the last (untied);
  norms, router, shared_expert_gate, q/k norms, linear_attn.norm: whole;
  q_proj, o_proj, the gated DeltaNet's tensors (in_proj_*, conv1d, A_log, dt_bias, out_proj), the
  shared expert, the dense MLP and the vocabulary (no padding at these sizes): 1/tp of the tensor;
  k_proj, v_proj with 2 key/value heads at tp 8: one head's rows (1/2 of the tensor);
  experts: with EP over the stage's dp*tp ranks, 512 / (dp*tp) whole experts per rank (a stacked
  tensor: that share of its expert slabs; per-expert tensors: those experts' whole tensors).

Also refused: the same Qwen3-Next headers at tp 32 (16 key heads: a key-head group would be cut).
Environment (set by ctest): SL_CLI, SL_SOURCE_DIR. Standard library only."""

import json
import os
import re
import subprocess
import sys
import tempfile

from plan_headers import check, check_plan, finish, header_fixture, nbytes, stage_of_layer

MODELS = [("qwen3_next_80b_full", False), ("qwen3_5_397b_full", True)]
LAYOUTS = [(8, 2, 1), (8, 1, 2)]


def share(name, t, tp, experts, ep_size):
    """The fraction of tensor name one rank of its stage holds (it is the same on every rank here)."""
    whole = ("layernorm.weight", "norm.weight", "mlp.gate.weight", "shared_expert_gate.weight",
             "q_norm.weight", "k_norm.weight")
    if ".experts." in name:
        return 1.0 / ep_size if name.endswith(("gate_up_proj", "down_proj")) else None
    if name.endswith(whole):
        return 1.0
    if name.endswith(("k_proj.weight", "v_proj.weight")):
        return 1.0 / 2        # 2 key/value heads, tp 8: each rank holds one
    return 1.0 / tp


def expected(tensors, config, tp, pp, dp):
    """{rank: bytes} of the layout, and the distinct bytes of the job."""
    text = config.get("text_config", config)
    layers, experts = text["num_hidden_layers"], text["num_experts"]
    ep_size = dp * tp
    per_rank = {}
    unique = 0
    for name, t in tensors.items():
        if name.startswith(("mtp.", "model.visual.")):
            continue
        unique += nbytes(t)
        m = re.search(r"layers\.(\d+)\.", name)
        if m:
            stages = [stage_of_layer(int(m.group(1)), layers, pp)]
        elif "embed_tokens" in name:
            stages = [0]
        else:
            stages = [pp - 1]
        for p in stages:
            for q in range(dp):
                for r in range(tp):
                    g = q * pp * tp + p * tp + r
                    e = q * tp + r
                    f = share(name, t, tp, experts, ep_size)
                    if f is None:   # a per-expert tensor: whole on the rank that holds its expert
                        x = int(re.search(r"experts\.(\d+)\.", name).group(1))
                        local = experts // ep_size
                        f = 1.0 if e * local <= x < (e + 1) * local else 0.0
                    per_rank[g] = per_rank.get(g, 0) + int(nbytes(t) * f)
    return per_rank, unique


def plan(cli, folder, tp, pp, dp, vision):
    args = [cli, "plan", folder, "--world", str(tp * pp * dp), "--tp", str(tp), "--pp", str(pp), "--dp",
            str(dp), "--enable-expert-parallel", "--json"]
    if vision:
        args.append("--skip-vision")
    r = subprocess.run(args, capture_output=True, text=True, timeout=240)
    return r


def main():
    cli, source = os.environ["SL_CLI"], os.environ["SL_SOURCE_DIR"]
    with tempfile.TemporaryDirectory(prefix="sl-plan-qwen-") as tmp:
        for model, vision in MODELS:
            folder = os.path.join(tmp, model)
            tensors, config = header_fixture(source, model, folder)
            for tp, pp, dp in LAYOUTS:
                label = "%s tp %d pp %d dp %d ep" % (model, tp, pp, dp)
                r = plan(cli, folder, tp, pp, dp, vision)
                if not check(r.returncode == 0, "%s: %s" % (label, r.stderr.strip()[-400:])):
                    continue
                doc = json.loads(r.stdout)
                want, unique = expected(tensors, config, tp, pp, dp)
                check_plan(label, doc, want, unique, 512 // (tp * dp), covering_allowed=True)
            if not vision:
                r = subprocess.run([cli, "plan", folder, "--world", "32", "--tp", "32"], capture_output=True,
                                   text=True, timeout=240)
                check(r.returncode != 0 and "16 key heads (linear_num_key_heads)" in r.stderr
                      and "in_proj_qkvz" in r.stderr, "%s tp 32: %s" % (model, r.stderr.strip()[-300:]))
    return finish("test_plan_qwen_next")


if __name__ == "__main__":
    sys.exit(main())
