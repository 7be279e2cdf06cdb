"""``bench.dp_overhead``: the variants alternate on each job, medians and ratios by hand."""

from __future__ import annotations

import importlib


def test_variants_alternate_and_the_table_shows_medians_and_ratios():
    bench = importlib.import_module("bench.dp_overhead")
    calls = []
    # Per job, 3 repeats of (no DP, Poisson without clip or noise, central DP), in that order.
    times = iter([0.010, 0.010, 0.012, 0.011, 0.011, 0.030, 0.011, 0.012, 0.013,    # J1
                  0.100, 0.110, 0.150, 0.100, 0.110, 0.150, 0.100, 0.110, 0.150])  # J2

    def timer(job, rounds, dp, accounting=True, noise=True):
        calls.append((job, dp, noise))
        return next(times)

    result = bench.compare(5, 3, False, timer=timer)
    order = [(False, True), (True, False), (True, True)]
    assert calls == [(job, dp, noise) for job in ("J1", "J2") for _ in range(3) for dp, noise in order]
    assert result["J1"] == {"no DP": 0.011, "Poisson, no clip/noise": 0.011, "central DP": 0.013}  # medians
    lines = bench.table(result).splitlines()
    assert lines[2] == "| J1 | 11.0 | 11.0 | 13.0 | 1.000 | 1.182 |"  # 13 / 11
    assert lines[3] == "| J2 | 100.0 | 110.0 | 150.0 | 1.100 | 1.500 |"
