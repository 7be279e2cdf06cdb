"""Verdicts on a paper's claims from per-seed differences, checked against hand-computed intervals."""

from __future__ import annotations

import math

import pytest

from lightning_fl.reproduce.claims import (
    DIRECTION_ONLY,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    judge,
)

HIGHER = Claim("s", "A", "B", "acc", True, "Table 1")


def test_interval_above_zero_is_reproduced() -> None:
    # differences 9, 10, 11: mean 10, sample std 1, t_{0.975,2} = 4.3027 -> half-width 4.3027 / sqrt(3) = 2.4842
    verdict = judge(HIGHER, [19.0, 20.0, 21.0], [10.0, 10.0, 10.0])
    assert verdict.verdict == REPRODUCED
    assert verdict.difference.mean == pytest.approx(10.0)
    assert verdict.difference.ci_low == pytest.approx(10.0 - 4.3027 / math.sqrt(3), abs=1e-4)


def test_interval_including_zero_is_direction_only() -> None:
    # differences 1, 2, 3: mean 2, half-width 2.4842 > 2, so the interval reaches below 0
    verdict = judge(HIGHER, [11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    assert verdict.verdict == DIRECTION_ONLY and "includes 0" in verdict.reason


def test_a_gap_under_half_the_papers_is_direction_only() -> None:
    claim = Claim("s", "A", "B", "acc", True, "Table 1", paper_ours=50.0, paper_baseline=25.0)  # paper: +25
    assert judge(claim, [19.0, 20.0, 21.0], [10.0, 10.0, 10.0]).verdict == DIRECTION_ONLY  # 10 < 12.5
    claim = Claim("s", "A", "B", "acc", True, "Table 1", paper_ours=30.0, paper_baseline=10.0)  # paper: +20
    assert judge(claim, [19.0, 20.0, 21.0], [10.0, 10.0, 10.0]).verdict == REPRODUCED  # 10 >= 10


def test_the_other_direction_is_not_reproduced() -> None:
    assert judge(HIGHER, [9.0, 9.5, 8.0], [10.0, 10.0, 10.0]).verdict == NOT_REPRODUCED


def test_lower_is_better_flips_the_sign() -> None:
    variance = Claim("s", "A", "B", "var", False, "Table 2", paper_ours=500.0, paper_baseline=1000.0)
    assert variance.paper_gap == 500.0
    verdict = judge(variance, [400.0, 420.0, 410.0], [1000.0, 1010.0, 990.0])  # gaps 600, 590, 580
    assert verdict.verdict == REPRODUCED and verdict.difference.mean == pytest.approx(590.0)


def test_one_seed_gives_no_interval() -> None:
    assert judge(HIGHER, [20.0], [10.0]).verdict == DIRECTION_ONLY


def test_values_must_pair_up_and_be_finite() -> None:
    with pytest.raises(ValueError, match="one per seed"):
        judge(HIGHER, [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="non-finite"):
        judge(HIGHER, [math.inf], [1.0])
