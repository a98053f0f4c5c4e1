"""recorded_cases.py -- the vLLM plugin's cases loaded through plans recorded from the stand-in
model's own weight loaders (harness group "recorded"; test_vllm_mp.py N recorded, and under
mpirun test_vllm_mpirun.py recorded).

Every case goes through harness.run_case (the plugin's model equal to the `auto` format's on every
worker, byte for byte) and then verify() here:
  - the load was a recorded plan, and the report says every byte was read once (read
    amplification 1.00) with each rank reading exactly what was planned (bytes_read ==
    bytes_read_planned), and the fallback as the case expects it (the arithmetic loader's tensors;
    none elsewhere);
  - for an architecture with a spec (plan "record" forced; gpt-oss aside: its spec hands the
    padded MXFP4 experts to their weight_loader, the recording copies into them): the recorded
    plan equals the spec's,
    as byte-level copies of every parameter (plan_compare): the library's description of the
    recorded plan (loader.plan() of the load) and the recording itself, each against the plan of
    a spec loader opened on the same workers.
"""

import os

import harness
import plan_compare

RECORD = {"plan": "record"}


def cases(world):
    C = harness.Case
    out = []
    if world == 1:
        out += [C("internlm2 recorded", "internlm2", verify="amplification"),
                C("starcoder2 recorded tied", "starcoder2", verify="amplification"),
                C("llama_arith falls back", "llama_arith", verify="arith", expect_handed=9),
                C("a recording that fails: vLLM's own loader", "llama_sparsity",
                  expect_loader="default"),
                C("recorded = spec llama_f32", "llama_f32", extra=RECORD, verify="spec"),
                C("recorded = spec qwen3 tied", "qwen3", extra=RECORD, verify="spec"),
                C("recorded = spec deepseek_v3", "deepseek_v3", extra=RECORD, verify="spec"),
                C("draft unknown arch recorded", "llama_f32", draft="eagle_draft",
                  verify="draft"),
                C("recording refuses a write outside its parameter", "llama_stray",
                  expect_error="writes outside parameter model.norm.weight")]
    if world == 2:
        out += [C("internlm2 tp2", "internlm2", tp=2, verify="amplification"),
                C("internlm2 pp2", "internlm2", pp=2, verify="amplification"),
                C("starcoder2 tp2", "starcoder2", tp=2, verify="amplification"),
                C("starcoder2 pp2", "starcoder2", pp=2, verify="amplification"),
                C("llama_arith tp2 falls back", "llama_arith", tp=2, verify="arith",
                  expect_handed=9),
                C("a recording that fails tp2: vLLM's own loader", "llama_sparsity", tp=2,
                  expect_loader="default"),
                C("recorded = spec llama_f32 tp2", "llama_f32", tp=2, extra=RECORD, verify="spec"),
                C("recorded = spec llama_f32 pp2", "llama_f32", pp=2, extra=RECORD, verify="spec"),
                C("recorded = spec qwen3 tp2", "qwen3", tp=2, extra=RECORD, verify="spec"),
                C("recorded = spec mixtral_f32 tp2 ep", "mixtral_f32", tp=2, ep=True, extra=RECORD,
                  verify="spec"),
                C("recorded = spec deepseek_v3 tp2 ep", "deepseek_v3", tp=2, ep=True,
                  extra=RECORD, verify="spec"),
                C("recorded = spec deepseek_v3 pp2", "deepseek_v3", pp=2, extra=RECORD,
                  verify="spec"),
                C("recorded = spec llama4_text tp2 (transposed experts)", "llama4_text", tp=2,
                  extra=RECORD, verify="spec"),
                C("recorded = spec llama4_text tp2 ep", "llama4_text", tp=2, ep=True,
                  extra=RECORD, verify="spec"),
                C("recording refuses a write outside its parameter tp2", "llama_stray", tp=2,
                  expect_error="writes outside parameter model.norm.weight"),
                # the stand-in's DeepSeek model recorded with the V3.2 / GLM-5 indexer (wk and
                # weights_proj stacked into wk_weights_proj; GLM-5 has a layer without one and
                # its BF16 k_norm held in float32)
                C("recorded deepseek_v32 tp2 ep (indexer)", "deepseek_v32", tp=2, ep=True,
                  extra=RECORD, verify="amplification"),
                C("recorded glm5 pp2 (a layer without an indexer)", "glm5", pp=2, extra=RECORD,
                  verify="amplification")]
    if world == 4:
        out += [C("internlm2 tp4", "internlm2", tp=4, verify="amplification"),
                C("internlm2 tp2 pp2", "internlm2", tp=2, pp=2, verify="amplification"),
                C("starcoder2 tp4", "starcoder2", tp=4, verify="amplification"),
                C("starcoder2 tp2 pp2", "starcoder2", tp=2, pp=2, verify="amplification"),
                C("recorded = spec llama_f32 tp4", "llama_f32", tp=4, extra=RECORD, verify="spec"),
                C("recorded = spec llama_f32 tp2 pp2", "llama_f32", tp=2, pp=2, extra=RECORD,
                  verify="spec"),
                C("recorded = spec mixtral_f32 tp4 ep", "mixtral_f32", tp=4, ep=True,
                  extra=RECORD, verify="spec"),
                C("recorded = spec mixtral_f32 tp2 dp2 ep", "mixtral_f32", tp=2, dp=2, ep=True,
                  extra=RECORD, verify="spec"),
                C("recorded = spec deepseek_v3 tp4 ep", "deepseek_v3", tp=4, ep=True,
                  extra=RECORD, verify="spec"),
                C("recorded = spec deepseek_v2_lite tp2 pp2", "deepseek_v2_lite", tp=2, pp=2,
                  extra=RECORD, verify="spec")]
    return out


def verify(case, model, ref, loader):
    """Failure messages of this worker for the case's verify kind."""
    last = loader.last or {}
    fails = []
    if last.get("plan") != "recorded":
        return ["%s: loaded with plan %r, expected a recorded one (%s)"
                % (case.name, last.get("plan"), last.get("why"))]
    fails += _amplification(case, last)
    recording = last.get("recording")
    fallback = list(recording.fallback) if recording is not None else None
    fill = (last.get("report") or {}).get("fill") or {}
    named = set(fill.get("fallback", {}).get("names", []))
    if not fill.get("recorded", {}).get("params") or \
            not {"fallback:" + t for t in fallback or []} <= named or (named and not fallback):
        fails.append("%s: the report's fill %s does not match this rank's fallback %s"
                     % (case.name, fill, fallback))
    if case.verify == "arith":
        if not fallback or any("mlp" not in t and "norm" not in t for t in fallback):
            fails.append("%s: fallback %s, expected the norms and gate/up projections" % (case.name, fallback))
        if "fallback" not in set(last.get("fills", {}).values()):
            fails.append("%s: no parameter reported filled by the fallback" % case.name)
    elif fallback:
        fails.append("%s: unexpected fallback %s (%s)" % (case.name, fallback, recording.reasons))
    if case.verify == "spec":
        fails += _same_as_spec(case, last)
    if case.verify == "draft" and "unknown architecture" not in str(last.get("why")):
        fails.append("%s: the draft was recorded for %r" % (case.name, last.get("why")))
    return fails


def _amplification(case, last):
    report = last.get("report") or {}
    out = []
    amp = report.get("read_amplification")
    if amp is None or abs(amp - 1.0) > 1e-9:
        out.append("%s: read amplification %r, expected 1.00" % (case.name, amp))
    for r in report.get("ranks", []):
        if r.get("bytes_read") != r.get("bytes_read_planned"):
            out.append("%s: rank %s read %s bytes, planned %s" % (case.name, r.get("rank"),
                                                                  r.get("bytes_read"),
                                                                  r.get("bytes_read_planned")))
    return out


def _same_as_spec(case, last):
    """The recorded plan against the spec's, opened on the same workers (collective)."""
    import shardload.torch
    from vllm.distributed import parallel_state as ps
    folder = os.path.join(harness.fixtures(), case.fixture)
    options = dict(last.get("options", {}))
    for k in ("progress", "timeout_s"):
        options.setdefault(k, {"progress": "never", "timeout_s": 60}[k])
    with shardload.torch.open_loader(folder, None, ps.get_world_group().cpu_group,
                                     **options) as spec_loader:
        spec = plan_compare.loader_maps(spec_loader.plan(), _catalog(folder))
    catalog = _catalog(folder)
    recorded = [p for p in last.get("planned", []) if not p.name.startswith("fallback:")]
    out = ["%s: library's recorded plan vs spec: %s" % (case.name, m)
           for m in plan_compare.compare(plan_compare.loader_maps(recorded, catalog), spec)]
    out += ["%s: recording vs spec: %s" % (case.name, m)
            for m in plan_compare.compare(plan_compare.recording_maps(last["recording"], catalog), spec)]
    return out


def _catalog(folder):
    import shardload.catalog
    return shardload.catalog.tensors(folder)
