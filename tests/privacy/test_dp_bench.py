"""``bench.dp_overhead``: the variants alternate on each job, medians and ratios by hand."""

from __future__ import annotations

import importlib


def test_variants_alternate_and_the_table_shows_medians_and_ratios():
    bench = importlib.import_module("bench.dp_overhead")
    calls = []
    times = iter([0.010, 0.012, 0.011, 0.030, 0.011, 0.013,    # J1: no DP 10, 11, 11 ms; DP 12, 30, 13 ms
                  0.100, 0.150, 0.100, 0.150, 0.100, 0.150])  # J2: no DP 100 ms, DP 150 ms

    def timer(job, rounds, dp, accounting=True):
        calls.append((job, dp))
        return next(times)

    result = bench.compare(5, 3, False, timer=timer)
    assert calls == [(job, dp) for job in ("J1", "J2") for _ in range(3) for dp in (False, True)]
    assert result == {"J1": {"no DP": 0.011, "central DP": 0.013}, "J2": {"no DP": 0.100, "central DP": 0.150}}
    lines = bench.table(result).splitlines()
    assert lines[2] == "| J1 | 11.0 | 13.0 | 1.182 |"  # 13 / 11
    assert lines[3] == "| J2 | 100.0 | 150.0 | 1.500 |"
