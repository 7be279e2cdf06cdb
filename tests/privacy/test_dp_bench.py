"""``bench.dp_overhead``: the variants alternate on each job, medians and ratios by hand."""

from __future__ import annotations

import importlib


def test_variants_alternate_and_the_table_shows_medians_and_ratios():
    bench = importlib.import_module("bench.dp_overhead")
    calls = []
    # Per job, 3 repeats of (no DP, Poisson without clip or noise, central DP, central DP with RDP), in that order.
    times = iter([0.010, 0.010, 0.012, 0.010, 0.011, 0.011, 0.030, 0.011, 0.011, 0.012, 0.013, 0.012,    # J1
                  0.100, 0.110, 0.150, 0.100, 0.100, 0.110, 0.150, 0.105, 0.100, 0.110, 0.150, 0.120])  # J2

    def timer(job, rounds, dp, accounting=True, noise=True, accountant="pld"):
        calls.append((job, dp, noise, accountant))
        return next(times)

    result = bench.compare(5, 3, False, timer=timer)
    order = [(False, True, "pld"), (True, False, "pld"), (True, True, "pld"), (True, True, "rdp")]
    assert calls == [(job, *variant) for job in ("J1", "J2") for _ in range(3) for variant in order]
    assert result["J1"] == {"no DP": 0.011, "Poisson, no clip/noise": 0.011, "central DP": 0.013,  # medians
                            "central DP, RDP": 0.011}
    lines = bench.table(result).splitlines()
    assert lines[2] == "| J1 | 11.0 | 11.0 | 13.0 | 11.0 | 1.000 | 1.182 | 1.000 |"  # 13 / 11
    assert lines[3] == "| J2 | 100.0 | 110.0 | 150.0 | 105.0 | 1.100 | 1.500 | 1.050 |"
