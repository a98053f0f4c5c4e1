"""typed_usage.py -- the public API as a typed program uses it, for mypy --strict against the
package's stubs (python/shardload/__init__.pyi; tests/unit/test_python_types.py runs it). It is
type-checked, never run: every call here must type-check with no error and no implicit Any.
"""

from typing import Any, Dict, List, Optional, Sequence, Type

import shardload
import shardload.torch


def on_progress(done: int, total: int) -> None:
    print("%d / %d" % (done, total))


def plan_names(loader: shardload.Loader) -> List[str]:
    params: List[shardload.Parameter] = loader.plan()
    return [p.name + str(p.shape) + p.dtype + str(p.nbytes) + str(p.alias_of or "") for p in params]


def load_all(model: str, comm: Any = None) -> Dict[str, Any]:
    config = shardload.Config(tp=2).set("strict", False)
    keys: Dict[str, str] = shardload.Config.keys()
    assert "tp" in keys and config.get("tp") == "2"
    with shardload.Loader(model, comm, config=config, progress=on_progress) as loader:
        names = plan_names(loader)
        bound: bool = loader.bind(names[0], object())
        loader.load().reload(revision="main")
        states: Dict[str, str] = loader.reload_state()
        report: Dict[str, Any] = loader.report()
        text: str = loader.summary()
        rank: int = loader.rank
        print(bound, states, report.get("ranks"), text, rank, loader.device)
        return loader.params(kind="numpy")


def peers(model: str) -> None:
    loader = shardload.Loader(model, group=None, tp=1, progress="never")
    try:
        loader.load_from_peers()
        loader.agree(shardload.ShapeError("not the shape I bound", None))
    finally:
        loader.close()


def described(model: str) -> int:
    plan = shardload.Plan()
    i: int = plan.param("lm_head.weight", "BF16", [64, 32])
    plan.region(i, "lm_head.weight", [0, 0], [64, 32], [0, 0], [64, 32])
    plan.zeros(i, [60, 0], [4, 32])
    plan.skip("rotary_emb.inv_freq")
    again = shardload.Plan.from_json(plan.to_json())
    run: shardload.DryRun = shardload.dryrun(model, 2, plans=[plan, again], tp=1)
    try:
        with shardload.Loader(model, plan=plan) as loader:
            loader.load()
    except shardload.PlanError as e:
        print(e.message)
    return len(plan) + plan.regions + len(run.summary) + len(run["ranks"])


def into_module(module: Any, model: str, group: Any) -> int:
    def keep(name: str) -> bool:
        return shardload.torch.kept_default(name) or name.endswith(".bias")

    def refuse(plan: List[Any]) -> Optional[str]:
        return None if plan else "an empty plan"

    missing, unexpected = shardload.torch.load_into(module, model, group=group, strict=False, kept=keep,
                                                    check=refuse, filled=["rotary.inv_freq"], refit=True,
                                                    tp=2)
    report = shardload.torch.refit_into(module, 1, group=group)
    kept: Optional[shardload.Loader] = shardload.torch.refit_loader(module)
    moved: int = 0 if report is None else int(report.get("bytes_transferred", 0))
    shardload.torch.refit_close(module)
    tensors: Dict[str, Any] = shardload.torch.module_tensors(module)
    return len(missing) + len(unexpected) + moved + len(tensors) + (kept is not None) + \
        len(shardload.torch.KEPT_DEFAULTS)


def classify(e: shardload.Error) -> str:
    status: Optional[int] = e.status
    peer: Optional[int] = e.peer_rank
    lost: Sequence[int] = e.lost_ranks
    cls: Type[shardload.Error] = shardload.BY_STATUS.get(status or 0, shardload.Error)
    return "%s %s %s %s %s" % (e.status_name, e.message, peer, list(lost), cls.__name__)


def run(model: str) -> int:
    try:
        load_all(model)
        peers(model)
        described(model)
    except shardload.MissingWeightsError as e:
        print("missing:", classify(e))
        return 2
    except (shardload.PeerFailedError, shardload.CommError) as e:
        print("another rank:", e.peer_rank)
        return 3
    except shardload.Error as e:
        print(classify(shardload.error_for(e.status or 1, e.message)))
        return 1
    version: str = shardload.__version__
    where: str = shardload.library_path
    print(version, where)
    return 0
