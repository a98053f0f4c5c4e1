"""shardload -- load a safetensors checkpoint into the ranks of an MPI job, from Python.

Pure Python over libshardload.so (ctypes). Each rank gets exactly its vLLM-layout tensor-parallel
slices and experts, written into the caller's own tensors (Loader.bind, shardload.torch.load_into)
or into the loader's memory, handed out zero-copy by DLPack (Loader.params()).

    import shardload
    with shardload.Loader("/models/m", tp=2) as loader:   # under mpirun, every rank
        loader.load()
        weights = loader.params()                         # name -> torch.Tensor (this rank's)

Submodules: shardload.torch (load_into for an nn.Module), shardload.vllm (vLLM's load format
"shardload"; imports vllm lazily). See python/README.md.
"""

from . import _lib
from .config import Config
from .errors import *  # noqa: F401,F403  (Error and one subclass per status code)
from .errors import BY_STATUS, Error, error_for
from .loader import Loader, Parameter, comm_handle

__version__ = "0.1.0"
library_path = _lib.path

__all__ = ["Config", "Loader", "Parameter", "Error", "error_for", "BY_STATUS", "library_path",
           "comm_handle"] + [c.__name__ for c in BY_STATUS.values()]
