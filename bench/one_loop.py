"""The vectorized engine's one-loop path against its step-by-step path, alternated in one process.

``python -m bench.one_loop [--jobs J1,J2] [--rounds 40]`` (docs/performance.md, "The one-loop path") trains
each job's logistic regression with two vectorized engines over the same cohorts, round by round in turn:
one as shipped (a single Linear under plain SGD takes each run of steps with the same clients in one loop,
:meth:`~lightning_fl.engines.fused.FusedLinearChain.sgd_steps`), one with that path switched off (every step
through :class:`~lightning_fl.engines.local_step.LocalStep`). It prints the median seconds per round of each
(the first round left out; the two take turns going first, since the first reads the cohort's data
from memory into the caches), their ratio, and how far apart the two global models are at the end (the one
loop updates the weight with one ``baddbmm_`` and takes ``torch.softmax`` on small steps: equal to float
rounding).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import lightning_fl.engines.vectorized as vectorized


def compare(job_name: str, rounds: int) -> dict[str, float | bool]:
    """``{"one loop": s, "step by step": s, "ratio": step by step / one loop, "rel diff": |w1 - w2| / |w2|}``."""
    from bench.jobs import build_jobs
    from bench.variants import EngineRunner
    from lightning_fl.simulation.sampling import ClientSampler

    torch.set_num_threads(1)  # FederatedLoop's rule for models under 1M parameters
    job = build_jobs()[job_name]
    data = job.make_data()
    sampler = ClientSampler(data.num_clients, job.clients_per_round, "uniform", 0, data.train_sizes())
    shipped = vectorized.plain_sgd_rate
    runners = {}
    for name in ("one loop", "step by step"):
        torch.manual_seed(0)
        runners[name] = EngineRunner(job, data, torch.device("cpu"), "vectorized")
    times: dict[str, list[float]] = {name: [] for name in runners}
    try:
        for round_idx in range(rounds + 1):
            ids = sampler.sample(round_idx)
            order = list(runners.items())
            for name, runner in order if round_idx % 2 else order[::-1]:  # each goes first every other round
                vectorized.plain_sgd_rate = shipped if name == "one loop" else (lambda optimizer: None)
                start = time.perf_counter()
                runner.round(round_idx, ids)
                times[name].append(time.perf_counter() - start)
    finally:
        vectorized.plain_sgd_rate = shipped
    fast, slow = (statistics.median(times[name][1:]) for name in runners)
    states = [runner.model.state_dict() for runner in runners.values()]
    one, two = (torch.cat([state[key].flatten().double() for key in sorted(state)]) for state in states)
    return {"one loop": fast, "step by step": slow, "ratio": slow / fast,
            "rel diff": float((one - two).norm() / two.norm())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="J1,J2", help="comma-separated jobs (logistic-regression ones: J1, J2)")
    parser.add_argument("--rounds", type=int, default=40, help="timed rounds (after one untimed round)")
    args = parser.parse_args(argv)
    print(f"one-loop path vs step by step, vectorized engine, alternated round by round, {args.rounds} rounds:")
    print("| Job | one loop (s/round) | step by step (s/round) | step by step / one loop | global models' relative difference |")
    print("| :--- | ---: | ---: | ---: | ---: |")
    for job in args.jobs.split(","):
        r = compare(job, args.rounds)
        print(f"| {job} | {r['one loop']:.4f} | {r['step by step']:.4f} | {r['ratio']:.2f} | {r['rel diff']:.1e} |")


if __name__ == "__main__":
    from bench.variants import quiet_lightning

    quiet_lightning()
    main()
