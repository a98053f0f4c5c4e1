"""vllm_recorded.py -- the vLLM plugin's load through a plan recorded from the model's own weight
loaders: an architecture shardload has no spec for (or model_loader_extra_config
{"plan": "record"}). shardload.vllm calls load_recorded(); docs/INTEGRATION.md says what it does.

On every worker:
1. the checkpoint's catalog (headers only, read by the first worker and sent to the others) and
   the recording of model.load_weights over stand-ins of its tensors (shardload.record); a RecordError on any worker fails every worker with it
   (the ranks agree over vLLM's world CPU group before anything else happens); a load_weights that
   fails on stand-ins on any worker (a model that needs values while it loads) hands the model to
   vLLM's own loader on every worker, with a warning;
2. the constants the loaders wrote (outside the plan's zeros) are written into the module;
3. the plan (shardload.Plan: recorded parameters with their regions and zeros, one parameter per
   fallback tensor, the tensors this rank skips) is loaded by shardload.torch.load_into: recorded
   parameters straight into the module's memory, each fallback tensor read once cluster-wide and
   handed, with the others, to model.load_weights as real tensors, a recorded part of a parameter
   (box) copied into it;
4. what was filled which way (spec, recorded, fallback), and the bytes each way, go to the
   loader's `last` and one log line.
"""

import logging

FALLBACK_PREFIX = "fallback:"
logger = logging.getLogger("shardload.vllm")


def to_plan(recording, device="cpu"):
    """The shardload.Plan of a Recording (this rank's). On the host a parameter is planned in its
    own dtype (the library converts the checkpoint's as it writes); for device cuda in the
    checkpoint's (the library converts on the host only: load_into copies with torch, which
    converts on the GPU)."""
    from . import Plan
    plan = Plan()
    for p in recording.params:
        dtype = p.src_dtype if device == "cuda" and p.src_dtype else p.dtype
        i = plan.param(p.name, dtype, list(p.plan_shape()), transposed=p.transposed,
                       fill="recorded")
        region = plan.region
        for r in p.regions:   # the boxes are lists of ints already (Plan.region extends arrays)
            region(i, r.tensor, r.src_start, r.src_count, r.dst_start, r.dst_count)
        for start, count in p.zeros:
            plan.zeros(i, list(start), list(count))
    for t in recording.fallback:
        info = recording.catalog[t]
        shape = list(info.shape)
        i = plan.param(FALLBACK_PREFIX + t, info.dtype, shape, fill="fallback")
        plan.region(i, t, [0] * len(shape), shape, [0] * len(shape), shape)
    for t in recording.skipped:
        plan.skip(t)
    return plan


def _agree(group, message):
    """Every worker's message (None: fine) over the group; the first one, named by its rank."""
    import torch.distributed as dist
    world = dist.get_world_size(group)
    everyone = [None] * world
    dist.all_gather_object(everyone, message, group=group)
    for rank, m in enumerate(everyone):
        if m is not None:
            return m if m.startswith("rank ") else "rank %d: %s" % (rank, m)
    return None


def _first_rank(group):
    import torch.distributed as dist
    if hasattr(dist, "get_process_group_ranks"):
        return dist.get_process_group_ranks(group)[0]
    return dist.distributed_c10d._get_global_rank(group, 0)   # torch 1.13


def shared_catalog(model_config, options, group):
    """The checkpoint's catalog, read by the group's first worker (which brings a Hub id into the
    cache) and sent to the others; (catalog, None) or (None, the failure's message)."""
    import torch.distributed as dist
    from . import catalog as sl_catalog
    box = [None]
    if dist.get_rank(group) == 0:
        try:
            box[0] = (sl_catalog.tensors(model_config.model, **{
                k: options.get(k) for k in ("load_format", "revision", "cache_dir")}), None)
        except Exception as e:
            box[0] = (None, "the checkpoint's catalog: %s: %s" % (type(e).__name__, e))
    dist.broadcast_object_list(box, src=_first_rank(group), group=group)
    return box[0]


def record_rank(model, model_config, options, group):
    """(This worker's Recording, None), or (None, why) when load_weights failed on stand-ins on
    some worker (every worker then hands the model to vLLM's own loader). A RecordError, or a
    catalog failure, on any worker raises on every worker."""
    from . import record as sl_record
    from .errors import InvalidArgumentError
    recording, problem, failed = None, None, None
    tensors, problem = shared_catalog(model_config, options, group)
    if tensors is not None:
        try:
            recording = sl_record.record(model, tensors)
        except sl_record.RecordError as e:
            problem = str(e)
        except Exception as e:   # a loader that needs values while it loads
            failed = "load_weights failed on stand-ins of the checkpoint (%s: %s)" % (type(e).__name__, e)
    message = _agree(group, problem)
    if message is not None:
        raise InvalidArgumentError("shardload: the recording of the model's weight loaders failed: "
                                   + message)
    failed = _agree(group, failed)
    return (None, failed) if failed is not None else (recording, None)


def replay_consts(model, recording):
    """Writes the constants the loaders wrote (beside the plan) into the module's parameters."""
    import torch
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, (offset, sizes, strides), value in recording.consts:
            p = params[name].data
            view = p.as_strided(sizes, strides, p.storage_offset() + offset)
            if isinstance(value, torch.Tensor):
                view.copy_(value.to(view.device))
            else:
                view.fill_(value)


class RecordedFallback:
    """load_into's fallback for a recorded plan: a recorded part of a parameter (its box) is
    copied into it; the fallback tensors (plan names fallback:TENSOR) are kept and, once this
    rank's last one arrived, handed together to model.load_weights as real tensors."""

    def __init__(self, model, recording):
        self.model = model
        self.recording = recording
        self.params = dict(model.named_parameters())
        self.boxes = {p.name: p for p in recording.params if p.box is not None}
        self.pending = {}
        self.handed = []

    def targets(self, name):
        if name in self.boxes:
            return [name]
        if name.startswith(FALLBACK_PREFIX):
            t = name[len(FALLBACK_PREFIX):]
            if self.recording.fallback and t == self.recording.fallback[0]:
                return list(self.recording.fallback_params)   # the pass fills them
            return []
        return None

    def __call__(self, name, tensor):
        import torch
        if name in self.boxes:
            p = self.boxes[name]
            start, count = p.box
            view = self.params[name].data[tuple(slice(s, s + c) for s, c in zip(start, count))]
            with torch.no_grad():
                view.copy_(tensor)
            self.handed.append((name, name, "box"))
            return
        t = name[len(FALLBACK_PREFIX):]
        self.pending[t] = tensor.clone()   # the loader's memory is valid during the call only
        if len(self.pending) == len(self.recording.fallback):
            weights = [(n, self.pending[n]) for n in self.recording.fallback]
            self.pending = {}
            with torch.no_grad():
                self.model.load_weights(iter(weights))
            self.handed += [(FALLBACK_PREFIX + n, n, "load_weights") for n, _ in weights]


def fills_of(plan):
    """({parameter: "spec" | "recorded" | "fallback"}, {way: bytes}) of a loader's plan (each
    planned parameter's fill, shardload.Parameter.fill; its bytes as held on this rank)."""
    fills, nbytes = {}, {"spec": 0, "recorded": 0, "fallback": 0}
    for p in plan:
        if p.alias_of is not None:
            continue
        way = getattr(p, "fill", None) or "spec"
        fills[p.name] = way
        nbytes[way] = nbytes.get(way, 0) + p.nbytes
    return fills, nbytes


def summary_line(way, fills, nbytes, recording=None, report=None):
    """The plugin's one log line: how the job's parameters were filled (the report's fill, every
    rank's; else this rank's), and the recording's time."""
    job = (report or {}).get("fill")
    if job:
        parts = ["%s %d parameters (%d bytes)" % (w, job[w].get("params", 0), job[w].get("bytes", 0))
                 for w in ("spec", "recorded", "fallback") if job.get(w, {}).get("params")]
        scope = "job"
    else:
        counts = {}
        for w in fills.values():
            counts[w] = counts.get(w, 0) + 1
        parts = ["%s %d parameters (%d bytes)" % (w, counts.get(w, 0), nbytes.get(w, 0))
                 for w in ("spec", "recorded", "fallback") if counts.get(w)]
        scope = "rank 0"
    text = "shardload: plan %s: %s: %s" % (way, scope, ", ".join(parts) or "nothing")
    if recording is not None:
        text += "; recording %.2f s" % recording.seconds
    return text
