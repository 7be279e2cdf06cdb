"""Tests for lightning_fl.functional.personal_metrics (SPEC sections 13.3, 13.4 and 7).

Expected numbers are worked out by hand in comments, or by the naive reference below, which
follows the formulas of SPEC 13.3 with plain Python lists.
"""

from __future__ import annotations

import doctest
import math

import pytest
import torch

from lightning_fl.functional import personal_metrics
from lightning_fl.functional.personal_metrics import (
    HEADLINE_KEYS,
    gain_over_local,
    gap_metrics,
    member_mask,
    optimistic_max_test,
    participation_gap,
    select_rounds,
    set_fairness,
)

T, F = True, False


def _naive_set_fairness(correct: list[int], total: list[int], members: list[bool]) -> dict[str, float]:
    """SPEC 13.3 over the members with test samples, in plain Python."""
    chosen = [(c, t) for c, t, m in zip(correct, total, members) if m and t > 0]
    acc = sorted(c / t for c, t in chosen)
    n = len(acc)
    tail = -(-n // 5)  # ceil(0.2 n) in integers
    mean = sum(acc) / n
    pct_mean = sum(100 * a for a in acc) / n
    return {
        "acc_mean": mean,
        "acc_pooled": sum(c for c, _ in chosen) / sum(t for _, t in chosen),
        "acc_worst20": sum(acc[:tail]) / tail,
        "acc_best20": sum(acc[-tail:]) / tail,
        "acc_var": sum((100 * a - pct_mean) ** 2 for a in acc) / n,  # population variance, percent^2
        "jain": sum(acc) ** 2 / (n * sum(a * a for a in acc)),
    }


# ----------------------------------------------------------------------------------------- set fairness
# Eight clients; the set is clients 0-4, and client 4 has no test samples (excluded, as fairness.py does).
CORRECT = torch.tensor([3, 5, 0, 8, 0, 9, 0, 1])
TOTAL = torch.tensor([4, 10, 5, 8, 0, 10, 2, 4])
MEMBERS = torch.tensor([T, T, T, T, T, F, F, F])


def test_set_fairness_by_hand():
    m = set_fairness(CORRECT, TOTAL, MEMBERS)
    # accuracies 3/4, 5/10, 0/5, 8/8 = 0.75, 0.5, 0.0, 1.0 over |C| = 4 clients
    assert m["acc_mean"] == pytest.approx(2.25 / 4)          # 0.5625
    assert m["acc_pooled"] == pytest.approx(16 / 27)         # (3+5+0+8) / (4+10+5+8)
    assert m["acc_worst20"] == pytest.approx(0.0)            # ceil(0.8) = 1 client
    assert m["acc_best20"] == pytest.approx(1.0)
    # percent 75, 50, 0, 100; mean 56.25; squares 351.5625 + 39.0625 + 3164.0625 + 1914.0625 = 5468.75; / 4
    assert m["acc_var"] == pytest.approx(1367.1875)
    # (2.25)^2 / (4 (0.5625 + 0.25 + 0 + 1)) = (81/16) / (29/4) = 81/116
    assert m["jain"] == pytest.approx(81 / 116)
    assert m[HEADLINE_KEYS["client_mean"]] == m["acc_mean"] and m[HEADLINE_KEYS["pooled"]] == m["acc_pooled"]


def test_set_fairness_matches_the_naive_reference_with_wider_tails():
    generator = torch.Generator().manual_seed(0)
    total = torch.randint(0, 30, (23,), generator=generator)
    total[[2, 9]] = 0  # two clients without test samples
    correct = (torch.rand(23, generator=generator) * total).floor().long()
    members = torch.rand(23, generator=generator) < 0.7
    members[[2, 9]] = True
    got = set_fairness(correct, total, members)
    expected = _naive_set_fairness(correct.tolist(), total.tolist(), members.tolist())
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_set_fairness_ignores_non_members():
    other = CORRECT.clone()
    other[5:] = torch.tensor([0, 2, 4])  # change only clients outside the set
    assert set_fairness(other, TOTAL, MEMBERS) == set_fairness(CORRECT, TOTAL, MEMBERS)


def test_set_fairness_refuses_empty_or_malformed_sets():
    with pytest.raises(ValueError, match="empty"):
        set_fairness(CORRECT, TOTAL, torch.zeros(8, dtype=torch.bool))
    with pytest.raises(ValueError, match="test samples"):  # the only member has no samples
        set_fairness(CORRECT, TOTAL, member_mask([4], 8))
    with pytest.raises(ValueError, match="bool"):
        set_fairness(CORRECT, TOTAL, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="bool"):
        set_fairness(CORRECT, TOTAL, torch.ones(5, dtype=torch.bool))


def test_member_mask():
    assert member_mask(torch.tensor([1, 3]), 5).tolist() == [F, T, F, T, F]
    assert member_mask([], 3).tolist() == [F, F, F]
    with pytest.raises(ValueError):
        member_mask([5], 5)


# ----------------------------------------------------------------------------------------- participation gap
def test_participation_gap_is_unseen_minus_participated():
    assert participation_gap(0.625, 0.75) == pytest.approx(-0.125)
    assert participation_gap(0.8, 0.5) == pytest.approx(0.3)


def test_gap_metrics_by_hand():
    correct = torch.tensor([6, 1, 3, 0, 7])
    total = torch.tensor([8, 4, 4, 2, 7])
    participated = torch.tensor([T, T, F, F, F])  # accs 0.75, 0.25: mean 0.5, pooled 7/12
    unseen = torch.tensor([F, F, T, T, F])        # accs 0.75, 0.0: mean 0.375, pooled 3/6
    gap = gap_metrics(correct, total, participated, unseen)  # client 4 is in neither set
    assert set(gap) == {"gap_client_mean", "gap_pooled"}
    assert gap["gap_client_mean"] == pytest.approx(0.375 - 0.5)
    assert gap["gap_pooled"] == pytest.approx(0.5 - 7 / 12)


def test_gap_metrics_refuses_overlapping_sets():
    with pytest.raises(ValueError, match="overlap"):
        gap_metrics(CORRECT, TOTAL, MEMBERS, member_mask([0, 6], 8))


# ----------------------------------------------------------------------------------------- gain over Local
def test_gain_over_local_by_hand():
    nan = math.nan
    method = torch.tensor([0.9, 0.5, 0.4, 0.8, nan, 0.1], dtype=torch.float64)
    local = torch.tensor([0.7, 0.5, 0.6, 0.8, nan, 0.9], dtype=torch.float64)
    members = torch.tensor([T, T, T, T, T, F])
    # client 4 has no samples (NaN in both runs), client 5 is not a member:
    # gains 0.2, 0, -0.2, 0 -> one win of 4 (ties are not wins), mean 0, min -0.2
    gain = gain_over_local(method, local, members)
    assert gain["win_rate"] == pytest.approx(0.25)
    assert gain["mean_gain"] == pytest.approx(0.0, abs=1e-12)
    assert gain["min_gain"] == pytest.approx(-0.2)


def test_gain_over_local_refuses_runs_with_different_splits():
    with pytest.raises(ValueError, match="one run only"):
        gain_over_local(torch.tensor([0.5, math.nan]), torch.tensor([0.5, 0.5]), torch.tensor([T, T]))
    with pytest.raises(ValueError, match="same length"):
        gain_over_local(torch.tensor([0.5]), torch.tensor([0.5, 0.5]), torch.tensor([T]))
    with pytest.raises(ValueError, match="no client"):
        gain_over_local(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5]), torch.tensor([F, F]))


# ----------------------------------------------------------------------------------------- round selection
HISTORY = [
    {"round": 2, "val": {"acc_mean": 0.50}, "test": {"acc_mean": 0.40, "acc_pooled": 0.45}},
    {"round": 4, "val": {"acc_mean": 0.70}, "test": {"acc_mean": 0.60, "acc_pooled": 0.65}},
    {"round": 6, "val": {"acc_mean": math.nan}, "test": {"acc_mean": 0.90, "acc_pooled": 0.95}},
    {"round": 8, "val": {"acc_mean": 0.70}, "test": {"acc_mean": 0.70, "acc_pooled": 0.75}},
    {"round": 10, "val": {"acc_mean": 0.65}, "test": {"acc_mean": 0.80, "acc_pooled": 0.85}},
]


def test_select_last():
    assert select_rounds(HISTORY, "last") == ({"acc_mean": 0.80, "acc_pooled": 0.85}, [10])


def test_select_mean_last():
    stats, rounds = select_rounds(HISTORY, "mean_last", last_r=3)
    assert rounds == [6, 8, 10]
    assert stats["acc_mean"] == pytest.approx((0.90 + 0.70 + 0.80) / 3)    # 0.8
    assert stats["acc_pooled"] == pytest.approx((0.95 + 0.75 + 0.85) / 3)  # 0.85
    # r larger than the history averages every evaluation: (0.4 + 0.6 + 0.9 + 0.7 + 0.8) / 5 = 0.68
    stats, rounds = select_rounds(HISTORY, "mean_last", last_r=10)
    assert rounds == [2, 4, 6, 8, 10] and stats["acc_mean"] == pytest.approx(0.68)
    assert select_rounds(HISTORY, "mean_last", last_r=1) == select_rounds(HISTORY, "last")


def test_select_best_val_takes_the_first_maximiser_and_never_reads_test():
    # val 0.5, 0.7, NaN, 0.7, 0.65: the maximum 0.7 is first reached at round 4 (NaN never wins);
    # round 6 has the best test accuracy, which best_val must not pick.
    assert select_rounds(HISTORY, "best_val", monitor="acc_mean") == ({"acc_mean": 0.60, "acc_pooled": 0.65}, [4])


def test_select_rounds_refusals():
    with pytest.raises(ValueError, match="rule"):
        select_rounds(HISTORY, "best_test")
    with pytest.raises(ValueError, match="empty"):
        select_rounds([], "last")
    with pytest.raises(ValueError, match="last_r"):
        select_rounds(HISTORY, "mean_last", last_r=0)
    with pytest.raises(ValueError, match="val/loss"):
        select_rounds(HISTORY, "best_val", monitor="loss")
    with pytest.raises(ValueError, match="NaN"):
        select_rounds([{"round": 1, "val": {"acc_mean": math.nan}, "test": {}}], "best_val")
    mixed = HISTORY[:-1] + [{"round": 10, "val": {"acc_mean": 0.6}, "test": {"acc_mean": 0.8}}]
    with pytest.raises(ValueError, match="same test statistics"):
        select_rounds(mixed, "mean_last", last_r=2)


def test_optimistic_max_test_picks_the_first_best_test_round():
    # pooled test 0.45, 0.65, 0.95, 0.75, 0.85: round 6
    assert optimistic_max_test(HISTORY) == ({"acc_mean": 0.90, "acc_pooled": 0.95}, [6])
    tie = [{"round": 1, "test": {"acc_pooled": 0.5}}, {"round": 2, "test": {"acc_pooled": 0.5}}]
    assert optimistic_max_test(tie)[1] == [1]


def test_docstring_examples():
    result = doctest.testmod(personal_metrics, extraglobs={"torch": torch}, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_best_val_minimises_a_lower_is_better_metric_and_keeps_the_first_of_ties() -> None:
    # val/mse_mean 3, 1, 2, 1: the lowest is at round 20 (round 40 ties it later and does not move the choice).
    history = [{"round": r, "val": {"mse_mean": v}, "test": {"mse_mean": 10 * v}}
               for r, v in ((10, 3.0), (20, 1.0), (30, 2.0), (40, 1.0))]
    assert select_rounds(history, "best_val", monitor="mse_mean", higher_is_better=False) == ({"mse_mean": 10.0}, [20])
    assert select_rounds(history, "best_val", monitor="mse_mean") == ({"mse_mean": 30.0}, [10])
