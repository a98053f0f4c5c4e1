"""shardload -- load a safetensors checkpoint into the ranks of a distributed job, from Python.

Pure Python over libshardload.so (ctypes). Each rank gets exactly its vLLM-layout tensor-parallel
slices and experts, written into the caller's own tensors (Loader.bind, shardload.torch.load_into)
or into the loader's memory, handed out zero-copy by DLPack (Loader.params()). The ranks are an
MPI job (comm=, under mpirun) or a torch.distributed process group (group=, no MPI).

    import shardload
    with shardload.Loader("/models/m", tp=2) as loader:   # under mpirun, every rank
        loader.load()
        weights = loader.params()                         # name -> torch.Tensor (this rank's)

Submodules: shardload.torch (load_into for an nn.Module), shardload.vllm (vLLM's load format
"shardload"; imports vllm lazily), shardload.refit (weight sync: shardload.publish on trainer ranks,
Loader.refit on rollout ranks; shardload.sync_group: a group holding both when each side has a
torch.distributed world of its own). shardload.Plan describes this rank's parameters and the boxes of
checkpoint tensors that fill them instead of an architecture spec (Loader(..., plan=plan));
shardload.dryrun plans any world size from the headers alone. See python/README.md.

The C library is opened on first use of a name that needs it (Loader, Config, the error classes,
library_path), not by `import shardload`: vLLM imports the plugin module shardload.vllm in every
process it starts, and only a process that loads with shardload should open libshardload (and the
MPI, CUDA and NCCL libraries it links). A library that cannot be found raises
shardload._lib.LibraryNotFound (an ImportError) there, listing the paths tried.
"""

__version__ = "0.2.0"

# name -> the submodule that defines it (imported on first access).
_LAZY = {"Config": "config", "Loader": "loader", "Parameter": "loader", "comm_handle": "loader",
         "Error": "errors", "error_for": "errors", "BY_STATUS": "errors", "Plan": "plan",
         "dryrun": "plan", "DryRun": "plan",
         "publish": "refit", "Publisher": "refit", "dryrun_refit": "refit", "fsdp_block": "refit",
         "sync_group": "syncgroup", "SyncGroup": "syncgroup"}


def _errors():
    from . import errors
    return errors


def __getattr__(name):
    import importlib
    if name in _LAZY:
        value = getattr(importlib.import_module("." + _LAZY[name], __name__), name)
    elif name == "library_path":
        from . import _lib
        value = _lib.path
    elif name == "__all__":
        value = sorted(_LAZY) + ["library_path"] + [c.__name__ for c in _errors().BY_STATUS.values()]
    elif name.endswith("Error") and not name.startswith("_"):
        # One class per C status code, generated from the library's own table.
        value = getattr(_errors(), name, None)
        if value is None:
            raise AttributeError("module 'shardload' has no attribute %r" % name)
    else:
        raise AttributeError("module 'shardload' has no attribute %r" % name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"library_path"})
