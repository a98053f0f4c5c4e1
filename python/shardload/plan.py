"""plan.py -- shardload.Plan: this rank's caller-described plan (docs/spec/DESIGN.md §12) instead of
an architecture spec, and shardload.dryrun: the dry run of a spec's or of described plans.

    plan = shardload.Plan()
    i = plan.param("model.layers.0.self_attn.qkv_proj.weight", "BF16", [96, 64])
    plan.region(i, "model.layers.0.self_attn.q_proj.weight", [0, 0], [64, 64], [0, 0], [64, 64])
    ...                                     # a box of a checkpoint tensor -> a box of the parameter
    plan.zeros(j, [250, 0], [6, 64])        # padding no checkpoint byte lands in
    plan.skip("model.layers.0.self_attn.rotary_emb.inv_freq")
    with shardload.Loader("/models/m", plan=plan, tp=2) as loader:   # every rank its own plan
        loader.load()

A region pairs the elements of a box of a checkpoint tensor (start, count: one entry per dimension
of the tensor) with those of a box of the parameter (dst_start, dst_count: one per dimension of the
parameter) in the row-major order of each box. The library checks the whole plan against the
checkpoint on every rank before any byte is read (shardload.PlanError naming the parameter, the
region and its tensor). Adding is cheap (Python lists); the plan reaches the C library in one bulk
call when it is used (Loader, dryrun, to_json), so a DeepSeek-V3-sized rank (~100,000 regions)
costs a fraction of a second. param() refuses a duplicate name at once; the rest is checked there.
"""

import array
import ctypes
import json

from . import _lib
from .config import Config
from .errors import InvalidArgumentError, error_for

lib = _lib.lib

FILLS = {"recorded": 1, "fallback": 2}  # sl_fill (SL_FILL_SPEC = 0 is a spec's)
ZEROS = 0xFFFFFFFF                        # SL_PLAN_ZEROS

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def _dtype_name(dtype):
    """A safetensors dtype name from "BF16", a torch dtype or a numpy dtype."""
    if isinstance(dtype, str):
        return dtype
    mod = type(dtype).__module__
    name = str(dtype)
    if mod.startswith("torch") or name.startswith("torch."):
        from .loader import _torch_dtypes
        for k, v in _torch_dtypes().items():
            if v == dtype:
                return k
        raise InvalidArgumentError("dtype %s has no safetensors name" % name)
    from .loader import _NUMPY
    for k, v in _NUMPY.items():
        if v == getattr(dtype, "name", name):
            return k
    raise InvalidArgumentError("dtype %r has no safetensors name" % (dtype,))


_DTYPE_IDS = {}  # safetensors name -> sl_dtype, from the library's table (filled once)


def _dtype_id(name):
    if not _DTYPE_IDS:
        i = 0
        while lib.sl_dtype_name(i) is not None:
            _DTYPE_IDS[_lib.text(lib.sl_dtype_name(i))] = i
            i += 1
    i = _DTYPE_IDS.get(name)
    if i is None:
        raise InvalidArgumentError("unknown dtype %r (a safetensors dtype name: BF16, F32, ...)" % (name,))
    return i


def _take_text(ptr):
    """A malloc'd C string as str, freed."""
    if not ptr:
        raise MemoryError("out of memory")
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        _libc.free(ptr)


class Plan:
    """This rank's plan: parameters and the regions that fill them (sl_plan)."""

    def __init__(self):
        self._h = ctypes.c_void_p()
        if lib.sl_plan_create(ctypes.byref(self._h)) != 0:
            raise MemoryError("cannot create a plan")
        self._names = {}          # parameter name -> index (those added from Python)
        self._n_params = 0        # in C plus pending
        self._p_names = []         # parameters not yet in C: names (bytes), dtypes, dims, shapes, ...
        self._p_dtype = array.array("i")
        self._p_ndim = array.array("I")
        self._p_shape = array.array("Q")
        self._p_transposed = bytearray()
        self._p_fill = bytearray()
        self._tensors = {}        # tensor name -> index in _tensor_names
        self._tensor_names = []
        self._r_param = array.array("I")
        self._r_tensor = array.array("I")
        self._r_ndim = array.array("I")
        self._r_dst_ndim = array.array("I")
        self._r_nums = array.array("Q")
        self._pending_skips = []

    # building ------------------------------------------------------------------------------

    def param(self, name, dtype, shape, transposed=False, fill="recorded"):
        """A parameter of this rank: its name (unique on the rank), the dtype it is held in (a
        safetensors name, or a torch / numpy dtype), its shape, whether its last two dimensions
        are held transposed against the orientation its regions address, and how it is filled:
        "recorded" (its regions) or "fallback" (one whole checkpoint tensor as stored, for the
        caller's own loader). Returns its index."""
        if name in self._names:
            raise InvalidArgumentError("parameter %s is described twice (names are unique on a rank)" % name)
        if fill not in FILLS:
            raise InvalidArgumentError("fill must be 'recorded' or 'fallback', not %r" % (fill,))
        dt = _dtype_id(dtype if isinstance(dtype, str) else _dtype_name(dtype))
        index = self._n_params
        self._p_names.append(name.encode())
        self._p_dtype.append(dt)
        self._p_ndim.append(len(shape))
        self._p_shape.extend(shape)
        self._p_transposed.append(1 if transposed else 0)
        self._p_fill.append(FILLS[fill])
        self._names[name] = index
        self._n_params += 1
        return index

    def region(self, param, tensor, start, count, dst_start, dst_count):
        """Box start/count of checkpoint tensor `tensor` fills box dst_start/dst_count of
        parameter `param` (an index from param()), elements paired in row-major order."""
        t = self._tensors.get(tensor)
        if t is None:
            t = self._tensors[tensor] = len(self._tensor_names)
            self._tensor_names.append(tensor.encode())
        n, m = len(start), len(dst_start)
        if len(count) != n or len(dst_count) != m:
            raise InvalidArgumentError("region(%s): start and count (dst_start and dst_count) must have "
                                       "one entry per dimension" % tensor)
        self._r_param.append(param)
        self._r_tensor.append(t)
        self._r_ndim.append(n)
        self._r_dst_ndim.append(m)
        nums = self._r_nums
        nums.extend(start)
        nums.extend(count)
        nums.extend(dst_start)
        nums.extend(dst_count)

    def zeros(self, param, dst_start, dst_count):
        """Box dst_start/dst_count of parameter `param` is zero on purpose (vLLM's padded
        vocabulary rows): no checkpoint byte lands there."""
        if len(dst_count) != len(dst_start):
            raise InvalidArgumentError("zeros: dst_start and dst_count must have one entry per dimension")
        self._r_param.append(param)
        self._r_tensor.append(ZEROS)
        self._r_ndim.append(0)
        self._r_dst_ndim.append(len(dst_start))
        self._r_nums.extend(dst_start)
        self._r_nums.extend(dst_count)

    def skip(self, tensor):
        """A checkpoint tensor this rank skips on purpose (rotary buffers, a tied head, another
        stage's layers): when no rank reads it, it is skipped, not unexpected."""
        self._pending_skips.append(tensor)

    # the C plan ------------------------------------------------------------------------------

    def _fail(self, st):
        raise error_for(st, _lib.last_error())

    def handle(self):
        """The C sl_plan with everything added so far (owned by this object)."""
        n = len(self._p_names)
        if n:
            names = (ctypes.c_char_p * n)(*self._p_names)
            dtypes = (ctypes.c_int * n).from_buffer(self._p_dtype)
            ndims = (ctypes.c_uint32 * n).from_buffer(self._p_ndim)
            shapes = (ctypes.c_uint64 * len(self._p_shape)).from_buffer(self._p_shape) if self._p_shape \
                else (ctypes.c_uint64 * 1)()
            flags = (ctypes.c_uint8 * n).from_buffer(self._p_transposed)
            fills = (ctypes.c_uint8 * n).from_buffer(self._p_fill)
            st = lib.sl_plan_add_params(self._h, n, names, dtypes, ndims, shapes, len(self._p_shape), flags, fills)
            del names, dtypes, ndims, shapes, flags, fills
            if st != 0:
                self._fail(st)
            self._p_names = []
            for a in (self._p_dtype, self._p_ndim, self._p_shape, self._p_transposed, self._p_fill):
                del a[:]
        n = len(self._r_param)
        if n:
            names = (ctypes.c_char_p * max(len(self._tensor_names), 1))(*self._tensor_names)
            arrays = [self._r_param, self._r_tensor, self._r_ndim, self._r_dst_ndim]
            ptrs = [(ctypes.c_uint32 * len(a)).from_buffer(a) for a in arrays]
            nums = (ctypes.c_uint64 * max(len(self._r_nums), 1)).from_buffer(self._r_nums) if self._r_nums \
                else (ctypes.c_uint64 * 1)()
            st = lib.sl_plan_add_regions(self._h, n, ptrs[0], ptrs[1], names, len(self._tensor_names), ptrs[2],
                                         ptrs[3], nums, len(self._r_nums))
            del ptrs, nums
            if st != 0:
                self._fail(st)
            for a in arrays:
                del a[:]
            del self._r_nums[:]
        for t in self._pending_skips:
            st = lib.sl_plan_skip(self._h, t.encode())
            if st != 0:
                self._fail(st)
        self._pending_skips = []
        return self._h

    def __len__(self):
        """Its parameters."""
        return self._n_params

    @property
    def regions(self):
        """Its regions (zeros included)."""
        return lib.sl_plan_region_count(self._h) + len(self._r_param)

    def to_json(self):
        """The JSON form (docs/spec/DESIGN.md §12; shardload/core.h sl_plan_to_json)."""
        return _take_text(lib.sl_plan_to_json(self.handle()))

    @classmethod
    def from_json(cls, text):
        """A plan from its JSON form; PlanError naming the key or rule on a defect."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        h = ctypes.c_void_p()
        st = lib.sl_plan_from_json(text, len(text), ctypes.byref(h), None)
        if st != 0:
            raise error_for(st, _lib.last_error())
        plan = cls.__new__(cls)
        Plan.__init__(plan)
        lib.sl_plan_destroy(plan._h)
        plan._h = h
        plan._n_params = lib.sl_plan_param_count(h)
        return plan

    def close(self):
        if self._h:
            lib.sl_plan_destroy(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class DryRun:
    """The dry run's report (docs/REPORT.md: a dict, .report) and its human summary (.summary)."""

    def __init__(self, report, summary):
        self.report = report
        self.summary = summary

    def __getitem__(self, key):
        return self.report[key]


def dryrun(model, world, plans=None, config=None, **values):
    """The plan of every rank of `world` ranks from the headers alone (no MPI, no tensor data):
    model as for Loader, config keys as for Loader (tp, pp, dp: tp*pp*dp = world; with plans and
    none of them, every rank is a data-parallel replica). plans: None (the architecture spec), a
    Plan (every rank's), or a list of one Plan per rank (the same object for ranks that describe
    the same). Returns a DryRun."""
    cfg = config if config is not None else Config()
    cfg.set("model", model)
    for key, value in values.items():
        cfg.set(key, value)
    if plans is not None and not any(cfg.get(k) for k in ("tp", "pp", "dp")):
        cfg.set("dp", world)
    handle = ctypes.c_void_p()
    if plans is None:
        st = lib.sl_dryrun_create(cfg.handle, world, ctypes.byref(handle))
    else:
        if isinstance(plans, Plan):
            plans = [plans] * world
        if len(plans) != world:
            raise InvalidArgumentError("plans: one per rank (%d), got %d" % (world, len(plans)))
        arr = (ctypes.c_void_p * world)(*[p.handle().value for p in plans])
        st = lib.sl_dryrun_create_described(cfg.handle, world, arr, ctypes.byref(handle))
    if st != 0:
        raise error_for(st, _lib.last_error())
    try:
        report = json.loads(_lib.text(lib.sl_dryrun_json(handle)))
        summary = _lib.text(lib.sl_dryrun_summary(handle))
    finally:
        lib.sl_dryrun_destroy(handle)
    return DryRun(report, summary)
