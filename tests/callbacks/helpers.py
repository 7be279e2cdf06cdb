"""Shared pieces of the aggregation-callback tests: a federation, a recording logger, hand-made updates, CLI runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import Tensor

from lightning_fl.apps.cli import FederatedCLI
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.functional.weights import weighted_average
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import ClientOptimizer, Federation
from lightning_fl.state.data import FederatedData, offsets_from_sizes
from lightning_fl.state.flat_state import FlatStateLayout
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]

CHECKPOINT = {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
              "init_args": {"save_last": True, "save_top_k": 0}}


class TwoParamsAndBuffer(torch.nn.Module):
    """``d = 3``: a trainable ``w`` of 2 entries and a float buffer ``r`` (like BatchNorm statistics)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))
        self.register_buffer("r", torch.zeros(1))


def vector_layout(d: int) -> FlatStateLayout:
    """A layout of one trainable entry ``w`` of ``d`` values."""
    return FlatStateLayout({"w": torch.zeros(d)})


def fake_federation(layout: FlatStateLayout | None = None, *, lr: float = 0.1, momentum: float = 0.0,
                    num_clients: int = 4, model: torch.nn.Module | None = None,
                    optimizer: Callable[..., torch.optim.Optimizer] | None = None,
                    label_hist: Tensor | None = None, keeps_state: bool = False) -> Federation:
    """A :class:`Federation` for driving callbacks directly (the trainable names come from ``model``)."""
    if optimizer is None:
        def optimizer(params):  # noqa: ANN001, ANN202
            return torch.optim.SGD(params, lr=lr, momentum=momentum)
    if layout is None:
        layout = vector_layout(1) if model is None else FlatStateLayout(model.state_dict())
    trainable = (frozenset(n for n, p in model.named_parameters() if p.requires_grad) if model is not None
                 else frozenset(e.name for e in layout.float_entries))
    hist = label_hist if label_hist is not None else torch.ones(num_clients, 3, dtype=torch.long)
    return Federation(num_clients=num_clients, num_classes=hist.shape[1], layout=layout, trainable=trainable,
                      optimizer=ClientOptimizer(optimizer, lr, momentum, keeps_state), label_histograms=hist,
                      train_sizes=torch.full((num_clients,), 10))


class RecordingLogger(RoundLogger):
    """A :class:`RoundLogger` that records what it is given: ``scalars``, ``histograms``, ``figures``."""

    def __init__(self, step: int = 1) -> None:
        super().__init__([], step)
        self.scalars: list[tuple[dict[str, float], int]] = []
        self.histograms: list[tuple[str, Tensor, int]] = []
        self.figures: list[tuple[str, int]] = []

    def log_scalars(self, metrics: Any, prog_bar: Sequence[str] = (), monitor: bool = True) -> None:
        for name in metrics:
            self.outputs.claim(name, "scalar")  # one kind per tag, as in a real run
        self.scalars.append(({k: float(v) for k, v in metrics.items()}, self.step))

    def log_histogram(self, tag: str, values: Tensor) -> None:
        self.outputs.claim(tag, "histogram")
        self.histograms.append((tag, values, self.step))

    def log_figure(self, tag: str, figure: Any) -> None:
        self.outputs.claim(tag, "image")
        self.figures.append((tag, self.step))

    def at(self, step: int) -> RecordingLogger:
        self.step = step
        return self


def prepared(callback: Any, federation: Federation) -> Any:
    """``callback`` bound to ``federation`` as the loop does at set-up (client state shapes, checks)."""
    callback.bind_client_state(federation.layout.numel)
    callback.on_federation_setup(federation)
    return callback


def aggregate(callback: AggregationCallback, federation: Federation, round_idx: int, global_w: Tensor,
              update: Any, log: RecordingLogger | None = None) -> Tensor:
    """``callback.aggregate`` for round ``round_idx``, logging at step ``round_idx + 1``."""
    log = RecordingLogger() if log is None else log
    return callback.aggregate(round_idx, global_w, update, federation, log.at(round_idx + 1))


def namespace_update(ids: Sequence[int], weights: Sequence[Sequence[float]], samples: Sequence[int] | None = None,
                     **fields: Any) -> SimpleNamespace:
    """The parts of a ``CohortUpdate`` a weighting callback reads (float64 weights), plus ``fields``."""
    k = len(ids)
    rows = torch.tensor(weights, dtype=torch.float64)
    return SimpleNamespace(**fields, client_ids=torch.tensor(ids), weights=rows,
                           num_samples=torch.tensor(samples if samples is not None else [10] * k), cohort_size=k,
                           weighted_sum=lambda coefficients: weighted_average(rows, coefficients))


def small_federated_data(sizes: Sequence[int], seed: int, features: int = 4, classes: int = 3) -> FederatedData:
    """Random clients of ``sizes`` samples (and three 1-sample test clients) from generator ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x = torch.randn(n, features, generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    return FederatedData(x, y, offsets_from_sizes(list(sizes)), x[:3], y[:3], offsets_from_sizes([1, 1, 1]), classes)


def make_update(round_idx: int, client_ids: Sequence[int], weights: Sequence[Sequence[float]],
                num_samples: Sequence[int] | None = None, num_steps: Sequence[int] | None = None,
                participation: Sequence[int] | None = None, loss_before: Sequence[float] | None = None
                ) -> CohortUpdate:
    """A ``CohortUpdate`` as an engine would return it (CPU integer statistics, fp32 weights)."""
    k = len(client_ids)
    return CohortUpdate(
        round_idx=round_idx,
        client_ids=torch.tensor(client_ids),
        weights=torch.tensor(weights, dtype=torch.float32),
        int_state={},
        num_samples=torch.tensor(num_samples if num_samples is not None else [10] * k),
        num_steps=torch.tensor(num_steps if num_steps is not None else [1] * k),
        train_acc=torch.full((k,), 0.5, dtype=torch.float64),
        train_loss=torch.ones(k, dtype=torch.float64),
        participation=torch.tensor(participation if participation is not None else [1] * k),
        label_hist=torch.ones(k, 3, dtype=torch.long),
        loss_before=None if loss_before is None else torch.tensor(loss_before, dtype=torch.float64),
    )


def vec(*values: float) -> Tensor:
    return torch.tensor(values, dtype=torch.float32)


# ---------------------------------------------------------------------------------------- CLI runs
def version_dir(tmp_path: Path, version: int = 0) -> Path:
    return tmp_path / "logs" / "run" / f"version_{version}"


def events(tmp_path: Path, version: int = 0) -> EventAccumulator:
    acc = EventAccumulator(str(version_dir(tmp_path, version)),
                           size_guidance={"scalars": 0, "histograms": 0, "images": 0})
    acc.Reload()
    return acc


def with_checkpoint(callback: dict[str, Any]) -> list[dict[str, Any]]:
    """``trainer.callbacks``: ``callback`` and a ModelCheckpoint that saves ``last.ckpt``."""
    return [callback, CHECKPOINT]


def load_last(tmp_path: Path, version: int = 0) -> dict[str, Any]:
    """The ``last.ckpt`` of run ``version``."""
    return torch.load(version_dir(tmp_path, version) / "checkpoints" / "last.ckpt", weights_only=False)


def run_with(tiny: Callable[..., Path], callback: dict[str, Any], **overrides: Any) -> int:
    """Run the tiny 4-round config with ``callback`` as the aggregation callback."""
    config = tiny(**{"trainer.callbacks": with_checkpoint(callback), **overrides})
    return run_cli("fit", "--config", str(config))


def run_4_and_2_plus_2(tiny: Callable[..., Path], tmp_path: Path, **overrides: Any
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """4 rounds in one go (version 0) vs 2 rounds (version 1) resumed from ``last.ckpt`` to 4 (in version 1).

    Asserts identical final model weights; returns the two final checkpoints.
    """
    full = tiny(**overrides)
    assert run_cli("fit", "--config", str(full)) == 0
    assert run_cli("fit", "--config", str(tiny(**{**overrides, "trainer.max_epochs": 2}))) == 0
    half = version_dir(tmp_path, 1) / "checkpoints" / "last.ckpt"
    assert run_cli("fit", "--config", str(full), "--ckpt_path", str(half)) == 0
    a, b = load_last(tmp_path, 0), load_last(tmp_path, 1)
    for name, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][name]), name
    return a, b


def assert_cli_exits_2(tiny: Callable[..., Path], capsys: Any, callback: dict[str, Any], message: str) -> None:
    """A run with the bad ``callback`` exits with status 2 and ``error: message`` as the last stderr line."""
    config = tiny(**{"trainer.callbacks": [callback]})
    assert run_cli("fit", "--config", str(config)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {message}"


def shipped_config(stem: str) -> tuple[FederatedCLI, AggregationCallback]:
    """The CLI built (not run) from ``configs/<stem>.yaml`` and its one aggregation callback."""
    cli = FederatedCLI(args=["--config", str(REPO / "configs" / f"{stem}.yaml")], run=False)
    [aggregator] = [c for c in cli.trainer.callbacks if isinstance(c, AggregationCallback)]
    return cli, aggregator


def assert_server_scalar_logged(tmp_path: Path, tag: str, rounds: int = 4) -> list[float]:
    """``tag`` was logged once per round with the round numbers as steps; returns its values."""
    scalars = events(tmp_path).Scalars(tag)
    assert [e.step for e in scalars] == list(range(1, rounds + 1)), tag
    values = [e.value for e in scalars]
    assert all(torch.isfinite(torch.tensor(values))), values
    return values
