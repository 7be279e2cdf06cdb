"""Shared pieces of the aggregation-callback tests: a fake loop, hand-made updates, CLI runs."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import Tensor

from lightning_fl.callback import AggregationCallback
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.flat_state import FlatStateLayout
from lightning_fl.data import FederatedData, offsets_from_sizes
from lightning_fl.cli import FederatedCLI
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


def fake_loop(layout: FlatStateLayout | None = None, *, lr: float = 0.1, momentum: float = 0.0, num_clients: int = 4,
              model: torch.nn.Module | None = None,
              optimizer: Callable[..., torch.optim.Optimizer] | None = None) -> SimpleNamespace:
    """What aggregation callbacks read from the loop; ``loop.logged`` records ``log_round`` calls."""
    logged: list[tuple[dict[str, float], int | None, bool]] = []

    def log_round(metrics: dict[str, float], step: int | None = None, prog_bar: tuple[str, ...] = (),
                  callback_metrics: bool = True) -> None:
        logged.append((dict(metrics), step, callback_metrics))

    if optimizer is None:
        def optimizer(params):  # noqa: ANN001, ANN202
            return torch.optim.SGD(params, lr=lr, momentum=momentum)
    return SimpleNamespace(client_lr=lr, client_momentum=momentum, layout=layout, model=model,
                           data=SimpleNamespace(num_clients=num_clients), log_round=log_round, logged=logged,
                           tensorboard=lambda: [], optimizer_factory=optimizer, keep_client_optimizer_state=False)


class RecordingLoop:
    """A fake loop for ``aggregate`` that records ``log_round`` calls and what a SummaryWriter would receive.

    ``label_hist``, if given, is what ``loop.data.label_histograms(split)`` returns.
    """

    def __init__(self, layout: FlatStateLayout | None = None, *, client_lr: float = 0.1,
                 label_hist: Tensor | None = None) -> None:
        self.layout = layout
        self.client_lr = client_lr
        if label_hist is not None:
            self.data = SimpleNamespace(label_histograms=lambda split: label_hist)
        self.scalars: list[tuple[dict[str, float], int | None]] = []
        self.histograms: list[tuple[str, Tensor, int]] = []
        self.figures: list[tuple[str, int]] = []
        writer = SimpleNamespace(
            add_histogram=lambda tag, values, step: self.histograms.append((tag, values, step)),
            add_figure=lambda tag, fig, step: self.figures.append((tag, step)),
        )
        self.tensorboard = lambda: [writer]

    def log_round(self, metrics: dict[str, float], step: int | None = None, **kwargs: Any) -> None:
        self.scalars.append((dict(metrics), step))


def namespace_update(ids: Sequence[int], weights: Sequence[Sequence[float]], samples: Sequence[int] | None = None,
                     **fields: Any) -> SimpleNamespace:
    """The parts of a ``CohortUpdate`` a weighting callback reads (float64 weights), plus ``fields``."""
    k = len(ids)
    return SimpleNamespace(**fields, client_ids=torch.tensor(ids), weights=torch.tensor(weights, dtype=torch.float64),
                           num_samples=torch.tensor(samples if samples is not None else [10] * k), cohort_size=k)


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


def checkpoint_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` after ``torch.save``/``torch.load`` (with ``weights_only``, as a checkpoint could be)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def assert_resume_exact(make: Callable[[], AggregationCallback], loop: Any, global_w: Tensor,
                        rounds: Sequence[CohortUpdate]) -> None:
    """Run ``rounds`` on one instance, and on a second one restored from the first's state after the
    first round; the second instance must then produce bit-identical global weights.
    """
    uninterrupted = make()
    w = uninterrupted.aggregate(None, loop, 0, global_w, rounds[0])
    state = uninterrupted.state_dict()
    resumed = make()
    resumed.load_state_dict(checkpoint_roundtrip(state))
    # The saved state is a copy: changing it afterwards does not reach either instance.
    for value in state.values():
        if isinstance(value, Tensor):
            value.add_(1000.0)
        elif isinstance(value, dict):
            for inner in value.values():
                if isinstance(inner, Tensor):
                    inner.add_(1000.0)
    w_a, w_b = w, w.clone()
    for t, update in enumerate(rounds[1:], start=1):
        w_a = uninterrupted.aggregate(None, loop, t, w_a, update)
        w_b = resumed.aggregate(None, loop, t, w_b, update)
        assert torch.equal(w_a, w_b), t
    assert not torch.equal(w_a, w), "the later rounds should move the model"


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
    """4 rounds in one go (version 0) vs 2 rounds (version 1) resumed from ``last.ckpt`` to 4 (version 2).

    Asserts identical final model weights; returns the two final checkpoints.
    """
    full = tiny(**overrides)
    assert run_cli("fit", "--config", str(full)) == 0
    assert run_cli("fit", "--config", str(tiny(**{**overrides, "trainer.max_epochs": 2}))) == 0
    half = version_dir(tmp_path, 1) / "checkpoints" / "last.ckpt"
    assert run_cli("fit", "--config", str(full), "--ckpt_path", str(half)) == 0
    a, b = load_last(tmp_path, 0), load_last(tmp_path, 2)
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


def assert_cli_resume_exact(tiny: Callable[..., Path], tmp_path: Path, callback: dict[str, Any],
                            **overrides: Any) -> None:
    """4 rounds in one go vs 2 + 2 rounds from ``last.ckpt``: identical final weights and callback state."""
    a, b = run_4_and_2_plus_2(tiny, tmp_path, **{"trainer.callbacks": with_checkpoint(callback), **overrides})
    name = callback["class_path"].rsplit(".", 1)[-1]
    _assert_same_state(a["callbacks"][name], b["callbacks"][name])


def _assert_same_state(a: Any, b: Any) -> None:
    if isinstance(a, Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same_state(a[key], b[key])
    else:
        assert a == b
