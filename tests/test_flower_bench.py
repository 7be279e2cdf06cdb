"""``bench.flower_j1``'s pure parts: round times, alternation, medians, spread, ratios and the table (no Flower)."""

from __future__ import annotations

import importlib

import pytest


def _bench():
    return importlib.import_module("bench.flower_j1")


def test_round_times_leave_the_first_round_out():
    # Round ends at 100, 103 (round 1, with start-up, not timed), 103.5, 104.25: rounds 2 and 3.
    assert _bench().round_times([103.0, 103.5, 104.25]) == pytest.approx([0.5, 0.75])
    assert _bench().round_times([7.0]) == []


def test_variants_alternate():
    calls = []

    def timer(name, values):
        def run():
            calls.append(name)
            return values
        return run

    runs = _bench().alternate({"Flower": timer("Flower", [1.0]), "vectorized": timer("vectorized", [0.1])}, 3)
    assert calls == ["Flower", "vectorized"] * 3
    assert runs == {"Flower": [[1.0]] * 3, "vectorized": [[0.1]] * 3}


def test_medians_spread_and_speedup_by_hand():
    runs = {
        # Flower: pooled 0.60 0.62 0.70 | 0.64 0.66 0.90 | 0.58 0.61 0.63 -> sorted middle (5th of 9) = 0.63;
        # per-run medians 0.62, 0.66, 0.61.
        "Flower": [[0.70, 0.60, 0.62], [0.64, 0.90, 0.66], [0.58, 0.63, 0.61]],
        # vectorized: pooled 0.040 0.042 0.050 | 0.041 0.045 0.060 | 0.039 0.044 0.043 -> 5th of 9 = 0.043;
        # per-run medians 0.042, 0.045, 0.043.
        "vectorized": [[0.040, 0.042, 0.050], [0.041, 0.045, 0.060], [0.039, 0.044, 0.043]],
    }
    summary = _bench().summarize(runs)
    assert summary["Flower"]["median"] == pytest.approx(0.63)
    assert (summary["Flower"]["low"], summary["Flower"]["high"]) == pytest.approx((0.61, 0.66))
    assert summary["vectorized"]["median"] == pytest.approx(0.043)
    assert (summary["vectorized"]["low"], summary["vectorized"]["high"]) == pytest.approx((0.042, 0.045))
    assert summary["Flower"]["speedup"] == pytest.approx(1.0)
    assert summary["vectorized"]["speedup"] == pytest.approx(0.63 / 0.043)  # 14.65
    assert summary["vectorized"]["rounds"] == 9
    lines = _bench().table(summary).splitlines()
    assert lines[0] == "| J1 | s/round (median) | per-run medians | rounds timed | x faster than Flower |"
    assert lines[2] == "| Flower | 0.630 | 0.610-0.660 | 9 | 1.0 |"
    assert lines[3] == "| vectorized | 0.043 | 0.042-0.045 | 9 | 14.7 |"


def test_even_round_counts_take_the_mean_of_the_middle_two():
    summary = _bench().summarize({"Flower": [[0.5, 0.7], [0.6, 0.8]], "Trainer": [[0.02, 0.06], [0.04, 0.05]]})
    assert summary["Flower"]["median"] == pytest.approx(0.65)  # (0.6 + 0.7) / 2
    assert summary["Trainer"]["median"] == pytest.approx(0.045)  # (0.04 + 0.05) / 2
    assert summary["Trainer"]["speedup"] == pytest.approx(0.65 / 0.045)
    assert (summary["Trainer"]["low"], summary["Trainer"]["high"]) == pytest.approx((0.04, 0.045))
