"""``make tensorboard``: TensorBoard over a log folder, opening on the clients' fairness scalars.

TensorBoard's Time Series tab sorts tag groups by name and expands only the first two, which for a
run of this project are ``data`` and ``round`` (or an algorithm's own group such as ``fedfa``); the
fairness statistics (``test/acc_mean``, ``test/acc_worst20``, ...) come later, collapsed. TensorBoard
reads pinned cards from its address (``?pinnedCards=[...]``), so this command prints the address with
the headline statistics of every metric the runs report pinned above everything else, then starts
TensorBoard. The metrics are read from the header of each run's ``fairness_history.csv``: ``acc``
for classifiers, a module's own declared metric (``mse``, ``perplexity``) otherwise.

``python -m lightning_fl.apps.tensorboard --logdir lightning_logs [--port 6006] [tensorboard options]``
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import sys
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["HEADLINE", "address", "declared_metrics", "main", "pinned_cards"]

#: The statistics pinned per metric: FedFa Table 2's columns.
HEADLINE = ("mean", "worst20", "best20", "var")
#: Runs whose headers are read at most (a large experiment folder holds hundreds of alike runs).
MAX_RUNS = 200


def declared_metrics(headers: Iterable[Sequence[str]]) -> list[str]:
    """The per-client metrics the runs report, from their ``fairness_history.csv`` headers: ``acc`` first.

    Example:
        >>> declared_metrics([["stage", "round", "acc_mean", "acc_worst20"], ["stage", "round", "mse_mean", "mse_worst20"]])
        ['acc', 'mse']
    """
    names = {column.removesuffix("_worst20") for header in headers for column in header if column.endswith("_worst20")}
    return sorted(names, key=lambda name: (name != "acc", name))


def pinned_cards(metrics: Sequence[str], stage: str = "test") -> list[dict[str, str]]:
    """TensorBoard's pinned-card entries for the headline statistics of each metric, in table order.

    Example:
        >>> [card["tag"] for card in pinned_cards(["mse"])]
        ['test/mse_mean', 'test/mse_worst20', 'test/mse_best20', 'test/mse_var']
    """
    return [{"plugin": "scalars", "tag": f"{stage}/{metric}_{key}"} for metric in metrics for key in HEADLINE]


def address(port: int, metrics: Sequence[str], host: str = "localhost") -> str:
    """The Time Series address with ``metrics``' headline cards pinned (no pins without metrics)."""
    if not metrics:
        return f"http://{host}:{port}/#timeseries"
    pins = urllib.parse.quote(json.dumps(pinned_cards(metrics), separators=(",", ":")))
    return f"http://{host}:{port}/?pinnedCards={pins}#timeseries"


def _headers(logdir: Path) -> list[list[str]]:
    headers = []
    for path in itertools.islice(logdir.rglob("fairness_history.csv"), MAX_RUNS):
        with open(path, newline="") as f:
            headers.append(next(csv.reader(f), []))
    return headers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lightning_fl.apps.tensorboard",
                                     description="TensorBoard over a log folder, opening on the fairness scalars.")
    parser.add_argument("--logdir", type=Path, default=Path("lightning_logs"))
    parser.add_argument("--port", type=int, default=6006)
    args, rest = parser.parse_known_args(argv)
    if not args.logdir.is_dir():
        print(f"error: --logdir {args.logdir} is not a folder (train a run first: make train)", file=sys.stderr)
        return 2
    metrics = declared_metrics(_headers(args.logdir))
    pinned = f" ({', '.join(metrics)} fairness statistics pinned first)" if metrics else ""
    print(f"Open {address(args.port, metrics)}{pinned}", flush=True)
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(args.logdir), "--port", str(args.port), *rest]
    os.execv(sys.executable, command)
    return 0  # not reached: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
