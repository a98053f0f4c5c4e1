# Type stubs of shardload.torch (PEP 484/561): the public functions that fill an nn.Module
# (load_into) and keep it in step with trainers (refit_into). tests/unit/test_python_stubs.py
# checks these names and parameters against the running module; tests/python/typed_usage.py uses
# them under mypy --strict. Modules, tensors, communicators and groups are typed Any (torch is
# not a dependency of the stubs).
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

from . import Loader, Plan

__all__: List[str]

KEPT_DEFAULTS: FrozenSet[str]

def module_tensors(module: Any) -> Dict[str, Any]: ...
def kept_default(name: str) -> bool: ...
def open_loader(model: str, comm: Any = None, group: Any = None, plan: Optional[Plan] = None,
                **config: Any) -> Loader: ...
def load_into(module: Any, model: str, comm: Any = None, group: Any = None,
              strict: Optional[bool] = None,
              fallback: Optional[Callable[[str, Any], object]] = None,
              check: Optional[Callable[[List[Any]], Optional[str]]] = None,
              kept: Optional[Callable[[str], bool]] = None, plan: Optional[Plan] = None,
              after: Optional[Callable[[Loader], object]] = None, filled: Iterable[str] = (),
              refit: bool = False, **config: Any) -> Tuple[List[str], List[str]]: ...
def refit_into(module: Any, version: int, comm: Any = None, group: Any = None,
               store: Any = None) -> Optional[Dict[str, Any]]: ...
def refit_loader(module: Any) -> Optional[Loader]: ...
def refit_close(module: Any) -> None: ...
