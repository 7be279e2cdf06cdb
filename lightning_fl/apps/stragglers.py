"""FedProx Fig. 1 on Synthetic(1,1): FedAvg dropping stragglers against FedProx keeping their partial work.

Runs every ``name=config.yaml`` method once per seed (``seed_everything``: cohort sampling, model
initialisation, batch order and the straggler draws; the data partition seed stays the config's),
at most ``--jobs`` processes at a time, each logging to ``<save_dir>/<method>/seed_<s>/``, with the
experiment runner's runs (:mod:`lightning_fl.experiments.runs`): a run that finished with the same
command is not redone, an interrupted one resumes from its last checkpoint. Then it reads every run's
per-round curves from its TensorBoard events, writes them as one long CSV (``results.csv``: method,
seed, round, metric, value), prints a table of mean +- standard deviation across seeds
(``results.md``) and saves the curves as a figure (``curves.png``: mean over seeds, band = min..max
over seeds).

Example::

    python -m lightning_fl.apps.stragglers --save-dir lightning_logs/stragglers/0.9 --seeds 3 --fraction 0.9

Everything after ``--`` is passed to every run (e.g. ``-- --data.init_args.num_clients 6``).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from lightning_fl.experiments.launcher import command_line, launch, run_all
from lightning_fl.experiments.run_info import read_scalars
from lightning_fl.experiments.runs import Run, is_finished, parse_seeds, plan_runs
from lightning_fl.experiments.stats import (
    Stats,
    aggregate,
    seed_bands,
    stats,
    tail_means,
)
from lightning_fl.reporting.figures import band_curves_figure

__all__ = ["METRICS", "Run", "Stats", "aggregate", "collect", "curves_figure", "is_finished", "launch", "main",
           "markdown_table", "parse_seeds", "plan_runs", "run_all", "stats", "tail_means", "write_long_csv"]

#: Metric name in the results -> TensorBoard tag of the run.
METRICS: dict[str, str] = {
    "train_loss": "train/global_loss",      # global model, all clients' training data (the paper's)
    "test_acc": "test/acc_pooled",           # global model, all clients' test splits, pooled
    "test_acc_mean": "test/acc_mean",        # mean of the clients' test accuracies
    "test_loss": "test/loss",
    "local_train_loss": "train/loss",       # the reporting clients' own loss while training locally
}
DEFAULT_METHODS = ("FedAvg-drop=configs/stragglers/fedavg_drop.yaml",
                   "FedProx-mu1-partial=configs/stragglers/fedprox_partial.yaml",
                   "FedProx-mu0-partial=configs/stragglers/fedprox_mu0_partial.yaml")


def collect(runs: Iterable[Run], metrics: Mapping[str, str] = METRICS) -> list[tuple[str, int, int, str, float]]:
    """Long-format rows ``(method, seed, round, metric, value)`` of every run's curves."""
    rows = []
    for run in runs:
        scalars = read_scalars(run.log_dir, metrics.values())
        for metric, tag in metrics.items():
            rows += [(run.method, run.seed, step, metric, value) for step, value in sorted(scalars[tag].items())]
    return rows


def write_long_csv(rows: Iterable[tuple[str, int, int, str, float]], path: Path) -> None:
    """Write rows from :func:`collect` to ``path`` under the header ``method,seed,round,metric,value``."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("method", "seed", "round", "metric", "value"))
        writer.writerows((m, s, r, k, repr(v)) for m, s, r, k, v in rows)


def markdown_table(rows: Sequence[tuple[str, int, int, str, float]], metric: str, rounds: Sequence[int],
                   last: int = 10, digits: int = 3) -> str:
    """Methods x rounds table of ``mean ± std`` across seeds for ``metric``, plus the last-rounds mean."""
    table, tails = aggregate(rows), tail_means(rows, last)
    methods = list(dict.fromkeys(m for m, *_ in rows))
    lines = ["| Method | " + " | ".join(f"round {r}" for r in rounds) + f" | last {last} rounds |",
             "| :--- |" + " ---: |" * (len(rounds) + 1)]
    for method in methods:
        cells = [table.get((method, metric, r)) for r in rounds] + [tails.get((method, metric))]
        lines.append(f"| {method} | " + " | ".join("n/a" if s is None else f"{s.mean:.{digits}f} ± {s.std:.{digits}f}"
                                                  for s in cells) + " |")
    return "\n".join(lines) + "\n"


def curves_figure(rows: Sequence[tuple[str, int, int, str, float]], panels: Mapping[str, str], title: str):
    """Figure with one panel per ``{metric: y label}``: mean over seeds, band = min..max over seeds."""
    return band_curves_figure([(ylabel, seed_bands(rows, metric)) for metric, ylabel in panels.items()], title=title)


def main(argv: list[str] | None = None, launcher: Callable[[Run], float] = launch) -> None:
    """Command line: see the module docstring; ``launcher`` trains one run (tests train in-process)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("methods", nargs="*", default=list(DEFAULT_METHODS), help="name=config.yaml pairs")
    parser.add_argument("--save-dir", type=Path, help="default: lightning_logs/stragglers/<fraction>")
    parser.add_argument("--seeds", default="3", help="a count (3: seeds 0, 1, 2) or a list (0,1,2)")
    parser.add_argument("--fraction", type=float, default=0.9, help="model.system.straggler_fraction")
    parser.add_argument("--rounds", type=int, help="override trainer.max_epochs")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel")
    parser.add_argument("--table-rounds", default="20,50,100,150,200")
    args = parser.parse_args(argv)
    methods = dict(pair.partition("=")[::2] for pair in args.methods)
    if not all(methods.values()):
        parser.error(f"methods must be name=config.yaml pairs; got {args.methods}")
    seeds = parse_seeds(args.seeds)
    args.save_dir = args.save_dir or Path("lightning_logs/stragglers") / str(args.fraction)
    overrides = ["--model.system.straggler_fraction", str(args.fraction),
                 *(["--trainer.max_epochs", str(args.rounds)] if args.rounds else []), *overrides]
    runs = plan_runs(methods, seeds, args.save_dir, overrides)
    started = time.perf_counter()
    run_all(runs, args.jobs, launcher)
    rows = collect(runs)
    write_long_csv(rows, args.save_dir / "results.csv")
    last_round = max(r for _, _, r, _, _ in rows)
    rounds = [r for r in map(int, args.table_rounds.split(",")) if r < last_round] + [last_round]
    setting = (f"{round(100 * args.fraction)}% stragglers, {len(seeds)} seeds ({', '.join(map(str, seeds))}), "
               f"{last_round} rounds")
    report = (f"Synthetic(1,1), {setting}; mean ± sample std across seeds.\n\n"
              f"Training loss (global model on every client's training data):\n\n"
              f"{markdown_table(rows, 'train_loss', rounds)}\n"
              f"Test accuracy (global model on every client's test split, pooled):\n\n"
              f"{markdown_table(rows, 'test_acc', rounds, digits=4)}")
    (args.save_dir / "results.md").write_text(report)
    fig = curves_figure(rows, {"train_loss": "training loss", "test_acc": "test accuracy"},
                        f"Synthetic(1,1), {setting}: mean over seeds, band = min..max")
    fig.savefig(args.save_dir / "curves.png", dpi=100)
    print(f"\n{report}\nSaved {args.save_dir / 'results.csv'}, results.md and curves.png"
          f" ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    command_line(main)
