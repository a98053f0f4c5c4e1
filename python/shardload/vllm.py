"""shardload.vllm -- vLLM's load format "shardload": every vLLM worker reads only its own
tensor-parallel slices and experts, and every byte of the checkpoint is read once cluster-wide.

    vllm serve M --load-format shardload [--model-loader-extra-config '{"threads": 16}']
    LLM(model=M, load_format="shardload", tensor_parallel_size=4)

Registration. `pip install ./python` declares the entry point vllm.general_plugins: shardload =
shardload.vllm:register; vLLM calls it in every process it starts (API server, engine, workers).
register() adds the loader with vllm.model_executor.model_loader.register_model_loader and never
raises (vLLM calls general plugins outside a try block): anything that goes wrong is a warning,
and `--load-format shardload` then fails in vLLM as an unknown format. This module imports no
other part of shardload at import or registration; the loader imports what it needs when the
format is used. (Importing the package `shardload`, which the entry point does, opens
libshardload today: python/shardload/__init__.py imports the loader eagerly.)

Where it runs. The workers of a load are vLLM's own torch.distributed world, whatever started
them: the mp executor (`vllm serve`, one process per GPU), Ray (one node or several),
external_launcher (torchrun, mpirun with launch/vllm-mpirun.sh), with data parallelism (vLLM's
world then spans every data-parallel rank). Control traffic uses vLLM's world CPU (gloo) group,
`get_world_group().cpu_group`, passed to shardload as group= (shardload.torch.load_into); the
sizes come from vLLM's tp, pp and dp groups, and the rank order is checked to be shardload's
(dp outer, then pp, tp fastest) before any byte is read.

Configuration forwarded (captured in load_model, while vLLM hands over its VllmConfig:
vLLM 0.10.2-0.13 leave get_current_vllm_config() unset during load_weights): tp, pp, dp;
enable_expert_parallel, expert_placement_strategy (linear|round_robin), enable_eplb,
num_redundant_experts; the load config's download_dir (shardload's cache_dir) and the model
revision; skip_vision when vLLM built a multimodal model without its vision tower
(--language-model-only, or --limit-mm-per-prompt 0 for every modality: vision_left_out); a
data-parallel tower (--mm-encoder-tp-mode data) is refused before any byte is read.
model_loader_extra_config: vLLM's own keys (enable_multithread_load, num_threads,
enable_weights_track) go to shardload's `extra_config` key, validated as vLLM validates them;
every other key is a shardload configuration key ({"load_strategy": "mmap", "threads": 16},
"strict": false, "arch": "spec.json"), validated by the C library when the loader is created.

What a worker gets (shardload.torch.load_into on the model vLLM built):
- parameters and buffers bound and written in place (Llama-4's experts too: the checkpoint stores
  them transposed, shardload plans vLLM's w13_weight / w2_weight and the C library transposes
  while the bytes land); tied embeddings (lm_head.weight, the same Parameter as
  model.embed_tokens.weight) are shared, not copied; a model dtype other than the checkpoint's is
  converted (host: by the C library while writing; GPU: torch's copy_);
- attention scales (_k_scale, _v_scale, _q_scale, _prob_scale buffers; k_scale, v_scale, ...
  Parameters of FP8 checkpoints) keep their initial values when the plan has none, and are loaded
  when it has them, checkpoint names (self_attn.k_proj.k_scale) mapped to vLLM's (attn.k_scale);
- pack-quantized weight_shape tensors planned in the checkpoint's integer dtype (vLLM holds a
  FusedMoE's in the model dtype, a linear's as int64) are copied in, converted as vLLM's loaders'
  copy converts them;
- bytes that cannot be bound go to the parameter's own weight_loader, in vLLM's conventions for
  data that is already the rank's: FusedMoE MXFP4 parameters (gpt-oss, intermediate size padded
  by vLLM) as weight_loader(param, rank_tensor, weight_name=..., shard_id=None, expert_id=None),
  parameters without a weight_loader through vLLM's default_weight_loader. Any other parameter
  the plan cannot fill (a tensor-parallel weight_loader slices whole checkpoint tensors itself: it
  cannot take a rank's slice) is an error on every rank;
- the experts of each FusedMoE layer are checked against its expert_map (local slots, EPLB's
  redundant slots holding logical expert slot % experts) before any byte is read;
- then vLLM's process_weights_after_loading, as for any loader.

Plans: with a spec for the architecture, shardload's spec plan; without one, a plan recorded from
the model's own weight loaders (shardload.record, python/shardload/vllm_recorded.py): the target
model is never refused for lack of a spec. model_loader_extra_config "plan": auto (default),
spec, record. A draft (speculative) model uses the spec when shardload knows its architecture
(vLLM's name of it: DeepSeekMTPModel for DeepSeek's and GLM-5's MTP layers) and its plan fits the
module vLLM built; otherwise (no spec, or a module vLLM names its own way, such as EAGLE heads)
its plan is recorded too. `last` says per parameter how it was filled (spec, recorded, fallback)
and the bytes each way; rank 0 logs one line.

Weight sync (RL rollouts; docs/INTEGRATION.md, docs/spec/DESIGN.md §13). With
model_loader_extra_config {"refit": true} the loader stays open on the model after the load, and
worker_extension_cls="shardload.vllm.RefitWorkerExtension" gives every worker the methods a
trainer's driver calls through collective_rpc while the trainer ranks call shardload.publish:
shardload_sync_group(host, port, rank_offset, world_size) joins a group holding the trainers and
the workers (shardload.sync_group; worker r is rank rank_offset + r), shardload_refit(version)
receives the published weights into the model's parameters in place, shardload_refit_state()
says which version each worker holds and what each parameter holds after a failed refit. The
refitted values are the checkpoint's tensors as the trainers publish them: a model whose
process_weights_after_loading changes the loaded weights (quantized repacking) does not see
them repacked.

vllm is imported only inside register() and the loader class, never by `import shardload.vllm`.
"""

import json
import logging
import re
import warnings

LOAD_FORMAT = "shardload"
VLLM_EXTRA_KEYS = ("enable_multithread_load", "num_threads", "enable_weights_track")
logger = logging.getLogger("shardload.vllm")
_registered = None
_class = None
_DRAFT_MISFIT = "the plan does not fit the draft model"
PLAN_MODES = ("auto", "spec", "record")   # model_loader_extra_config "plan"


def register():
    """The vllm.general_plugins entry point: registers load format "shardload". Never raises."""
    global _registered
    if _registered is not None:
        return _registered
    try:
        from vllm.model_executor.model_loader import register_model_loader
        cls = loader_class()
        register_model_loader(LOAD_FORMAT)(cls)
    except Exception as e:  # vLLM calls plugins unguarded: a raise here would stop every start
        message = "shardload: load format %r not registered with vLLM: %s: %s" % (
            LOAD_FORMAT, type(e).__name__, e)
        logger.warning(message)
        warnings.warn(message, RuntimeWarning)
        return None
    _registered = cls
    return cls


# -------------------------------------------------------------------------------------------------
# Options


def split_options(extra):
    """(shardload keys, strict) from model_loader_extra_config: vLLM's keys become `extra_config`
    (validated by the C library as vLLM validates them), `strict` and `refit` are load_into's, the
    others are shardload keys."""
    if extra is None:
        extra = {}
    if isinstance(extra, str):
        extra = json.loads(extra) if extra.strip() else {}
    if not isinstance(extra, dict):
        raise ValueError("model_loader_extra_config must be a dict for load format %s, got %s"
                         % (LOAD_FORMAT, type(extra).__name__))
    options = dict(extra)
    vllm_keys = {k: options.pop(k) for k in VLLM_EXTRA_KEYS if k in options}
    if vllm_keys:
        options["extra_config"] = vllm_keys
    strict = options.pop("strict", None)
    refit = options.pop("refit", False)
    if not isinstance(refit, bool):
        raise ValueError("model_loader_extra_config: refit must be true or false, got %r" % (refit,))
    if refit:
        options["refit"] = True   # taken off again by the loader (load_into's argument)
    if strict is None:
        track = vllm_keys.get("enable_weights_track")
        strict = track if isinstance(track, bool) else True
    return options, strict


# The modules of the vision towers in vLLM's models (Qwen3-VL / Qwen3.5 visual, Gemma-3 and Kimi-K2.5
# vision_tower, Llama-4 vision_model, their projectors): docs/spec/ARCHITECTURES.md §24.
VISION_MODULES = ("visual.", "vision_tower.", "vision_model.", "multi_modal_projector.", "mm_projector.")


def vision_left_out(model, model_config):
    """True when vLLM built a multimodal model without its vision tower: --language-model-only
    (multimodal_config.language_model_only), or --limit-mm-per-prompt with 0 items of every
    modality, after which vLLM's wrappers build no tower (`self.visual = None`). shardload then
    skips the checkpoint's tower (skip_vision) as vLLM's load_weights skips it."""
    mm = getattr(model_config, "multimodal_config", None)
    if mm is None:
        return False
    if getattr(mm, "language_model_only", False):
        return True
    return not any(name.startswith(VISION_MODULES) for name, _ in model.named_parameters())


def vision_problem(model_config, options):
    """A message when vLLM builds the vision tower in a layout shardload does not plan
    (mm_encoder_tp_mode "data": every rank a whole tower), else None."""
    mm = getattr(model_config, "multimodal_config", None)
    if getattr(mm, "mm_encoder_tp_mode", None) != "data" or options.get("skip_vision") or \
            options.get("language_model_only"):
        return None
    return ("shardload: mm_encoder_tp_mode 'data' (a whole vision tower on every rank) is not "
            "supported; shardload loads the tower tensor-parallel, as vLLM's default 'weights' mode "
            "builds it")


def _redundant_experts(parallel):
    n = getattr(parallel, "num_redundant_experts", None)   # vLLM 0.10.2
    if n is None:
        n = getattr(getattr(parallel, "eplb_config", None), "num_redundant_experts", 0)
    return int(n or 0)


def parallel_layout(vllm_config):
    """The load's sizes, keys and control group, read from vLLM's process groups and config.
    Returns a dict: tp, pp, dp (sizes), rank (world rank), keys (shardload configuration keys),
    group (the world's CPU ProcessGroup), problem (a message when vLLM's rank order or sizes are
    not shardload's, else None)."""
    from vllm.distributed import parallel_state as ps
    world, tp, pp = ps.get_world_group(), ps.get_tp_group(), ps.get_pp_group()
    parallel = getattr(vllm_config, "parallel_config", None)
    try:
        dp = ps.get_dp_group()
        dp_size, dp_rank = dp.world_size, dp.rank_in_group
    except Exception:  # a version or launcher without a data-parallel group
        dp_size = int(getattr(parallel, "data_parallel_size", 1) or 1)
        dp_rank = int(getattr(parallel, "data_parallel_rank", 0) or 0)
    keys = {"tp": tp.world_size, "pp": pp.world_size, "dp": dp_size}
    if parallel is not None and getattr(parallel, "enable_expert_parallel", False):
        keys["enable_expert_parallel"] = True
        keys["expert_placement"] = getattr(parallel, "expert_placement_strategy", None) or "linear"
        if getattr(parallel, "enable_eplb", False):
            keys["enable_eplb"] = True
            keys["num_redundant_experts"] = _redundant_experts(parallel)
    problem = None
    want = (dp_rank * pp.world_size + pp.rank_in_group) * tp.world_size + tp.rank_in_group
    for cp in ("prefill_context_parallel_size", "decode_context_parallel_size"):
        if int(getattr(parallel, cp, 1) or 1) > 1:
            problem = "shardload: %s %s > 1 is not supported" % (cp, getattr(parallel, cp))
    if problem is None and world.world_size != dp_size * pp.world_size * tp.world_size:
        problem = ("shardload: vLLM's world has %d workers, dp %d x pp %d x tp %d = %d"
                   % (world.world_size, dp_size, pp.world_size, tp.world_size,
                      dp_size * pp.world_size * tp.world_size))
    if problem is None and world.rank_in_group != want:
        problem = ("shardload: vLLM worker %d is dp rank %d, pp rank %d, tp rank %d, which "
                   "shardload places at rank %d (dp outer, then pp, tp fastest)"
                   % (world.rank_in_group, dp_rank, pp.rank_in_group, tp.rank_in_group, want))
    return {"tp": tp.world_size, "pp": pp.world_size, "dp": dp_size, "rank": world.rank_in_group,
            "keys": keys, "group": world.cpu_group, "problem": problem}


# -------------------------------------------------------------------------------------------------
# Experts: FusedMoE's expert map against shardload's plan

_EXPERT_ID = re.compile(r"\.experts\.(\d+)\.")
_BITS = {"F64": 64, "I64": 64, "U64": 64, "F32": 32, "I32": 32, "U32": 32, "F16": 16, "BF16": 16,
         "I16": 16, "U16": 16}


def module_experts(moe):
    """Logical expert ids of a FusedMoE's local slots, in slot order (redundant EPLB slot s holds
    logical expert s % experts)."""
    total = int(getattr(moe, "global_num_experts", 0) or 0)
    logical = getattr(moe, "logical_num_experts", None) or \
        total - int(getattr(moe, "num_redundant_experts", 0) or 0)
    expert_map = getattr(moe, "expert_map", None)
    if expert_map is None:
        expert_map = getattr(moe, "_expert_map", None)
    if expert_map is None:
        physical = list(range(total))
    else:
        slots = sorted((slot, phys) for phys, slot in enumerate(expert_map.tolist()) if slot >= 0)
        physical = [phys for _, phys in slots]
    return [p % logical for p in physical] if logical else physical


def planned_experts(p):
    """Global expert ids of a planned stacked-expert parameter's slots (from its sources), or
    None when they cannot be told."""
    if not p.shape or p.shape[0] == 0 or not p.slices:
        return None
    slot_bytes = p.nbytes // p.shape[0]
    by_slot = {}
    for s in p.slices:
        m = _EXPERT_ID.search(s["tensor"])
        if m:
            expert = int(m.group(1))
        else:  # a fused [E, ...] source: the expert is the source offset's slab
            shape = s["tensor_shape"]
            bits = _BITS.get(s["tensor_dtype"], 8)
            per = 1
            for d in shape[1:]:
                per *= d
            per = per * bits // 8
            if len(shape) < 3 or per == 0:
                return None
            expert = s["src_offset"] // per
        by_slot.setdefault(s["dst_offset"] // slot_bytes, expert)
    if len(by_slot) != p.shape[0]:
        return None
    return [by_slot[k] for k in sorted(by_slot)]


def check_experts(plan, model):
    """None, or a message naming the first FusedMoE layer whose local experts differ from the plan."""
    modules = dict(model.named_modules())
    for p in plan:
        for suffix in (".w13_weight", ".gate_up_proj"):
            if not p.name.endswith(suffix) or "experts" not in p.name:
                continue
            moe = modules.get(p.name[: -len(suffix)])
            if moe is None or not hasattr(moe, "global_num_experts"):
                continue
            want, got = module_experts(moe), planned_experts(p)
            if got is not None and want != got:
                return ("shardload: %s: vLLM's FusedMoE holds experts %s (local slot order), "
                        "shardload planned %s; the expert-parallel settings differ "
                        "(enable_expert_parallel, expert_placement_strategy, enable_eplb, "
                        "num_redundant_experts)" % (p.name[: -len(suffix)], want, got))
    return None


# -------------------------------------------------------------------------------------------------
# What cannot be bound: to the parameter's weight_loader


_KV_SCALE = re.compile(r"^(.*)\.self_attn\.(?:[qkv]_proj\.|prob_proj\.)?((?:k|v|q|prob)_scale)$")
# DeepSeek-V3.2's indexer in a block-fp8 checkpoint: shardload plans wk (F8, with its scale) and
# weights_proj apart; vLLM fuses them into wk_weights_proj (BF16: wk dequantized while loading).
_INDEXER_PART = re.compile(r"^(.*\.indexer)\.(wk\.weight|wk\.weight_scale_inv|weights_proj\.weight)$")
_INDEXER_HOW = {"wk.weight": "wk", "wk.weight_scale_inv": "wk_scale", "weights_proj.weight": "weights_proj"}
# DeepSeek-V4's attention sink: vLLM pads it to at least 64 heads (-inf beyond the rank's, FlashMLA's
# minimum) and its load_weights copies the rank's heads into the leading slots.
_PADDED_SINK = re.compile(r"\.attn\.attn_sink$")
# Module tensors vLLM leaves at their initial values because its checkpoints have none, by
# architecture: DeepSeek-V4's indexer builds a LayerNorm k_norm its releases do not store (the
# module registered again under mla_attn.).
_VLLM_INITIALIZED = {
    "DeepseekV4ForCausalLM": re.compile(r"\.indexer\.k_norm\.(?:weight|bias)$"),
}


def kept_initialized(model_config):
    """kept(name) for load_into: the module tensors vLLM leaves at their initial values for this
    model's architecture (see _VLLM_INITIALIZED), or None."""
    archs = getattr(model_config, "architectures", None) or \
        getattr(getattr(model_config, "hf_config", None), "architectures", None) or []
    patterns = [_VLLM_INITIALIZED[a] for a in archs if a in _VLLM_INITIALIZED]
    if not patterns:
        return None
    return lambda name: any(p.search(name) for p in patterns)


def _e4m3_values():
    """The 256 values of a float8 e4m3fn byte (sign, 4 exponent bits of bias 7, 3 mantissa bits;
    exponent 0 subnormal, 0x7f and 0xff NaN, no infinity) as float32."""
    import torch
    out = []
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = float("nan")
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        out.append(-v if b & 0x80 else v)
    return torch.tensor(out, dtype=torch.float32)


def dequantize_fp8_blocks(weight, scale, out_dtype):
    """An F8 (e4m3) weight [N, K] times its block scales [N/bn, K/bk] (each scale over a bn x bk
    block, the block sizes taken from the shapes as vLLM's _try_load_fp8_indexer_wk does), the
    product in float32, then out_dtype: vLLM's scaled_dequantize. The weight may arrive as torch's
    float8 type or as its bytes (uint8: a torch without float8 types)."""
    import torch
    raw = weight if weight.dtype == torch.uint8 else weight.view(torch.uint8)
    values = _e4m3_values()[raw.long()]
    rows, cols = weight.shape[0] // scale.shape[0], weight.shape[1] // scale.shape[1]
    s = scale.float().repeat_interleave(rows, dim=0).repeat_interleave(cols, dim=1)
    return (values * s).to(out_dtype)


class WeightLoaderFallback:
    """load_into's fallback for a vLLM model: targets(name) says which planned parameters it
    takes (before any byte is read), __call__(name, tensor) hands the rank's bytes over."""

    def __init__(self, model):
        self.params = dict(model.named_parameters())
        self.modules = dict(model.named_modules())
        self.handed = []   # (planned name, module parameter, how), for the report and the tests
        self.pending = {}  # fused indexer parameter -> {"wk": tensor, "wk_scale": tensor}

    def _route(self, name):
        """(module parameter name, how) or None."""
        m = _KV_SCALE.match(name)
        if m:
            target = "%s.self_attn.attn.%s" % (m.group(1), m.group(2))
            if target in self.params:
                return target, "default"
        m = _INDEXER_PART.match(name)
        if m and name not in self.params and m.group(1) + ".wk_weights_proj.weight" in self.params:
            return m.group(1) + ".wk_weights_proj.weight", _INDEXER_HOW[m.group(2)]
        if name not in self.params:
            return None
        if _PADDED_SINK.search(name) and self.params[name].dim() == 1:
            return name, "leading"
        if name.endswith("weight_shape"):   # pack-quantized: vLLM holds them in its own dtype
            return name, "convert"
        module = self.modules.get(name.rsplit(".", 1)[0])
        if getattr(module, "quant_config", None) is not None and \
                "mxfp4" in str(_quant_name(module.quant_config)) and hasattr(module, "expert_map"):
            return name, "moe_rank"
        if not hasattr(self.params[name], "weight_loader"):
            return name, "default"
        return None

    def targets(self, name):
        route = self._route(name)
        return None if route is None else [route[0]]

    def __call__(self, name, tensor):
        import torch
        target, how = self._route(name)
        param = self.params[target]
        with torch.no_grad():
            if how == "weights_proj":   # shard 1 of the fused indexer projection, as it is
                param.weight_loader(param, tensor, 1)
            elif how in ("wk", "wk_scale"):
                self._indexer_wk(param, target, how, tensor)
            elif how == "leading":   # the rank's heads into the leading slots of the padded sink
                if tensor.dim() != 1 or tensor.shape[0] > param.shape[0]:
                    raise ValueError("%s: %d planned heads do not fit vLLM's %s" % (
                        name, tensor.shape[0], list(param.shape)))
                param.data[:tensor.shape[0]].copy_(tensor)
            elif how == "convert":    # integers into vLLM's dtype, as its loaders' copy converts them
                param.data.copy_(tensor.reshape(param.shape))
            elif how == "moe_rank":   # vLLM's MXFP4 convention: the rank's tensor, every expert
                t = tensor if param.dim() == tensor.dim() else \
                    tensor.reshape(tuple(tensor.shape[:param.dim() - 1]) + (-1,))
                param.weight_loader(param, t, weight_name=target, shard_id=None, expert_id=None)
            else:
                from vllm.model_executor.model_loader.weight_utils import default_weight_loader
                default_weight_loader(param, tensor)
        self.handed.append((name, target, how))


    def _indexer_wk(self, param, target, how, tensor):
        """Shard 0 of the fused indexer projection: wk as it is, or an F8 wk dequantized with its
        scale once both have arrived (the plan puts the scale right after its weight)."""
        import torch
        f8 = tensor.dtype == torch.uint8 or str(tensor.dtype).startswith("torch.float8")
        if how == "wk" and not f8:
            param.weight_loader(param, tensor, 0)
            return
        parts = self.pending.setdefault(target, {})
        parts[how] = tensor.clone()   # the tensor is the loader's memory: valid during the call only
        if "wk" in parts and "wk_scale" in parts:
            del self.pending[target]
            param.weight_loader(param, dequantize_fp8_blocks(parts["wk"], parts["wk_scale"], torch.bfloat16), 0)


def _quant_name(quant_config):
    get_name = getattr(quant_config, "get_name", None)
    return get_name() if callable(get_name) else quant_config


# -------------------------------------------------------------------------------------------------
# The loader


def loader_class():
    """The BaseModelLoader subclass (defined on first use: it needs vllm)."""
    global _class
    if _class is not None:
        return _class
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    class ShardloadModelLoader(BaseModelLoader):
        """load_format="shardload": every worker loads its own shards with shardload."""

        def __init__(self, load_config):
            super().__init__(load_config)
            self.options, self.strict = split_options(
                getattr(load_config, "model_loader_extra_config", None))
            self.plan_mode = self.options.pop("plan", "auto")
            if self.plan_mode not in PLAN_MODES:
                raise ValueError("model_loader_extra_config plan: expected one of %s, got %r"
                                 % ("/".join(PLAN_MODES), self.plan_mode))
            from .config import Config
            self.refit = self.options.pop("refit", False)
            Config(**{k: v for k, v in self.options.items()})   # unknown keys and values fail here
            self.vllm_config = None
            self.main_model_config = None
            self.last = None   # what the last load_weights did: for logs and tests

        def download_model(self, model_config):
            return None   # rank 0 of the load resolves and downloads Hub repositories itself

        def load_model(self, vllm_config, model_config, *args, **kwargs):
            self.vllm_config = vllm_config
            self.main_model_config = getattr(vllm_config, "model_config", None)
            return super().load_model(vllm_config, model_config, *args, **kwargs)

        def _config(self):
            if self.vllm_config is not None:
                return self.vllm_config
            from vllm.config import get_current_vllm_config
            return get_current_vllm_config()

        def _options(self, model, model_config, layout):
            import torch
            options = dict(self.options)
            options.update(layout["keys"])
            if any(p.is_cuda for p in model.parameters()):
                options.setdefault("device", "cuda")
                options.setdefault("cuda_device", torch.cuda.current_device())
            download_dir = getattr(self.load_config, "download_dir", None)
            if download_dir:
                options.setdefault("cache_dir", download_dir)
            revision = getattr(model_config, "revision", None)
            if revision:
                options.setdefault("revision", revision)
            if "skip_vision" not in options and "language_model_only" not in options and \
                    vision_left_out(model, model_config):
                options["skip_vision"] = True
            return options

        def load_weights(self, model, model_config):
            from .errors import Error
            layout = parallel_layout(self._config())
            options = self._options(model, model_config, layout)
            draft = self.main_model_config is not None and model_config is not self.main_model_config
            if draft:
                # vLLM names a draft's architecture (DeepSeekMTPModel for the MTP layers of a
                # DeepSeek-V3/V3.2 or GLM-5 checkpoint) unlike the checkpoint's config.json: the
                # spec is looked up by vLLM's name.
                archs = getattr(model_config, "architectures", None) or \
                    getattr(getattr(model_config, "hf_config", None), "architectures", None)
                if archs and "arch" not in self.options:
                    options["arch"] = archs[0]
            mode, why = self.plan_mode, "model_loader_extra_config plan: record"
            if draft and mode != "record":
                why = self._draft_misfit(model, model_config, layout, options)
                if why is not None:
                    mode = "record"
            if mode == "record":
                return self._load_recorded(model, model_config, layout, options, why)
            try:
                self._load_spec(model, model_config, layout, options)
            except Error as e:
                if mode == "auto" and "unknown architecture" in e.message:
                    return self._load_recorded(model, model_config, layout, options,
                                               "no spec for the architecture")
                raise

        def _load_spec(self, model, model_config, layout, options):
            from . import torch as sl_torch
            from .vllm_recorded import fills_of, summary_line
            fallback = WeightLoaderFallback(model)
            seen = {}

            def check(plan):
                seen["plan"] = plan
                return layout["problem"] or vision_problem(model_config, options) or check_experts(plan, model)

            missing, unexpected = sl_torch.load_into(
                model, model_config.model, group=layout["group"], strict=self.strict,
                fallback=fallback, check=check, kept=kept_initialized(model_config), refit=self.refit,
                after=lambda loader: seen.update(report=loader.report()), **options)
            fills, nbytes = fills_of(seen["plan"])
            self.last = {"loader": "shardload", "plan": "spec", "missing": missing,
                         "unexpected": unexpected, "handed": list(fallback.handed),
                         "options": options, "fills": fills, "bytes": nbytes,
                         "planned": seen["plan"], "report": seen.get("report")}
            if layout["rank"] == 0:
                logger.info(summary_line("spec", fills, nbytes, report=seen.get("report")))

        def _load_recorded(self, model, model_config, layout, options, why):
            from . import torch as sl_torch
            from .vllm_recorded import (FALLBACK_PREFIX, RecordedFallback, fills_of, record_rank,
                                        replay_consts, summary_line, to_plan)
            recording, failed = record_rank(model, model_config, options, layout["group"])
            if failed is not None:
                return self._to_default_loader(model, model_config, failed)
            replay_consts(model, recording)
            handler = RecordedFallback(model, recording)
            seen = {}

            def check(plan):
                seen["plan"] = plan
                return layout["problem"] or check_experts(plan, model)

            const_only = {name for name, _, _ in recording.consts}
            missing, unexpected = sl_torch.load_into(
                model, model_config.model, group=layout["group"], strict=self.strict,
                fallback=handler, check=check, plan=to_plan(recording, options.get("device", "cpu")),
                filled=const_only, kept=kept_initialized(model_config), refit=self.refit,
                after=lambda loader: seen.update(report=loader.report()), **options)
            fills, nbytes = fills_of(seen["plan"])
            for name in [n for n in fills if n.startswith(FALLBACK_PREFIX)]:
                del fills[name]   # a checkpoint tensor: the parameters it fills are named below
            fills.update({n: "fallback" for n in recording.fallback_params})
            self.last = {"loader": "shardload", "plan": "recorded", "why": why, "missing": missing,
                         "unexpected": unexpected, "handed": list(handler.handed),
                         "options": options, "fills": fills, "bytes": nbytes,
                         "planned": seen["plan"], "recording": recording,
                         "report": seen.get("report")}
            if layout["rank"] == 0:
                logger.info(summary_line("recorded (%s)" % why, fills, nbytes, recording,
                                         seen.get("report")))

        def _draft_misfit(self, model, model_config, layout, options):
            """None when shardload can load the draft model, else the reason (collective)."""
            from . import torch as sl_torch
            from .errors import Error, UnexpectedWeightsError
            fallback = WeightLoaderFallback(model)
            try:
                with sl_torch.open_loader(model_config.model, None, layout["group"],
                                          strict=self.strict, **options) as loader:
                    plan = loader.plan()
                    tensors = sl_torch.module_tensors(model)
                    planned = set()
                    lacking = []
                    for p in plan:
                        names = [p.name] if p.name in tensors else fallback.targets(p.name)
                        if names is None:
                            lacking.append(p.name)
                        planned.update(names or [])
                    unfilled = [n for n in tensors if n not in planned and not sl_torch.kept_default(n)]
                    problem = None
                    if lacking or unfilled:
                        problem = UnexpectedWeightsError(
                            "%s (module lacks %s; plan lacks %s)" % (_DRAFT_MISFIT, lacking[:5], unfilled[:5]))
                    loader.agree(problem)
                return None
            except Error as e:
                if "unknown architecture" in e.message or _DRAFT_MISFIT in e.message:
                    return e.message
                raise

        def _to_default_loader(self, model, model_config, reason):
            """vLLM's own loader (every worker reads every file), when nothing could be recorded."""
            import copy
            from vllm.model_executor.model_loader import DefaultModelLoader
            logger.warning("shardload: %s loaded by vLLM's default loader: %s",
                           model_config.model, reason)
            config = copy.copy(self.load_config)
            config.load_format = "auto"
            extra = getattr(self.load_config, "model_loader_extra_config", None) or {}
            config.model_loader_extra_config = {k: v for k, v in extra.items() if k in VLLM_EXTRA_KEYS}
            DefaultModelLoader(config).load_weights(model, model_config)
            self.last = {"loader": "default", "plan": None, "why": reason}

    _class = ShardloadModelLoader
    return _class


# -------------------------------------------------------------------------------------------------
# Weight sync: vLLM's worker extension


class RefitWorkerExtension:
    """worker_extension_cls="shardload.vllm.RefitWorkerExtension": vLLM adds this class to its
    worker class's bases (vLLM `vllm/v1/worker/worker_base.py`, `WorkerWrapperBase.init_worker`),
    so that LLM.collective_rpc / the engine's collective_rpc runs these methods on every worker.
    The model must have been loaded with load_format "shardload" and model_loader_extra_config
    {"refit": true}. Every method is COLLECTIVE over the workers (and, for the refit, the trainers
    publishing the same version over the same sync group)."""

    def shardload_sync_group(self, host, port, rank_offset, world_size, timeout_s=600.0):
        """Joins the sync group of trainers and workers at host:port (its rank 0 serves the store):
        this worker is rank rank_offset + its vLLM rank. Returns that rank."""
        from .syncgroup import sync_group
        self._shardload_sync = sync_group(host, port, int(rank_offset) + self.rank, world_size, timeout_s)
        return self._shardload_sync.rank()

    def shardload_refit(self, version):
        """Receives version `version` from the trainers into the model's parameters (in place).
        Returns the refit's report (a dict; bytes_transferred 0 when the worker held it)."""
        from . import torch as sl_torch
        from .errors import InvalidArgumentError
        group = getattr(self, "_shardload_sync", None)
        if group is None:
            raise InvalidArgumentError("shardload_refit: call shardload_sync_group first")
        return sl_torch.refit_into(self._shardload_model(), int(version), group=group)

    def shardload_refit_state(self):
        """{"version": (held, pending or None), "states": {parameter: "new" | "old" | "partial"}}
        of this worker's loader (docs/spec/DESIGN.md §13, faults)."""
        from . import torch as sl_torch
        from .errors import InvalidArgumentError
        loader = sl_torch.refit_loader(self._shardload_model())
        if loader is None:
            raise InvalidArgumentError("shardload_refit_state: the model was not loaded with "
                                       "load_format shardload and model_loader_extra_config "
                                       "{\"refit\": true}")
        return {"version": loader.version(), "states": loader.reload_state()}

    def _shardload_model(self):
        get_model = getattr(self, "get_model", None)
        model = get_model() if callable(get_model) else None
        return model if model is not None else self.model_runner.model
