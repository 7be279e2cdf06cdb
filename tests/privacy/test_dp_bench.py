"""``bench.dp_overhead``: the variants alternate on each job, medians and ratios by hand, the cohorts' samples."""

from __future__ import annotations

import importlib

import torch


def test_variants_alternate_and_the_table_shows_medians_and_ratios_to_the_same_cohorts():
    bench = importlib.import_module("bench.dp_overhead")
    calls = []
    # Per job, 3 repeats of (no DP, no DP on the Poisson cohorts, central DP, central DP with RDP), in that order.
    times = iter([0.009, 0.010, 0.012, 0.010, 0.011, 0.011, 0.030, 0.011, 0.011, 0.012, 0.013, 0.012,    # J1
                  0.090, 0.110, 0.150, 0.100, 0.100, 0.100, 0.150, 0.105, 0.100, 0.120, 0.150, 0.120])  # J2

    def timer(job, rounds, dp, accounting=True, poisson=False, accountant="pld"):
        calls.append((job, dp, poisson, accountant))
        return next(times)

    result = bench.compare(5, 3, False, timer=timer)
    order = [(False, False, "pld"), (False, True, "pld"), (True, False, "pld"), (True, False, "rdp")]
    assert calls == [(job, *variant) for job in ("J1", "J2") for _ in range(3) for variant in order]
    assert result["J1"] == {"no DP": 0.011, "no DP, same cohorts": 0.011, "central DP": 0.013,  # medians
                            "central DP, RDP": 0.011}
    lines = bench.table(result).splitlines()
    assert lines[2] == "| J1 | 11.0 | 11.0 | 13.0 | 11.0 | 1.182 | 1.000 |"  # 13 / 11, 11 / 11
    assert lines[3] == "| J2 | 100.0 | 110.0 | 150.0 | 105.0 | 1.364 | 0.955 |"  # 150 / 110, 105 / 110


def test_cohort_samples_are_the_mean_sizes_of_each_sampler_draw(monkeypatch):
    bench = importlib.import_module("bench.dp_overhead")
    jobs = importlib.import_module("bench.jobs")
    from lightning_fl.state.seeding import client_uniforms, generator_for

    sizes = [5, 10, 20, 40]

    class Data:
        def train_sizes(self):
            return torch.tensor(sizes)

    class Job:
        clients_per_round = 2

        def make_data(self):
            return Data()

    monkeypatch.setattr(jobs, "build_jobs", lambda: {"J9": Job()})
    got = bench.cohort_samples("J9", 3)
    # By hand from the keyed draws: uniform takes a seeded randperm's first 2; Poisson each client whose keyed
    # uniform (seed 0, "poisson", t, k) is below q = 2/4.
    uniform = [sum(sizes[k] for k in torch.randperm(4, generator=generator_for(0, "cohort", t))[:2].tolist())
               for t in (1, 2, 3)]
    poisson = [sum(s for k, s in enumerate(sizes) if client_uniforms(torch.arange(4), 0, "poisson", t)[k] < 0.5)
               for t in (1, 2, 3)]
    assert got == {"uniform": sum(uniform) / 3, "Poisson": sum(poisson) / 3}
