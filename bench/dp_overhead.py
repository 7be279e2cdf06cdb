"""Central DP's cost per round on J1 and J2, side by side in one run (docs/performance.md, Client-level DP).

``python -m bench.dp_overhead [--rounds 20] [--repeats 3]`` (part of ``make bench``) alternates, per job:

- ``no DP``: FedAvg on ``K`` of ``N`` clients drawn uniformly (the default sampling);
- ``no DP, same cohorts``: FedAvg without any DP stage on the Poisson cohorts (``q = K/N``) the DP runs
  draw: the same clients every round, so the difference to the DP runs is what DP's stages and accounting
  cost. The DP ratios are taken against it;
- ``central DP``: flat L2 clipping, Gaussian noise on the fixed-denominator sum, and ``dp/epsilon`` from the
  PLD accountant after every round (the default accountant);
- ``central DP, RDP``: the same with ``dp.accountant: rdp`` (one release's RDP vector is computed once, so
  the per-round epsilon costs a fraction of a millisecond where a fresh PLD costs 0.1-0.7 s);
- with ``--no-accounting``, ``DP, no accounting``: the mechanism without the per-round ``dp/epsilon``.

and prints the median time per round of each, their ratios to ``no DP, same cohorts``, and how many
samples the uniform and the Poisson cohorts of the timed rounds hold (a different draw of clients of
different sizes: over 100 rounds of J2 the Poisson cohorts hold about 13% more samples; over 1,000, 2%).
A round's time is the time between consecutive round ends (training, aggregation, the DP stages and the
accounting; evaluation is off), the first round left out (one-off set-up): by default the process's CPU time
(``time.process_time``; the runs use one torch thread, so it is the work the round costs, whatever else the
shared machine runs), or the wall clock with ``--clock wall``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

JOBS = ("J1", "J2")


def round_seconds(job_name: str, rounds: int, dp: bool, accounting: bool = True, poisson: bool = False,
                  accountant: str = "pld", clock: Callable[[], float] = time.process_time) -> float:
    """The median seconds per round of ``job_name`` trained ``rounds + 1`` rounds with or without central DP
    (``poisson``: without DP, on the Poisson cohorts a DP run draws)."""
    import pytorch_lightning as pl
    import torch

    from bench.jobs import build_jobs
    from lightning_fl.callbacks import FedAvg
    from lightning_fl.privacy import DifferentialPrivacy
    from lightning_fl.simulation.datamodule import FederatedDataModule
    from lightning_fl.simulation.loop import FederatedLoop

    job = build_jobs()[job_name]

    class JobData(FederatedDataModule):
        def build_data(self):  # noqa: ANN202
            return job.make_data()

    ends: list[float] = []

    class RoundEnds(pl.Callback):  # everything a round does (the DP stages and dp/epsilon too), not evaluation
        def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            if poisson:  # the cohorts of the DP runs (the same keyed draw), without any DP stage
                module.sampler.use_poisson(module.sampler.clients_per_round / module.sampler.num_clients)

        def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            ends.append(clock())

    privacy = None
    if dp:
        privacy = DifferentialPrivacy(noise_multiplier=1.0, clip_norm=1.0, sampling="poisson", accountant=accountant)
    if privacy is not None and not accounting:
        privacy.log_round = _no_log  # the mechanism alone: what the accountant adds is the difference
        privacy.on_budget = "continue"
    torch.manual_seed(0)
    loop = FederatedLoop(client=job.make_model(), optimizer=job.optimizer, clients_per_round=job.clients_per_round,
                         local_epochs=job.run_epochs, batch_size=job.batch_size, seed=0, dp=privacy)
    with tempfile.TemporaryDirectory(prefix="lfl-dp-bench-") as root:
        trainer = pl.Trainer(max_epochs=rounds + 1, accelerator="cpu", logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                             limit_val_batches=0, default_root_dir=root,
                             callbacks=[FedAvg(weighting="uniform"), RoundEnds()])
        trainer.fit(loop, datamodule=JobData())
    return statistics.median(b - a for a, b in zip(ends, ends[1:], strict=False)) * job.epoch_scale


def _no_log(log: object) -> None:
    return None


BASELINE = "no DP, same cohorts"


def compare(rounds: int, repeats: int, accounting_off: bool,
            timer: Callable[..., float] = round_seconds, **timer_args: object) -> dict[str, dict[str, float]]:
    """``{job: {variant: median seconds per round}}``, the variants alternated ``repeats`` times per job."""
    variants = {"no DP": {"dp": False}, BASELINE: {"dp": False, "poisson": True},
                "central DP": {"dp": True}, "central DP, RDP": {"dp": True, "accountant": "rdp"}}
    if accounting_off:
        variants["DP, no accounting"] = {"dp": True, "accounting": False}
    out = {}
    for job in JOBS:
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(repeats):  # alternated, so every variant sees the same machine load
            for name, kwargs in variants.items():
                times[name].append(timer(job, rounds, **kwargs, **timer_args))
        out[job] = {name: statistics.median(values) for name, values in times.items()}
    return out


def cohort_samples(job_name: str, rounds: int) -> dict[str, float]:
    """Mean training samples per timed round (rounds 1..rounds) in the uniform and in the Poisson cohorts."""
    from bench.jobs import build_jobs
    from lightning_fl.simulation.sampling import ClientSampler

    job = build_jobs()[job_name]
    sizes = job.make_data().train_sizes().double()
    uniform = ClientSampler(len(sizes), job.clients_per_round, "uniform", 0, sizes)
    poisson = ClientSampler(len(sizes), job.clients_per_round, "uniform", 0, sizes)
    poisson.use_poisson(job.clients_per_round / len(sizes))
    return {name: float(sum(sizes[s.sample(t)].sum() for t in range(1, rounds + 1))) / rounds
            for name, s in (("uniform", uniform), ("Poisson", poisson))}


def table(result: dict[str, dict[str, float]]) -> str:
    """A markdown table: ms per round of each variant and its ratio to the same cohorts without DP.

    Example:
        >>> print(table({"J1": {"no DP": 0.009, "no DP, same cohorts": 0.010, "central DP": 0.0105}}))
        | Job | no DP (ms/round) | no DP, same cohorts (ms/round) | central DP (ms/round) | central DP / no DP, same cohorts |
        | :--- | ---: | ---: | ---: | ---: |
        | J1 | 9.0 | 10.0 | 10.5 | 1.050 |
    """
    names = list(next(iter(result.values())))
    dp_names = [n for n in names if n not in ("no DP", BASELINE)]
    lines = ["| Job | " + " | ".join(f"{n} (ms/round)" for n in names) + " | "
             + " | ".join(f"{n} / {BASELINE}" for n in dp_names) + " |",
             "| :--- |" + " ---: |" * (len(names) + len(dp_names))]
    for job, t in result.items():
        lines.append(f"| {job} | " + " | ".join(f"{1e3 * t[n]:.1f}" for n in names) + " | "
                     + " | ".join(f"{t[n] / t[BASELINE]:.3f}" for n in dp_names) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per run (after one warm-up round)")
    parser.add_argument("--repeats", type=int, default=3, help="alternated runs per variant")
    parser.add_argument("--no-accounting", action="store_true", help="also time DP without the per-round epsilon")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="the process's CPU time (default: robust to other load on the machine) or wall time")
    args = parser.parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    result = compare(args.rounds, args.repeats, args.no_accounting, clock=clock)
    print(f"Central DP (z = 1, C = 1, Poisson q = K/N, PLD or RDP epsilon every round) vs none on the same cohorts: median {args.clock} time per round,"
          f" {args.rounds} rounds, median of {args.repeats} alternated runs")
    print(table(result))
    for job in JOBS:
        samples = cohort_samples(job, args.rounds)
        print(f"{job}: samples per timed round, uniform cohorts {samples['uniform']:.1f}, Poisson cohorts"
              f" {samples['Poisson']:.1f} ({samples['Poisson'] / samples['uniform']:.3f}x)")


if __name__ == "__main__":
    from bench.variants import quiet_lightning

    quiet_lightning()
    main()
