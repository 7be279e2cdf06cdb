"""Tests for lightning_fl.functional.fairness (SPEC section 7); numbers worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.functional.fairness import (
    FAIRNESS_KEYS,
    client_accuracies,
    fairness_metrics,
    first_reaching,
    last_rounds_count,
    mean_over_last_rounds,
    tail_count,
)
from lightning_fl.reporting.tables import (
    LAST_ROUNDS_COLUMNS,
    fairness_csv,
    fairness_table,
    last_rounds_note,
)

# Five clients, accuracies [0.1, 0.5, 0.9, 0.7, 0.3] with totals [10, 20, 10, 40, 20]:
# correct = [1, 10, 9, 28, 6].
CORRECT5 = torch.tensor([1, 10, 9, 28, 6])
TOTAL5 = torch.tensor([10, 20, 10, 40, 20])


def test_client_accuracies_fractions_and_empty_client_is_nan():
    acc = client_accuracies(CORRECT5, TOTAL5)
    assert acc.dtype == torch.float64
    torch.testing.assert_close(acc, torch.tensor([0.1, 0.5, 0.9, 0.7, 0.3], dtype=torch.float64))

    acc = client_accuracies(torch.tensor([3, 0, 1]), torch.tensor([4, 0, 2]))
    assert acc[0].item() == 0.75 and acc[2].item() == 0.5
    assert math.isnan(acc[1].item())


def test_fairness_metrics_hand_computed_five_clients():
    m = fairness_metrics(CORRECT5, TOTAL5)
    assert tuple(m) == FAIRNESS_KEYS
    assert all(type(v) is float for v in m.values())
    # mean = (0.1 + 0.5 + 0.9 + 0.7 + 0.3) / 5 = 2.5 / 5 = 0.5
    assert m["acc_mean"] == pytest.approx(0.5, abs=1e-12)
    # weighted = sum(total * acc) / sum(total) = (1 + 10 + 9 + 28 + 6) / 100 = 0.54
    assert m["acc_weighted"] == pytest.approx(0.54, abs=1e-12)
    # pooled = sum(correct) / sum(total) = 54 / 100, identical to weighted
    assert m["acc_pooled"] == pytest.approx(0.54, abs=1e-12)
    # ceil(0.2 * 5) = 1 client in each tail: worst = 0.1, best = 0.9
    assert m["acc_worst20"] == pytest.approx(0.1, abs=1e-12)
    assert m["acc_best20"] == pytest.approx(0.9, abs=1e-12)
    # percent values 10, 50, 90, 70, 30; mean 50; squared deviations 1600, 0, 1600, 400, 400
    # population variance = 4000 / 5 = 800 percent^2; std = sqrt(800) = 28.28... percent
    assert m["acc_var"] == pytest.approx(800.0, abs=1e-9)
    assert m["acc_std"] == pytest.approx(math.sqrt(800.0), abs=1e-9)
    assert m["acc_min"] == pytest.approx(0.1, abs=1e-12)
    assert m["acc_max"] == pytest.approx(0.9, abs=1e-12)
    # jain = (sum a)^2 / (N sum a^2) = 2.5^2 / (5 * (0.01 + 0.25 + 0.81 + 0.49 + 0.09))
    #      = 6.25 / (5 * 1.65) = 6.25 / 8.25 = 25 / 33
    assert m["jain"] == pytest.approx(25.0 / 33.0, abs=1e-12)


def test_fairness_metrics_seven_clients_tail_of_two():
    # accuracies [0.2, 0.9, 0.4, 1.0, 0.6, 0.1, 0.7]; ceil(0.2 * 7) = ceil(1.4) = 2
    correct = torch.tensor([2, 9, 4, 10, 6, 1, 7])
    total = torch.full((7,), 10)
    m = fairness_metrics(correct, total)
    # worst 2: (0.1 + 0.2) / 2 = 0.15; best 2: (1.0 + 0.9) / 2 = 0.95
    assert m["acc_worst20"] == pytest.approx(0.15, abs=1e-12)
    assert m["acc_best20"] == pytest.approx(0.95, abs=1e-12)
    # mean = 3.9 / 7
    assert m["acc_mean"] == pytest.approx(3.9 / 7, abs=1e-12)
    # equal totals: weighted == unweighted mean
    assert m["acc_weighted"] == pytest.approx(3.9 / 7, abs=1e-12)


def test_tail_count_is_exact_ceil():
    # 0.2 * 15 == 3.0000000000000004 in floats; ceil would wrongly give 4.
    assert [tail_count(n) for n in (0, 1, 4, 5, 6, 7, 10, 11, 15, 100)] == [0, 1, 1, 1, 2, 2, 2, 3, 3, 20]
    m = fairness_metrics(torch.arange(15), torch.full((15,), 14))
    # lowest 3 accuracies: (0 + 1 + 2) / 14 / 3 = 1 / 14
    assert m["acc_worst20"] == pytest.approx(1.0 / 14.0, abs=1e-12)


def test_fairness_metrics_client_with_zero_test_samples():
    # client 1 has no test samples: excluded from unweighted statistics, weight 0 in weighted.
    m = fairness_metrics(torch.tensor([3, 0, 1]), torch.tensor([4, 0, 2]))
    # remaining accuracies 0.75, 0.5 (N = 2)
    assert m["acc_mean"] == pytest.approx(0.625, abs=1e-12)
    # weighted / pooled = (3 + 1) / (4 + 2) = 2/3
    assert m["acc_weighted"] == pytest.approx(2.0 / 3.0, abs=1e-12)
    assert m["acc_pooled"] == pytest.approx(2.0 / 3.0, abs=1e-12)
    # ceil(0.2 * 2) = 1: worst 0.5, best 0.75
    assert m["acc_worst20"] == pytest.approx(0.5, abs=1e-12)
    assert m["acc_best20"] == pytest.approx(0.75, abs=1e-12)
    # percent 75, 50: mean 62.5, deviations^2 156.25 each -> var 156.25, std 12.5
    assert m["acc_var"] == pytest.approx(156.25, abs=1e-9)
    assert m["acc_std"] == pytest.approx(12.5, abs=1e-9)
    assert (m["acc_min"], m["acc_max"]) == (0.5, 0.75)
    # jain = 1.25^2 / (2 * (0.5625 + 0.25)) = 1.5625 / 1.625 = 25/26
    assert m["jain"] == pytest.approx(25.0 / 26.0, abs=1e-12)
    assert not any(math.isnan(v) for v in m.values())


def test_fairness_metrics_all_zero_accuracies():
    m = fairness_metrics(torch.zeros(4, dtype=torch.long), torch.tensor([5, 3, 8, 1]))
    for key in ("acc_mean", "acc_weighted", "acc_pooled", "acc_worst20", "acc_best20", "acc_var", "acc_std"):
        assert m[key] == 0.0, key
    # all accuracies equal (all zero): perfectly fair by convention
    assert m["jain"] == 1.0


def test_fairness_metrics_equal_and_single_client():
    m = fairness_metrics(torch.tensor([3, 6]), torch.tensor([4, 8]))
    assert m["jain"] == pytest.approx(1.0) and m["acc_var"] == pytest.approx(0.0, abs=1e-12)
    m = fairness_metrics(torch.tensor([2]), torch.tensor([5]))
    assert m["acc_worst20"] == m["acc_best20"] == m["acc_mean"] == pytest.approx(0.4)
    assert m["jain"] == 1.0


@pytest.mark.parametrize(
    ("correct", "total", "match"),
    [
        (torch.tensor([1, 2]), torch.tensor([2]), "same length"),
        (torch.ones(2, 2), torch.ones(2, 2), "1-D"),
        (torch.tensor([3]), torch.tensor([2]), "exceeds"),
        (torch.tensor([-1]), torch.tensor([2]), "non-negative"),
        (torch.tensor([0, 0]), torch.tensor([0, 0]), "no client has test samples"),
        (torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long), "no client has test samples"),
    ],
)
def test_fairness_metrics_rejects_bad_input(correct, total, match):
    with pytest.raises(ValueError, match=match):
        fairness_metrics(correct, total)


def test_first_reaching():
    assert first_reaching([0.2, 0.5, 0.7, 0.9], 0.7) == 2  # >= counts as reached
    assert first_reaching(torch.tensor([0.2, 0.8, 0.5, 0.9]), 0.75) == 1
    assert first_reaching([0.1, float("nan"), 0.3], 0.2) == 2  # NaN never reaches
    assert first_reaching([0.1, 0.2], 0.5) is None
    assert first_reaching([], 0.5) is None
    assert first_reaching([2.0, 1.0, 0.5, 0.4], 0.5, mode="min") == 2
    assert first_reaching(torch.tensor([2.0, 1.0]), 0.5, mode="min") is None
    with pytest.raises(ValueError, match="mode"):
        first_reaching([1.0], 0.5, mode="up")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NaN"):
        first_reaching([1.0], float("nan"))


ROWS = {
    "FedAvg": {"acc_mean": 0.8911, "acc_worst20": 0.7817, "acc_best20": 1.0, "acc_var": 68.04},
    "FedFa": fairness_metrics(CORRECT5, TOTAL5),  # 50%, 10%, 90%, 800
}


def test_fairness_table_exact_string():
    expected = (
        "| Method | Average | Worst 20% | Best 20% | Variance |\n"
        "| :--- | ---: | ---: | ---: | ---: |\n"
        "| FedAvg | 89.11% | 78.17% | 100.00% | 68.04 |\n"
        "| FedFa | 50.00% | 10.00% | 90.00% | 800.00 |\n"
    )
    assert fairness_table(ROWS) == expected


def test_fairness_table_escapes_pipe_and_requires_keys():
    table = fairness_table({"a|b": ROWS["FedAvg"]})
    assert "| a\\|b | 89.11%" in table
    with pytest.raises(KeyError, match="acc_var"):
        fairness_table({"x": {"acc_mean": 0.5, "acc_worst20": 0.1, "acc_best20": 0.9}})


def test_fairness_csv_full_precision():
    rows = {"FedAvg": ROWS["FedAvg"], "run": {"acc_mean": 1 / 3, "acc_worst20": 0.1, "acc_best20": 0.9, "acc_var": 800.0}}
    text = fairness_csv(rows)
    lines = text.splitlines()
    assert lines[0] == "Method,Average,Worst 20%,Best 20%,Variance"
    assert lines[1] == "FedAvg,0.8911,0.7817,1.0,68.04"
    assert lines[2] == f"run,{1 / 3!r},0.1,0.9,800.0"
    assert float(lines[2].split(",")[1]) == 1 / 3  # round-trips exactly
    assert text.endswith("\n") and len(lines) == 3


def test_last_rounds_count_is_the_integer_ceiling():
    # ceil(0.1 n): 1 -> 1, 9 -> 1, 10 -> 1, 11 -> 2, 30 -> 3 (the float 0.1 * 30 = 3.0000000000000004 would give 4)
    assert [last_rounds_count(n) for n in (1, 9, 10, 11, 30, 5000)] == [1, 1, 1, 2, 3, 500]
    with pytest.raises(ValueError, match="num_rounds must be >= 1"):
        last_rounds_count(0)


def test_mean_over_last_rounds_by_hand():
    # Evaluated every 3 rounds and at the final round 20; window 5 -> rounds 16..20: evaluations 18 and 20.
    rounds = [3, 6, 9, 12, 15, 18, 20]
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9]
    mean, used = mean_over_last_rounds(rounds, values, last_round=20, window=5)
    assert used == [18, 20] and mean == pytest.approx((0.6 + 0.9) / 2, abs=1e-15)
    # Window 1: the final round only; a round evaluated twice counts once, with its latest value.
    assert mean_over_last_rounds([19, 20, 20], [0.1, 0.2, 0.4], 20, 1) == (0.4, [20])
    with pytest.raises(ValueError, match="no evaluation in the last 1 round"):
        mean_over_last_rounds([18], [0.5], 20, 1)
    with pytest.raises(ValueError, match="same length"):
        mean_over_last_rounds([18, 20], [0.5], 20, 5)


def test_fairness_csv_extra_columns_and_last_rounds_note():
    row = {**ROWS["FedAvg"], "acc_mean_last10pct": 0.25, "acc_pooled_last10pct": 1 / 3}
    lines = fairness_csv({"FedAvg": row}, LAST_ROUNDS_COLUMNS).splitlines()
    assert lines[0] == "Method,Average,Worst 20%,Best 20%,Variance,Average (last 10% of rounds),Pooled (last 10% of rounds)"
    assert lines[1] == f"FedAvg,0.8911,0.7817,1.0,68.04,0.25,{1 / 3!r}"
    note = last_rounds_note(row, 1, [20])
    assert note == ("Last 10% of rounds (IGFL's metric; the last 1 round, evaluated at round 20):"
                    " Average 25.00%, Pooled 33.33%.\n")
