"""Per-client state in memory or on disk, side by side: peak memory, checkpoint size, time.

``python -m bench.client_state [--clients 2000] [--cohort 200] [--rounds 5] [--hidden 1200]``

SCAFFOLD keeps one model-sized control per client seen. Each variant runs in its own process (so
peak resident memory is its own) with ``model.client_state`` ``memory`` and ``disk`` on the same
seed, and the table prints the peak RSS, the size of ``last.ckpt`` and of ``client_state/``, the wall
time, and whether the two final models are bitwise equal.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run_one(mode: str, args: argparse.Namespace, root: Path) -> None:
    import pytorch_lightning as pl
    import torch

    from lightning_fl.callbacks import Scaffold
    from lightning_fl.datamodules import SyntheticDataModule
    from lightning_fl.simulation.loop import FederatedLoop
    from lightning_fl.models import MLP

    pl.seed_everything(0, verbose=False)
    loop = FederatedLoop(client=MLP(60, 10, hidden=(args.hidden,)), clients_per_round=args.cohort, local_epochs=1,
                         batch_size=10, seed=0, client_state=mode,
                         optimizer=lambda p: torch.optim.SGD(p, lr=0.01))
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=root / "checkpoints", save_last=True, save_top_k=0)
    trainer = pl.Trainer(max_epochs=args.rounds, accelerator="cpu", logger=False, default_root_dir=root,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, callbacks=[Scaffold(), checkpoint])
    started = time.perf_counter()
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=args.clients, max_samples_per_client=60))
    seconds = time.perf_counter() - started
    state_bytes = sum(f.stat().st_size for f in (root / "client_state").glob("*")) if mode == "disk" else 0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = len(trainer.callbacks[0].client_control) if isinstance(trainer.callbacks[0], Scaffold) else None
    torch.save(loop.model.state_dict(), root / "final.pt")
    print(json.dumps({"mode": mode, "peak_mib": peak_mib, "seconds": seconds, "rows": rows,
                      "params": loop.layout.numel, "ckpt_mib": (root / "checkpoints" / "last.ckpt").stat().st_size / 2**20,
                      "state_mib": state_bytes / 2**20}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--cohort", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=1200)
    parser.add_argument("--child", choices=("memory", "disk"), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _run_one(args.child, args, args.root)
        return
    import torch

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("memory", "disk"):
            root = Path(tmp) / mode
            out = subprocess.run([sys.executable, "-m", "bench.client_state", "--child", mode, "--root", str(root),
                                  "--clients", str(args.clients), "--cohort", str(args.cohort),
                                  "--rounds", str(args.rounds), "--hidden", str(args.hidden)],
                                 capture_output=True, text=True, check=True).stdout
            results[mode] = json.loads(out.strip().splitlines()[-1])
            results[mode]["final"] = torch.load(root / "final.pt")
    same = all(torch.equal(v, results["disk"]["final"][k]) for k, v in results["memory"]["final"].items())
    first = results["memory"]
    print(f"SCAFFOLD, {args.clients} clients, cohort {args.cohort}, {args.rounds} rounds, MLP with"
          f" {first['params']:,} parameters; {first['rows']} clients seen (one control row each)")
    print("| client_state | peak RSS (MiB) | last.ckpt (MiB) | client_state/ on disk (MiB) | wall (s) |")
    print("| :--- | ---: | ---: | ---: | ---: |")
    for mode, r in results.items():
        print(f"| {mode} | {r['peak_mib']:.0f} | {r['ckpt_mib']:.1f} | {r['state_mib']:.0f} | {r['seconds']:.1f} |")
    m, d = results["memory"], results["disk"]
    print(f"disk / memory: peak RSS {d['peak_mib'] / m['peak_mib']:.2f}x, checkpoint {d['ckpt_mib'] / m['ckpt_mib']:.3f}x,"
          f" wall {d['seconds'] / m['seconds']:.2f}x; final models bitwise equal: {same}")


if __name__ == "__main__":
    main()
