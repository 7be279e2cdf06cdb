"""J1 in Flower's simulation and in lightning_fl, alternated in one run (docs/performance.md, J1 against Flower).

Usage::

    .venv/bin/python -m bench.flower_j1 --flower-site /tmp/flwr_site [--rounds 20] [--repeats 3]

Flower is not a dependency of this project: install it (with its ``simulation`` extra, which brings
Ray) into a folder of its own, outside the virtual environment, and name that folder with
``--flower-site`` (or put it on ``PYTHONPATH``); for example
``.venv/bin/python -m pip install --target /tmp/flwr_site -c constraints.txt "flwr[simulation]==1.41.*"``
with ``torch`` pinned in ``constraints.txt`` so pip leaves the installed torch alone.

Both sides train the same job (:mod:`bench.jobs`, J1: FedProx Synthetic(1,1) logistic regression
60 -> 10, 30 clients, 10 per round, 20 local epochs, batch 10, SGD lr 0.01, the same data and model):

* **Flower**: ``flwr.simulation.run_simulation`` with 30 virtual SuperNodes on the Ray backend (one
  CPU per client actor, so as many actors as cores), a ``ServerApp`` running Flower's ``FedAvg``
  (``fraction_train = 10/30``, no client or server evaluation) and a ``ClientApp`` that trains the
  received model with a plain PyTorch loop (a seeded permutation per epoch, ``cross_entropy``,
  ``loss.backward()``, ``SGD.step()``) on one torch thread and sends it back.
* **lightning_fl**: the vectorized engine with FedAvg, driven as ``bench.run`` drives it
  (``vectorized``), and ``FederatedLoop`` under a Lightning ``Trainer`` (``Trainer``), uniform
  sampling, evaluation off.

A round's time is the wall clock between consecutive round ends (Flower: the end of its
``aggregate_train``; lightning_fl: the end of the aggregation, or of the Trainer's epoch), so the first
round (Ray's actor start-up, first-call allocations) is left out. The runs alternate
(Flower, vectorized, Trainer, Flower, ...) ``--repeats`` times, so the shared machine's load hits all
alike; the table gives the median over all timed rounds of all repeats, the range of the per-repeat
medians, and each median's ratio to Flower's.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):  # `python bench/flower_j1.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
FLOWER = "Flower"


def round_times(ends: Sequence[float]) -> list[float]:
    """Seconds per round from the round-end clock readings, the first round left out.

    Example:
        >>> round_times([10.0, 10.5, 10.75, 11.25])
        [0.5, 0.25, 0.5]
    """
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


def summarize(runs: dict[str, list[list[float]]], baseline: str = FLOWER) -> dict[str, dict[str, float]]:
    """Median seconds per round of each variant, the spread of its runs and its speed-up over ``baseline``.

    Args:
        runs: ``{variant: [seconds per timed round of run 1, of run 2, ...]}``.
        baseline: The variant the others are compared with.

    Returns:
        ``{variant: {"median", "low", "high", "speedup", "rounds"}}``: the median over all timed rounds of
        all runs, the lowest and highest per-run median, ``baseline``'s median over this one's, and how
        many rounds were timed.
    """
    out = {}
    for name, per_run in runs.items():
        pooled = [t for run in per_run for t in run]
        medians = [statistics.median(run) for run in per_run]
        out[name] = {"median": statistics.median(pooled), "low": min(medians), "high": max(medians),
                     "rounds": len(pooled)}
    for name in out:
        out[name]["speedup"] = out[baseline]["median"] / out[name]["median"]
    return out


def table(summary: dict[str, dict[str, float]], baseline: str = FLOWER) -> str:
    """A markdown table of :func:`summarize`'s result.

    Example:
        >>> print(table({"Flower": {"median": 0.64, "low": 0.6, "high": 0.7, "rounds": 38, "speedup": 1.0},
        ...              "vectorized": {"median": 0.04, "low": 0.035, "high": 0.05, "rounds": 38, "speedup": 16.0}}))
        | J1 | s/round (median) | per-run medians | rounds timed | x faster than Flower |
        | :--- | ---: | ---: | ---: | ---: |
        | Flower | 0.640 | 0.600-0.700 | 38 | 1.0 |
        | vectorized | 0.040 | 0.035-0.050 | 38 | 16.0 |
    """
    lines = [f"| J1 | s/round (median) | per-run medians | rounds timed | x faster than {baseline} |",
             "| :--- | ---: | ---: | ---: | ---: |"]
    for name, s in summary.items():
        lines.append(f"| {name} | {s['median']:.3f} | {s['low']:.3f}-{s['high']:.3f} | {s['rounds']} |"
                     f" {s['speedup']:.1f} |")
    return "\n".join(lines)


def alternate(timers: dict[str, Callable[[], list[float]]], repeats: int) -> dict[str, list[list[float]]]:
    """Run every timer in turn, ``repeats`` times (A B A B ...): ``{name: [round times of each run]}``."""
    runs: dict[str, list[list[float]]] = {name: [] for name in timers}
    for repeat in range(repeats):
        for name, timer in timers.items():
            runs[name].append(timer())
            print(f"  repeat {repeat + 1}/{repeats} {name}: median {statistics.median(runs[name][-1]):.4f} s/round",
                  flush=True)
    return runs


# ----------------------------------------------------------------------------------------------- Flower

_DATA = {}


def _client_tensors(partition: int):  # noqa: ANN202 - (x, y) tensors
    # Built once per Ray actor process (the same data as the engine's, from bench.jobs), then cached.
    if "data" not in _DATA:
        from bench.jobs import build_jobs

        _DATA["data"] = build_jobs()["J1"].make_data()
    return _DATA["data"].client_train(partition)


def flower_train(message, context):  # noqa: ANN001, ANN201 - Flower's Message and Context
    """The ``ClientApp``'s train handler: J1's local training as a plain PyTorch loop."""
    import torch
    import torch.nn.functional as F
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    from bench.jobs import build_jobs

    torch.set_num_threads(1)
    job = build_jobs()["J1"]
    partition = int(context.node_config["partition-id"])
    server_round = int(message.content["config"]["server-round"])
    x, y = _client_tensors(partition)
    model = job.make_model()
    model.load_state_dict(message.content["arrays"].to_torch_state_dict())
    optimizer = job.optimizer(model.parameters())
    # Every draw a function of (seed, round, client).
    generator = torch.Generator().manual_seed(1_000_003 * server_round + partition)
    model.train()
    for _ in range(job.local_epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), job.batch_size):
            batch = order[start:start + job.batch_size]
            loss = F.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": len(x)})})
    return Message(content=content, reply_to=message)


def flower_round_times(rounds: int, seed: int = 0) -> list[float]:
    """Run J1 in Flower's simulation for ``rounds + 1`` rounds; seconds per round after the first."""
    import random

    import torch
    from flwr.app import ArrayRecord, Context
    from flwr.clientapp import ClientApp
    from flwr.server import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    from bench.jobs import build_jobs

    job = build_jobs()["J1"]
    num_clients = 30
    ends: list[float] = []

    class TimedFedAvg(FedAvg):
        def aggregate_train(self, server_round, replies):  # noqa: ANN001, ANN202 - Flower's signature
            out = super().aggregate_train(server_round, replies)
            ends.append(time.perf_counter())
            return out

    client_app = ClientApp()
    client_app.train()(flower_train)
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        torch.manual_seed(seed)
        strategy = TimedFedAvg(fraction_train=job.clients_per_round / num_clients, fraction_evaluate=0.0,
                               min_train_nodes=job.clients_per_round, min_available_nodes=num_clients)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(job.make_model().state_dict()), num_rounds=rounds + 1)

    logging.getLogger("flwr").setLevel(logging.WARNING)  # Flower logs every round at INFO
    random.seed(seed)  # Flower's FedAvg samples its cohorts with Python's random
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    return round_times(ends)


# ------------------------------------------------------------------------------------------ lightning_fl

def engine_round_times(rounds: int) -> list[float]:
    """J1 with the vectorized engine and FedAvg as ``bench.run`` times it; seconds per round after the first."""
    import torch

    from bench.jobs import build_jobs
    from bench.variants import EngineRunner
    from lightning_fl.simulation.sampling import ClientSampler

    torch.set_num_threads(1)  # FederatedLoop's rule for models under 1M parameters
    job = build_jobs()["J1"]
    data = job.make_data()
    sampler = ClientSampler(data.num_clients, job.clients_per_round, "uniform", 0, data.train_sizes())
    runner = EngineRunner(job, data, torch.device("cpu"), "vectorized")
    ends = []
    for round_idx in range(rounds + 1):
        runner.round(round_idx, sampler.sample(round_idx))
        ends.append(time.perf_counter())
    return round_times(ends)


def trainer_round_times(rounds: int) -> list[float]:
    """J1 through ``FederatedLoop`` under a Lightning ``Trainer``; seconds per round after the first."""
    import pytorch_lightning as pl
    import torch

    from bench.jobs import build_jobs
    from lightning_fl.callbacks import FedAvg
    from lightning_fl.simulation.datamodule import FederatedDataModule
    from lightning_fl.simulation.loop import FederatedLoop

    job = build_jobs()["J1"]
    ends: list[float] = []

    class JobData(FederatedDataModule):
        def build_data(self):  # noqa: ANN202
            return job.make_data()

    class RoundEnds(pl.Callback):
        def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            ends.append(time.perf_counter())

    torch.manual_seed(0)
    loop = FederatedLoop(client=job.make_model(), optimizer=job.optimizer, clients_per_round=job.clients_per_round,
                         local_epochs=job.local_epochs, batch_size=job.batch_size, seed=0)
    trainer = pl.Trainer(max_epochs=rounds + 1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, default_root_dir=tempfile.mkdtemp(prefix="lfl-flower-bench-"),
                         callbacks=[FedAvg(), RoundEnds()])
    trainer.fit(loop, datamodule=JobData())
    return round_times(ends)


def use_flower_site(site: str | None) -> None:
    """Put Flower's install folder first on the import path, here and in Ray's worker processes."""
    if not site:
        return
    site = str(Path(site).resolve())
    sys.path.insert(0, site)
    # Ray's actors are new processes: they find Flower, the repository and bench.flower_j1 through this.
    paths = [site, str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flower-site", default=None, help="folder Flower 1.41+ (with Ray) is installed in")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per run (after one untimed round)")
    parser.add_argument("--repeats", type=int, default=3, help="alternated runs per variant")
    parser.add_argument("--no-trainer", action="store_true", help="leave out the FederatedLoop + Trainer variant")
    args = parser.parse_args(argv)
    use_flower_site(args.flower_site)
    # After Flower's folder leads the path: bench.variants imports attrs, which Flower's jsonschema needs newer.
    from bench.variants import quiet_lightning

    quiet_lightning()
    if str(REPO) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    import flwr

    timers = {FLOWER: lambda: flower_round_times(args.rounds),
              "vectorized": lambda: engine_round_times(args.rounds)}
    if not args.no_trainer:
        timers["Trainer"] = lambda: trainer_round_times(args.rounds)
    runs = alternate(timers, args.repeats)
    summary = summarize(runs)
    print(f"J1, Flower {flwr.__version__} simulation (Ray, {os.cpu_count()} client actors) vs lightning_fl:"
          f" {args.rounds} timed rounds per run, {args.repeats} alternated runs")
    print(table(summary))
    return summary


if __name__ == "__main__":
    main()
