#!/usr/bin/env python3
"""test_vllm_indexer_fp8.py -- one process: the plugin's fallback (shardload.vllm's
WeightLoaderFallback) for DeepSeek-V3.2's indexer in a block-fp8 checkpoint, where shardload plans
wk (F8 e4m3, with its F32 block scales) and weights_proj apart and vLLM holds them fused as
wk_weights_proj (BF16, wk shard 0, weights_proj shard 1; vLLM dequantizes wk while it loads).

Checked against an independent numpy computation: every e4m3 byte decoded from its bits (sign,
exponent of bias 7 with subnormals, mantissa), times the scale of its 4x8 block in float32, rounded
to BF16 to nearest even; weights_proj's rows copied as they are. Also: targets() routes the three
planned names to the fused parameter, a BF16 wk goes to shard 0 as it is, and a torch without
float8 types hands the F8 bytes over as uint8 (torch 1.13: this case)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.need(["torch", "numpy"])

import numpy as np  # noqa: E402
import torch  # noqa: E402

from shardload.vllm import WeightLoaderFallback  # noqa: E402
from vllm.model_executor.layers.linear import MergedColumnParallelLinear  # noqa: E402

fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, flush=True)


def e4m3(b):
    """float64 of e4m3 bytes (no NaN bytes here: 0x7f and 0xff are left out of the data)."""
    b = b.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 15, b & 7
    val = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    return sign * val


def to_bf16_bits(x32):
    bits = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


class Model(torch.nn.Module):
    def __init__(self, dk, nk, hidden):
        super().__init__()
        self.layer = torch.nn.Module()
        self.layer.indexer = torch.nn.Module()
        with torch.no_grad():
            self.layer.indexer.wk_weights_proj = MergedColumnParallelLinear(hidden, [dk, nk], bias=False,
                                                                      params_dtype=torch.bfloat16,
                                                                      disable_tp=True)


dk, nk, hidden, bn, bk = 8, 4, 32, 4, 8
rng = np.random.RandomState(7)
wk_bytes = rng.randint(0, 256, size=(dk, hidden)).astype(np.uint8)
wk_bytes[(wk_bytes & 0x7F) == 0x7F] = 0x3C   # no NaN encodings
scale = (rng.rand(dk // bn, hidden // bk).astype(np.float32) * 4 - 2).astype(np.float32)
weights_proj = torch.from_numpy(rng.rand(nk, hidden).astype(np.float32)).to(torch.bfloat16)

model = Model(dk, nk, hidden)
fb = WeightLoaderFallback(model)
fused = "layer.indexer.wk_weights_proj.weight"
for name in ("layer.indexer.wk.weight", "layer.indexer.wk.weight_scale_inv", "layer.indexer.weights_proj.weight"):
    check(fb.targets(name) == [fused], "targets(%s) = %s" % (name, fb.targets(name)))
check(fb.targets("layer.indexer.wq_b.weight") is None, "an unrelated name is refused")
fb("layer.indexer.wk.weight", torch.from_numpy(wk_bytes.copy()))
check(fused in fb.pending, "wk waits for its scale")
fb("layer.indexer.wk.weight_scale_inv", torch.from_numpy(scale.copy()))
fb("layer.indexer.weights_proj.weight", weights_proj)
check(not fb.pending, "nothing left pending")

got = model.layer.indexer.wk_weights_proj.weight.detach().view(torch.int16).numpy().view(np.uint16)
s = np.repeat(np.repeat(scale, bn, axis=0), bk, axis=1)
want_wk = to_bf16_bits((e4m3(wk_bytes).astype(np.float32) * s).astype(np.float32))
check(np.array_equal(got[:dk], want_wk), "wk rows: dequantized as vLLM (%d of %d elements differ)"
      % (int((got[:dk] != want_wk).sum()), want_wk.size))
check(np.array_equal(got[dk:], weights_proj.view(torch.int16).numpy().view(np.uint16)),
      "weights_proj rows copied as they are")
check([h[2] for h in fb.handed] == ["wk", "wk_scale", "weights_proj"], "handed: %s" % fb.handed)

# a BF16 wk (an fp8 checkpoint that left the indexer unquantized): shard 0 as it is
model2 = Model(dk, nk, hidden)
fb2 = WeightLoaderFallback(model2)
wk16 = torch.from_numpy(rng.rand(dk, hidden).astype(np.float32)).to(torch.bfloat16)
fb2("layer.indexer.wk.weight", wk16)
check(not fb2.pending, "a BF16 wk is loaded at once")
check(torch.equal(model2.layer.indexer.wk_weights_proj.weight[:dk], wk16), "BF16 wk rows")

print("test_vllm_indexer_fp8: %d failures" % len(fails))
sys.exit(1 if fails else 0)
