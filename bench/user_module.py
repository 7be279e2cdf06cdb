"""A user's own LightningModule beside the shipped model, measured side by side (docs/performance.md, issue 25).

``python -m bench.user_module [--jobs J1,J2] [--rounds N] [--passes P]`` trains J1 and J2
(:mod:`bench.jobs`) three ways on the same cohorts, alternating round by round so background load on a
shared machine hits all of them alike:

* ``fused``: the shipped :class:`~lightning_fl.models.LogisticRegression` (a ClientModule) in the
  vectorized engine, which trains it through its fused linear-chain path;
* ``plain vectorized``: :class:`PlainLogReg`, the same model written as a plain LightningModule, in the
  vectorized engine, which runs its ``training_step`` under ``vmap`` (lightning_fl.engines.user_step);
* ``plain sequential``: :class:`PlainLogReg` in the sequential engine, one client after another.

Round 0 is an untimed warm-up; a variant's seconds per round are those of its best pass (as
``bench.run``). Prints a table with each variant's time over the fused path's.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/user_module.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn

VARIANTS = ("fused", "plain vectorized", "plain sequential")


class PlainLogReg(pl.LightningModule):
    """J1/J2's logistic regression as a user writes it: a LightningModule whose objective is its training_step."""

    def __init__(self, in_features: int = 60, num_classes: int = 10, lr: float = 0.01) -> None:
        super().__init__()
        self.lr = lr
        self.linear = nn.Linear(in_features, num_classes)  # the shipped model's name: the same initial weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1))

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201 - Lightning's signature
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def _plain(job):  # noqa: ANN001, ANN202 - a bench.jobs.Job
    """``job`` with its model written as :class:`PlainLogReg` (same shape, same seed, same initial weights)."""
    shipped = job.make_model()
    return dataclasses.replace(job, make_model=lambda: PlainLogReg(shipped.linear.in_features,
                                                                   shipped.linear.out_features, job.lr))


def run(name: str, rounds: int | None, passes: int) -> dict[str, float]:
    """Seconds per round (best pass) of every variant of job ``name``, alternated round by round."""
    from bench.jobs import build_jobs
    from bench.run import _time_round
    from bench.variants import EngineRunner
    from lightning_fl.simulation.sampling import ClientSampler

    job = build_jobs(rounds=rounds)[name]
    device = torch.device("cpu")
    data = job.make_data()
    runners = {"fused": EngineRunner(job, data, device, "vectorized"),
               "plain vectorized": EngineRunner(_plain(job), data, device, "vectorized"),
               "plain sequential": EngineRunner(_plain(job), data, device, "sequential")}
    kinds = {n: getattr(r.engine.forward, "kind", "?") for n, r in runners.items() if n != "plain sequential"}
    assert kinds == {"fused": "fused-linear", "plain vectorized": "training_step"}, kinds  # each on the path it names
    sampler = ClientSampler(data.num_clients, job.clients_per_round, "uniform", 0, data.train_sizes())
    cohorts = [sampler.sample(t) for t in range(job.rounds + 1)]
    _time_round(runners, 0, cohorts[0], device)  # warm-up
    best = {v: float("inf") for v in VARIANTS}
    for _ in range(passes):
        seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for t in range(1, job.rounds + 1):
            for v, (wall, _cpu, _mem) in _time_round(runners, t, cohorts[t], device).items():
                seconds[v].append(wall)
        for v in VARIANTS:
            best[v] = min(best[v], statistics.fmean(seconds[v]))
    # The three trained the same cohorts from the same weights: their models must agree.
    fused = runners["fused"].weights()
    best["max_rel_diff"] = max(float((runners[v].weights() - fused).norm() / fused.norm()) for v in VARIANTS[1:])
    best["title"] = job.title
    return best


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="J1,J2")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per pass (default: the job's)")
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # bench.run's rule for models under 1M parameters (J1, J2)
    started, results = time.perf_counter(), {}
    for name in args.jobs.split(","):
        results[name] = row = run(name, args.rounds, args.passes)
        print(f"{name}: {row['title']}", flush=True)
        fused = row["fused"]
        for v in VARIANTS:
            print(f"  {v:<17} {row[v] * 1e3:9.2f} ms/round  {row[v] / fused:6.2f}x the fused path", flush=True)
        print(f"  plain vectorized / plain sequential: {row['plain vectorized'] / row['plain sequential']:.2f}x;"
              f" models' max relative difference to fused: {row['max_rel_diff']:.1e}", flush=True)
    print(f"python -m bench.user_module {' '.join(sys.argv[1:] if argv is None else argv)}: {args.passes} passes,"
          f" {time.perf_counter() - started:.0f} s", flush=True)
    return results


if __name__ == "__main__":
    from bench.variants import quiet_lightning

    quiet_lightning()
    main()
