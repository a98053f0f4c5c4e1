"""shardload.torch -- load a checkpoint straight into an nn.Module's own tensors, as torch and
vLLM fill a module.

    missing, unexpected = shardload.torch.load_into(module, "/models/m", tp=2)
    missing, unexpected = shardload.torch.load_into(module, "/models/m", group=cpu_group, tp=2)

Every parameter and persistent buffer of `module` (every name state_dict gives it, tied names
included) whose name is a planned parameter (vLLM's layout: qkv_proj, gate_up_proj,
experts.w13_weight / w2_weight, padded vocabulary ...) is filled:

- same dtype, shape and device, contiguous: bound, so the loader writes into the module's memory
  (no copy, no second allocation);
- another float dtype (F32/F16/BF16/F64 on either side), on the host: bound with the module's
  dtype, converted by the C library while it writes (Loader.bind);
- another float dtype on a GPU, another device, or not contiguous: loaded into the loader's
  memory, then copied with torch's copy_ (which casts on the device); that memory is freed after;
- on a GPU, a parameter the plan converts (held in another dtype than its checkpoint tensors, as
  DeepSeek-V3.2's indexer k_norm in F32 from BF16): the library converts in host memory only, so
  the checkpoint's bytes land in a device tensor of their own dtype, then copy_ casts them into the
  module's tensor on the device ("stage");
- a planned alias (tied embeddings: lm_head.weight of model.embed_tokens.weight): nothing to do
  when the module's two names share storage (vLLM's tie, torch's `lm_head.weight = embed.weight`),
  else copied from its target after the load;
- another non-float dtype of the same element size (the checkpoint's int8 FP4 bytes in vLLM's uint8
  parameter, E8M0 scales in uint8): bound as a view of the module's memory in the planned dtype,
  the bytes as they are (what torch's copy_ between them keeps);
- another shape (or a change between a float and a non-float dtype): handed to `fallback` when one
  is given, else bound so that the load fails with the bind's ShapeError/InvalidArgumentError on
  every rank; another non-float dtype of another element size is bound, and fails so.
- a module tensor registered under several names (one Parameter reachable through two module
  paths, as vLLM's DeepSeek-V4 attention registers its layers again) is filled through any of them.

Returns (missing, unexpected) as torch's load_state_dict does: module tensors the plan does not
fill, planned parameters the module lacks (and no fallback takes). Module tensors whose last name
component is in KEPT_DEFAULTS (attention scales: _k_scale, k_scale, ...), and those for which
kept(name) is true when the caller gives `kept`, keep their initial value when the plan has none
and are loaded when it has them; they are never reported. With strict (the
default, as the C key `strict`) either list non-empty is an error raised on every rank before any
byte is read; strict=False loads the rest.

fallback(name, tensor): called after the load, on every rank, for each planned parameter it takes
(see load_into), with the loaded local tensor (the loader's memory, valid during the call; copy
what you keep). An exception in it fails the load on every rank. `fallback.targets(name)`, when
the callable has that attribute, says which planned names it takes: a list of the module tensor
names it fills from that parameter (possibly empty), or None to refuse the name (which is then
reported as usual); without `targets` it takes every parameter load_into cannot bind and fills
the module tensor of the same name.

Weight sync (docs/spec/DESIGN.md §13): load_into(..., refit=True) keeps the loader open on the
module, and refit_into(module, version, group=...) then receives the weights trainer ranks publish
with shardload.publish: bound tensors are written in place, copied ones (and the fallback's) are
copied in again after a refit that moved bytes (staged ones too), as load_into copied them. refit_loader(module) is
that Loader (version(), reload_state(), refit_report()); refit_close(module) closes it.
"""

import contextlib

import torch

from .errors import Error, InvalidArgumentError, MissingWeightsError, UnexpectedWeightsError
from .loader import Loader, _torch_dtypes, sources_dtype

# Module tensors that keep their initial value when the checkpoint has none (vLLM's attention
# scales: the buffers every attention layer registers, the parameters FP8 checkpoints add; the
# group indices vLLM's WNA16 MoE methods create for activation ordering, which checkpoints
# without it do not hold).
__all__ = ["KEPT_DEFAULTS", "module_tensors", "kept_default", "open_loader", "load_into", "refit_into",
           "refit_loader", "refit_close"]

KEPT_DEFAULTS = frozenset(["_k_scale", "_v_scale", "_q_scale", "_prob_scale",
                           "k_scale", "v_scale", "q_scale", "prob_scale",
                           "w13_weight_g_idx", "w2_weight_g_idx", "w13_g_idx_sort_indices",
                           "w2_g_idx_sort_indices"])

_FLOATS = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def module_tensors(module):
    """{name: tensor}: parameters and persistent buffers under every name state_dict gives them
    (a tied tensor appears under each of its names: torch 1.13's named_parameters() lists it
    once and has no remove_duplicate=False)."""
    try:
        return dict(module.state_dict(keep_vars=True))
    except Exception:  # a module whose state_dict hooks fail: walk it instead
        out = {}
        for mod_name, mod in module.named_modules(remove_duplicate=False):
            prefix = mod_name + "." if mod_name else ""
            skip = getattr(mod, "_non_persistent_buffers_set", set())
            for n, p in mod._parameters.items():
                if p is not None:
                    out[prefix + n] = p
            for n, b in mod._buffers.items():
                if b is not None and n not in skip:
                    out[prefix + n] = b
        return out


def kept_default(name):
    return name.rsplit(".", 1)[-1] in KEPT_DEFAULTS


def _strict_value(strict, config):
    if strict is None:
        strict = config.pop("strict", True)
    if isinstance(strict, str):
        strict = strict.lower() in ("1", "true", "yes", "on")
    return bool(strict)


def _same_memory(a, b):
    return a.device == b.device and a.data_ptr() == b.data_ptr() and \
        tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


def _fill_duplicates(tensors, filled):
    """Every name of a tensor one of whose names is filled (one Parameter under several paths)."""
    names = {}
    for n, t in tensors.items():
        names.setdefault(id(t), []).append(n)
    for n in [n for n in filled if n in tensors]:
        filled.update(names[id(tensors[n])])


def open_loader(model, comm=None, group=None, plan=None, **config):
    """Loader over an MPI communicator (comm) or a torch.distributed group (group); plan: this
    rank's shardload.Plan instead of the architecture spec, or None."""
    if group is not None:
        return Loader(model, comm, group=group, plan=plan, **config)
    return Loader(model, comm, plan=plan, **config)


def _raw_view(p, t):
    """The torch dtype to view module tensor t as for planned parameter p, when both are non-float
    types of one element size that differ (int8 bytes into uint8, E8M0 into uint8), else None."""
    want = _torch_dtypes().get(p.dtype)
    if want is None or want == t.dtype or p.dtype in _FLOATS or t.dtype in _FLOATS.values():
        return None
    return want if torch.empty(0, dtype=want).element_size() == t.element_size() else None


def _staged_dtype(p):
    """The torch dtype of p's checkpoint tensors when the plan converts p (another dtype than its
    sources') and torch has that dtype, else None."""
    name = sources_dtype(p)
    return None if name is None else _torch_dtypes().get(name)


def _how(p, t, loader_device):
    """How planned parameter p reaches module tensor t: "bind" (the loader writes t), "view" (it
    writes t viewed in the planned non-float dtype of t's element size), "copy" (from the loader's
    memory after the load) or "other" (a shape, or a change between a float and a non-float type,
    that neither can do: the fallback's, else a bind that fails), or "stage" (on a GPU, a planned
    conversion: loaded into a device tensor of the sources' dtype, cast into t after the load)."""
    if tuple(t.shape) != tuple(p.shape):
        return "other"
    want = _FLOATS.get(p.dtype)
    if (want is not None) != (t.dtype in _FLOATS.values()):  # float into non-float, or the reverse
        return "other"
    if t.device.type == "cuda" and loader_device == "cuda" and _staged_dtype(p) is not None:
        return "stage"
    direct = ((t.device.type == "cuda") == (loader_device == "cuda")) and t.is_contiguous()
    if not direct:
        return "copy"
    if want is None and _raw_view(p, t) is not None:
        return "view"
    if want is None or t.dtype == want or t.device.type == "cpu":
        return "bind"  # non-float types are checked by the bind; host floats converted in C
    return "copy"      # another float type on a GPU: torch casts on the device


def _cuda_device_of(tensors):
    """The GPU ordinal the module's parameters are on (the lowest where they are on several), None
    when none is on a GPU. The loader uses that device rather than the node-local rank's: a rank may
    own any GPU, and the library refuses bound memory of another device before any byte moves."""
    gpus = sorted({t.device.index for t in tensors.values() if t.is_cuda and t.device.index is not None})
    return gpus[0] if gpus else None


def load_into(module, model, comm=None, group=None, strict=None, fallback=None, check=None, kept=None,
              plan=None, after=None, filled=(), refit=False, **config):
    """COLLECTIVE. Loads `model` (folder or Hub id) into `module` on every rank of the load.
    comm: an mpi4py communicator (default: MPI's world); group: a torch.distributed ProcessGroup
    (gloo) of every rank of the load, used instead of MPI. config: the C library's keys (tp, pp,
    dp, enable_expert_parallel, device, ...). The device defaults to the module's (cuda when its
    parameters are on a GPU), and cuda_device to the GPU they are on. fallback: see the module's
    docstring. check(plan): called before any byte is read with this rank's plan (a list of
    shardload.Parameter); a returned message fails the load on every rank. kept(name): module
    tensors that may keep their initial value (see the module's docstring). plan: this rank's
    shardload.Plan (a caller-described plan, docs/spec/DESIGN.md §12) instead of the architecture
    spec. after(loader): called on every rank once the load is done (and the fallback ran), before
    the loader closes (its report(), ...). filled: module tensor names the caller fills itself
    (never reported missing). A module tensor that is the same tensor as a filled one (a tied head:
    one Parameter under two names) is filled too. refit: keep the loader open afterwards, so that
    refit_into can receive the weights trainers publish into the module (weight sync,
    shardload.refit); its memory of copied and staged parameters stays allocated meanwhile.
    Returns (missing, unexpected)."""
    strict = _strict_value(strict, config)
    filled_by_caller = set(filled)
    tensors = module_tensors(module)
    if "device" not in config:
        on_gpu = any(t.is_cuda for t in tensors.values())
        config["device"] = "cuda" if on_gpu else "cpu"
    if config["device"] == "cuda" and "cuda_device" not in config:
        gpu = _cuda_device_of(tensors)
        if gpu is not None:
            config["cuda_device"] = gpu
    targets = getattr(fallback, "targets", None)

    def taken(name):
        """Module names the fallback fills from planned `name`, or None when it does not take it."""
        if fallback is None:
            return None
        if targets is None:
            return [name] if name in tensors else []
        out = targets(name)
        return None if out is None else list(out)

    with contextlib.ExitStack() as scope:  # closes the loader, unless refit keeps it (pop_all)
        loader = scope.enter_context(open_loader(model, comm, group, plan=plan, strict=strict,
                                                 **config))
        plan = loader.plan()
        binds, copies, aliases, handed, views, staged = [], [], [], [], {}, {}
        filled, unexpected = set(), []
        for p in plan:
            t = tensors.get(p.name)
            if p.alias_of is not None:
                if t is not None:
                    target = tensors.get(p.alias_of)
                    if target is None or not _same_memory(t, target):
                        aliases.append((p.name, p.alias_of))
                    filled.add(p.name)
                    continue
            how = "other" if t is None or p.alias_of is not None else _how(p, t, loader.device)
            names = taken(p.name) if how == "other" else None
            if names is not None:
                handed.append(p.name)
                filled.update(names)
            elif t is None:
                unexpected.append(p.name)
            elif how == "copy":
                copies.append(p.name)
                filled.add(p.name)
            elif how == "stage":
                staged[p.name] = torch.empty(p.shape, dtype=_staged_dtype(p), device=t.device)
                filled.add(p.name)
            else:  # bind; a shape the bind refuses fails the load on every rank with its message
                binds.append(p.name)
                filled.add(p.name)
                if how == "view":
                    views[p.name] = _raw_view(p, t)
        unexpected.sort()
        filled.update(n for n in filled_by_caller if n in tensors)
        _fill_duplicates(tensors, filled)
        missing = sorted(n for n in tensors if n not in filled and not kept_default(n) and
                         not (kept is not None and kept(n)))
        problem = None
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append("module tensors the checkpoint does not fill: " + ", ".join(missing))
            if unexpected:
                parts.append("planned parameters the module lacks: " + ", ".join(unexpected))
            cls = MissingWeightsError if missing else UnexpectedWeightsError
            problem = cls("load_into: " + "; ".join(parts))
        if problem is None and check is not None:
            try:
                message = check(plan)
            except Exception as e:  # a failing check must fail every rank, not hang the others
                message = "load_into: check: %s: %s" % (type(e).__name__, e)
            if message:
                problem = InvalidArgumentError(message)
        loader.agree(problem)
        for name in binds:
            data = tensors[name].data
            loader.bind(name, data.view(views[name]) if name in views else data)
        for name, buffer in staged.items():
            loader.bind(name, buffer)
        loader.load()
        work = [("stage", n, None) for n in list(staged)] + [("copy", n, None) for n in copies] + \
            [("alias", n, t) for n, t in aliases] + \
            [("fallback", n, None) for n in handed]
        _after_load(loader, tensors, work, fallback, staged, keep=refit, after=after)
        if refit:
            module._shardload_refit = _Refit(loader, tensors, work, fallback, staged)
            scope.pop_all()  # kept open for refit_into
    return missing, unexpected


def _after_load(loader, tensors, work, fallback, staged, keep=False, after=None):
    """COLLECTIVE. What load_into does once the loader holds the bytes: staged and copied parameters
    into the module's tensors (converted on their device by copy_), planned aliases, the fallback's
    parameters, then after(loader) when given and all went well; any rank's failure raises on every
    rank. keep: the staged buffers stay (the loader writes them again at each refit), else each is
    dropped once copied."""
    failure = None
    loaded = loader.params() if any(kind != "stage" for kind, _, _ in work) else {}

    def step(kind, name, target=None):
        if kind == "stage":
            tensors[name].data.copy_(staged[name] if keep else staged.pop(name))
        elif kind == "copy":
            tensors[name].data.copy_(loaded[name])
        elif kind == "alias":
            tensors[name].data.copy_(tensors[target].data if target in tensors else loaded[name])
        else:
            fallback(name, loaded[name])

    for kind, name, target in work:
        try:
            with torch.no_grad():
                step(kind, name, target)
        except Exception as e:
            if failure is None:
                failure = InvalidArgumentError("load_into: %s: %s: %s" % (name, type(e).__name__, e))
                failure.__cause__ = e
    loaded = None   # the loader's memory of copied parameters is freed with the tensors (unless kept)
    if after is not None and failure is None:
        try:
            after(loader)
        except Exception as e:
            failure = InvalidArgumentError("load_into: after: %s: %s" % (type(e).__name__, e))
            failure.__cause__ = e
    try:
        loader.agree(failure)  # every rank raises when a fallback failed on any rank
    except Error as e:
        if failure is not None:
            raise e from failure.__cause__
        raise


class _Refit:
    """What load_into(refit=True) keeps on the module: the open loader and the steps after it."""

    def __init__(self, loader, tensors, work, fallback, staged):
        self.loader, self.tensors, self.work, self.fallback = loader, tensors, work, fallback
        self.staged = staged

    def refit(self, version, comm=None, group=None, store=None):
        report = self.loader.refit(version, comm=comm, group=group, store=store)
        if report is not None and report.get("bytes_transferred", 0) > 0:
            _after_load(self.loader, self.tensors, self.work, self.fallback, self.staged, keep=True)
        return report

    def close(self):
        self.loader.close()


def refit_into(module, version, comm=None, group=None, store=None):
    """COLLECTIVE over the job of a refit (group: a torch.distributed process group; comm: an
    mpi4py communicator), with the trainers calling shardload.publish(..., version=version): the
    weights they publish land in the module loaded by load_into(..., refit=True) — bound tensors in
    place, the others copied in after, as load_into did (docs/spec/DESIGN.md §13). Returns the
    refit's report (dict; bytes_transferred 0 when the module held the version)."""
    r = getattr(module, "_shardload_refit", None)
    if r is None:
        raise InvalidArgumentError("refit_into: the module was not loaded with "
                                   "shardload.torch.load_into(..., refit=True)")
    return r.refit(version, comm=comm, group=group, store=store)


def refit_loader(module):
    """The Loader load_into(..., refit=True) kept on the module (None without one)."""
    r = getattr(module, "_shardload_refit", None)
    return None if r is None else r.loader


def refit_close(module):
    """Closes the loader kept by load_into(..., refit=True); later refit_into calls are refused."""
    r = getattr(module, "_shardload_refit", None)
    if r is not None:
        del module._shardload_refit
        r.close()
