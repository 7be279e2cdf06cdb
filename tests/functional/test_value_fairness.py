"""value_fairness: fairness over any per-client metric with its direction, against hand-worked numbers."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.functional.fairness import fairness_metrics
from lightning_fl.functional.value_fairness import VALUE_FAIRNESS_KEYS, default_higher_is_better, value_fairness


def test_lower_is_better_tails_are_the_highest_values() -> None:
    # Six clients' MSE; m = ceil(0.2 * 6) = 2. Sorted: 0.5, 1, 1, 2, 3, 4.5 -> best (lowest two) 0.75,
    # worst (highest two) 3.75; mean 12/6 = 2; var = (2.25+1+1+0+1+6.25)/6 = 11.5/6.
    mse = torch.tensor([1.0, 3.0, 0.5, 4.5, 2.0, 1.0], dtype=torch.float64)
    m = value_fairness(mse, higher_is_better=False)
    assert list(m) == list(VALUE_FAIRNESS_KEYS)
    assert m["mean"] == pytest.approx(2.0)
    assert m["worst20"] == pytest.approx(3.75)
    assert m["best20"] == pytest.approx(0.75)
    assert m["var"] == pytest.approx(11.5 / 6)
    assert m["std"] == pytest.approx(math.sqrt(11.5 / 6))
    assert (m["min"], m["max"]) == (0.5, 4.5)
    # Jain: (12)^2 / (6 * (1 + 9 + 0.25 + 20.25 + 4 + 1)) = 144 / 213
    assert m["jain"] == pytest.approx(144 / 213)
    higher = value_fairness(mse, higher_is_better=True)
    assert (higher["worst20"], higher["best20"]) == (pytest.approx(0.75), pytest.approx(3.75))


def test_weights_and_left_out_clients() -> None:
    # The NaN client (no samples) is left out of every statistic; weighted = (2*1 + 6*3) / 8 = 2.5.
    m = value_fairness(torch.tensor([1.0, float("nan"), 3.0]), False, weights=torch.tensor([2.0, 0.0, 6.0]))
    assert m["mean"] == pytest.approx(2.0)
    assert m["weighted"] == pytest.approx(2.5)
    assert (m["worst20"], m["best20"]) == (3.0, 1.0)  # m = ceil(0.4) = 1


def test_accuracy_matches_fairness_metrics() -> None:
    correct, total = torch.tensor([1, 10, 9, 28, 6]), torch.tensor([10, 20, 10, 40, 20])
    acc = fairness_metrics(correct, total)
    m = value_fairness(correct.double() / total, True, weights=total)
    assert m["mean"] == pytest.approx(acc["acc_mean"])
    assert m["weighted"] == pytest.approx(acc["acc_weighted"])
    assert (m["worst20"], m["best20"]) == (pytest.approx(acc["acc_worst20"]), pytest.approx(acc["acc_best20"]))
    assert m["var"] * 1e4 == pytest.approx(acc["acc_var"])  # acc_var is in percent^2
    assert m["jain"] == pytest.approx(acc["jain"])


def test_jain_edge_cases_and_errors() -> None:
    assert value_fairness([0.0, 0.0])["jain"] == 1.0
    assert math.isnan(value_fairness([-1.0, 2.0])["jain"])
    with pytest.raises(ValueError, match="no client has a value"):
        value_fairness([float("nan")])
    with pytest.raises(ValueError, match="1-D"):
        value_fairness(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="finite"):
        value_fairness([1.0, float("inf")])


def test_default_direction() -> None:
    assert default_higher_is_better("acc") and default_higher_is_better("f1")
    assert not any(default_higher_is_better(n) for n in ("loss", "mse", "MAE", "perplexity", "rmse"))
