"""``client_accuracy.csv``: every client's accuracy at every evaluation (docs/algorithms.md, Fairness metrics).

One row per evaluation, split and client: ``round,stage,client,accuracy,samples`` (``accuracy`` is
``nan`` for a client without samples in the split). Rows are appended as the run evaluates, so the
file is complete up to the last evaluation even if the run is killed.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from torch import Tensor

from lightning_fl.faults.validation import ConfigError
from lightning_fl.faults.write_failures import writing

__all__ = ["HEADER", "append_client_rows"]

HEADER = ("round", "stage", "client", "accuracy", "samples")


def append_client_rows(path: Path, round_number: int, stage: str, accuracies: Tensor, samples: Tensor,
                       first_of_stage: bool) -> None:
    """Append one evaluation's ``(N,)`` client ``accuracies`` and test ``samples`` to the CSV at ``path``.

    Args:
        path: The CSV file (created with its header when absent).
        round_number: Rounds completed when the model was evaluated.
        stage: ``"val"`` or ``"test"`` (``"val/unseen"``, ``"test/unseen"``: the held-out unseen clients).
        accuracies: ``(N,)`` accuracies in ``[0, 1]`` (NaN: no samples).
        samples: ``(N,)`` samples per client in the split.
        first_of_stage: This process's first evaluation of ``stage``. Rows of ``stage`` from round
            ``round_number`` on are then dropped first: a resumed run (or ``validate``/``test`` of its
            checkpoint) evaluates those rounds again, and the file must hold each evaluation once.
    """
    if first_of_stage and path.exists():
        with open(path, newline="") as f:
            rows = [r for r in csv.reader(f)][1:]
        try:
            kept = [r for r in rows if _well_formed(r) and not (r[1] == stage and int(r[0]) >= round_number)]
        except (IndexError, ValueError):
            raise ConfigError(f"{path}: a damaged row (not round,stage,client,accuracy,samples); move the file"
                              " away to have the run write its evaluations anew") from None
        # Rewritten beside and renamed over: a failure halfway leaves the earlier rows as they were.
        temporary = path.with_name(f".{path.name}.tmp")
        with writing(path, "the client accuracies"):
            with open(temporary, "w", newline="") as f:
                csv.writer(f, lineterminator="\n").writerows([HEADER, *kept])
            os.replace(temporary, path)
    new = not path.exists()
    with writing(path, "the client accuracies"), open(path, "a", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        if new:
            writer.writerow(HEADER)
        writer.writerows((round_number, stage, client, repr(float(acc)), int(n))
                         for client, (acc, n) in enumerate(zip(accuracies.tolist(), samples.tolist(), strict=True)))


def _well_formed(row: list[str]) -> bool:
    """Raises ``ValueError`` unless ``row`` reads as ``round,stage,client,accuracy,samples``."""
    # <stage>/unseen: the held-out clients of model.eval.unseen_fraction, scored beside the others
    if len(row) != len(HEADER) or row[1] not in ("val", "test", "val/unseen", "test/unseen"):
        raise ValueError(row)
    int(row[0]), int(row[2]), float(row[3]), int(row[4])
    return True
