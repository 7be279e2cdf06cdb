"""Statistics across seeds: t quantiles and p-values, mean/std/95% interval, the summary of a hand-written long CSV."""

from __future__ import annotations

import math

import pytest

from lightning_fl.experiments.results import (
    read_long_csv,
    summarize,
    summary_csv,
    summary_markdown,
)
from lightning_fl.experiments.stats import seed_bands, stats, t_pvalue, t_quantile, t_quantile_975

# Two-sided 95% quantiles t_{0.975, df} from a printed Student t table (3 decimals).
TEXTBOOK = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 10: 2.228, 20: 2.086, 29: 2.045, 30: 2.042,
            40: 2.021, 60: 2.000, 120: 1.980}


@pytest.mark.parametrize("df", sorted(TEXTBOOK))
def test_t_quantile_matches_the_printed_table(df):
    assert t_quantile_975(df) == pytest.approx(TEXTBOOK[df], abs=6e-4)


def test_t_quantile_tends_to_the_normal_and_rejects_df_below_one():
    assert t_quantile_975(10**7) == pytest.approx(1.960, abs=5e-4)  # z_{0.975} = 1.95996
    assert t_quantile_975(31) < t_quantile_975(30)
    with pytest.raises(ValueError, match="df must be >= 1"):
        t_quantile_975(0)
    with pytest.raises(ValueError, match="level must be in"):
        t_quantile(1.0, 3)


# One-sided quantiles t_{level, df} at other levels, from the same printed table (3 decimals).
OTHER_LEVELS = {(0.95, 10): 1.812, (0.99, 5): 3.365, (0.995, 4): 4.604, (0.9995, 2): 31.599, (0.9, 1): 3.078}


@pytest.mark.parametrize("level_df", sorted(OTHER_LEVELS))
def test_t_quantile_at_any_level_matches_the_printed_table(level_df):
    level, df = level_df
    assert t_quantile(level, df) == pytest.approx(OTHER_LEVELS[level_df], abs=6e-4)


def test_t_pvalue_against_the_closed_forms_of_one_and_two_degrees_of_freedom():
    # Two values (df 1, the Cauchy distribution): P(|T| >= t) = 1 - (2 / pi) atan(t).
    # 1, 3: mean 2, std sqrt(2), t = 2 / (sqrt(2) / sqrt(2)) = 2.
    assert t_pvalue([1.0, 3.0]) == pytest.approx(1 - 2 / math.pi * math.atan(2.0), rel=1e-9)
    # Three values (df 2): P(|T| >= t) = 1 - t / sqrt(t^2 + 2). 1, 2, 3: mean 2, std 1, t = 2 sqrt(3).
    t = 2 * math.sqrt(3)
    assert t_pvalue([1.0, 2.0, 3.0]) == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-9)  # 0.0742
    assert t_pvalue([-1.0, -2.0, -3.0]) == pytest.approx(t_pvalue([1.0, 2.0, 3.0]))  # two-sided
    # The p-value of t = t_{0.975, 4} = 2.776 (the printed table) on 4 df is 0.05: five values with mean
    # 2.776 / sqrt(5) and sample std 1 (deviations -1, -0.5, 0, 0.5, 1 have sample variance 2.5 / 4).
    values = [x / math.sqrt(0.625) + 2.776 / math.sqrt(5) for x in (-1.0, -0.5, 0.0, 0.5, 1.0)]
    assert t_pvalue(values) == pytest.approx(0.05, abs=1e-4)


def test_t_pvalue_without_spread_or_with_one_value():
    assert t_pvalue([0.0, 0.0, 0.0]) == 1.0  # no difference at all: no evidence
    assert t_pvalue([2.0, 2.0]) == 0.0  # the same positive difference every time: no doubt about the sign
    with pytest.raises(ValueError, match="at least two values"):
        t_pvalue([1.0])


def test_mean_std_and_interval_by_hand():
    s = stats([1.0, 2.0, 6.0])
    # mean 3; squared deviations 4 + 1 + 9 = 14; sample variance 14 / 2 = 7; std 2.6458.
    assert s.mean == pytest.approx(3.0) and s.std == pytest.approx(math.sqrt(7.0))
    # half-width t_{0.975,2} std / sqrt(3) = 4.303 * 2.6458 / 1.7321 = 6.573.
    assert s.ci == pytest.approx(6.573, abs=2e-3)
    assert (s.ci_low, s.ci_high) == pytest.approx((3.0 - 6.573, 3.0 + 6.573), abs=2e-3)
    assert (s.min, s.max, s.n) == (1.0, 6.0, 3)
    one = stats([0.5])
    assert (one.mean, one.std, one.n) == (0.5, 0.0, 1) and math.isnan(one.ci)  # no interval from one seed


LONG_CSV = """run,method,seed,round,stage,metric,value
A/seed_0,A,0,5,test,acc_mean,0.1
A/seed_0,A,0,10,val,acc_mean,0.99
A/seed_0,A,0,10,test,acc_mean,0.60
A/seed_1,A,1,10,test,acc_mean,0.70
A/seed_2,A,2,10,test,acc_mean,0.80
A/seed_0,A,0,10,test,acc_var,100.0
A/seed_1,A,1,10,test,acc_var,300.0
A/seed_2,A,2,10,test,acc_var,200.0
B/seed_0,B,0,10,test,acc_mean,0.5
B/seed_1,B,1,10,test,acc_mean,0.7
"""


def test_summary_of_a_hand_written_long_csv(tmp_path):
    path = tmp_path / "evaluations.csv"
    path.write_text(LONG_CSV)
    summary = summarize(read_long_csv(path), stage="test")
    a = summary[("A", "acc_mean")]
    # Final round 10 only (round 5 and the val row are ignored): 0.6, 0.7, 0.8 -> mean 0.7,
    # sample std sqrt((0.01 + 0 + 0.01) / 2) = 0.1, half-width 4.303 * 0.1 / sqrt(3) = 0.24843.
    assert (a.n, a.mean, a.std) == (3, pytest.approx(0.7), pytest.approx(0.1))
    assert a.ci == pytest.approx(0.24843, abs=1e-4)
    assert summary[("A", "acc_var")].mean == pytest.approx(200.0) and summary[("A", "acc_var")].std == pytest.approx(100.0)
    b = summary[("B", "acc_mean")]
    # 0.5, 0.7 -> mean 0.6, std sqrt(0.02) = 0.141421, half-width 12.706 * 0.141421 / sqrt(2) = 1.2706.
    assert (b.n, b.mean, b.std, b.ci) == (2, pytest.approx(0.6), pytest.approx(0.141421, abs=1e-6),
                                          pytest.approx(1.2706, abs=1e-3))
    assert summary[("A", "round")].mean == 10.0

    lines = summary_csv(summary).splitlines()
    assert lines[0] == "method,metric,unit,n,mean,std,ci95_low,ci95_high,min,max"
    row = next(line.split(",") for line in lines if line.startswith("A,acc_mean,"))
    assert row[2:4] == ["fraction", "3"] and [float(v) for v in row[4:]] == pytest.approx(
        [0.7, 0.1, 0.7 - 0.24843, 0.7 + 0.24843, 0.6, 0.8], abs=1e-4)
    assert next(line for line in lines if line.startswith("A,acc_var,")).split(",")[2] == "percent^2"
    table = summary_markdown(summary, {"acc_mean": ("Average (%)", 100.0), "acc_var": ("Variance", 1.0)})
    assert table.splitlines() == [
        "| Method | Seeds | Round | Average (%) | Variance |",
        "| :--- | ---: | ---: | ---: | ---: |",
        # half-widths t_{0.975,2} = 4.30265 times 10 / sqrt(3) = 24.84 and 100 / sqrt(3) = 248.41;
        # clipped to what the metric can take: a variance at 0, an accuracy to [0, 100]% (B: [-67.06, 187.06])
        "| A | 3 | 10 | 70.00 ± 10.00 [45.16, 94.84] | 200.00 ± 100.00 [0.00, 448.41] |",
        "| B | 2 | 10 | 60.00 ± 14.14 [0.00, 100.00] | n/a |",
    ]


def test_seed_bands_give_mean_and_range_per_round_in_the_methods_order():
    rows = [("B", 0, 1, "acc", 0.2), ("B", 1, 1, "acc", 0.4), ("A", 0, 1, "acc", 0.5), ("A", 0, 1, "loss", 9.0),
            ("B", 0, 2, "acc", 0.6), ("B", 1, 2, "acc", 1.0)]
    bands = seed_bands(rows, "acc")
    assert list(bands) == ["B", "A"]  # as the runs were given, not sorted
    rounds, mean, low, high = bands["B"]
    assert rounds == [1, 2] and mean == pytest.approx([0.3, 0.8]) and low == [0.2, 0.6] and high == [0.4, 1.0]
    assert bands["A"] == ([1], [0.5], [0.5], [0.5])


def test_a_module_judged_by_its_own_metric_gets_that_metrics_columns() -> None:
    # Two seeds of a regression module's per-client MSE statistics (no accuracy at all).
    from scipy import stats as scipy_stats

    from lightning_fl.experiments.results import summarize, summary_markdown

    rows = [(f"R/seed_{seed}", "R", seed, 3, "test", metric, value)
            for seed, values in ((0, (1.0, 2.0, 0.5, 0.25)), (1, (3.0, 4.0, 1.5, 0.75)))
            for metric, value in zip(("mse_mean", "mse_worst20", "mse_best20", "mse_var"), values)]
    table = summary_markdown(summarize(rows)).splitlines()
    assert table[0] == "| Method | Seeds | Round | Average mse | Worst 20% mse | Best 20% mse | Variance of mse |"
    # mse_mean over seeds: mean 2, sample std sqrt(2), 95% t interval 2 -+ t(0.975, 1) sqrt(2) / sqrt(2).
    half = scipy_stats.t.ppf(0.975, 1)
    assert table[2].startswith(f"| R | 2 | 3 | 2.00 ± 1.41 [{2 - half:.2f}, {2 + half:.2f}] |")
