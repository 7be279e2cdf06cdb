"""The declared-state contract: every stateful callback resumes bit for bit (2 + 2 == 4 rounds).

One test for all of them, through the real CLI: 4 rounds in one run, and 2 rounds, a checkpoint and
2 more rounds in a second run, must end with the same global model and the same callback state
(server state and every per-client row). A callback that declares state gets this for free; the
discovery test below makes sure no stateful callback is left out of the list.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import lightning_fl.callbacks as callbacks
import pytest
import torch
from torch import Tensor

from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.state.client_table import ClientTable
from tests.callbacks.helpers import CHECKPOINT, run_4_and_2_plus_2, version_dir

HIERARCHY = {"model.hierarchy": {"num_institutions": 2, "local_rounds": 2}}
#: The Tempo paper's three-layer FedAdp baseline: institutions keep a smoothed angle per client (loop state).
HIERARCHY_FEDADP = {"model.hierarchy": {"num_institutions": 2, "local_rounds": 2, "institution_aggregation": "fedadp"}}
#: Dropout, partial stragglers under a deadline and over-selection: every draw replays on resume.
SYSTEM = {"model.system": {"dropout": 0.3, "speed_mean": 3.0, "speed_sigma": 1.0, "deadline": 3.0,
                           "stragglers": "partial", "over_selection": 0.5}}

#: A model with a head and a body (the tiny config's logistic regression is all head).
MLP8 = {"class_path": "lightning_fl.models.MLP", "init_args": {"in_features": 60, "num_classes": 10, "hidden": [8]}}

#: (callback class name, init_args, config overrides). Every stateful callback appears at least once; a
#: variant is kept where it resumes state the others do not (the sequential engine with system
#: heterogeneity, the hierarchy with FedAdp at the institutions, the disk store); the plain sequential
#: Scaffold/IGFL and FedAdp-on-a-FedAvg-hierarchy variants were left out for CI time (their state is a
#: subset of those).
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("FedFa", {}, {"model.optimizer.init_args.momentum": 0.9}),
    # b = 3: the run is cut after round 2 of a period, so the resumed run applies it from the saved w^{t+1-b}.
    ("FedFa", {"period": 3, "period_mode": "per_period", "momentum_form": "arxiv"},
     {"model.optimizer.init_args.momentum": 0.9}),
    ("FedFaMo", {}, {}),
    ("FedAvgM", {}, {}),
    ("FedAdam", {"lr": 0.05}, {}),
    ("FedYogi", {"lr": 0.05}, {}),
    ("FedAdagrad", {"lr": 0.05}, {}),
    ("FedDyn", {"alpha": 0.1}, {}),
    ("Scaffold", {}, {}),
    ("Scaffold", {}, {"model.client_state": "disk"}),
    ("Scaffold", {}, SYSTEM),
    ("Scaffold", {}, {**SYSTEM, "model.engine": "sequential"}),
    ("FedFa", {}, {**SYSTEM, "model.optimizer.init_args.momentum": 0.9, "model.keep_client_optimizer_state": True}),
    ("FedAdp", {}, {}),
    ("FedAdp", {}, {**HIERARCHY_FEDADP, "model.client_state": "disk"}),
    ("IGFLClient", {}, {}),
    ("IGFLServer", {"attention": "time"}, {}),
    ("IGFL", {"attention": "time"}, {"model.client_state": "disk"}),
    ("Tempo", {"initial_epochs": 2}, HIERARCHY),
    ("CommunicationCost", {"client_bandwidth_mbps": 10.0}, {}),
    ("FairnessMetrics", {}, {}),
    ("RoundsToTarget", {"target": 0.3}, {}),
    ("ModelDivergence", {}, {}),
    # Personalization: each client's personal part is declared client state (docs/personalization.md).
    ("Ditto", {"lam": 0.5}, {"model.client": MLP8}),
    ("FedRep", {"head_epochs": 2}, {"model.client": MLP8, "model.client_state": "disk"}),
    ("FedPer", {}, {"model.client": MLP8}),
    ("Local", {}, {"model.client": MLP8}),
    ("FedBN", {}, {"model.client": {**MLP8, "init_args": {**MLP8["init_args"], "batch_norm": True}}}),
    ("PFedMe", {"local_rounds": 3, "inner_steps": 2}, {}),
    ("APFL", {}, {}),
    ("APFL", {"alpha_l2": 0.02}, {"model.client": MLP8, "model.client_state": "disk", "model.engine": "sequential"}),
]


def _stateful_callbacks() -> set[str]:
    names = set()
    for name, cls in inspect.getmembers(callbacks, inspect.isclass):
        if issubclass(cls, FederatedCallback) and not inspect.isabstract(cls):
            try:
                instance = cls()
            except TypeError:  # needs arguments: judged by its declared state below
                continue
            if instance.state_dict() != {"server": {}, "clients": {}}:
                names.add(name)
    return names


def test_every_stateful_callback_is_in_the_contract() -> None:
    assert _stateful_callbacks() <= {name for name, _, _ in CASES}


def _assert_same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, Tensor):
        assert isinstance(b, Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif where.endswith(("elapsed_before", "seconds")):
        return  # wall-clock time differs between runs by nature
    else:
        assert a == b, where


def _comparable(state: dict[str, Any], model_numel: int, run_dir: Path) -> dict[str, Any]:
    """``state`` without wall-clock entries, with disk-stored client rows read back (from ``run_dir``'s files)."""
    state = dict(state)
    if "clients" in state:
        clients = {}
        for name, rows in state["clients"].items():
            if rows.get("store") == "disk":
                # fp32 rows: bytes / 4 values each (a model row, or one scalar such as FedAdp's angle).
                width = int(rows["lengths"][0]) // 4 if len(rows["lengths"]) else model_numel
                table = ClientTable(name, shape=(width,))
                table.bind(model_numel)
                table.load_state_dict({**rows, "directory": str(run_dir)})
                rows = table.state_dict()
            clients[name] = rows
        state["clients"] = clients
    return state


@pytest.mark.parametrize(("name", "init_args", "overrides"), CASES,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)])
def test_declared_state_resumes_exactly(tiny, tmp_path, name: str, init_args: dict[str, Any],
                                        overrides: dict[str, Any]) -> None:
    entry = {"class_path": f"lightning_fl.callbacks.{name}", "init_args": init_args}
    # FairnessMetrics' figure of the first evaluation per stage only: figures are not state, and each one
    # costs more than a round of these runs.
    metrics = {"class_path": "lightning_fl.callbacks.FairnessMetrics", "init_args": {"histogram_every": 1000}}
    others = [] if name == "FairnessMetrics" else [metrics]
    if name == "Tempo" or "model.hierarchy" in overrides:
        others.append({"class_path": "lightning_fl.callbacks.FedAvg"} if name == "Tempo" else None)
    listed = [entry, *[o for o in others if o is not None], CHECKPOINT]
    a, b = run_4_and_2_plus_2(tiny, tmp_path, **{"trainer.callbacks": listed, **overrides})
    [key] = [k for k in a["callbacks"] if k == name or k.startswith(f"{name}{{")]
    state_a, state_b = a["callbacks"][key], b["callbacks"][key]
    numel = sum(v.numel() for k, v in a["state_dict"].items() if v.is_floating_point() and k.startswith("model."))
    _assert_same(_comparable(state_a, numel, version_dir(tmp_path, 0)),
                 _comparable(state_b, numel, version_dir(tmp_path, 1)), name)
    for table, rows in state_a.get("clients", {}).items():
        # Rows exist only for clients that trained (never N x d up front).
        assert 0 < len(rows["ids"]) <= 6, table
        assert rows.get("store", "memory") == overrides.get("model.client_state", "memory")
    if "model.hierarchy" in overrides:  # the loop's own declared state: the institutions' (FedAdp angles)
        hierarchy_a, hierarchy_b = dict(a["federated"]["hierarchy"]), dict(b["federated"]["hierarchy"])
        institution_a = _comparable(hierarchy_a.pop("institution_state"), numel, version_dir(tmp_path, 0))
        institution_b = _comparable(hierarchy_b.pop("institution_state"), numel, version_dir(tmp_path, 1))
        _assert_same(hierarchy_a, hierarchy_b, "hierarchy")
        _assert_same(institution_a, institution_b, "hierarchy.institution_state")
        if overrides["model.hierarchy"].get("institution_aggregation") == "fedadp":
            assert len(institution_a["clients"]["smoothed_angle"]["ids"]) == 6  # every client trained
