"""Training over a lazy federation: bitwise the eager run, and a round stages K (+ m) clients, never N."""

from __future__ import annotations

import tempfile

import pytest
import pytorch_lightning as pl
import torch

from lightning_fl.callbacks import FedAvg, FedProx, Scaffold
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import LogisticRegression
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.data import FederatedData

N, K, M, ROUNDS = 20, 4, 5, 2


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05)


def _fit(datamodule: pl.LightningDataModule, engine: str = "sequential", callback: pl.Callback | None = None,
         evaluate: bool = False, **loop_args) -> FederatedLoop:
    torch.manual_seed(0)
    loop = FederatedLoop(client=LogisticRegression(60, 10), optimizer=_sgd, clients_per_round=K, local_epochs=2,
                         batch_size=10, seed=0, engine=engine, eval=EvalProtocol(client_subset=M), **loop_args)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=ROUNDS, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=1 if evaluate else 0,
                         check_val_every_n_epoch=1, callbacks=[callback or FedAvg()])
    trainer.fit(loop, datamodule=datamodule)
    return loop


def _synthetic(lazy: bool) -> SyntheticDataModule:
    return SyntheticDataModule("1_1", num_clients=N, seed=3, max_samples_per_client=60, generator="per_client",
                               lazy=lazy)


def _weights(loop: FederatedLoop) -> torch.Tensor:
    return loop.layout.flatten(loop.model.state_dict())


@pytest.mark.parametrize(("engine", "callback"), [("sequential", FedAvg), ("vectorized", FedAvg),
                                                 ("vectorized", FedProx)], ids=["sequential", "vectorized", "fedprox"])
def test_lazy_run_is_bitwise_the_eager_run(engine: str, callback: type) -> None:
    kwargs = {"mu": 0.1} if callback is FedProx else {}
    eager = _fit(_synthetic(False), engine, callback(**kwargs), evaluate=True)
    lazy = _fit(_synthetic(True), engine, callback(**kwargs), evaluate=True)
    assert lazy.source is not None and eager.source is None
    assert torch.equal(_weights(lazy), _weights(eager))
    assert lazy.engine.name == engine
    # The evaluation of the subset scores the same clients with the same numbers.
    assert torch.equal(lazy.last_evaluation.correct, eager.last_evaluation.correct)
    assert torch.equal(lazy.last_evaluation.total, eager.last_evaluation.total)
    assert int((lazy.last_evaluation.total > 0).sum()) == M


def test_scaffold_with_the_disk_store_is_bitwise_the_eager_run() -> None:
    eager = _fit(_synthetic(False), "vectorized", Scaffold(), client_state="disk")
    lazy = _fit(_synthetic(True), "vectorized", Scaffold(), client_state="disk")
    assert torch.equal(_weights(lazy), _weights(eager))


class CountingSource:
    """A lazy source over an eager federation that records every client it is asked to produce."""

    def __init__(self, data: FederatedData) -> None:
        self.inner, self.requests = data, []
        self.num_clients, self.num_classes = data.num_clients, data.num_classes
        self.input_shape, self.has_validation = data.input_shape, data.has_validation

    def sizes(self, split: str = "train") -> torch.Tensor:
        return self.inner.sizes(split)

    def stage(self, client_ids, split="train", device=None) -> FederatedData:
        self.requests.append((split, len(client_ids)))
        return self.inner.stage(client_ids, split, device)

    def digest(self) -> str:
        return "counting"


class CountingDataModule(FederatedDataModule):
    def build_data(self) -> FederatedData:
        return _synthetic(False).build_data()

    def build_source(self) -> CountingSource:
        self.counting = CountingSource(super().build_source())
        return self.counting


def test_a_round_stages_the_cohort_and_an_evaluation_the_subset_only() -> None:
    datamodule = CountingDataModule(seed=3)
    _fit(datamodule, "vectorized", evaluate=True)
    requests = datamodule.counting.requests
    assert requests[0] == ("val", 1)  # set-up: client 0, for the checks
    # Each round: the K clients of the cohort; each evaluation (every round): M clients of val, M of test.
    assert requests[1:] == [("train", K), ("val", M), ("test", M)] * ROUNDS
    assert sum(n for _, n in requests) == 1 + ROUNDS * (K + 2 * M) < N * ROUNDS


@pytest.mark.parametrize(("loop_args", "field"), [
    ({"sampling": "by_samples"}, "model.sampling: uniform"),
    ({"eval": EvalProtocol()}, "set model.eval.client_subset"),
    ({"eval": EvalProtocol(model="finetuned", finetune_steps=1, client_subset=M)}, "model.eval.model: finetuned"),
])
def test_what_needs_every_client_is_refused_before_training(loop_args: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        _fit_args(loop_args)


def test_label_histogram_readers_are_refused() -> None:
    from lightning_fl.callbacks import DWFed

    with pytest.raises(ConfigError, match=r"does not hold the \(N, C\) label histograms, which DWFed reads"):
        _fit(_synthetic(True), callback=DWFed())


def test_a_system_model_label_flipping_and_poisson_dp_are_refused() -> None:
    from lightning_fl.aggregation.attacks import LabelFlip, SignFlip
    from lightning_fl.privacy import DifferentialPrivacy
    from lightning_fl.simulation.system import SystemHeterogeneity

    with pytest.raises(ConfigError, match="cannot be combined with model.system"):
        _fit_args({"system": SystemHeterogeneity(dropout=0.1)})
    with pytest.raises(ConfigError, match="cannot be combined with model.attack .it rewrites"):
        _fit_args({"attack": LabelFlip(0.2)})
    with pytest.raises(ConfigError, match="model.dp.sampling: poisson .it draws every client"):
        _fit_args({"dp": DifferentialPrivacy(noise_multiplier=1.0)})
    _fit_args({"attack": SignFlip(0.2)})  # an attack on the updates needs no client's samples: it trains
    _fit_args({"dp": DifferentialPrivacy(noise_multiplier=1.0, sampling="fixed")})  # and so does DP on a fixed K


def test_no_test_sample_anywhere_is_one_line_from_the_sizes() -> None:
    datamodule = SyntheticDataModule("1_1", num_clients=N, seed=3, max_samples_per_client=60, test_fraction=0.0,
                                     generator="per_client", lazy=True)
    with pytest.raises(ConfigError, match=r"data.test_fraction must be in \(0, 1\): no client has a test sample"):
        _fit(datamodule)


def _fit_args(loop_args: dict) -> None:
    eval_protocol = loop_args.pop("eval", EvalProtocol(client_subset=M))
    torch.manual_seed(0)
    loop = FederatedLoop(client=LogisticRegression(60, 10), optimizer=_sgd, clients_per_round=K, seed=0,
                         eval=eval_protocol, **loop_args)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=1, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[FedAvg()])
    trainer.fit(loop, datamodule=_synthetic(True))


def _lazy_loop(clients_per_round: int, subset: int) -> FederatedLoop:
    return FederatedLoop(client=LogisticRegression(60, 10), optimizer=_sgd, clients_per_round=clients_per_round,
                         seed=0, eval=EvalProtocol(client_subset=subset))


@pytest.mark.parametrize(("cohort", "subset", "message"), [
    (N + 1, M, f"clients_per_round must be between 1 and {N} (the number of clients); got {N + 1}"),
    (K, N + 1, f"model.eval.client_subset must be at most {N} (the number of clients"),
])
def test_cohort_or_subset_above_n_is_one_line_before_anything_trains(cohort: int, subset: int, message: str) -> None:
    loop = _lazy_loop(cohort, subset)
    trained = []
    loop.training_step = lambda *args: trained.append(args)  # noqa: ARG005 (must never be reached)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=1, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[FedAvg()])
    with pytest.raises(ConfigError) as raised:
        trainer.fit(loop, datamodule=_synthetic(True))
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert trained == []


def test_a_lazy_run_from_yaml_logs_checkpoints_and_resumes(tiny, tmp_path) -> None:
    from tests.conftest import run_cli

    lazy_data = {"variant": "1_1", "num_clients": 6, "max_samples_per_client": 80, "generator": "per_client",
                 "lazy": True}
    config = tiny(**{"data.init_args": lazy_data, "model.eval": {"client_subset": 3}, "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config), "--trainer.enable_progress_bar", "false") == 0
    checkpoints = sorted((tmp_path / "logs").rglob("last.ckpt"))
    assert checkpoints, "the round checkpoint was written"
    more = tiny(**{"data.init_args": lazy_data, "model.eval": {"client_subset": 3}, "trainer.max_epochs": 3})
    assert run_cli("fit", "--config", str(more), "--ckpt_path", str(checkpoints[0]),
                   "--trainer.enable_progress_bar", "false") == 0
