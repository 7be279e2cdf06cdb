"""The benchmark's engine runners still drive the current engine and aggregation interfaces."""

from __future__ import annotations

import torch

from bench.jobs import build_jobs
from bench.variants import EngineRunner


def test_engine_runners_train_a_round_of_j1() -> None:
    job = build_jobs(quick=True)["J1"]
    data = job.make_data()
    for engine in ("sequential", "vectorized"):
        torch.manual_seed(0)
        runner = EngineRunner(job, data, torch.device("cpu"), engine)
        before = runner.layout.flatten(runner.model.state_dict()).clone()
        runner.round(0, torch.arange(job.clients_per_round))
        assert not torch.equal(before, runner.layout.flatten(runner.model.state_dict())), engine
