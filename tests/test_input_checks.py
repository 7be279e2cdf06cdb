"""Problems that would otherwise surface as silently wrong results, caught before training."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lightning_fl.loop import check_finite_inputs, check_precision
from lightning_fl.validation import ConfigError
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
