"""Where a round's time goes: ``torch.profiler`` over a few rounds of one job and engine.

Usage::

    .venv/bin/python -m bench.profile_step --job J2 --engine vectorized [--formulation vmap] [--rounds 10]

``--formulation`` forces the vectorized engine's cohort formulation (``fused-linear``, ``batched``,
``vmap``) so the three can be compared on the same model; the per-step time printed first is CPU
time per local step of the longest client (``max_k tau_k`` steps per round).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.profiler import profile

from bench.jobs import build_jobs
from bench.variants import CentralizedRunner, EngineRunner
from lightning_fl.engines.base import num_local_steps
from lightning_fl.engines.formulation import build_forward
from lightning_fl.simulation.sampling import ClientSampler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default="J2")
    parser.add_argument("--engine", default="vectorized", choices=("sequential", "vectorized", "centralized"))
    parser.add_argument("--formulation", default=None, choices=("fused-linear", "batched", "vmap"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", type=int, default=25, help="profiler table rows")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    job = build_jobs()[args.job]
    data = job.make_data()
    device = torch.device("cpu")
    if args.engine == "centralized":
        runner = CentralizedRunner(job, data, device)
    else:
        runner = EngineRunner(job, data, device, args.engine)
        if args.formulation is not None:
            runner.engine.forward = build_forward(args.formulation, runner.model)
    sampler = ClientSampler(data.num_clients, job.clients_per_round, "uniform", 0, data.train_sizes())
    cohorts = [sampler.sample(t) for t in range(args.rounds + 1)]
    runner.round(0, cohorts[0])  # warm-up
    steps = sum(int(num_local_steps(data.train_sizes()[c], job.run_epochs, job.batch_size).max()) for c in cohorts[1:])
    started = time.process_time()
    for t, cohort in enumerate(cohorts[1:], start=1):
        runner.round(t, cohort)
    elapsed = time.process_time() - started
    print(f"{args.job} {args.engine} {args.formulation or ''}: {elapsed / args.rounds * 1e3:.2f} ms CPU per round,"
          f" {elapsed / steps * 1e6:.0f} us per step of the longest client ({steps / args.rounds:.1f} steps/round)")
    with profile() as prof:
        for t, cohort in enumerate(cohorts[1:], start=1):
            runner.round(t, cohort)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
