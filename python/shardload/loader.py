"""loader.py -- shardload.Loader: the C loader from Python, collective like the C API.

    with shardload.Loader("/models/m", tp=2) as loader:      # every rank of comm
        for p in loader.plan():                              # this rank's parameters
            ...                                              # p.name, p.dtype, p.shape, p.slices
        loader.bind("model.norm.weight", my_tensor)          # optional: the caller's memory
        loader.load()                                        # collective
        weights = loader.params()                            # name -> torch tensor (or numpy)

Binding is checked against the plan (name, dtype, shape, contiguity, device) before any byte
moves. A host tensor of another float dtype (float32, float16, bfloat16, float64 against a plan of
F32, F16, BF16 or F64) is accepted: the C library converts each element while it writes
(sl_loader_bind_as, rounding as torch's .to(dtype)); on CUDA a dtype difference is refused. A
failed check is recorded and raised by load() on every rank (the failing rank's status and
message; "another rank failed: rank R: ..." elsewhere), so that no rank waits for another.

Loaded parameters are exported by DLPack: each Parameter has __dlpack__/__dlpack_device__, and the
capsule holds a counted reference on the memory (sl_loader_param_retain), so a tensor made from
it stays valid after the loader is closed. Memory the caller bound is never freed by shardload.

    loader.reload("/ckpt/step-200")                          # collective: same memory, new values

reload() reads another checkpoint of the same architecture and shapes into the same memory
(sl_loader_reload): tensors from params() and bound tensors see the new values; a checkpoint that
does not match is refused on every rank before any byte is written.

    side = world.Split(0 if gives else 1, world.Get_rank())  # each side in the job's order
    loader = shardload.Loader(m, side, tp=2 if gives else 1, dp=1 if gives else 2)
    if gives:
        loader.load()                                        # the donors: from storage
    loader.load_from_peers(world)                            # collective over the job

load_from_peers() gives a loaded loader's parameters to freshly created loaders of another layout
over a communicator that holds both (sl_loader_load_from_peers): the receivers read nothing from
storage, the donors stay as they were (docs/spec/DESIGN.md §11).

    loader.refit(group=sync_group, version=step)            # trainers: shardload.publish(...)

refit() receives the weights trainer ranks publish into the same memory, every step of an RL loop
(shardload.refit, docs/spec/DESIGN.md §13).
"""

import atexit
import ctypes
import json
import warnings

from . import _lib
from . import progress as _progress
from .config import Config
from .errors import (Error, InvalidArgumentError, NotFoundError, ShapeError, check,
                     error_for)

from . import errors as _errors

FILL_NAMES = {0: "spec", 1: "recorded", 2: "fallback"}  # sl_fill

PEER_FAILED = next(c.status for c in _errors.BY_STATUS.values() if c.status_name == "PEER_FAILED")
MPI_FAILED = next(c.status for c in _errors.BY_STATUS.values() if c.status_name == "MPI")

lib = _lib.lib

# DLPack device types (dlpack.h).
KDL_CPU = 1
KDL_CUDA = 2

# -------------------------------------------------------------------------------------------------
# Communicators


_mpi_initialized_here = False


def _world_without_mpi4py():
    """MPI_COMM_WORLD of Open MPI through ctypes (MPI_Init here when nobody did)."""
    global _mpi_initialized_here
    flag = ctypes.c_int(0)
    lib.MPI_Initialized(ctypes.byref(flag))
    if not flag.value:
        _lib.promote_mpi()
        rc = lib.MPI_Init(None, None)
        if rc != 0:
            raise error_for(MPI_FAILED, "MPI_Init failed (error code %d)" % rc)
        _mpi_initialized_here = True
        atexit.register(_finalize)
    try:
        return ctypes.addressof(ctypes.c_char.in_dll(lib, "ompi_mpi_comm_world"))
    except ValueError:
        raise InvalidArgumentError("without mpi4py shardload finds MPI_COMM_WORLD in Open MPI "
                                   "only: install mpi4py (Debian: python3-mpi4py) and pass comm")


def _finalize():
    flag = ctypes.c_int(0)
    lib.MPI_Finalized(ctypes.byref(flag))
    if not flag.value:
        lib.MPI_Finalize()


def comm_handle(comm):
    """(MPI_Comm as an integer, the object kept alive). comm: an mpi4py communicator or None
    (mpi4py's COMM_WORLD, or Open MPI's world through ctypes when mpi4py is absent)."""
    if comm is None:
        try:
            from mpi4py import MPI
        except ImportError:
            return _world_without_mpi4py(), None
        comm = MPI.COMM_WORLD
    if isinstance(comm, int):
        return comm, None
    from mpi4py import MPI
    return MPI._handleof(comm), comm


# -------------------------------------------------------------------------------------------------
# Element types of torch and numpy


def _torch_dtypes():
    try:
        import torch
    except ImportError:
        return {}
    pairs = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
             "I8": "int8", "U8": "uint8", "I16": "int16", "I32": "int32", "I64": "int64",
             "BOOL": "bool", "C64": "complex64", "U16": "uint16", "U32": "uint32",
             "U64": "uint64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
             "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
             "F8_E8M0": "float8_e8m0fnu"}
    return {k: getattr(torch, v) for k, v in pairs.items() if hasattr(torch, v)}


_NUMPY = {"F32": "float32", "F64": "float64", "F16": "float16", "I8": "int8", "U8": "uint8",
          "I16": "int16", "U16": "uint16", "I32": "int32", "U32": "uint32", "I64": "int64",
          "U64": "uint64", "BOOL": "bool", "C64": "complex64"}


def numpy_dtype(dtype):
    """numpy dtype of a safetensors dtype; types numpy lacks (BF16, F8_*) as unsigned integers of
    the same width, F4/F6 as bytes."""
    import numpy as np
    if dtype in _NUMPY:
        return np.dtype(_NUMPY[dtype])
    if dtype == "BF16":
        return np.dtype("uint16")
    return np.dtype("uint8")


def _describe(tensor):
    """(kind, dtype string, shape, device type, device index, contiguous, data pointer, nbytes)."""
    mod = type(tensor).__module__
    if mod.startswith("torch"):
        t = tensor.detach() if hasattr(tensor, "detach") else tensor
        return ("torch", t.dtype, tuple(t.shape), t.device.type, t.device.index,
                t.is_contiguous(), t.data_ptr(), t.numel() * t.element_size())
    if mod.startswith("numpy"):
        import numpy as np
        a = np.asarray(tensor)
        if not a.flags.writeable:
            raise InvalidArgumentError("the numpy array is read-only")
        return ("numpy", a.dtype, tuple(a.shape), "cpu", None, bool(a.flags.c_contiguous),
                a.ctypes.data, a.nbytes)
    raise InvalidArgumentError("bind takes a torch tensor or a numpy array, got %s" % type(tensor))


def sources_dtype(p):
    """The dtype of parameter p's checkpoint tensors when it is one and differs from the dtype the
    plan holds p in (a planned conversion), else None."""
    have = {s["tensor_dtype"] for s in p.slices}
    return have.pop() if len(have) == 1 and p.dtype not in have else None


def _dtype_ok(kind, have, want, raw_ok):
    if kind == "torch":
        expected = _torch_dtypes().get(want)
        if expected is not None and have == expected:
            return True
        if expected is None and raw_ok:  # torch lacks the type: raw unsigned of the same width
            return str(have) in ("torch.uint8", "torch.int16", "torch.uint16") and \
                _width(str(have)) == _lib.lib.sl_dtype_bits(_dtype_id(want))
        return False
    return have == numpy_dtype(want) or (raw_ok and want not in _NUMPY and
                                         have.itemsize * 8 == _lib.lib.sl_dtype_bits(_dtype_id(want)))


# The float types the C library converts between (sl_loader_bind_as), by torch and numpy name.
_CASTS = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}


def _cast_dtype(kind, have, want):
    """The safetensors name of `have` when a host buffer of it can receive a parameter planned as
    `want` by conversion (both among F32, F16, BF16, F64), else None."""
    if want not in _CASTS.values():
        return None
    name = str(have)[len("torch."):] if kind == "torch" else getattr(have, "name", str(have))
    return _CASTS.get(name)


def _width(torch_dtype_name):
    return {"torch.uint8": 8, "torch.int16": 16, "torch.uint16": 16}.get(torch_dtype_name, 0)


def _dtype_id(name):
    for i in range(64):
        n = _lib.text(lib.sl_dtype_name(i))
        if n is None:
            break
        if n == name:
            return i
    return -1


# -------------------------------------------------------------------------------------------------
# Parameters


_DLTENSOR = b"dltensor"
_USED = b"used_dltensor"
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _Destructor]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


def _capsule_destructor(capsule):
    # A consumer renames the capsule "used_dltensor" and owns the tensor then; an unconsumed
    # capsule still named "dltensor" frees it here.
    if _api.PyCapsule_IsValid(capsule, _DLTENSOR):
        lib.sl_dlpack_free(_api.PyCapsule_GetPointer(capsule, _DLTENSOR))


_capsule_destructor_c = _Destructor(_capsule_destructor)


class Parameter:
    """One local parameter of the plan. After the load it exports its memory by DLPack."""

    def __init__(self, loader, index, p):
        self._loader = loader
        self.index = index
        self.name = _lib.text(p.name)
        self.dtype = _lib.text(p.dtype)
        self.dtype_id = lib.sl_param_dtype_id(ctypes.byref(p))
        self.dtype_bits = p.dtype_bits
        self.shape = tuple(p.local_shape[d] for d in range(p.ndim))
        self.global_shape = tuple(p.global_shape[d] for d in range(p.ndim))
        self.nbytes = p.nbytes
        self.shard = _lib.text(p.shard)
        self.alias_of = _lib.text(p.alias_of)
        self.device = loader.device
        self.bound = False
        self.slices = self._slices(loader, index)
        # how it is filled: "spec", or a described plan's "recorded" / "fallback"
        self.fill = FILL_NAMES.get(lib.sl_loader_param_fill(loader._h, index), "spec")

    @staticmethod
    def _slices(loader, index):
        """Where the bytes come from, machine-readable: one dict per source (sl_param_source):
        the checkpoint tensor, its shape, the byte geometry, and (when the geometry is whole
        elements of a 2-D view [prod(shape[:-1]), shape[-1]] of the tensor) the element slice
        'start'/'stop'/'step' of that view and the local element offset 'dst_start'. With
        'dst_transposed' (Llama-4's experts in the vllm layout) the destination offsets count in the
        checkpoint's orientation: the local shape with its last two dimensions swapped."""
        out = []
        n = lib.sl_loader_param_source_count(loader._h, index)
        src = _lib.ParamSource(size=ctypes.sizeof(_lib.ParamSource))
        for k in range(n):
            check(lib.sl_loader_param_source(loader._h, index, k, ctypes.byref(src)))
            shape = [src.tensor_shape[d] for d in range(src.tensor_ndim)]
            d = {"tensor": _lib.text(src.tensor), "tensor_dtype": _lib.text(lib.sl_dtype_name(src.dtype)),
                 "tensor_shape": shape, "src_offset": src.src_offset, "src_stride": src.src_stride,
                 "row_bytes": src.row_bytes, "rows": src.rows, "dst_offset": src.dst_offset,
                 "dst_stride": src.dst_stride, "dst_transposed": bool(src.dst_transposed)}
            bits = lib.sl_dtype_bits(src.dtype)
            cols = shape[-1] if shape else 1
            row = cols * bits // 8 if bits % 8 == 0 else 0
            if row and src.src_offset % (bits // 8) == 0 and src.row_bytes % (bits // 8) == 0:
                eb = bits // 8
                r0, c0 = divmod(src.src_offset // eb, cols)
                ncols = src.row_bytes // eb
                step = src.src_stride // row if src.rows > 1 and src.src_stride % row == 0 else 1
                if ncols > cols and c0 == 0 and ncols % cols == 0 and src.rows == 1:
                    d.update(start=[r0, 0], stop=[r0 + ncols // cols, cols], step=[1, 1])
                elif c0 + ncols <= cols and (src.rows == 1 or src.src_stride % row == 0):
                    d.update(start=[r0, c0], stop=[r0 + (src.rows - 1) * step + 1, c0 + ncols],
                             step=[step, 1])
                d["dst_start"] = src.dst_offset // eb
            out.append(d)
        return out

    def __repr__(self):
        return "Parameter(%r, %s, shape=%s, %s)" % (self.name, self.dtype, list(self.shape),
                                                     self.shard)

    def as_dict(self):
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                "global_shape": list(self.global_shape), "nbytes": self.nbytes,
                "shard": self.shard, "slices": self.slices, "device": self.device,
                "alias_of": self.alias_of, "bound": self.bound, "fill": self.fill}

    # DLPack ---------------------------------------------------------------------------------

    def __dlpack_device__(self):
        p = self._loader._param(self.index)
        return (KDL_CUDA, p.device) if p.device >= 0 else (KDL_CPU, 0)

    def __dlpack__(self, stream=None, **kwargs):
        """A 'dltensor' capsule on this parameter's memory, holding a reference on it. The load is
        complete when load() returns (CUDA: synchronized), so stream needs no wait."""
        self._loader._need_loaded()
        managed = ctypes.c_void_p()
        st = lib.sl_loader_param_dlpack(self._loader._h, self.index, ctypes.byref(managed))
        check(st, self._loader._message)
        try:
            return _api.PyCapsule_New(managed, _DLTENSOR, _capsule_destructor_c)
        except BaseException:
            lib.sl_dlpack_free(managed)
            raise

    def torch(self):
        """A torch tensor on the memory (zero-copy, by DLPack). Types DLPack lacks (F8_*, F4,
        F6_*) arrive as uint8 bytes, viewed as torch's float8 type of that name when it has one."""
        import torch
        t = torch.utils.dlpack.from_dlpack(self)
        want = _torch_dtypes().get(self.dtype)
        if want is not None and t.dtype != want and self.dtype_bits == 8:
            t = t.view(want).reshape(self.shape)
        return t

    def numpy(self):
        """A numpy array on the memory (host only). numpy's own types through numpy.from_dlpack;
        BF16 and F8 as unsigned integers of the same width, viewing the same bytes."""
        import numpy as np
        if self.device != "cpu":
            raise InvalidArgumentError("%s is in CUDA memory: numpy needs host memory" % self.name)
        c = self._loader._param(self.index)  # the memory's dtype: a binding's (converted), or planned
        dtype, bits, nbytes = _lib.text(c.dtype), c.dtype_bits, c.nbytes
        if dtype in _NUMPY:
            return np.from_dlpack(self)
        dt = numpy_dtype(dtype)
        shape = self.shape if bits % 8 == 0 else (nbytes,)
        return np.asarray(_Retained(self, dt, shape))


class _Retained:
    """Host memory of one loaded parameter as numpy's array interface, holding a C reference
    (sl_loader_param_retain) released when numpy drops the array: for types numpy lacks."""

    def __init__(self, param, dtype, shape):
        ref = ctypes.c_void_p()
        check(lib.sl_loader_param_retain(param._loader._h, param.index, ctypes.byref(ref)),
              param._loader._message)
        self._ref = ref
        self.__array_interface__ = {"data": (lib.sl_param_ref_data(ref), False),
                                    "shape": tuple(shape), "typestr": dtype.str, "version": 3}

    def __del__(self):
        if getattr(self, "_ref", None):
            lib.sl_param_ref_release(self._ref)
            self._ref = None


# -------------------------------------------------------------------------------------------------
# Loader


def _world_size(comm, group):
    """Ranks of the load: the group's, or the MPI communicator's."""
    if group is not None:
        return group.size()
    handle, _ = comm_handle(comm)
    n = ctypes.c_int(1)
    lib.MPI_Comm_size(ctypes.c_void_p(handle), ctypes.byref(n))
    return n.value


class Loader:
    """Loader(model, comm=None, group=None, **config): COLLECTIVE over the ranks of the load.

    The ranks are either an MPI communicator (comm: an mpi4py communicator, default COMM_WORLD;
    the job is started by mpirun) or a torch.distributed process group (group: every rank of the
    load, e.g. torch.distributed.group.WORLD or vLLM's world CPU group; gloo carries the host
    bytes; torchrun, torch.multiprocessing, vLLM and SGLang workers): MPI is then never
    initialised. store: with group, the torch.distributed Store the group's ranks share (default:
    the default process group's). config: the C library's keys (shardload.Config.keys()), e.g.
    tp=2, enable_expert_parallel=True, strict=False. A Config object may be passed as config=.
    progress: a callable fn(bytes_done, bytes_total) or True (shardload/progress.py); a string
    is the `progress` configuration key (auto, always, never: what rank 0 prints on stderr).
    plan: this rank's shardload.Plan instead of the architecture spec (every rank passes one; with
    none of tp, pp, dp given, every rank is a data-parallel replica in the report)."""

    def __init__(self, model, comm=None, config=None, progress=None, group=None, store=None, plan=None,
                 **values):
        from .torchcomm import TorchComm, is_process_group
        self._h = None
        self._model = model
        cfg = config if config is not None else Config()
        cfg.set("model", model)
        for key, value in values.items():
            cfg.set(key, value)
        if isinstance(progress, str):
            cfg.set("progress", progress)
            progress = None
        self._cfg = cfg
        if group is None and comm is not None and is_process_group(comm):
            group, comm = comm, None
        if group is not None and comm is not None:
            raise InvalidArgumentError("pass comm (MPI) or group (torch.distributed), not both")
        handle = ctypes.c_void_p()
        self._transport = None
        if plan is not None and not any(cfg.get(k) for k in ("tp", "pp", "dp")):
            cfg.set("dp", _world_size(comm, group))  # a described load: every rank a replica by default
        if group is not None:
            timeout = cfg.get("timeout_s")
            self._transport = TorchComm(group, store, float(timeout) if timeout else 600.0)
            self._comm_int, self._comm_obj = None, None
            st = lib.sl_loader_create_ops(cfg.handle, ctypes.byref(self._transport.ops()), ctypes.byref(handle))
        else:
            self._comm_int, self._comm_obj = comm_handle(comm)
            st = lib.sl_loader_create(cfg.handle, ctypes.c_void_p(self._comm_int), ctypes.byref(handle))
        if st != 0:
            raise error_for(st, self._comm_failure() or _lib.last_error())
        self._h = handle
        self._plan_error = None
        if plan is not None:  # this rank's plan instead of the architecture spec (docs/spec/DESIGN.md §12)
            try:
                st = lib.sl_loader_set_plan(self._h, plan.handle())
                if st != 0:
                    raise error_for(st, self._message())
            except Error as e:
                # Raised by the next collective call, which then fails on every rank ("rank R could
                # not set its plan"): raising here would leave the other ranks waiting in it.
                self._plan_error = e
                lib.sl_loader_set_plan(self._h, None)
        self.device = cfg.get("device") or "cpu"
        self._plan = None
        self._by_name = {}
        self._loaded = False
        self._pending = None  # first failed bind: (status, message)
        self._bound = {}      # name -> the caller's tensor (kept alive until load returns)
        self._progress = None  # shardload.progress.Forwarder: the C callback and fn's exception
        if progress is True:
            progress = _progress.default_reporter(self._rank())
        if callable(progress):
            self._progress = _progress.Forwarder(progress)
            self._check(lib.sl_loader_set_progress(
                self._h, ctypes.cast(self._progress.c_callback, ctypes.c_void_p), None))

    # plumbing ----------------------------------------------------------------------------------

    @property
    def rank(self):
        """This process's rank in the load."""
        return self._rank()

    def _rank(self):
        if self._transport is not None:
            return self._transport.rank
        r = ctypes.c_int(0)
        lib.MPI_Comm_rank(ctypes.c_void_p(self._comm_int), ctypes.byref(r))
        return r.value

    def _comm_failure(self):
        return self._transport.failure if self._transport is not None else None

    def _message(self):
        return _lib.last_error()

    def _own_message(self):
        """The failure this loader recorded itself (empty when a call ended on the transport's
        error): whether the transport's failure is the one to raise (refit.py, _run)."""
        return _lib.text(lib.sl_loader_error(self._h)) if self._h else ""

    def _check(self, st):
        """Raises the failure of a C call: the same class on every rank (a rank that only saw a
        peer fail raises the class of that peer's failure, with .peer_rank set; over a
        torch.distributed group, a lost worker is .peer_rank on every survivor, and .lost_ranks
        lists every lost one)."""
        if st == 0:
            return
        if self._plan_error is not None:  # this rank's plan failed: its own error, not the agreement's
            raise self._plan_error
        cause_rank = ctypes.c_int(-1)
        cause = lib.sl_loader_error_cause(self._h, ctypes.byref(cause_rank)) if self._h else st
        e = error_for(cause if st == PEER_FAILED and cause not in (0, PEER_FAILED) else st, self._message())
        e.peer_rank = cause_rank.value if cause_rank.value >= 0 and st == PEER_FAILED else None
        e.lost_ranks = []
        transport = self._transport
        if transport is not None and transport.failure is not None:
            # A worker lost (dead, stopped): it is the cause on every survivor, whichever survivor
            # noticed first; and no survivor's process ends before the others have learned so.
            transport.settle()
            if transport.lost:
                e.lost_ranks = sorted(transport.lost)
                e.peer_rank = e.lost_ranks[0]
        raise e

    def _need_open(self):
        if not self._h:
            raise InvalidArgumentError("the loader is closed")

    def _need_loaded(self):
        self._need_open()
        if not self._loaded:
            raise InvalidArgumentError("call load() first")

    def _param(self, index):
        return lib.sl_loader_param(self._h, index).contents

    # collective steps --------------------------------------------------------------------------

    def plan(self):
        """COLLECTIVE (the first time). The list of this rank's parameters (Parameter objects:
        name, dtype, shape (local), global_shape, shard, slices, device, nbytes, alias_of)."""
        self._need_open()
        if self._plan is None:
            self._check(lib.sl_loader_plan(self._h))
            n = lib.sl_loader_param_count(self._h)
            self._plan = [Parameter(self, i, self._param(i)) for i in range(n)]
            self._by_name = {p.name: p for p in self._plan}
        return list(self._plan)

    def _fail_bind(self, status_cls, message):
        if self._pending is None:
            self._pending = (status_cls.status, message)

    def bind(self, name, tensor):
        """Not collective. The parameter `name` is written into `tensor` (torch tensor or numpy
        array, CPU or CUDA, contiguous, of the planned dtype and local shape, on the loader's
        device). A CPU tensor may have another float dtype than the plan (float32, float16,
        bfloat16, float64; the plan F32, F16, BF16 or F64): the C library converts each element
        while it writes, as torch's .to(dtype) rounds. Checked before any byte moves; a failure is
        raised by load() on every rank. Returns True when the binding was accepted."""
        self._need_open()
        if self._plan is None:
            raise InvalidArgumentError("call plan() before bind()")
        if self._loaded:
            raise InvalidArgumentError("bind(%s): bind before load()" % name)
        p = self._by_name.get(name)
        if p is None:
            self._fail_bind(NotFoundError, "bind(%s): this rank holds no parameter of that name" % name)
            return False
        if p.alias_of is not None:
            self._fail_bind(InvalidArgumentError, "bind(%s): it shares the memory of %s: bind that "
                            "one instead" % (name, p.alias_of))
            return False
        try:
            kind, dtype, shape, dev, dev_index, contiguous, ptr, nbytes = _describe(tensor)
        except Error as e:
            self._fail_bind(type(e), "bind(%s): %s" % (name, e.message))
            return False
        cast = None
        if not _dtype_ok(kind, dtype, p.dtype, True):
            cast = _cast_dtype(kind, dtype, p.dtype) if dev == "cpu" else None
            held_as = sources_dtype(p)
            if cast is None and dev != "cpu" and held_as is not None and _dtype_ok(kind, dtype, held_as, False):
                # A planned conversion (the checkpoint's BF16 held in F32, I64 in I32) is done in host
                # memory only: a device buffer of the sources' dtype is written as they are, and the
                # caller converts on the device (shardload.torch does).
                cast = held_as
            if cast is None:
                hint = ""
                if dev != "cpu" and _cast_dtype(kind, dtype, p.dtype) is not None:
                    hint = " (a conversion is done on the host only: load, then convert on the GPU)"
                self._fail_bind(InvalidArgumentError, "bind(%s): the plan holds %s, the %s tensor is %s%s"
                                % (name, p.dtype, kind, dtype, hint))
                return False
        if tuple(shape) != tuple(p.shape):
            self._fail_bind(ShapeError, "bind(%s): the plan holds local shape %s, the tensor has "
                            "shape %s" % (name, list(p.shape), list(shape)))
            return False
        if not contiguous:
            self._fail_bind(InvalidArgumentError, "bind(%s): the tensor is not contiguous" % name)
            return False
        want_dev = "cuda" if self.device == "cuda" else "cpu"
        if dev != want_dev:
            self._fail_bind(InvalidArgumentError, "bind(%s): the loader writes %s memory (device=%s), "
                            "the tensor is on %s" % (name, want_dev, self.device, dev))
            return False
        if cast is not None:
            st = lib.sl_loader_bind_as(self._h, name.encode(), ctypes.c_void_p(ptr), nbytes,
                                       _dtype_id(cast))
        else:
            st = lib.sl_loader_bind(self._h, name.encode(), ctypes.c_void_p(ptr), nbytes)
        if st != 0:
            self._fail_bind(type(error_for(st)), self._message())
            return False
        self._bound[name] = tensor
        p.bound = True
        # Bytes no source covers (vocabulary padding) are zeroed by the C loader at load time.
        return True

    def agree(self, error=None):
        """COLLECTIVE. Raises on every rank when any rank passes an Error (or had a failed bind)."""
        self._need_open()
        status, message = (0, b"")
        if error is not None:
            status, message = error.status or 1, error.message.encode()
        elif self._pending is not None:
            status, message = self._pending[0], self._pending[1].encode()
        self._check(lib.sl_loader_agree(self._h, status, message))

    def load(self):
        """COLLECTIVE. Agrees on the bindings, then loads; on failure every rank raises."""
        self._need_open()
        if self._plan is None:
            self.plan()
        try:
            self.agree()
        finally:
            self._pending = None
        self._check(lib.sl_loader_load(self._h))
        self._loaded = True
        for p in self._plan:
            p.device = ("cuda:%d" % self._param(p.index).device) if self._param(p.index).device >= 0 \
                else "cpu"
        if self._progress is not None:
            self._progress.raise_pending()  # the load itself succeeded: the loader is usable
        return self

    # reload in place ---------------------------------------------------------------------------

    RELOAD_STATES = ("old", "new", "partial")

    def reload(self, model=None, revision=None):
        """COLLECTIVE, after load(). Reads checkpoint `model` (a folder or Hub id; None: the
        loader's current one, the last loaded or reloaded) at `revision` (None: the loader's
        revision for its current model, else main) into the same memory: no tensor moves,
        tensors exported before (params(), DLPack) and bound tensors see the new values. A
        checkpoint whose plan differs (a parameter name, dtype, shape or slicing) is refused on
        every rank before any byte is written (ShapeError naming the parameter); the loader stays
        loaded. A failure during the transfer raises on every rank and leaves the loader closed to
        further loads: reload_state() then says which parameters hold which checkpoint
        (docs/spec/DESIGN.md §10)."""
        self._need_loaded()
        self._check(lib.sl_loader_reload(self._h, model.encode() if model else None,
                                         revision.encode() if revision else None))
        for p in self._plan:  # the sources are the new checkpoint's now
            p.slices = Parameter._slices(self, p.index)
        if self._progress is not None:
            self._progress.raise_pending()
        return self

    # load from peers -------------------------------------------------------------------------

    def load_from_peers(self, comm=None, group=None, store=None):
        """COLLECTIVE over every rank of the job: the ranks whose loader is loaded (the donors)
        give their parameters to the ranks whose loader is freshly created (the receivers, no
        plan() or bind() yet), which plan their own layout from the donors' catalog and read
        nothing from storage (docs/spec/DESIGN.md §11). Each side's loader spans exactly its ranks,
        numbered in the job's order (split the job by role: comm.Split(color, rank)). The job is
        comm (mpi4py, default COMM_WORLD) or group (a torch.distributed process group; store as
        for Loader). The donors' loaders and tensors are unchanged and stay usable; the receivers'
        are loaded as after load() (params(), report() with bytes_read 0 and bytes_received, the
        time model of the transfer from peers). A failure raises on every rank; a receiver's
        loader is then closed to loads, a donor's stays as it was."""
        from .torchcomm import TorchComm, is_process_group
        self._need_open()
        if group is None and comm is not None and is_process_group(comm):
            group, comm = comm, None
        if group is not None and comm is not None:
            raise InvalidArgumentError("pass comm (MPI) or group (torch.distributed), not both")
        donor = self._loaded
        if group is not None:
            timeout = self._cfg.get("timeout_s")
            job = TorchComm(group, store, float(timeout) if timeout else 600.0)
            st = lib.sl_loader_load_from_peers_ops(self._h, ctypes.byref(job.ops()))
            if st != 0 and job.failure and not self._own_message():  # the transport's failure
                raise error_for(st, job.failure)
        else:
            handle, keep = comm_handle(comm)
            st = lib.sl_loader_load_from_peers(self._h, ctypes.c_void_p(handle))
            del keep
        self._check(st)
        if not donor:  # the plan was made inside the call, from the donors' catalog
            n = lib.sl_loader_param_count(self._h)
            self._plan = [Parameter(self, i, self._param(i)) for i in range(n)]
            self._by_name = {p.name: p for p in self._plan}
            self._loaded = True
        if self._progress is not None:
            self._progress.raise_pending()
        return self

    # weight sync -------------------------------------------------------------------------------

    def refit(self, version, comm=None, group=None, store=None):
        """COLLECTIVE over the job of a refit (group: a torch.distributed process group; comm: an
        mpi4py communicator), with the trainers calling shardload.publish(..., version=version):
        the weights they publish land in this loaded loader's memory in place (tensors from
        params(), bound tensors and DLPack exports see them). The plan is made on the first refit
        and kept; a refit of the version the loader holds moves nothing. A failure raises on every
        rank and leaves the loader usable: reload_state() says what each parameter holds, and the
        next refit of the same version completes it (docs/spec/DESIGN.md §13; shardload.refit).
        Returns the refit's report (dict)."""
        from .refit import refit_loader
        return refit_loader(self, version, comm, group, store)

    def version(self):
        """(version, pending): the version every parameter holds (0: the loaded checkpoint), and
        the version a failed refit left in part (None when none)."""
        from .refit import loader_version
        self._need_loaded()
        return loader_version(self)

    def refit_report(self):
        """The last successful refit's report (dict), or None."""
        from .refit import refit_report
        self._need_open()
        return refit_report(self)

    def reload_state(self):
        """{name: "new" | "old" | "partial"}: what each local parameter holds after the last
        reload() or refit() ("old": what it held before that call; every parameter "old" before any
        reload and after a refused one; after a failed refit "new" means it holds the version
        refitted, counting earlier failed refits of that version)."""
        self._need_open()
        if self._plan is None:
            raise InvalidArgumentError("call load() first")
        out = {}
        state = ctypes.c_int(0)
        for p in self._plan:
            check(lib.sl_loader_reload_state(self._h, p.index, ctypes.byref(state)), self._message)
            out[p.name] = self.RELOAD_STATES[state.value]
        return out

    def report(self):
        """The JSON report as a dict (docs/REPORT.md). Every rank holds the job's figures and totals;
        rank 0's also lists every rank and every node (``report_scope`` "job"), another rank's lists
        only itself under ``ranks`` and no node (``report_scope`` "rank"), so that its size does not
        grow with the job."""
        self._need_loaded()
        text = _lib.text(lib.sl_loader_report_json(self._h))
        return json.loads(text) if text else {}

    def summary(self):
        self._need_loaded()
        return _lib.text(lib.sl_loader_summary(self._h)) or ""

    def params(self, kind=None):
        """{name: tensor} of every local parameter. Bound ones are the caller's own tensors;
        the others share the loader's memory by DLPack (zero-copy) and outlive close().
        kind: "torch" (default when torch imports), "numpy" (host only) or "dlpack" (the
        Parameter objects themselves)."""
        self._need_loaded()
        if kind is None:
            try:
                import torch  # noqa: F401
                kind = "torch"
            except ImportError:
                kind = "numpy"
        out = {}
        for p in self._plan:
            if p.name in self._bound:
                out[p.name] = self._bound[p.name]
            elif p.alias_of is not None and p.alias_of in self._bound:
                out[p.name] = self._bound[p.alias_of]
            elif kind == "dlpack":
                out[p.name] = p
            elif kind == "numpy":
                out[p.name] = p.numpy()
            else:
                out[p.name] = p.torch()
        return out

    def close(self):
        """COLLECTIVE. Destroys the C loader; tensors handed out stay valid."""
        if getattr(self, "_h", None):
            lib.sl_loader_destroy(self._h)
            self._h = None
        self._bound = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        # The garbage collector runs at a different time on each rank: a finalizer must not call
        # the collective destroy. It frees this rank's memory alone (sl_loader_release_local:
        # tensors handed out stay valid) and warns that close() was not called.
        handle = getattr(self, "_h", None)
        if not handle:
            return
        self._h = None
        self._bound = {}
        try:
            warnings.warn("shardload.Loader(%r) was not closed: call close() on every rank (or use "
                          "`with`); this rank's memory was released without the other ranks"
                          % (getattr(self, "_model", None),), ResourceWarning, source=self)
        except Exception:  # interpreter shutdown: warnings may be gone
            pass
        lib.sl_loader_release_local(handle)
