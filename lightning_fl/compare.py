"""Run several configs on the same data and seed and print one comparison table.

``make compare`` (FedFa Table 2/3 layout: Average, Worst 20%, Best 20%, Variance per method) and
``make tempo`` (rounds and estimated deployment time to a target accuracy, Tempo Table 1) both use
this. Every run logs to ``<save_dir>/<method>`` so ``tensorboard --logdir <save_dir>`` overlays the
curves.

Example::

    python -m lightning_fl.compare --save-dir lightning_logs/compare_synthetic_1_1 \\
        --data synthetic_1_1 fedavg=configs/fedavg_synthetic.yaml fedfa=configs/fedfa_synthetic.yaml
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

from lightning_fl.reporting.tables import fairness_table

# Command-line overrides that switch every config to one dataset (same seed, same partition).
DATASETS: dict[str, list[str]] = {
    **{f"synthetic_{v}": ["--data", "lightning_fl.datamodules.SyntheticDataModule", "--data.variant", v,
                          "--model.client.init_args.in_features", "60"]
       for v in ("0_0", "0.5_0.5", "1_1", "iid")},
    "digits": ["--data", "lightning_fl.datamodules.DigitsDataModule",
               "--data.partition", "lightning_fl.datamodules.partitions.Dirichlet", "--data.partition.alpha", "0.5",
               "--model.client.init_args.in_features", "64"],
}


def run_one(name: str, config: str, save_dir: Path, extra: list[str]) -> Path:
    """Train ``config`` as run ``name``; returns its log directory."""
    run_root = save_dir / name
    existing = set(run_root.glob("version_*")) if run_root.exists() else set()
    command = [sys.executable, "-m", "lightning_fl", "fit", "--config", config,
               "--trainer.logger.init_args.save_dir", str(save_dir), "--trainer.logger.init_args.name", name, *extra]
    print(f"\n=== {name}: {' '.join(command[2:])}", flush=True)
    subprocess.run(command, check=True)
    created = sorted(set(run_root.glob("version_*")) - existing, key=lambda p: int(p.name.split("_")[1]))
    return created[-1]


def read_summary(log_dir: Path) -> dict[str, float]:
    """The final fairness metrics of a run (``fairness_history.csv``'s last row of the client test splits)."""
    with open(log_dir / "fairness_history.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["stage"] == "test"]
    return {key: float(value) for key, value in rows[-1].items() if key != "stage"}


def read_target(log_dir: Path) -> dict | None:
    path = log_dir / "rounds_to_target.json"
    return json.loads(path.read_text()) if path.exists() else None


def target_table(results: dict[str, dict | None]) -> str:
    """Markdown table of rounds, wall time and estimated deployment time to the target."""
    lines = ["| Method | Target | Rounds to target | Wall time (s) | Estimated deployment time (s) |",
             "| :--- | ---: | ---: | ---: | ---: |"]
    for name, result in results.items():
        if result is None:
            continue
        target = f"{result['monitor']} {'>=' if result['mode'] == 'max' else '<='} {result['target']}"
        if result["round"] is None:
            lines.append(f"| {name} | {target} | not reached | not reached | not reached |")
            continue
        estimated = result.get("estimated_seconds")
        lines.append(f"| {name} | {target} | {result['round']} | {result['seconds']:.1f} |"
                     f" {'n/a' if estimated is None else f'{estimated:.1f}'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="name=config.yaml pairs")
    parser.add_argument("--save-dir", required=True, type=Path)
    parser.add_argument("--data", choices=sorted(DATASETS), help="switch every run to this dataset")
    parser.add_argument("--rounds", type=int, help="override trainer.max_epochs")
    args = parser.parse_args(argv)
    extra = list(DATASETS[args.data]) if args.data else []
    if args.rounds:
        extra += ["--trainer.max_epochs", str(args.rounds)]
    metrics, targets = {}, {}
    for pair in args.runs:
        name, _, config = pair.partition("=")
        if not config:
            parser.error(f"runs must be name=config.yaml pairs; got {pair!r}")
        log_dir = run_one(name, config, args.save_dir, extra)
        metrics[name] = read_summary(log_dir)
        targets[name] = read_target(log_dir)
    rounds = {int(m["round"]) for m in metrics.values()}
    report = (f"Global model after {', '.join(map(str, sorted(rounds)))} rounds"
              f"{' on ' + args.data if args.data else ''}; client test splits.\n\n{fairness_table(metrics)}")
    if any(targets.values()):
        report += "\n" + target_table(targets)
    args.save_dir.mkdir(parents=True, exist_ok=True)
    (args.save_dir / "comparison.md").write_text(report)
    print("\n" + report + f"\nSaved to {args.save_dir / 'comparison.md'}; curves: tensorboard --logdir {args.save_dir}")


if __name__ == "__main__":
    main()
