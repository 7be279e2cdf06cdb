"""Verdicts on a paper's claims from per-seed differences, checked against hand-computed intervals.

With three seeds (2 degrees of freedom) Student's t has closed forms, the references of these tests:
the two-sided p-value of ``t`` is ``1 - t / sqrt(t^2 + 2)`` and the two-sided interval at confidence
``c`` uses the quantile ``c * sqrt(2 / (1 - c^2))`` (from ``F(t) = 1/2 + t / (2 sqrt(t^2 + 2))``).
"""

from __future__ import annotations

import math

import pytest

from lightning_fl.faults.validation import ConfigError
from lightning_fl.reproduce.claims import (
    CONTRADICTED,
    DIRECTION_ONLY,
    INCONCLUSIVE,
    NOT_TESTABLE,
    REPRODUCED,
    Claim,
    judge,
    judge_all,
)

HIGHER = Claim("s", "A", "B", "acc", True, "Table 1")
ZEROS = [0.0, 0.0, 0.0]


def _p(mean: float, std: float) -> float:
    """Two-sided p-value of three values with ``mean`` and sample ``std`` (2 df)."""
    t = abs(mean) / (std / math.sqrt(3))
    return 1 - t / math.sqrt(t * t + 2)


def _half(confidence: float, std: float) -> float:
    """Half-width of the two-sided interval at ``confidence`` of three values with sample ``std``."""
    return confidence * math.sqrt(2 / (1 - confidence**2)) * std / math.sqrt(3)


def _claim(name: str, **kwargs) -> Claim:
    return Claim("s", name, "B", "acc", True, "Table 1", **kwargs)


def test_the_closed_forms_agree_with_the_printed_table() -> None:
    assert _half(0.95, math.sqrt(3)) == pytest.approx(4.303, abs=5e-4)  # t_{0.975,2} of the printed table
    assert _half(0.99, math.sqrt(3)) == pytest.approx(9.925, abs=5e-4)  # t_{0.995,2}


def test_holm_stops_at_the_first_claim_it_cannot_reject() -> None:
    # Differences (std 1 each): a = 9, 10, 11 (t = 10 sqrt 3), b = 2, 3, 4 (t = 3 sqrt 3), c = 1, 2, 3 (t = 2 sqrt 3).
    p_a, p_b, p_c = _p(10, 1), _p(3, 1), _p(2, 1)
    assert (round(p_a, 4), round(p_b, 4), round(p_c, 4)) == (0.0033, 0.0351, 0.0742)
    # Given in the order c, a, b: ranked a (p 0.0033 < 0.05 / 3), b (0.0351 > 0.05 / 2: Holm stops), c.
    c, a, b = judge_all([(_claim("c"), [1.0, 2.0, 3.0], ZEROS), (_claim("a"), [9.0, 10.0, 11.0], ZEROS),
                         (_claim("b"), [2.0, 3.0, 4.0], ZEROS)])
    assert [v.claim.ours for v in (a, b, c)] == ["a", "b", "c"]  # the order given is kept
    assert a.verdict == REPRODUCED and a.holm_level == pytest.approx(1 - 0.05 / 3)
    assert a.p_value == pytest.approx(p_a, rel=1e-9)
    assert a.holm_interval == pytest.approx((10 - _half(1 - 0.05 / 3, 1), 10 + _half(1 - 0.05 / 3, 1)), rel=1e-9)
    # b alone would be reproduced (95% interval 3 -+ 2.484 is above 0), but not at Holm's level 97.5%.
    assert 3 - _half(0.95, 1) > 0 and 3 - _half(0.975, 1) < 0
    assert b.verdict == DIRECTION_ONLY and b.holm_level == pytest.approx(1 - 0.05 / 2)
    assert b.reason.startswith("its interval holds 0 at Holm's level (rank 2 of 3")
    assert b.reason.endswith("; the 95% interval lies above 0, the mean is positive")
    assert judge(_claim("b"), [2.0, 3.0, 4.0], ZEROS).verdict == REPRODUCED
    # c comes after the stop: not checked, at best direction only by the unadjusted rules.
    assert c.verdict == DIRECTION_ONLY and c.holm_level is None and "stopped" in c.reason
    assert c.reason.endswith("; the 95% interval holds 0, the mean is positive")
    assert c.p_value == pytest.approx(p_c, rel=1e-9)


def test_holm_reproduces_every_claim_that_clears_its_level() -> None:
    # a: p 0.0033 < 0.05 / 3; b = 4, 5, 6: p 0.0131 < 0.05 / 2; c = 3, 4, 5: p 0.0202 < 0.05.
    assert _p(5, 1) < 0.025 and _p(4, 1) < 0.05
    verdicts = judge_all([(_claim("a"), [9.0, 10.0, 11.0], ZEROS), (_claim("b"), [4.0, 5.0, 6.0], ZEROS),
                          (_claim("c"), [3.0, 4.0, 5.0], ZEROS)])
    assert [v.verdict for v in verdicts] == [REPRODUCED] * 3
    assert [v.holm_level for v in verdicts] == pytest.approx([1 - 0.05 / 3, 1 - 0.05 / 2, 0.95])


def test_after_holms_stop_a_reversal_is_contradicted_by_its_95_percent_interval() -> None:
    # a (p 0.0033) passes at 1 - 0.05 / 3; b = 2, 3, 4 (p 0.0351) stops Holm at 97.5%; s = -1.6, -2.6, -3.6
    # (mean -2.6, std 1: p 0.0460) comes after the stop, and its 95% interval -2.6 + 2.484 < 0 lies below 0.
    assert _p(3, 1) < _p(-2.6, 1) < 0.05 and -2.6 + _half(0.95, 1) < 0
    a, b, s = judge_all([(_claim("a"), [9.0, 10.0, 11.0], ZEROS), (_claim("b"), [2.0, 3.0, 4.0], ZEROS),
                         (_claim("s"), [-1.6, -2.6, -3.6], ZEROS)])
    assert (a.verdict, b.verdict) == (REPRODUCED, DIRECTION_ONLY)
    assert s.verdict == CONTRADICTED and s.holm_level is None
    assert s.reason == "Holm's procedure stopped at a claim ranked before it; the 95% interval lies below 0"


def test_a_significant_reversal_is_a_rejection_and_holm_goes_on() -> None:
    # r = -9, -10, -11 ranks first (p 0.0033) and is contradicted; b = 4, 5, 6 is then checked at 97.5%.
    r, b = judge_all([(_claim("r"), [-9.0, -10.0, -11.0], ZEROS), (_claim("b"), [4.0, 5.0, 6.0], ZEROS)])
    assert r.verdict == CONTRADICTED and r.holm_level == pytest.approx(1 - 0.05 / 2)
    assert b.verdict == REPRODUCED and b.holm_level == pytest.approx(0.95)


def test_each_label_of_a_better_claim() -> None:
    # 9, 10, 11: mean 10, std 1, t_{0.975,2} = 4.3027 -> half-width 2.4842: above 0.
    verdict = judge(HIGHER, [19.0, 20.0, 21.0], [10.0, 10.0, 10.0])
    assert verdict.verdict == REPRODUCED and verdict.difference.mean == pytest.approx(10.0)
    assert verdict.difference.ci_low == pytest.approx(10.0 - 4.3027 / math.sqrt(3), abs=1e-4)
    # 1, 2, 3: mean 2 < 2.4842: the interval holds 0, the mean is positive.
    assert judge(HIGHER, [11.0, 12.0, 13.0], [10.0, 10.0, 10.0]).verdict == DIRECTION_ONLY
    # -1, 0, -0.5: mean -0.5, std 0.5, half-width 1.242: holds 0 with a negative mean; -1, 0, 1: mean 0.
    assert judge(HIGHER, [9.0, 10.0, 9.5], [10.0, 10.0, 10.0]).verdict == INCONCLUSIVE
    assert judge(HIGHER, [9.0, 10.0, 11.0], [10.0, 10.0, 10.0]).verdict == INCONCLUSIVE
    # -9, -10, -11: hi = -10 + 2.4842 < 0.
    assert judge(HIGHER, [1.0, 0.0, -1.0], [10.0, 10.0, 10.0]).verdict == CONTRADICTED


def test_lower_is_better_flips_the_sign() -> None:
    variance = Claim("s", "A", "B", "var", False, "Table 2", paper_ours=500.0, paper_baseline=1000.0)
    assert variance.paper_gap == 500.0
    verdict = judge(variance, [400.0, 420.0, 410.0], [1000.0, 1010.0, 990.0])  # gaps 600, 590, 580
    assert verdict.verdict == REPRODUCED and verdict.difference.mean == pytest.approx(590.0)
    assert judge(variance, [1000.0, 1010.0, 990.0], [400.0, 420.0, 410.0]).verdict == CONTRADICTED


def test_the_reason_says_where_the_papers_size_lies() -> None:
    within = _claim("a", paper_ours=80.0, paper_baseline=70.0)  # paper +10; ours 10 -+ 2.4842
    assert "the paper's +10 lies within [+7.52, +12.5]" in judge(within, [9.0, 10.0, 11.0], ZEROS).reason
    far = _claim("a", paper_ours=90.0, paper_baseline=70.0)  # paper +20: 20 - 12.4842 = 7.5158 above
    verdict = judge(far, [9.0, 10.0, 11.0], ZEROS)
    assert verdict.verdict == REPRODUCED and "the paper's +20 lies 7.52 above [+7.52, +12.5]" in verdict.reason
    below = _claim("a", paper_ours=72.0, paper_baseline=70.0)  # paper +2: 7.5158 - 2 = 5.52 below
    assert "lies 5.52 below" in judge(below, [9.0, 10.0, 11.0], ZEROS).reason


def test_one_seed_gives_no_interval_and_is_judged_by_sign() -> None:
    up, down = judge_all([(HIGHER, [20.0], [10.0]), (HIGHER, [10.0], [20.0])])
    assert (up.verdict, down.verdict) == (DIRECTION_ONLY, INCONCLUSIVE)
    assert up.reason == "one seed: no interval" and up.p_value is None and up.holm_level is None


def test_untestable_runs_are_not_testable_and_equal_scores_are_judged() -> None:
    reason = "every client has the same distance, so the weights are FedAvg's"
    untestable = _claim("a", untestable=reason)
    verdict = judge(untestable, [19.0, 20.0, 21.0], [10.0, 10.0, 10.0])  # a difference, but by construction none
    assert (verdict.verdict, verdict.reason, verdict.p_value) == (NOT_TESTABLE, reason, None)
    # Equal scores on every seed are not "identical by construction": a difference of 0 judged by the rules.
    same = judge(HIGHER, [70.0, 71.5, 69.0], [70.0, 71.5, 69.0])
    assert same.verdict == INCONCLUSIVE and same.reason.endswith("every per-seed difference is 0 (the two score"
                                                                 " the same on every seed)")
    comparable = judge(_claim("c", form="comparable"), [100.0, 100.0, 100.0], [100.0, 100.0, 100.0])
    assert comparable.verdict == REPRODUCED  # [0, 0] lies inside the margin +-1
    assert judge(HIGHER, [70.0], [70.0]).verdict == INCONCLUSIVE  # one seed: judged by sign
    # The untestable claim does not enter Holm's family; the tie does, with p = 1, so it ranks last:
    # the testable claim ranks 1 of 2 and is checked at 1 - 0.05 / 2.
    *_, a = judge_all([(untestable, [19.0, 20.0, 21.0], ZEROS), (HIGHER, [1.0, 1.0], [1.0, 1.0]),
                       (_claim("a"), [9.0, 10.0, 11.0], ZEROS)])
    assert a.holm_level == pytest.approx(0.975)


def test_comparable_claims_against_the_margin() -> None:
    close = _claim("a", form="comparable")  # margin 1
    # 0.1, -0.1, 0: mean 0, std 0.1, half-width 0.248: inside [-1, 1].
    assert judge(close, [0.1, -0.1, 0.0], ZEROS).verdict == REPRODUCED
    # 3, 4, 5: lo = 4 - 2.484 = 1.516 > 1: outside.
    assert judge(close, [3.0, 4.0, 5.0], ZEROS).verdict == CONTRADICTED
    assert judge(close, [-3.0, -4.0, -5.0], ZEROS).verdict == CONTRADICTED
    # 0, 1, 2: [-1.484, 3.484] crosses the margin.
    assert judge(close, [0.0, 1.0, 2.0], ZEROS).verdict == INCONCLUSIVE
    # 0.5, 1, 1.5 (mean 1, half-width 1.242): [-0.242, 2.242] lies inside [-2.5, 2.5] but not [-1, 1].
    assert judge(_claim("a", form="comparable", margin=2.5), [0.5, 1.0, 1.5], ZEROS).verdict == REPRODUCED
    assert judge(close, [0.5, 1.0, 1.5], ZEROS).verdict == INCONCLUSIVE


def test_slightly_better_claims_against_the_margin() -> None:
    slightly = _claim("a", form="slightly_better")
    # 0.5, 1, 1.5: lo = 1 - 1.242 = -0.242 > -1.
    assert judge(slightly, [0.5, 1.0, 1.5], ZEROS).verdict == REPRODUCED
    # -3, -4, -5: hi = -4 + 2.484 = -1.516 < -1.
    assert judge(slightly, [-3.0, -4.0, -5.0], ZEROS).verdict == CONTRADICTED
    # -2, 0, 2.5: mean 0.167 > 0, but lo far below -1; -2.5, 0, 2: mean -0.167.
    assert judge(slightly, [-2.0, 0.0, 2.5], ZEROS).verdict == DIRECTION_ONLY
    assert judge(slightly, [-2.5, 0.0, 2.0], ZEROS).verdict == INCONCLUSIVE


def test_equivalence_claims_stay_out_of_holms_family() -> None:
    # Two "better" claims and a comparable one: m = 2, so a is checked at 97.5%, b at 95%.
    a, _, b = judge_all([(_claim("a"), [9.0, 10.0, 11.0], ZEROS), (_claim("c", form="comparable"), [0.1, -0.1, 0.0], ZEROS),
                         (_claim("b"), [4.0, 5.0, 6.0], ZEROS)])
    assert (a.holm_level, b.holm_level) == pytest.approx((1 - 0.05 / 2, 0.95))


def test_claims_not_in_the_paper_are_a_family_of_their_own() -> None:
    # In the paper: a and b (m = 2); x is not in the paper and is judged alone (m = 1), whatever its p-value.
    a, x, b = judge_all([(_claim("a"), [9.0, 10.0, 11.0], ZEROS), (_claim("x", in_paper=False), [19.0, 20.0, 21.0], ZEROS),
                         (_claim("b"), [4.0, 5.0, 6.0], ZEROS)])
    assert a.holm_level == pytest.approx(1 - 0.05 / 2) and b.holm_level == pytest.approx(0.95)
    assert x.holm_level == pytest.approx(0.95) and x.verdict == REPRODUCED


def test_values_must_pair_up_and_be_finite() -> None:
    with pytest.raises(ValueError, match="one per seed"):
        judge(HIGHER, [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="non-finite"):
        judge(HIGHER, [math.inf], [1.0])


def test_a_bad_form_or_margin_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError, match=r"^Claim.form of A acc > B must be one of better, comparable, slightly_better;"
                                          r" got 'equal'$"):
        Claim("s", "A", "B", "acc", True, "Table 1", form="equal")
    with pytest.raises(ConfigError, match="margin of A acc > B must be a finite number > 0; got 0"):
        Claim("s", "A", "B", "acc", True, "Table 1", form="comparable", margin=0)
