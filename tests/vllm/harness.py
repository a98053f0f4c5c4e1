"""harness.py -- what the vLLM plugin tests share: the stand-in vLLM on the path, workers started
as vLLM starts them, the cases, and the comparison with vLLM's own loading rules.

Workers: `spawn(world, ...)` starts them as vLLM's mp executor does (torch.multiprocessing with the
spawn context, one process per worker, a gloo world over tcp://127.0.0.1:PORT); `init_from_env()`
joins a world whose processes someone else started (external_launcher: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, as launch/vllm-mpirun.sh sets them under mpirun). Then each worker
sets up vLLM's groups (world, tp, pp, dp, ep) for each case.

A case loads one fixture twice in every worker: through the plugin
(get_model_loader(LoadConfig(load_format="shardload")).load_model(...)) and through the stand-in's
DefaultModelLoader, whose every rank reads every checkpoint tensor whole and applies the model's
weight_loader rules (vLLM's conventions, independent of shardload's plan). Every parameter and
buffer of the two models must be equal byte for byte (in a case with a model dtype unlike the
checkpoint's, NaN elements need only be NaN on both sides: see same()), tied parameters must stay
one Parameter, and the plugin must have loaded with the options the case expects. Failures are
gathered over the world so that every worker reports the same verdict.
"""

import dataclasses
import json
import os
import socket
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SL_SOURCE_DIR", os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "standin"))
sys.path.insert(0, os.path.join(SOURCE, "python"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from common import need, skip  # noqa: E402,F401  (the python tests' own: exit 77 with the reason)


def fixtures():
    return os.environ.get("SL_VLLM_FIXTURES", os.path.join(os.getcwd(), "fixtures-vllm"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -------------------------------------------------------------------------------------------------
# Cases


@dataclasses.dataclass
class Case:
    name: str
    fixture: str
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False
    placement: str = "linear"
    eplb: bool = False
    redundant: int = 0
    dtype: str = "auto"
    quantization: str = None
    extra: dict = dataclasses.field(default_factory=dict)
    draft: str = None            # a draft model folder: loaded as vLLM loads a speculative draft
    expect_error: str = None     # the plugin must fail on every worker with this in the message
    expect_loader: str = "shardload"
    expect_handed: int = 0       # parameters handed to weight_loader (the fallback); None: per stage
    mutate: str = None           # a deliberate fault (see run_case)
    mm: dict = None              # ModelConfig's multimodal keys: language_model_only, limit_mm_per_prompt
    expect_skip_vision: bool = None   # the plugin's skip_vision option must be this (None: not checked)
    verify: str = None           # recorded_cases.verify's check after the comparison

    def world(self):
        return self.tp * self.pp * self.dp


def cases(world, group):
    """The cases of a world size (group: "main", "dtype", "qwen", "packed", "dsa", "minimax", "dsv4",
    "mm", "recorded")."""
    C = Case
    out = []
    if group == "recorded":   # plans recorded from the weight loaders (recorded_cases.py)
        import recorded_cases
        return recorded_cases.cases(world)
    if group == "dsa":   # DeepSeek-V3.2, GLM-5 and their MTP draft (cases_dsa.py)
        import cases_dsa
        return cases_dsa.cases(world, C)
    if group == "minimax":   # MiniMax-M2 (cases_minimax.py)
        import cases_minimax
        return cases_minimax.cases(world, C)
    if group == "dsv4":   # DeepSeek-V4 (cases_dsv4.py)
        import cases_dsv4
        return cases_dsv4.cases(world, C)
    if group == "qwen":
        return qwen_cases(world)
    if group == "packed":   # pack-quantized and NVFP4 checkpoints (packed_cases.py)
        from packed_cases import packed_cases
        return packed_cases(C, world)
    if group == "mm":
        return mm_cases(world)
    if group == "dtype":   # model dtype unlike the checkpoint's, on the host
        tp = 2 if world % 2 == 0 else 1
        return [C("llama bf16->f32", "llama", tp=tp, dp=world // tp, dtype="float32"),
                C("llama_f32 f32->bf16", "llama_f32", tp=tp, dp=world // tp, dtype="bfloat16"),
                C("mixtral_f32 f32->f16 ep", "mixtral_f32", tp=tp, dp=world // tp, ep=True,
                  dtype="float16"),
                C("llama4 f32->bf16 experts converted and transposed", "llama4_text", tp=tp,
                  dp=world // tp, dtype="bfloat16")]
    if world == 1:
        out += [C("llama_f32", "llama_f32"),
                C("qwen3 tied", "qwen3"),
                C("mixtral_f32", "mixtral_f32"),
                C("llama_f32 kv scales absent", "llama_f32", quantization="fp8"),
                C("llama_kv kv scales loaded", "llama_kv", quantization="fp8",
                  extra={"arch": "@kv_spec"}, expect_handed=4),
                C("vllm extra-config keys", "llama_f32",
                  extra={"num_threads": 2, "enable_multithread_load": True,
                         "load_strategy": "auto"}),
                C("gpt_oss mxfp4 padded", "gpt_oss", expect_handed=10),
                C("llama4 experts in place", "llama4_text"),
                C("draft known", "llama_f32", draft="llama_f32"),
                C("draft unknown arch", "llama_f32", draft="eagle_draft"),
                C("extra config: num_threads four", "llama_f32", extra={"num_threads": "four"},
                  expect_error="num_threads"),
                C("extra config: multithread with direct reads", "llama_f32",
                  extra={"enable_multithread_load": True, "load_strategy": "direct"},
                  expect_error="enable_multithread_load"),
                C("strict: module lacks a planned tensor", "llama_f32", mutate="drop_norm",
                  expect_error="planned parameters the module lacks")]
    if world == 2:
        out += [C("llama_f32 tp2", "llama_f32", tp=2),
                C("llama_f32 pp2", "llama_f32", pp=2),
                C("qwen3 tied tp2", "qwen3", tp=2),
                C("mixtral_f32 tp2", "mixtral_f32", tp=2),
                C("mixtral_f32 tp2 ep", "mixtral_f32", tp=2, ep=True),
                C("mixtral_ng2 tp2 ep round_robin", "mixtral_ng2", tp=2, ep=True,
                  placement="round_robin"),
                C("mixtral_f32 tp2 ep eplb r2", "mixtral_f32", tp=2, ep=True, eplb=True, redundant=2),
                C("mixtral_f32 dp2 ep", "mixtral_f32", dp=2, ep=True),
                C("llama_kv tp2 kv scales", "llama_kv", tp=2, quantization="fp8",
                  extra={"arch": "@kv_spec"}, expect_handed=4),
                C("gpt_oss tp2", "gpt_oss", tp=2, expect_handed=10),
                C("gpt_oss tp2 ep", "gpt_oss", tp=2, ep=True, expect_handed=10),
                C("llama4 tp2", "llama4_text", tp=2),
                C("llama4 tp2 ep", "llama4_text", tp=2, ep=True),
                C("expert map differs", "mixtral_ng2", tp=2, ep=True, placement="round_robin",
                  mutate="drop_placement", expect_error="vLLM's FusedMoE holds experts")]
    if world == 3:
        out += [C("llama_f32 dp3", "llama_f32", dp=3),
                C("mixtral_f32 dp3 ep", "mixtral_f32", dp=3, ep=True),
                C("mixtral_ng2 dp3 ep round_robin", "mixtral_ng2", dp=3, ep=True,
                  placement="round_robin"),
                C("qwen3 tied dp3", "qwen3", dp=3)]
    if world == 4:
        out += [C("llama_f32 tp2 pp2", "llama_f32", tp=2, pp=2),
                C("llama_f32 tp4", "llama_f32", tp=4),
                C("qwen3 tied tp2 pp2", "qwen3", tp=2, pp=2),
                C("mixtral_f32 tp4", "mixtral_f32", tp=4),
                C("mixtral_f32 tp2 dp2 ep", "mixtral_f32", tp=2, dp=2, ep=True),
                C("mixtral_f32 tp2 dp2", "mixtral_f32", tp=2, dp=2),
                C("mixtral_f32 tp4 ep eplb r4", "mixtral_f32", tp=4, ep=True, eplb=True,
                  redundant=4),
                C("mixtral_ng2 tp4 ep round_robin", "mixtral_ng2", tp=4, ep=True,
                  placement="round_robin"),
                C("gpt_oss tp4", "gpt_oss", tp=4, expect_handed=10),
                C("llama4 tp2 dp2 ep", "llama4_text", tp=2, dp=2, ep=True)]
    return out


def qwen_cases(world):
    """Qwen3-Next and Qwen3.5 (gated DeltaNet; the ConditionalGeneration wrappers with their vision
    tower skipped): 1 and 2 workers."""
    C = Case
    vision = {"skip_vision": True}
    if world == 1:
        return [C("qwen3_next", "qwen3_next"), C("qwen3_5 tied, vision skipped", "qwen3_5", extra=vision),
                C("qwen3_5_moe stacked experts", "qwen3_5_moe", extra=vision),
                C("qwen3_5_moe_text", "qwen3_5_moe_text")]
    if world == 2:
        return [C("qwen3_next tp2", "qwen3_next", tp=2), C("qwen3_next tp2 ep", "qwen3_next", tp=2, ep=True),
                C("qwen3_5 tp2", "qwen3_5", tp=2, extra=vision),
                C("qwen3_5_moe tp2 ep", "qwen3_5_moe", tp=2, ep=True, extra=vision),
                C("qwen3_5_moe pp2", "qwen3_5_moe", pp=2, extra=vision),
                C("qwen3_5_moe_text dp2 ep", "qwen3_5_moe_text", dp=2, ep=True)]
    return []


def mm_cases(world):
    """The multimodal wrappers with their vision towers (Qwen3-VL, Gemma-3 with SigLIP, with the
    names of transformers 4.52+ and the first Gemma-3 checkpoints', Kimi-K2.5 with W4A16 routed
    experts and its BF16 MoonViT: the plugin converts the two weight_shape parameters of each
    MoE layer), and vLLM built without its
    tower (--language-model-only, --limit-mm-per-prompt 0): the plugin sets skip_vision."""
    C = Case
    lmo = {"language_model_only": True}
    no_images = {"limit_mm_per_prompt": {"image": 0}}
    if world == 1:
        return [C("qwen3_vl", "qwen3_vl", expect_skip_vision=False),
                C("qwen3_vl language_model_only", "qwen3_vl", mm=lmo, expect_skip_vision=True),
                C("gemma3_mm", "gemma3_mm", expect_skip_vision=False),
                C("gemma3_mm_legacy vLLM's names", "gemma3_mm_legacy"),
                C("gemma3_mm no images", "gemma3_mm", mm=no_images, expect_skip_vision=True),
                C("kimi_k25_w4a16 W4A16 experts, BF16 MoonViT", "kimi_k25_w4a16", expect_skip_vision=False,
                  expect_handed=4),
                C("qwen3_vl data-parallel tower refused", "qwen3_vl", mm={"mm_encoder_tp_mode": "data"},
                  expect_error="mm_encoder_tp_mode 'data'")]
    if world == 2:
        return [C("qwen3_vl tp2", "qwen3_vl", tp=2), C("qwen3_vl pp2", "qwen3_vl", pp=2),
                C("qwen3_vl tp2 language_model_only", "qwen3_vl", tp=2, mm=lmo, expect_skip_vision=True),
                C("gemma3_mm tp2", "gemma3_mm", tp=2), C("gemma3_mm pp2", "gemma3_mm", pp=2),
                C("gemma3_mm_legacy tp2", "gemma3_mm_legacy", tp=2),
                C("kimi_k25_w4a16 tp2", "kimi_k25_w4a16", tp=2, expect_handed=4)]
    if world == 4:
        return [C("qwen3_vl tp4", "qwen3_vl", tp=4), C("qwen3_vl tp2 pp2", "qwen3_vl", tp=2, pp=2),
                C("gemma3_mm tp4", "gemma3_mm", tp=4), C("gemma3_mm tp2 pp2", "gemma3_mm", tp=2, pp=2)]
    return []


# -------------------------------------------------------------------------------------------------
# One case in one worker


def raw(t):
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def same(a, b, converted):
    """a and b byte for byte; in a converted case (a model dtype unlike the checkpoint's) an
    element that is NaN on both sides may differ in its bits: torch's own conversions give NaN
    patterns that depend on the path (torch 1.13: a copy_ from a strided float32 view into
    bfloat16 gives 0x7FC0 where .to() gives 0xFFFF), and vLLM's rules copy_ from transposed
    views (Llama-4's experts)."""
    import torch
    if raw(a) == raw(b):
        return True
    if not converted or not a.is_floating_point():
        return False
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    m = a.view(ints) != b.view(ints)
    return bool((torch.isnan(a[m]) & torch.isnan(b[m])).all())


def vllm_configs(case, folder, load_format, extra):
    from vllm.config import (EPLBConfig, LoadConfig, ModelConfig, ParallelConfig,
                             SpeculativeConfig, VllmConfig)
    model = ModelConfig(model=folder, dtype=case.dtype, quantization=case.quantization, **(case.mm or {}))
    parallel = ParallelConfig(tensor_parallel_size=case.tp, pipeline_parallel_size=case.pp,
                              data_parallel_size=case.dp, enable_expert_parallel=case.ep,
                              expert_placement_strategy=case.placement, enable_eplb=case.eplb,
                              eplb_config=EPLBConfig(case.redundant))
    spec = None
    if case.draft:
        spec = SpeculativeConfig(ModelConfig(model=os.path.join(fixtures(), case.draft),
                                             dtype=case.dtype))
    return VllmConfig(model_config=model, parallel_config=parallel, speculative_config=spec,
                      load_config=LoadConfig(load_format=load_format,
                                             model_loader_extra_config=dict(extra)))


def _extra(case):
    out = {"progress": "never", "timeout_s": 60}
    out.update(json.loads(os.environ.get("SL_VLLM_EXTRA", "{}")))   # a debugging aid
    for k, v in case.extra.items():
        out[k] = os.path.join(fixtures(), "kv_spec.json") if v == "@kv_spec" else v
    return out


def load_both(case):
    """(plugin model, reference model, plugin loader) of a case in this worker."""
    import shardload.vllm
    from vllm.distributed import parallel_state as ps
    from vllm.model_executor.model_loader import get_model_loader
    ps.initialize_model_parallel(case.tp, case.pp, case.dp)
    folder = os.path.join(fixtures(), case.fixture)
    shardload.vllm.register()
    vc = vllm_configs(case, folder, "shardload", _extra(case))
    model_config = vc.speculative_config.draft_model_config if case.draft else vc.model_config
    if case.mutate == "drop_placement":   # shardload told linear placement, vLLM builds round_robin
        real = shardload.vllm.parallel_layout

        def layout(config):
            out = real(config)
            out["keys"].pop("expert_placement", None)
            return out
        shardload.vllm.parallel_layout = layout
    loader = get_model_loader(vc.load_config)
    if case.mutate == "drop_norm":   # vLLM's module lacks model.norm.weight
        real_load = loader.load_weights

        def load_weights(model, model_config):
            del model.model.norm.weight
            model.model.norm.register_parameter("weight", None)
            return real_load(model, model_config)
        loader.load_weights = load_weights
    try:
        model = loader.load_model(vc, model_config)
    finally:
        if case.mutate == "drop_placement":
            shardload.vllm.parallel_layout = real
    ref_vc = vllm_configs(case, folder, "auto", {})
    ref_model_config = ref_vc.speculative_config.draft_model_config if case.draft \
        else ref_vc.model_config
    ref = get_model_loader(ref_vc.load_config).load_model(ref_vc, ref_model_config)
    return model, ref, loader


def run_case(case, rank):
    """A list of failure messages of this worker (empty: passed)."""
    fails = []
    try:
        model, ref, loader = load_both(case)
    except Exception as e:
        text = "%s: %s" % (type(e).__name__, e)
        if case.expect_error and case.expect_error in text or \
                case.expect_error and "another rank failed" in text:
            return []
        return ["%s: load failed: %s\n%s" % (case.name, text, traceback.format_exc()[-1500:])]
    if case.expect_error:
        return ["%s: expected an error containing %r, the load succeeded"
                % (case.name, case.expect_error)]
    got, want = model.state_dict(), ref.state_dict()
    if set(got) != set(want):
        fails.append("%s: names differ: %s" % (case.name, sorted(set(got) ^ set(want))))
    nbytes = 0
    for name in sorted(set(got) & set(want)):
        a, b = got[name], want[name]
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
            fails.append("%s: %s is %s %s, vLLM's rules give %s %s"
                         % (case.name, name, a.dtype, list(a.shape), b.dtype, list(b.shape)))
        elif not same(a, b, case.dtype != "auto"):
            fails.append("%s: %s differs from vLLM's rules" % (case.name, name))
        nbytes += a.numel() * a.element_size()
    head = getattr(model, "lm_head", None)
    if getattr(model, "tied", False) and hasattr(head, "weight"):
        if head.weight is not model.model.embed_tokens.weight:
            fails.append("%s: lm_head.weight is no longer model.embed_tokens.weight" % case.name)
    last = loader.last or {}
    if last.get("loader") != case.expect_loader:
        fails.append("%s: loaded by %r, expected %r (%s)"
                     % (case.name, last.get("loader"), case.expect_loader, last.get("reason")))
    if case.expect_loader == "shardload":
        handed = last.get("handed", [])
        if case.expect_handed is not None and len(handed) != case.expect_handed:
            fails.append("%s: %d parameters handed to weight_loader, expected %d: %s"
                         % (case.name, len(handed), case.expect_handed, handed))
        opts = last.get("options", {})
        want_opts = {"tp": case.tp, "pp": case.pp, "dp": case.dp}
        if case.ep:
            want_opts["enable_expert_parallel"] = True
            want_opts["expert_placement"] = case.placement
        if case.expect_skip_vision is not None:
            want_opts["skip_vision"] = True if case.expect_skip_vision else None
        for k, v in want_opts.items():
            if opts.get(k) != v:
                fails.append("%s: option %s = %r, expected %r" % (case.name, k, opts.get(k), v))
    if case.verify and not fails:
        import recorded_cases
        fails += recorded_cases.verify(case, model, ref, loader)
    print("rank %d: %s: %d tensors, %d bytes compared, loader %s%s"
          % (rank, case.name, len(got), nbytes, last.get("loader"),
             "" if not fails else " FAIL"), flush=True)
    return fails


# -------------------------------------------------------------------------------------------------
# Workers


def run_cases(world, rank, group):
    """Every case of the world size in this worker; returns the number of failures anywhere
    (the same on every worker)."""
    import torch.distributed as dist
    fails = []
    selected = cases(world, group)
    only = os.environ.get("SL_VLLM_CASE")
    for case in selected:
        if only and only not in case.name:
            continue
        assert case.world() == world, case
        t0 = time.time()
        mine = run_case(case, rank)
        for f in mine:
            print("rank %d: FAIL: %s" % (rank, f), flush=True)
        fails += mine
        everyone = [None] * world
        dist.all_gather_object(everyone, len(mine))
        if rank == 0:
            print("case %r: %s (%.1f s)" % (case.name, "ok" if sum(everyone) == 0 else
                                            "FAILED on %d worker(s)" % sum(1 for n in everyone if n),
                                            time.time() - t0), flush=True)
    counts = [None] * world
    dist.all_gather_object(counts, len(fails))
    return sum(counts)


def _worker(rank, world, init_method, group, status_dir):
    import torch.distributed as dist
    from vllm.distributed import parallel_state as ps
    code = 1
    try:
        dist.init_process_group("gloo", init_method=init_method, world_size=world, rank=rank)
        ps.init_distributed_environment(world, rank, init_method, rank, "gloo")
        bad = run_cases(world, rank, group)
        if rank == 0:
            print("vllm plugin, %d worker(s) (%s): %d failure(s)" % (world, group, bad), flush=True)
        code = 1 if bad else 0
    except BaseException:
        traceback.print_exc()
    with open(os.path.join(status_dir, "rank%d" % rank), "w") as f:
        f.write(str(code))
    sys.stdout.flush()
    os._exit(code)


def spawn(world, group, timeout):
    """World `world` as vLLM's mp executor starts it; returns the exit status of the test."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    status = tempfile.mkdtemp(prefix="sl-vllm-")
    init = "tcp://127.0.0.1:%d" % free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, init, group, status)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.time() + timeout
    for p in procs:
        p.join(max(1.0, deadline - time.time()))
    hung = [i for i, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
    if hung:
        print("FAIL: workers %s still running after %d s: killed" % (hung, timeout), flush=True)
        return 1
    codes = []
    for r in range(world):
        try:
            codes.append(int(open(os.path.join(status, "rank%d" % r)).read()))
        except (OSError, ValueError):
            codes.append(procs[r].exitcode)
    if any(codes):
        print("FAIL: worker exit statuses %s" % codes, flush=True)
        return 1
    return 0


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
