"""Problems that would otherwise surface as silently wrong results, caught before training."""

from __future__ import annotations

from fnmatch import fnmatchcase
from types import SimpleNamespace

import pytest
import torch

import lightning_fl.callbacks as callbacks
from lightning_fl.callbacks import CommunicationCost, FairnessMetrics, GlobalTrainLoss, RoundsToTarget
from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.run_checks import check_finite_inputs, check_precision
from lightning_fl.simulation.run_checks import check_monitors, check_setup, logged_scalars
from tests.callbacks.helpers import events
from tests.conftest import run_cli


def _data(x_train: torch.Tensor, train_offsets: list[int]) -> SimpleNamespace:
    return SimpleNamespace(x_train=x_train, train_offsets=torch.tensor(train_offsets),
                           x_test=torch.zeros(2, 3), test_offsets=torch.tensor([0, 1, 2, 2]))


def test_nan_in_the_data_is_blamed_on_the_data_not_the_learning_rate() -> None:
    x = torch.zeros(10, 3)
    x[7, 1] = float("nan")  # clients own rows [0, 4), [4, 6), [6, 10): row 7 is client 2's sample 1
    x[9, 0] = float("inf")
    with pytest.raises(ConfigError) as err:
        check_finite_inputs(_data(x, [0, 4, 6, 10]))
    assert str(err.value) == ("data: the training inputs of client 2 contain NaN or inf (sample 1 of its training"
                              " split, 2 samples in all); clean the data before training")
    check_finite_inputs(_data(torch.zeros(10, 3), [0, 4, 6, 10]))  # clean data passes
    check_finite_inputs(_data(torch.zeros(10, 3, dtype=torch.long), [0, 4, 6, 10]))  # token ids: nothing to check


@pytest.mark.parametrize(("precision", "accelerator", "fails"), [
    ("16-mixed", "cpu", True), ("16-mixed", "auto", not torch.cuda.is_available()), ("bf16-mixed", "cpu", False),
    ("32-true", "cpu", False)])
def test_fp16_without_a_gpu_is_an_error(precision: str, accelerator: str, fails: bool) -> None:
    if fails:
        with pytest.raises(ConfigError, match="trainer.precision 16-mixed needs a GPU"):
            check_precision(precision, accelerator)
    else:
        check_precision(precision, accelerator)


def test_fp16_on_cpu_fails_in_one_line_from_the_cli(tiny, capsys) -> None:
    assert run_cli("fit", "--config", str(tiny(**{"trainer.precision": "16-mixed"}))) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "error: trainer.precision 16-mixed needs a GPU")


def test_options_a_run_ignores_are_named_in_one_warning(tiny) -> None:
    hierarchy = tiny(**{"model.hierarchy": {"num_institutions": 2}, "model.sampling": "by_samples",
                        "trainer.max_epochs": 1})
    with pytest.warns(UserWarning, match=r"^model.clients_per_round 3 and model.sampling by_samples are ignored: with"
                                         r" model.hierarchy every client of every institution trains each round$"):
        assert run_cli("fit", "--config", str(hierarchy)) == 0
    sequential = tiny(**{"model.engine": "sequential", "model.max_parallel_clients": 2, "trainer.max_epochs": 1})
    with pytest.warns(UserWarning, match=r"^model.max_parallel_clients 2 is ignored: the sequential engine trains one"
                                         r" client at a time \(it bounds the vectorized engine\)$"):
        assert run_cli("fit", "--config", str(sequential)) == 0


def test_clients_without_test_samples_are_named_in_a_warning() -> None:
    loop = SimpleNamespace(trainer=SimpleNamespace(callbacks=[]), system=None, on_client_divergence="stop")
    data = SimpleNamespace(test_offsets=torch.tensor([0, 2, 2, 5, 5]), has_validation=True)
    with pytest.warns(UserWarning, match=r"^data: 2 of 4 clients \(1, 3\) have no test sample; they are left out of"
                                         r" the test/\* fairness metrics$"):
        check_setup(loop, data, "fit")


def test_monitors_of_callbacks_from_elsewhere_are_not_second_guessed() -> None:
    class Theirs:  # a third-party callback: what it logs is unknown
        monitor = "their/metric"

    check_monitors([Theirs()], validation=True, system=False, drop=False)
    with pytest.raises(ConfigError, match=r"^Theirs.monitor must be a metric this run logs, one of train/loss"):
        check_monitors([type("Theirs", (), {"monitor": "their/metric", "logged_scalars": ()})()], True, False, False)
    names = logged_scalars([], validation=False, system=True, drop=True)
    assert "val/loss" not in names and "sim/elapsed_seconds" in names and "clients/diverged" in names


@pytest.mark.parametrize("aggregation", ["FedAvgM", "FedAdam", "Scaffold", "QFFL", "FedNova", "FedDyn", "FedAdp",
                                         "FedFaMo"])
def test_every_scalar_a_run_logs_is_declared(tiny, tmp_path, aggregation) -> None:
    # The monitor check (lightning_fl/simulation/run_checks.py) trusts the callbacks' logged_scalars: they must cover
    # every scalar that reaches TensorBoard, or a valid monitor would be refused.
    names = ["FairnessMetrics", "CommunicationCost", "GlobalTrainLoss"]
    config = tiny(**{"trainer.max_epochs": 1,
                     "model.system": {"dropout": 0.1}, "model.on_client_divergence": "drop",
                     "trainer.callbacks": [{"class_path": f"lightning_fl.callbacks.{n}"} for n in [aggregation, *names]]
                     + [{"class_path": "lightning_fl.callbacks.RoundsToTarget",
                         "init_args": {"monitor": "val/acc_mean", "target": 0.0}}]})
    assert run_cli("fit", "--config", str(config)) == 0
    declared = logged_scalars([getattr(callbacks, aggregation)(), FairnessMetrics(), CommunicationCost(),
                               GlobalTrainLoss(), RoundsToTarget()], validation=True, system=True, drop=True)
    tags = events(tmp_path).Tags()["scalars"]
    assert tags and [t for t in tags if not any(fnmatchcase(t, n) for n in declared)] == []
