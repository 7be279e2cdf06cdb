"""Unreliable clients through the loop: who is aggregated, whose state moves, empty rounds, diverged clients."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from lightning_fl.callbacks import FedAvg, FedFa, Scaffold
from lightning_fl.datamodules import SyntheticDataModule
from torch import Tensor
from typing_extensions import override

from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.engines.hooks import ClientHooks
from lightning_fl.faults.validation import DivergenceError
from lightning_fl.models import LogisticRegression
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.simulation.system import SystemHeterogeneity

SYSTEM = {"dropout": 0.3, "speed_mean": 3.0, "speed_sigma": 1.0, "deadline": 3.0, "stragglers": "partial",
          "over_selection": 0.5}


class Recorder(FederatedCallback):
    """Records the clients each round started with and the clients the aggregation saw."""

    def __init__(self) -> None:
        self.started: list[list[int]] = []
        self.aggregated: list[list[int]] = []
        self.steps: list[list[int]] = []

    @override
    def on_round_start(self, round_idx, client_ids, federation, log) -> None:
        self.started.append(client_ids.tolist())

    @override
    def on_round_end(self, round_idx, result, federation, log) -> None:
        self.aggregated.append(result.update.client_ids.tolist())
        self.steps.append(result.update.num_steps.tolist())


class Poison(FederatedCallback, ClientHooks):
    """Makes the given clients' weights NaN after their first local step (in rounds >= ``from_round``)."""

    def __init__(self, clients: list[int], from_round: int = 1) -> None:
        self.clients, self.from_round = clients, from_round

    @override
    def after_local_step(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                         step_delta: dict[str, Tensor]) -> None:
        if ctx.round_idx >= self.from_round:
            hit = torch.isin(ctx.client_ids, torch.tensor(self.clients)).to(next(iter(params.values())).device)
            for value in params.values():
                value[hit] = float("nan")


def _fit(callbacks: list[pl.Callback], rounds: int = 5, engine: str = "auto", **loop_args: Any) -> FederatedLoop:
    torch.manual_seed(0)
    loop = FederatedLoop(client=LogisticRegression(60, 10), optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
                         clients_per_round=4, local_epochs=2, batch_size=10, seed=0, engine=engine, **loop_args)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=rounds, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         callbacks=callbacks)
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=10, max_samples_per_client=100))
    return loop


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_only_reporting_clients_are_aggregated_counted_and_remembered(engine: str) -> None:
    recorder = Recorder()
    scaffold = Scaffold()
    loop = _fit([scaffold, recorder], rounds=6, engine=engine, system=SystemHeterogeneity(**SYSTEM))
    fates = [loop.system.fates(t, loop.sampler) for t in range(6)]  # a pure function of (seed, round, client)
    kept = [f.client_ids.tolist() for f in fates if not f.empty]
    assert recorder.aggregated == recorder.started == kept
    assert recorder.steps == [f.num_steps.tolist() for f in fates if not f.empty]
    assert any(len(f.dropped) for f in fates) and any((f.num_steps < f.full_steps).any() for f in fates)
    for f in fates:  # aggregations never see a dropped client, a straggler only with partial work
        assert not torch.isin(f.client_ids, f.dropped).any()
    # f_k counts completed participations only; SCAFFOLD's control variates exist only for them.
    completed = torch.zeros(10, dtype=torch.long)
    for ids in kept:
        completed[ids] += 1
    assert torch.equal(loop.store.participation, completed)
    seen = [k for k, known in enumerate(scaffold.client_control.seen(torch.arange(10))) if known]
    assert seen == sorted({k for ids in kept for k in ids})


def test_a_dropped_client_s_state_is_untouched() -> None:
    # Client state after 6 rounds with dropout == state after training only the rounds each client
    # completed: a client that drops out in round 5 keeps the control variate of its last completed round.
    scaffold = Scaffold()
    loop = _fit([scaffold], rounds=6, system=SystemHeterogeneity(dropout=0.5))
    fates = [loop.system.fates(t, loop.sampler) for t in range(6)]
    last = fates[-1]
    assert len(last.dropped), "the scenario needs a dropout in the last round"
    shorter = Scaffold()
    _fit([shorter], rounds=5, system=SystemHeterogeneity(dropout=0.5))
    compared = 0
    for client in last.dropped.tolist():
        ids = torch.tensor([client])
        if shorter.client_control.seen(ids)[0]:
            assert torch.equal(scaffold.client_control.gather(ids), shorter.client_control.gather(ids))
            compared += 1
    assert compared, "the scenario needs a dropped client with state from earlier rounds"


def test_fedfa_counts_completed_participations() -> None:
    loop = _fit([FedFa()], rounds=5, system=SystemHeterogeneity(dropout=0.4))
    completed = torch.zeros(10, dtype=torch.long)
    for t in range(5):
        completed[loop.system.fates(t, loop.sampler).client_ids] += 1
    sampled = torch.zeros(10, dtype=torch.long)
    for t in range(5):
        sampled[loop.system.fates(t, loop.sampler).sampled] += 1
    assert torch.equal(loop.store.participation, completed) and not torch.equal(completed, sampled)


def test_an_empty_round_leaves_the_model_unchanged(tmp_path) -> None:
    torch.manual_seed(0)
    initial = LogisticRegression(60, 10).state_dict()
    trace = tmp_path / "available.csv"  # rounds 1-3 list no client, so every client is offline in them
    trace.write_text("round,client,available\n4,0,1\n")  # (availability 0.0 is refused: nothing would train)
    loop = _fit([FedAvg()], rounds=3, system=SystemHeterogeneity(availability_trace=str(trace)))
    for name, value in loop.model.state_dict().items():
        assert torch.equal(value, initial[name]), name
    assert loop.rounds_completed == 3 and int(loop.store.participation.sum()) == 0


def test_defaults_reproduce_the_run_without_a_system_model() -> None:
    plain = _fit([Scaffold()], rounds=3)
    neutral = _fit([Scaffold()], rounds=3, system=SystemHeterogeneity())
    for name, value in plain.model.state_dict().items():
        assert torch.equal(value, neutral.model.state_dict()[name]), name


def test_diverged_clients_are_dropped_and_named() -> None:
    recorder = Recorder()
    with pytest.warns(UserWarning, match=r"round 2: discarded the updates of diverged clients \d"):
        loop = _fit([FedAvg(), Poison([0, 1, 2]), recorder], rounds=3, on_client_divergence="drop")
    for started, aggregated in zip(recorder.started[1:], recorder.aggregated[1:]):
        assert aggregated == [k for k in started if k not in (0, 1, 2)]
    assert recorder.aggregated[0] == recorder.started[0]
    assert torch.isfinite(loop.layout.flatten(loop.model.state_dict())).all()


def test_divergence_stops_by_default_naming_round_and_client() -> None:
    with pytest.raises(DivergenceError, match=r"round 2: client \d+ diverged .*on_client_divergence: drop"):
        _fit([FedAvg(), Poison(list(range(10)))], rounds=3)


def test_a_round_where_every_client_diverges_stops() -> None:
    with pytest.raises(DivergenceError, match=r"round 2: every client diverged"):
        _fit([FedAvg(), Poison(list(range(10)))], rounds=3, on_client_divergence="drop")
