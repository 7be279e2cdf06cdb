"""Personalization's costs, measured side by side in one run (docs/performance.md, Personalization).

``python -m bench.personal memory [--clients 1000] [--cohort 50] [--rounds 40]`` trains ``Local`` on
pfl-research's CIFAR-10 workload shape (:mod:`bench.cifar_like`: 1,000 users x 50 images, the
1,626,442-parameter :class:`~lightning_fl.models.PflCNN`) with every client's personal model on disk
(``model.client_state: disk``), in its own process so its peak resident memory is its own, and
prints the peak RSS beside the size the personal models would take in memory.

``python -m bench.personal speed [--repeats 3]`` alternates FedAvg and Ditto rounds of the vectorized
engine on one federation and prints Ditto's round time over FedAvg's beside the bound of issue 22,
``(1 + s / tau) x 1.2`` with ``s = tau`` personal steps (Ditto's default): 2.4.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _memory_run(args: argparse.Namespace) -> None:
    import pytorch_lightning as pl
    import torch

    from bench.cifar_like import CifarLikeDataModule
    from lightning_fl.callbacks import FairnessMetrics, Local
    from lightning_fl.models import PflCNN
    from lightning_fl.simulation.loop import FederatedLoop

    root = Path(tempfile.mkdtemp(prefix="lfl-personal-"))
    pl.seed_everything(0, verbose=False)
    loop = FederatedLoop(client=PflCNN(), optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
                         clients_per_round=args.cohort, local_epochs=1, batch_size=args.batch, seed=0,
                         client_state="disk")
    local, metrics = Local(), FairnessMetrics()
    setup_peak: list[float] = []

    class TrainingPeak(pl.Callback):  # the set-up's peak (building 50,000 images) apart from the rounds'
        def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            setup_peak.append(_peak_mib())
            Path("/proc/self/clear_refs").write_text("5")  # Linux: resets the peak (VmHWM) to the current RSS

    trainer = pl.Trainer(max_epochs=args.rounds, accelerator="cpu", logger=False, default_root_dir=root,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         check_val_every_n_epoch=args.rounds, enable_checkpointing=False,
                         callbacks=[local, metrics, TrainingPeak()])
    started = time.perf_counter()
    try:
        trainer.fit(loop, datamodule=CifarLikeDataModule(num_users=args.clients))
        seconds = time.perf_counter() - started
        on_disk = sum(f.stat().st_size for f in (root / "client_state").rglob("*") if f.is_file())
    finally:  # 1,000 personal CNNs on disk: about 13 GB, left in /tmp by every run before this
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"peak_mib": _peak_mib(), "setup_peak_mib": setup_peak[0], "seconds": seconds,
                      "engine": loop.engine.name,
                      "clients_with_personal_model": len(local.personal), "params": loop.layout.numel,
                      "in_memory_mib": len(local.personal) * loop.layout.numel * 4 / 2**20,
                      "disk_mib": on_disk / 2**20, "test_acc_mean": metrics.latest("test")["acc_mean"]}))


def _peak_mib() -> float:
    """This process's peak resident memory since start or the last reset (``VmHWM``), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: the whole run's peak


def memory(args: argparse.Namespace) -> None:
    command = [sys.executable, "-m", "bench.personal", "_memory", "--clients", str(args.clients),
               "--cohort", str(args.cohort), "--rounds", str(args.rounds), "--batch", str(args.batch)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    row = json.loads(out)
    print(f"Local, {args.clients} clients x PflCNN ({row['params']:,} params), cohort {args.cohort}, {args.rounds}"
          f" rounds, model.client_state: disk")
    print(f"  personal models: {row['clients_with_personal_model']} ({row['in_memory_mib']:,.0f} MiB if held in"
          f" memory; {row['disk_mib']:,.0f} MiB on disk)")
    print(f"  peak RSS during the rounds: {row['peak_mib']:,.0f} MiB (set-up, building the images:"
          f" {row['setup_peak_mib']:,.0f} MiB); engine {row['engine']}; {row['seconds']:.0f} s; personal test"
          f" acc_mean {row['test_acc_mean']:.3f}")


def speed(args: argparse.Namespace) -> None:
    import pytorch_lightning as pl
    import torch

    from lightning_fl.callbacks import Ditto, FedAvg
    from lightning_fl.datamodules import SyntheticDataModule
    from lightning_fl.models import MLP
    from lightning_fl.personalization import EvalProtocol
    from lightning_fl.simulation.loop import FederatedLoop

    def round_seconds(callback, protocol) -> float:
        pl.seed_everything(0, verbose=False)
        loop = FederatedLoop(client=MLP(60, 10, hidden=(200, 200)), optimizer=lambda p: torch.optim.SGD(p, lr=0.01),
                             clients_per_round=50, local_epochs=2, batch_size=10, seed=0, engine="vectorized",
                             eval=protocol)
        seconds: list[float] = []

        class RoundTimes(pl.Callback):  # the round's own time (training and aggregation), not evaluation's
            def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
                seconds.append(float(trainer.callback_metrics["round/seconds"]))

        with tempfile.TemporaryDirectory(prefix="lfl-personal-") as root:
            trainer = pl.Trainer(max_epochs=args.rounds, accelerator="cpu", logger=False, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                                 limit_val_batches=0, callbacks=[callback, RoundTimes()], default_root_dir=root)
            trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=200, seed=0))
        return statistics.median(seconds[1:])  # the first round pays one-off set-up

    times: dict[str, list[float]] = {"FedAvg": [], "Ditto": []}
    for _ in range(args.repeats):  # alternated, so both see the same machine load
        times["FedAvg"].append(round_seconds(FedAvg(), None))
        times["Ditto"].append(round_seconds(Ditto(lam=1.0), EvalProtocol(model="personal")))
    fedavg, ditto = statistics.median(times["FedAvg"]), statistics.median(times["Ditto"])
    print(f"Vectorized engine, MLP 60-200-200-10, 200 clients, cohort 50, E=2, B=10 ({args.rounds} rounds, median of"
          f" {args.repeats} alternated runs)")
    print(f"  FedAvg {fedavg * 1e3:.1f} ms/round; Ditto (s = tau personal steps) {ditto * 1e3:.1f} ms/round:"
          f" {ditto / fedavg:.2f}x (bound (1 + s/tau) x 1.2 = 2.40)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["memory", "speed", "_memory"])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--cohort", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    {"memory": memory, "speed": speed, "_memory": _memory_run}[args.what](args)


if __name__ == "__main__":
    main()
