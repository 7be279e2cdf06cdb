"""``client_accuracy.csv``: every client's accuracy at every evaluation (docs/algorithms.md, Fairness metrics).

One row per evaluation, split and client: ``round,stage,client,accuracy,samples`` (``accuracy`` is
``nan`` for a client without samples in the split). Rows are appended as the run evaluates, so the
file is complete up to the last evaluation even if the run is killed.
"""

from __future__ import annotations

import csv
from pathlib import Path

from torch import Tensor

from lightning_fl.write_failures import writing

__all__ = ["HEADER", "append_client_rows"]

HEADER = ("round", "stage", "client", "accuracy", "samples")


def append_client_rows(path: Path, round_number: int, stage: str, accuracies: Tensor, samples: Tensor,
                       first_of_stage: bool) -> None:
    """Append one evaluation's ``(N,)`` client ``accuracies`` and test ``samples`` to the CSV at ``path``.

    Args:
        path: The CSV file (created with its header when absent).
        round_number: Rounds completed when the model was evaluated.
        stage: ``"val"`` or ``"test"``.
        accuracies: ``(N,)`` accuracies in ``[0, 1]`` (NaN: no samples).
        samples: ``(N,)`` samples per client in the split.
        first_of_stage: This process's first evaluation of ``stage``. Rows of ``stage`` from round
            ``round_number`` on are then dropped first: a resumed run (or ``validate``/``test`` of its
            checkpoint) evaluates those rounds again, and the file must hold each evaluation once.
    """
    if first_of_stage and path.exists():
        with open(path, newline="") as f:
            kept = [r for r in csv.reader(f)][1:]
        kept = [r for r in kept if not (r[1] == stage and int(r[0]) >= round_number)]
        with writing(path, "the client accuracies"), open(path, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows([HEADER, *kept])
    new = not path.exists()
    with writing(path, "the client accuracies"), open(path, "a", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        if new:
            writer.writerow(HEADER)
        writer.writerows((round_number, stage, client, repr(float(acc)), int(n))
                         for client, (acc, n) in enumerate(zip(accuracies.tolist(), samples.tolist(), strict=True)))
