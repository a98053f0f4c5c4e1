#!/usr/bin/env python3
"""test_record.py -- the recorder (python/shardload/record*.py) in one process.

1. Each view op a weight loader takes, and each op that must fall back: a small module whose
   load_weights uses the op is recorded over stand-ins, the recording is carried out on the real
   tensors (recorded_util.apply: an independent reading of regions), and the module must equal the
   same module loaded by its own load_weights over the real tensors, byte for byte; the test also
   says whether the op is recorded or falls back (and that nothing was written into the
   parameters while recording).
2. The stand-in vLLM's models at every rank of tp 1, 2, 4, pp 2 and expert parallelism (emulated
   process groups): recorded and carried out, equal to vLLM's rules over the whole checkpoint (the
   `auto` format); the architectures without a spec (internlm2, starcoder2) among them.
3. A loader writing outside its parameter is a RecordError naming both.
4. Every rank's recording of a layout through the library's dry run (shardload plan --plan-file):
   accepted, read amplification 1.00, and for the families with a spec each rank's bytes read,
   needed and received equal to the spec's plan's; the shardload.Plan the vLLM plugin builds
   from a recording (vllm_recorded.to_plan) is the recording's JSON.
Needs the vLLM fixtures (SL_VLLM_FIXTURES) for part 2."""

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recorded_util as U  # noqa: E402
import harness  # noqa: E402

harness.need(["torch", "numpy"])

import torch  # noqa: E402

import shardload.record as R  # noqa: E402
import shardload.vllm_recorded as vllm_recorded  # noqa: E402

torch.manual_seed(0)
FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg, flush=True)


class Module(torch.nn.Module):
    """Parameters from {name: (shape, dtype)}; load_weights calls loader(module, name, w)."""

    def __init__(self, params, loader):
        super().__init__()
        self.names = {}
        for name, (shape, dtype) in params.items():
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape, dtype=dtype),
                                                             requires_grad=False))
        self.loader = loader

    def load_weights(self, weights):
        for name, w in weights:
            self.loader(self, name, w)


def check(title, params, tensors, loader, fallback=()):
    """Records, carries out, compares; fallback: the checkpoint tensors expected to fall back."""
    try:
        recorded = Module(params, loader)
        before = {n: U.raw(p) for n, p in recorded.named_parameters()}
        rec = R.record(recorded, U.fake_catalog(tensors))
        for n, p in recorded.named_parameters():
            if U.raw(p) != before[n]:
                fail("%s: recording wrote into parameter %s" % (title, n))
        U.apply(rec, recorded, {n: t.clone() for n, t in tensors.items()})
        reference = Module(params, loader)
        with torch.no_grad():   # (a loader may change its tensors in place: fresh copies)
            reference.load_weights(iter([(n, t.clone()) for n, t in tensors.items()]))
        diff = U.differences(recorded, reference)
        if diff:
            fail("%s: differs from the real load in %s" % (title, diff))
        if set(rec.fallback) != set(fallback):
            fail("%s: fallback tensors %s, expected %s (%s)" % (title, rec.fallback, sorted(fallback),
                                                                rec.reasons))
        print("ok %-48s %d recorded, %d regions, fallback %s"
              % (title, len(rec.params), sum(len(p.regions) for p in rec.params), rec.fallback),
              flush=True)
        return rec
    except Exception as e:
        fail("%s: %s: %s\n%s" % (title, type(e).__name__, e, traceback.format_exc()[-1500:]))


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


def op_cases():
    w = {"w": rand(6, 8)}
    w3 = {"w": rand(4, 6, 8)}
    p = {"p": ((3, 8), F32)}

    def into(fn):   # a loader writing fn(w) into the whole parameter p
        return lambda m, n, t: m.p.data.copy_(fn(t))
    check("narrow", p, w, into(lambda t: t.narrow(0, 2, 3)))
    check("slice with step", {"p": ((3, 4), F32)}, w, into(lambda t: t[1::2, ::2]))
    check("int, None and Ellipsis index", {"p": ((1, 8), F32)}, w3, into(lambda t: t[2, 1, None, ...]))
    check("select", {"p": ((6, 8), F32)}, w3, into(lambda t: t.select(0, 3)))
    check("view of contiguous", {"p": ((12, 4), F32)}, w, into(lambda t: t.view(12, 4)))
    check("reshape that copies", {"p": ((24,), F32)}, w, into(lambda t: t.t().reshape(-1)[:24]))
    check("chunk", p, w, into(lambda t: t.chunk(2, dim=0)[1]))
    check("split sizes", {"p": ((6, 5), F32)}, w, into(lambda t: t.split([3, 5], dim=1)[1]))
    check("unbind", {"p": ((8,), F32)}, w, into(lambda t: t.unbind(0)[4]))
    check("transpose into a transposed parameter", {"p": ((8, 6), F32)}, w, into(lambda t: t.t()))
    check("permute", {"p": ((8, 4, 6), F32)}, w3, into(lambda t: t.permute(2, 0, 1)))
    check("T then narrow", {"p": ((8, 2), F32)}, w, into(lambda t: t.T.narrow(1, 3, 2)))
    check("squeeze / unsqueeze", {"p": ((1, 6, 8), F32)}, {"w": rand(6, 1, 8)},
          into(lambda t: t.squeeze(1).unsqueeze(0)))
    check("contiguous of a transpose", {"p": ((8, 6), F32)}, w, into(lambda t: t.t().contiguous()))
    check("clone, detach, .data, to(device)", p, w,
          into(lambda t: t.narrow(0, 1, 3).clone().detach().data.to("cpu")))
    check("expand (a broadcast copy)", {"p": ((4, 8), F32)}, {"w": rand(8)}, into(lambda t: t.expand(4, 8)))
    check("broadcast by copy_", {"p": ((4, 8), F32)}, {"w": rand(8)}, into(lambda t: t))
    check("bf16 into an f32 parameter", p, {"w": rand(6, 8, dtype=BF16)}, into(lambda t: t[:3]))
    check("to(float32) on the way", p, {"w": rand(6, 8, dtype=BF16)}, into(lambda t: t[:3].float()))
    check("setitem into a parameter view", {"p": ((6, 8), F32)}, w,
          lambda m, n, t: m.p.__setitem__((slice(0, 3), slice(None)), t[3:]))
    check("narrow of param.data", {"p": ((9, 8), F32)}, w,
          lambda m, n, t: m.p.data.narrow(0, 3, 6).copy_(t))
    check("constant fill beside a region", {"p": ((8, 8), F32)}, w,
          lambda m, n, t: (m.p.data[:6].copy_(t), m.p.data[6:].fill_(0.5)))
    check("zero_ before a region", {"p": ((8, 8), F32)}, w,
          lambda m, n, t: (m.p.data.zero_(), m.p.data[1:7].copy_(t)))
    check("a copy and a transposed copy into one parameter", {"p": ((4, 6), F32)},
          {"a": rand(2, 6), "b": rand(6, 2)},
          lambda m, n, t: m.p.data[:2].copy_(t) if n == "a" else m.p.data[2:].copy_(t.t()))
    check("two tensors into one parameter", {"p": ((12, 8), F32)}, {"a": rand(6, 8), "b": rand(6, 8)},
          lambda m, n, t: m.p.data.narrow(0, 0 if n == "a" else 6, 6).copy_(t))
    # What must fall back.
    check("arithmetic", p, w, into(lambda t: t[:3] * 2), fallback=["w"])
    check("cat of two tensors", {"p": ((12, 8), F32)}, {"a": rand(6, 8), "b": rand(6, 8)},
          _cat_loader(), fallback=["a", "b"])
    check("item", {"p": ((1,), F32)}, {"w": rand(1)},
          lambda m, n, t: m.p.data.fill_(t.item()), fallback=["w"])
    check("tolist", {"p": ((8,), F32)}, {"w": rand(8)},
          lambda m, n, t: m.p.data.copy_(torch.tensor(t.tolist())), fallback=["w"])
    check("data-dependent index", {"p": ((2, 8), F32)}, w,
          into(lambda t: t[torch.tensor([4, 1])]), fallback=["w"])
    check("in-place op on the stand-in", p, w, into(lambda t: t[:3].mul_(3)), fallback=["w"])
    check("dtype reinterpretation", {"p": ((6, 8), torch.int32)}, w,
          into(lambda t: t.view(torch.int32)), fallback=["w"])
    check("bf16 -> f16 -> f32 (two roundings)", p, {"w": rand(6, 8, dtype=BF16)},
          into(lambda t: t[:3].half()), fallback=["w"])
    check("a copy through a temporary buffer", p, w, _temp_loader(), fallback=["w"])
    check("a copy through a buffer made like the parameter", p, w,
          lambda m, n, t: m.p.data.copy_(torch.empty_like(m.p.data).copy_(t[:3])), fallback=["w"])
    check("in-place op on the parameter after the copy", p, w,
          lambda m, n, t: (m.p.data.copy_(t[:3]), m.p.data.mul_(2)), fallback=["w"])
    check("overlapping writes", {"p": ((6, 8), F32)}, {"a": rand(6, 8), "b": rand(3, 8)},
          lambda m, n, t: m.p.data[:t.shape[0]].copy_(t), fallback=["a", "b"])
    kept = []
    check("a stand-in the model keeps", p, w,
          lambda m, n, t: (kept.append(t), m.p.data.copy_(t[:3])), fallback=["w"])
    kept.clear()


def _cat_loader():
    seen = {}

    def load(m, n, t):
        seen[n] = t
        if len(seen) == 2:
            m.p.data.copy_(torch.cat([seen.pop("a"), seen.pop("b")]))
    return load


def _temp_loader():
    def load(m, n, t):
        tmp = torch.empty(3, 8)
        tmp.copy_(t[:3])
        m.p.data.copy_(tmp)
    return load


def outside_case():
    """A loader writing past its parameter (a view into a larger buffer): a RecordError naming
    the parameter and the tensor."""
    class Stray(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(9)[:8], requires_grad=False)

        def load_weights(self, weights):
            for _, w in weights:
                self.p.data.as_strided((8,), (1,), 1).copy_(w)
    try:
        R.record(Stray(), U.fake_catalog({"w": rand(8)}))
        fail("a write outside the parameter was recorded")
    except R.RecordError as e:
        if "p" not in str(e) or "w" not in str(e) or "outside" not in str(e):
            fail("the RecordError does not name parameter and tensor: %s" % e)
        else:
            print("ok write outside its parameter: %s" % e)


MODELS = [("llama_f32", [dict(tp=1), dict(tp=2), dict(tp=4), dict(pp=2)]),
          ("qwen3", [dict(tp=2), dict(tp=2, pp=2)]),
          ("mixtral_f32", [dict(tp=2), dict(tp=2, ep=True), dict(tp=4, ep=True, eplb=True, redundant=4)]),
          ("deepseek_v3", [dict(tp=2), dict(tp=4, ep=True), dict(tp=2, pp=2)]),
          ("llama4_text", [dict(tp=2), dict(tp=2, ep=True)]),
          ("internlm2", [dict(tp=1), dict(tp=2), dict(tp=4), dict(pp=2)]),
          ("starcoder2", [dict(tp=1), dict(tp=2), dict(tp=4), dict(pp=2)]),
          ("llama", [dict(tp=2, dtype="float32")]),
          ("llama_arith", [dict(tp=2)])]


def model_cases():
    fixtures = harness.fixtures()
    if not os.path.isdir(os.path.join(fixtures, "internlm2")):
        fail("no vLLM fixtures in %s (run the vllm_fixtures test)" % fixtures)
        return
    for fixture, layouts in MODELS:
        folder = os.path.join(fixtures, fixture)
        real, catalog = U.real_tensors(folder), U.catalog(folder)
        for layout in layouts:
            world = layout.get("tp", 1) * layout.get("pp", 1) * layout.get("dp", 1)
            for rank in range(world):
                try:
                    model = U.build(folder, rank, **layout)
                    rec = R.record(model, catalog)
                    U.apply(rec, model, real)
                    diff = U.differences(model, U.reference(folder, real, rank, **layout))
                    if diff:
                        fail("%s %s rank %d: differs from vLLM's rules in %s" % (fixture, layout, rank, diff))
                    arith = fixture == "llama_arith"
                    if bool(rec.fallback) != arith:
                        fail("%s %s rank %d: fallback %s" % (fixture, layout, rank, rec.reasons))
                except Exception as e:
                    fail("%s %s rank %d: %s: %s\n%s" % (fixture, layout, rank, type(e).__name__, e,
                                                        traceback.format_exc()[-1500:]))
            print("ok %s %s: every rank equal to vLLM's rules" % (fixture, layout), flush=True)


DRY_RUNS = [("internlm2", dict(tp=4), False), ("internlm2", dict(tp=2, pp=2), False),
            ("starcoder2", dict(tp=2, pp=2), False), ("llama_f32", dict(tp=4), True),
            ("qwen3", dict(tp=2, pp=2), True), ("mixtral_f32", dict(tp=2, ep=True), True),
            ("deepseek_v3", dict(tp=2, pp=2), True), ("deepseek_v3", dict(tp=4, ep=True), True),
            ("llama4_text", dict(tp=2), True)]


def _dry_run(folder, world, layout, plan_file=None):
    import json
    import subprocess
    args = [os.environ.get("SL_CLI", "shardload"), "plan", folder, "--world", str(world), "--json"]
    for key in ("tp", "pp", "dp"):
        args += ["--" + key, str(layout.get(key, 1))]
    if plan_file:
        args += ["--plan-file", plan_file]
    elif layout.get("ep"):
        args += ["--enable-expert-parallel"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args[1:]), p.stderr.strip()[-1500:]))
    return json.loads(p.stdout)


def _canonical(plan):
    """A described plan's JSON with defaults filled in and regions in one order."""
    out = []
    for p in plan["params"]:
        q = dict(p, transposed=bool(p.get("transposed", False)), fill=p.get("fill", "recorded"))
        q["regions"] = sorted(p["regions"], key=lambda r: json_key(r))
        out.append(q)
    return sorted(out, key=lambda p: p["name"]), sorted(plan.get("skip", []))


def json_key(obj):
    import json
    return json.dumps(obj, sort_keys=True)


def dry_run_cases():
    """Every rank's recording as one plan file through the library's dry run (shardload plan
    --plan-file): the library accepts every plan, every byte is read once, and where a spec
    exists each rank reads and holds what the spec's plan has it read and hold."""
    import json
    import tempfile
    fixtures = harness.fixtures()
    for fixture, layout, spec in DRY_RUNS:
        folder = os.path.join(fixtures, fixture)
        world = layout.get("tp", 1) * layout.get("pp", 1) * layout.get("dp", 1)
        try:
            catalog = U.catalog(folder)
            recordings = [R.record(U.build(folder, r, **layout), catalog) for r in range(world)]
            plans = [rec.to_json() for rec in recordings]
            built = json.loads(vllm_recorded.to_plan(recordings[-1]).to_json())
            if _canonical(built) != _canonical(plans[-1]):
                fail("%s %s: the shardload.Plan the plugin builds differs from the recording's "
                     "JSON" % (fixture, layout))
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump({"ranks": plans}, f)
            got = _dry_run(folder, world, layout, f.name)
            os.unlink(f.name)
            if got.get("read_amplification") != 1.0:
                fail("%s %s: recorded plans read amplification %s" % (fixture, layout,
                                                                      got.get("read_amplification")))
            if spec:
                want = _dry_run(folder, world, layout)
                # Read bytes without the covering gaps: whether two near reads are merged over the
                # bytes between them depends on how the copies are cut (Llama-4's q/k rows permuted
                # for vLLM's rotary are cut row by row by the spec), not on which bytes a rank needs.
                def figures_of(plan):
                    return [(r["bytes_read"] - r.get("bytes_covering", 0), r["bytes_needed"],
                             r["bytes_received"]) for r in plan["ranks"]]
                figures, expect = figures_of(got), figures_of(want)
                if figures != expect:
                    fail("%s %s: recorded plans read (without covering gaps)/need/receive %s per rank, the spec's %s"
                         % (fixture, layout, figures, expect))
            print("ok dry run of the recorded plans %s %s%s" % (fixture, layout,
                                                                ": as the spec's" if spec else ""))
        except Exception as e:
            fail("%s %s dry run: %s: %s" % (fixture, layout, type(e).__name__, e))


if __name__ == "__main__":
    op_cases()
    outside_case()
    model_cases()
    dry_run_cases()
    print("test_record: %d failure(s)" % len(FAILS))
    sys.exit(1 if FAILS else 0)
