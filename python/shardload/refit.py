"""refit.py -- weight sync: trainers push the weights they hold into running inference ranks.

Every step of a reinforcement-learning loop, the trainer ranks publish the blocks of checkpoint
tensors they hold and the rollout ranks' loaded loaders receive them in place, over one group (a
torch.distributed process group, or an mpi4py communicator) that holds both
(docs/spec/DESIGN.md §13):

    # trainers (FSDP: each rank holds a block of rows of every parameter)
    shardload.publish({name: (local_tensor, offsets)}, group=sync_group, version=step)
    # rollout ranks (a loader loaded once with shardload, kept open)
    loader.refit(group=sync_group, version=step)

Blocks are described in the checkpoint's global coordinates: the checkpoint tensor's name (the
receivers' names: convert the trainer's own first), the local tensor (contiguous, row-major) and
its offsets in the full tensor; (tensor, offsets, shape) also gives the full shape (otherwise the
receivers' checkpoint's). Trainers holding the same block (data-parallel replicas) share the
sending. The plan is made on the first step and reused while both layouts stay the same: a step
costs the bytes moved, and asking again for the version the receivers hold moves nothing. A
trainer's F32 into the receivers' BF16 is converted as it is packed (host memory; on a GPU pass
dtype= to convert on the device first). A failure raises on every rank; the receivers' loaders stay
usable, Loader.reload_state() says what each parameter holds, and the next refit of the same
version completes it.

    shardload.dryrun_refit("/models/m", 8, "fsdp:4", tp=4, dp=2)   # the plan and its time, no job
"""

import ctypes
import json

from . import _lib
from .config import Config
from .errors import InvalidArgumentError, error_for
from .loader import _dtype_id, _torch_dtypes, comm_handle

lib = _lib.lib
_P = ctypes.POINTER
_u64p = _P(ctypes.c_uint64)

for _name, _res, _args in (
        ("sl_publisher_create", ctypes.c_int, [ctypes.c_void_p, _P(ctypes.c_void_p)]),
        ("sl_publisher_destroy", None, [ctypes.c_void_p]),
        ("sl_publisher_error", ctypes.c_char_p, [ctypes.c_void_p]),
        ("sl_publisher_add", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32,
                                            _u64p, _u64p, _u64p, ctypes.c_void_p]),
        ("sl_publisher_clear", None, [ctypes.c_void_p]),
        ("sl_publish", ctypes.c_int, [ctypes.c_void_p, _lib.c_comm, ctypes.c_uint64]),
        ("sl_publish_ops", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]),
        ("sl_publisher_report_json", ctypes.c_char_p, [ctypes.c_void_p]),
        ("sl_loader_refit", ctypes.c_int, [ctypes.c_void_p, _lib.c_comm, ctypes.c_uint64]),
        ("sl_loader_refit_ops", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]),
        ("sl_loader_version", ctypes.c_int, [ctypes.c_void_p, _u64p, _u64p]),
        ("sl_loader_refit_report_json", ctypes.c_char_p, [ctypes.c_void_p]),
        ("sl_dryrun_refit_create", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                                                  _P(ctypes.c_void_p)]),
        ("sl_dryrun_refit_destroy", None, [ctypes.c_void_p]),
        ("sl_dryrun_refit_json", ctypes.c_char_p, [ctypes.c_void_p]),
        ("sl_dryrun_refit_summary", ctypes.c_char_p, [ctypes.c_void_p])):
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

_NUMPY_NAMES = {"float32": "F32", "float64": "F64", "float16": "F16", "int8": "I8", "uint8": "U8",
                "int16": "I16", "uint16": "U16", "int32": "I32", "uint32": "U32", "int64": "I64",
                "uint64": "U64", "bool": "BOOL", "complex64": "C64"}


def fsdp_block(shape, rank, world, dim=0):
    """(offsets, extent) of rank's block of a tensor of `shape` cut along `dim` over `world` ranks as
    torch.chunk cuts it (FSDP's Shard(0)): blocks of ceil(n / world), the last ones shorter or
    empty."""
    shape = [int(s) for s in shape]
    offsets, extent = [0] * len(shape), list(shape)
    if shape:
        n = shape[dim]
        chunk = -(-n // world)
        lo = min(rank * chunk, n)
        offsets[dim], extent[dim] = lo, min(lo + chunk, n) - lo
    return offsets, extent


def _describe(tensor):
    """(dtype name, shape, device type, device index, data pointer, the object to keep alive)."""
    mod = type(tensor).__module__
    if mod.startswith("torch"):
        t = tensor.detach()
        if not t.is_contiguous():
            t = t.contiguous()  # a temporary copy, kept alive until the publish returns
        names = {v: k for k, v in _torch_dtypes().items()}
        if t.dtype not in names:
            raise InvalidArgumentError("publish: torch dtype %s has no safetensors name" % t.dtype)
        return names[t.dtype], tuple(t.shape), t.device.type, t.device.index, t.data_ptr(), t
    if mod.startswith("numpy"):
        import numpy as np
        a = np.ascontiguousarray(tensor)
        if a.dtype.name not in _NUMPY_NAMES:
            raise InvalidArgumentError("publish: numpy dtype %s has no safetensors name" % a.dtype)
        return _NUMPY_NAMES[a.dtype.name], tuple(a.shape), "cpu", None, a.ctypes.data, a
    raise InvalidArgumentError("publish takes torch tensors or numpy arrays, got %s" % type(tensor))


def _u64s(values):
    values = [int(v) for v in values]
    if any(v < 0 for v in values):
        raise InvalidArgumentError("publish: negative offsets or shape %s" % values)
    return (ctypes.c_uint64 * max(1, len(values)))(*values)


def _job(comm, group):
    """(group, comm): a process group given as comm= is a group."""
    from .syncgroup import SyncGroup
    from .torchcomm import is_process_group
    if group is None and comm is not None and (is_process_group(comm) or isinstance(comm, SyncGroup)):
        group, comm = comm, None
    if group is not None and comm is not None:
        raise InvalidArgumentError("pass comm (MPI) or group (torch.distributed), not both")
    return group, comm


def _run(call_ops, call_mpi, comm, group, store, timeout_s, own_message):
    """Runs one side's collective over group (torch.distributed) or comm (MPI); the status. The
    transport's failure is raised at once when the library recorded no failure of its own
    (own_message(): the handle's message, empty then): the call ended on the transport's error,
    and no further step of this refit may use the group (gloo cannot drop the failed messages)."""
    group, comm = _job(comm, group)
    if group is not None:
        from .torchcomm import TorchComm
        job = TorchComm(group, store, timeout_s)
        st = call_ops(ctypes.byref(job.ops()))
        if st != 0 and job.failure and not own_message():
            raise error_for(st, job.failure)
        return st
    handle, keep = comm_handle(comm)
    st = call_mpi(ctypes.c_void_p(handle))
    del keep
    return st


class Publisher:
    """One trainer rank's side of weight sync: its blocks and the plan of its last refit, kept for
    the next. Publisher(timeout_s=..., bucket_bytes=..., network_gbps=...): the C library's keys a
    publisher reads (shardload/core.h section 13); device and cuda_device follow the tensors."""

    def __init__(self, **config):
        self._config = dict(config)
        self._h = None
        self._device = None
        self._report = None

    def _open(self, device, index):
        if self._h is not None and self._device == (device, index):
            return
        self.close()
        cfg = Config(**self._config)
        cfg.set("device", "cuda" if device == "cuda" else "cpu")
        if device == "cuda" and index is not None:
            cfg.set("cuda_device", index)
        handle = ctypes.c_void_p()
        st = lib.sl_publisher_create(cfg.handle, ctypes.byref(handle))
        if st != 0:
            raise error_for(st, "cannot create a publisher")
        self._h, self._device = handle, (device, index)

    def _message(self):
        return _lib.last_error()

    def _own_message(self):
        return _lib.text(lib.sl_publisher_error(self._h)) if self._h else ""

    def _add_all(self, tensors, dtype):
        """Hands every block to the library; returns what must stay alive until the publish returns."""
        described = []
        for name, value in tensors.items():
            if not isinstance(value, (tuple, list)) or len(value) not in (2, 3):
                raise InvalidArgumentError("publish(%s): expected (tensor, offsets) or (tensor, offsets, shape)"
                                           % name)
            tensor, offsets = value[0], value[1]
            want = dtype.get(name) if isinstance(dtype, dict) else dtype
            if want is not None and hasattr(tensor, "to") and tensor.dtype != want:
                tensor = tensor.to(want)  # converted where it lies (the GPU's own conversion)
            described.append((name, _describe(tensor), offsets, value[2] if len(value) == 3 else None))
        devices = {(d[2], d[3]) for _, d, _, _ in described}
        if len(devices) > 1:
            raise InvalidArgumentError("publish: the tensors lie on several devices %s: one device per rank"
                                       % sorted(str(d) for d in devices))
        device, index = devices.pop() if devices else ("cpu", None)
        self._open(device, index)
        lib.sl_publisher_clear(self._h)
        for name, (dt, shape, _, _, ptr, _), offsets, full in described:
            if len(offsets) != len(shape) or (full is not None and len(full) != len(shape)):
                raise InvalidArgumentError("publish(%s): a %d-dimensional tensor needs %d offsets%s" % (
                    name, len(shape), len(shape), " and a shape of as many" if full is not None else ""))
            st = lib.sl_publisher_add(self._h, name.encode(), _dtype_id(dt), len(shape),
                                      _u64s(full) if full is not None else None, _u64s(offsets), _u64s(shape),
                                      ctypes.c_void_p(ptr))
            if st != 0:
                raise error_for(st, self._message())
        return described

    def publish(self, tensors, version, comm=None, group=None, store=None, dtype=None):
        """COLLECTIVE over the job (group: a torch.distributed process group; comm: an mpi4py
        communicator, default COMM_WORLD), with the receivers calling Loader.refit(version=...).
        tensors: {checkpoint name: (tensor, offsets) or (tensor, offsets, full shape)}; torch
        tensors (host or one GPU) or numpy arrays. dtype: a torch dtype (or {name: dtype}) to
        convert the tensors to before publishing (on a GPU the library does not convert: publish
        the receivers' dtype). Returns the refit's report (a dict, the same on every rank)."""
        keep = self._add_all(tensors, dtype)
        timeout = float(self._config.get("timeout_s", 600.0))
        st = _run(lambda ops: lib.sl_publish_ops(self._h, ops, int(version)),
                  lambda c: lib.sl_publish(self._h, c, int(version)), comm, group, store, timeout,
                  self._own_message)
        del keep
        if st != 0:
            raise error_for(st, self._message())
        return self.report()

    def report(self):
        """The last successful publish's report (dict), or None."""
        text = _lib.text(lib.sl_publisher_report_json(self._h)) if self._h else None
        return json.loads(text) if text else None

    def close(self):
        if getattr(self, "_h", None):
            lib.sl_publisher_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# One publisher per job (a group, or an MPI communicator), so that shardload.publish keeps its plan
# from one step to the next.
_PUBLISHERS = {}


def publish(tensors, version, comm=None, group=None, store=None, dtype=None, **config):
    """COLLECTIVE: Publisher.publish with a publisher kept per group or communicator (and per
    configuration), so that later steps reuse the plan. Returns the refit's report (dict)."""
    g, c = _job(comm, group)
    key = (id(g) if g is not None else ("mpi", comm_handle(c)[0]), tuple(sorted(config.items())))
    pub = _PUBLISHERS.get(key)
    if pub is None:
        pub = _PUBLISHERS[key] = Publisher(**config)
    return pub.publish(tensors, version, comm=c, group=g, store=store, dtype=dtype)


def refit_loader(loader, version, comm=None, group=None, store=None):
    """Loader.refit: the receivers' side (see Loader.refit)."""
    loader._need_loaded()
    timeout = loader._cfg.get("timeout_s")
    st = _run(lambda ops: lib.sl_loader_refit_ops(loader._h, ops, int(version)),
              lambda c: lib.sl_loader_refit(loader._h, c, int(version)), comm, group, store,
              float(timeout) if timeout else 600.0, loader._own_message)
    loader._check(st)
    if loader._progress is not None:
        loader._progress.raise_pending()
    return refit_report(loader)


def loader_version(loader):
    v, pending = ctypes.c_uint64(0), ctypes.c_uint64(0)
    loader._check(lib.sl_loader_version(loader._h, ctypes.byref(v), ctypes.byref(pending)))
    return v.value, pending.value or None


def refit_report(loader):
    text = _lib.text(lib.sl_loader_refit_report_json(loader._h)) if loader._h else None
    return json.loads(text) if text else None


def dryrun_refit(model, world, publishers, **config):
    """The dry run of a refit (no job, no tensor data): the receivers of `model` at world ranks
    (config: their layout, ranks_per_node, network_gbps, ...), the trainers as `publishers` says:
    "fsdp:T", "fsdp:TxR", or {"trainers": [{name: {"offsets": [...], "extent": [...]}}, ...]} (a
    dict or its JSON text). Returns (report dict, summary text)."""
    cfg = Config(model=model, **config)
    text = publishers if isinstance(publishers, str) else json.dumps(publishers)
    handle = ctypes.c_void_p()
    st = lib.sl_dryrun_refit_create(cfg.handle, int(world), text.encode(), ctypes.byref(handle))
    if st != 0:
        raise error_for(st, _lib.last_error())
    try:
        return (json.loads(_lib.text(lib.sl_dryrun_refit_json(handle))),
                _lib.text(lib.sl_dryrun_refit_summary(handle)))
    finally:
        lib.sl_dryrun_refit_destroy(handle)
