"""What the experiment runner shows while runs train: a bar over the runs, and each running run's round.

Training processes started by the runner print ``round r/R (s)`` after every round into their
``train.log`` (:class:`~lightning_fl.callbacks.RoundLines`, asked for through the environment); a
thread reads the last such line of every running run's log every ``interval`` seconds and shows it in
the bar's postfix (``FedAvg/seed_0 12/60``). Messages go through the bar, so they do not break it.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from lightning_fl.experiments.runs import Run

__all__ = ["RunProgress", "latest_round"]

_ROUND_LINE = re.compile(rb"^round (\d+)/(\S+) \(")


def latest_round(log: Path, window: int = 4096) -> str | None:
    """``"12/60"`` from the last ``round 12/60 (...)`` line of ``log`` (only its end is read), or ``None``."""
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - window))
            tail = f.read()
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        match = _ROUND_LINE.match(line)
        if match:
            return f"{match.group(1).decode()}/{match.group(2).decode()}"
    return None


class RunProgress:
    """A bar over ``runs`` (those already finished count as done), with the running runs' rounds.

    Args:
        runs: Every run of the command.
        done: How many of them were finished before (kept).
        interval: Seconds between reads of the running runs' logs.
    """

    def __init__(self, runs: Sequence[Run], done: int, interval: float = 2.0) -> None:
        # Only on a terminal: in a file or a CI log a bar is a line of carriage returns; messages still print.
        self._bar = tqdm(total=len(runs), initial=done, desc="Runs", unit="run", dynamic_ncols=True, smoothing=0,
                         disable=not sys.stdout.isatty(), file=sys.stdout)
        self._running: dict[str, Path] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(interval,), daemon=True)
        self._thread.start()

    def say(self, line: str) -> None:
        """Print ``line`` above the bar."""
        self._bar.write(line)

    def started(self, run: Run) -> None:
        with self._lock:
            self._running[run.name] = run.log_dir / "train.log"

    def ended(self, run: Run, trained: bool) -> None:
        """``run`` is no longer running; ``trained``: it finished (the bar advances)."""
        with self._lock:
            self._running.pop(run.name, None)
        if trained:
            self._bar.update(1)
        self._refresh()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._bar.close()

    def _refresh(self) -> None:
        with self._lock:
            running = dict(self._running)
        rounds = {name: latest_round(log) for name, log in running.items()}
        self._bar.set_postfix_str(", ".join(f"{name} {r or 'starting'}" for name, r in rounds.items()), refresh=True)

    def _watch(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._refresh()
