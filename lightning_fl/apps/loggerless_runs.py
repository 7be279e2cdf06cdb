"""A run without a logger (``--trainer.logger false``) still gets a folder of its own.

Without a logger Lightning writes checkpoints to ``<default_root_dir>/checkpoints`` and the project
writes its files to ``default_root_dir`` itself, so a second run into the same folder would overwrite
the first one's ``fairness_summary.md`` and ``last.ckpt``. Here such a run's ``default_root_dir``
becomes ``<default_root_dir>/lightning_logs/version_<N>`` (the next free ``N``, the layout Lightning's
own loggers use), so its checkpoints and files stay together and apart from every other run; a run
resumed from ``<folder>/checkpoints/<file>`` goes on in ``<folder>``. The folder is chosen once, by the
first process, and passed to the processes it starts (Lightning's ``ddp``) through the environment;
processes started together by ``torchrun`` keep ``default_root_dir``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["ENVIRONMENT", "assign_run_folder", "forget_run_folder"]

#: Where the first process puts the folder it chose, for the other processes of the run.
ENVIRONMENT = "LIGHTNING_FL_LOGGERLESS_RUN_DIR"


def _next_version(runs: Path) -> int:
    versions = [int(p.name[len("version_"):]) for p in runs.glob("version_*") if p.name[len("version_"):].isdigit()]
    return max(versions, default=-1) + 1


def assign_run_folder(trainer: dict[str, Any], ckpt_path: str | None) -> str | None:
    """Set ``trainer["default_root_dir"]`` to the run's own folder when it has no logger; returns the folder."""
    if trainer.get("logger") is not False:
        return None
    chosen = os.environ.get(ENVIRONMENT)
    if not chosen and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return None  # processes started together (torchrun): none can tell the others its choice
    if not chosen:
        checkpoint = Path(ckpt_path).resolve() if ckpt_path else None
        if checkpoint is not None and checkpoint.parent.name == "checkpoints":
            chosen = str(checkpoint.parent.parent)  # resume where that run wrote
        else:
            runs = Path(trainer.get("default_root_dir") or ".") / "lightning_logs"
            folder = runs / f"version_{_next_version(runs)}"
            folder.mkdir(parents=True, exist_ok=True)  # claimed now: a run started next gets the next N
            chosen = str(folder)
        os.environ[ENVIRONMENT] = chosen
    trainer["default_root_dir"] = chosen
    return chosen


def forget_run_folder() -> None:
    """After the run: the next run of this process (a test, a script) chooses its own folder."""
    os.environ.pop(ENVIRONMENT, None)
