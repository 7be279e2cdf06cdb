"""Scaling over processes, side by side: round time with W = 1 and W = 2, speed-up and efficiency.

``python -m bench.scaling [--jobs J1,J3] [--rounds 3]`` (part of ``make bench``)

Each row trains a benchmark job (bench/jobs.py) through the real loop (``FederatedLoop`` under a
Lightning ``Trainer``; ``ddp`` over gloo for ``W = 2``, launched with ``torchrun``) with the sequential
engine, and reports the median round time of the timed rounds (after one warm-up round), the
exchange per round (bytes all-gathered, seconds moving them, seconds waiting at the barrier for the
slower rank) and the peak resident memory of each rank. Speed-up = round time at ``W = 1`` / round
time at ``W``, both with 1 torch thread per process; efficiency = speed-up / ``W``.
The extra ``W = 1, default threads`` row uses the loop's thread policy (all cores for models of a
million parameters or more), to show whether processes or threads serve a model better. The rows of
a job run one after the other in one invocation, so they see the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _worker(job_name: str, rounds: int, threads: str, out: Path) -> None:
    """One process (one rank) of a row: train, then write this rank's measurements to ``out``."""
    import pytorch_lightning as pl
    import torch
    import torch.distributed as dist
    from pytorch_lightning.strategies import DDPStrategy

    from bench.jobs import build_jobs
    from lightning_fl.simulation.callback import FederatedCallback
    from lightning_fl.callbacks import FedAvg
    from lightning_fl.simulation.datamodule import FederatedDataModule
    from lightning_fl.simulation.loop import FederatedLoop

    job = build_jobs()[job_name]
    world = int(os.environ.get("WORLD_SIZE", "1"))

    class JobData(FederatedDataModule):
        def build_data(self):  # noqa: ANN202
            return job.make_data()

    class RoundTimes(FederatedCallback):
        def __init__(self) -> None:
            super().__init__()
            self.seconds: list[float] = []

        def on_round_end(self, round_idx, result, federation, log):  # noqa: ANN001, ANN202
            self.seconds.append(result.seconds)

    torch.manual_seed(0)
    times = RoundTimes()
    loop = FederatedLoop(client=job.make_model(), optimizer=job.optimizer, clients_per_round=job.clients_per_round,
                         local_epochs=job.run_epochs, batch_size=job.batch_size, seed=0, engine="sequential",
                         cpu_threads=None if threads == "default" else 1)
    trainer = pl.Trainer(max_epochs=rounds + 1, accelerator="cpu", devices=world, logger=False,
                         strategy=DDPStrategy(process_group_backend="gloo") if world > 1 else "auto",
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, limit_val_batches=0, callbacks=[FedAvg(), times])
    trainer.fit(loop, datamodule=JobData())
    sharding = loop.sharding
    result = {"round_seconds": statistics.median(times.seconds[1:]) * job.epoch_scale,
              "threads": torch.get_num_threads(),
              "exchange_bytes": sharding.bytes_exchanged / (rounds + 1),
              "exchange_seconds": sharding.exchange_seconds / (rounds + 1),
              "wait_seconds": sharding.wait_seconds / (rounds + 1),
              "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "params": loop.layout.numel}
    rank = dist.get_rank() if dist.is_initialized() else 0
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def _row(job: str, world: int, threads: str, rounds: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        args = ["-m", "bench.scaling", "--worker", job, "--rounds", str(rounds), "--threads", threads, "--out", tmp]
        if world == 1:
            command = [sys.executable, *args]
        else:
            command = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", str(world),
                       *args]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        if threads != "default":
            env["OMP_NUM_THREADS"] = "1"
        subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, text=True)
        return [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(world)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="J1,J3")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per row (after one warm-up round)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--threads", default="1", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker, args.rounds, args.threads, args.out)
        return
    print(f"cpu cores: {os.cpu_count()}; sequential engine; median of {args.rounds} timed rounds per row")
    print("| job | processes | thread setting | threads/process | round (s) | speed-up | efficiency | exchange/round"
          " (MiB, s) | wait/round (s) | peak RSS per rank (MiB) |")
    print("| :--- | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for job in args.jobs.split(","):
        rows = {(1, "1"): _row(job, 1, "1", args.rounds), (2, "1"): _row(job, 2, "1", args.rounds),
                (1, "default"): _row(job, 1, "default", args.rounds)}
        base = rows[(1, "1")][0]["round_seconds"]
        for (world, threads), ranks in rows.items():
            seconds = max(r["round_seconds"] for r in ranks)
            speedup = base / seconds
            exchange = ranks[0]
            peaks = ", ".join(f"{r['peak_mib']:.0f}" for r in ranks)
            setting = "default policy" if threads == "default" else "1 per process"
            print(f"| {job} | {world} | {setting} | {ranks[0]['threads']} | {seconds:.3f} | {speedup:.2f}x | {speedup / world:.2f} |"
                  f" {exchange['exchange_bytes'] / 2**20:.2f}, {exchange['exchange_seconds']:.4f} |"
                  f" {exchange['wait_seconds']:.3f} | {peaks} |")


if __name__ == "__main__":
    main()
