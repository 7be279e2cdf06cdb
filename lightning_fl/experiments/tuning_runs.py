"""One trial of the tuner: its runs (one per tuning seed), their validation scores, and pruning over rounds.

A trial's runs train in parallel, each in its own process (the project's launcher, so finished runs are
kept and interrupted ones resume bit for bit). While they train, :func:`evaluate_trial` reads every
run's **validation** rows as they appear (the ``FairnessMetrics`` history in the run's ``last.ckpt``,
rewritten after every round; ``fairness_history.csv`` once the run has finished) and reports, for each
evaluation round every seed has reached, the mean over the seeds to Optuna's pruner. When the pruner
says stop, the processes get SIGTERM (each finishes its round and checkpoints) and the trial is pruned.

Pruning decisions depend only on the reported values, never on timing: a rerun replays the values it
finds (a pruned run's checkpoint holds its rows) and prunes at the same round without training, or
resumes the run where the replay needs more rounds. Test rows are never read.
"""

from __future__ import annotations

import csv
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from lightning_fl.experiments.launcher import RunInterrupted, launch
from lightning_fl.experiments.runs import CHECKPOINT, STARTED, Run, is_finished, matches
from lightning_fl.simulation.default_callbacks import ROUND_LINES_ENVIRONMENT
from lightning_fl.simulation.run_checks import CLIENT_STATE_DIR

__all__ = ["ABORT", "Pruned", "TrialOutcome", "common_steps", "evaluate_trial", "failure_reason",
           "release_client_state", "stoppable_train", "val_series"]

#: Set when the tuner is stopping (Ctrl-C, SIGTERM): every trial's processes are stopped, resumable.
ABORT = threading.Event()
#: Seconds between reads of the running runs' validation rows.
POLL_SECONDS = 0.5


class Pruned(RunInterrupted):
    """The run was stopped because its trial was pruned (or the tuner is stopping); it stays resumable."""


@dataclass
class TrialOutcome:
    """What one trial's runs gave.

    Attributes:
        state: ``complete``, ``pruned`` or ``failed``.
        score: Mean over the seeds of the metric at the final validation round (``None`` unless complete).
        seed_scores: Each seed's final value (complete trials).
        steps: ``(round, mean over seeds)`` reported to the pruner, in order.
        pruned_at: The round at which the pruner stopped the trial.
        error: First line of a failed run's error.
    """

    state: str
    score: float | None = None
    seed_scores: list[float] = field(default_factory=list)
    steps: list[tuple[int, float]] = field(default_factory=list)
    pruned_at: int | None = None
    error: str = ""


def _csv_rows(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r["stage"] == "val"]  # test rows are never looked at


def _checkpoint_rows(path: Path) -> list[dict[str, Any]]:
    import torch  # here only: reading a running run's checkpoint

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        history = checkpoint["callbacks"]["FairnessMetrics"]["server"]["history"]
    except Exception:  # noqa: BLE001 - not written yet, or without FairnessMetrics: no rows yet
        return []
    return [r for r in history if r.get("stage") == "val"]


def val_series(run: Run, metric: str) -> list[tuple[int, float]]:
    """``(round, value)`` of ``metric`` (``val/...``) at every validation evaluation of ``run`` so far.

    Read from ``fairness_history.csv`` of a finished run, else from the checkpoint of an attempt of
    exactly this run (an outdated run directory gives nothing).
    """
    key = metric.partition("/")[2]
    if is_finished(run) and (run.log_dir / "fairness_history.csv").is_file():
        rows = _csv_rows(run.log_dir / "fairness_history.csv")
    elif matches(run.log_dir / STARTED, run) and (run.log_dir / CHECKPOINT).is_file():
        rows = _checkpoint_rows(run.log_dir / CHECKPOINT)
    else:
        return []
    return sorted((int(r["round"]), float(r[key])) for r in rows if key in r)


def common_steps(series: Sequence[Sequence[tuple[int, float]]]) -> list[tuple[int, float]]:
    """``(round, mean over the seeds)`` for the rounds every seed has reached (the rounds of the first seed).

    Example:
        >>> common_steps([[(5, 0.2), (10, 0.4)], [(5, 0.4)]])
        [(5, 0.30000000000000004)]
    """
    first, *rest = series
    out = []
    for round_, value in first:
        others = [dict(s).get(round_) for s in rest]
        if any(v is None for v in others):
            break
        out.append((round_, (value + sum(others)) / (1 + len(others))))
    return out


def stoppable_train(run: Run, stop: threading.Event) -> int:
    """Train ``run`` in a fresh process (as the launcher does); SIGTERM it when ``stop`` or :data:`ABORT` is set.

    Raises:
        Pruned: After stopping the process (it finished its round and checkpointed).
    """
    command, env = [sys.executable, *run.command], dict(os.environ)
    env[ROUND_LINES_ENVIRONMENT] = "1"
    if run.threads is not None:
        env["OMP_NUM_THREADS"] = str(run.threads)
        if "--model.cpu_threads" not in command:
            command += ["--model.cpu_threads", str(run.threads)]
    with open(run.log_dir / "train.log", "a") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    while True:
        try:
            return process.wait(timeout=POLL_SECONDS)
        except subprocess.TimeoutExpired:
            if stop.is_set() or ABORT.is_set():
                process.send_signal(signal.SIGTERM)
                process.wait()
                raise Pruned("stopped by the tuner (pruned, or the tuner is stopping)") from None


def _report(trial: Any, steps: list[tuple[int, float]], done: int) -> tuple[int, int | None]:
    """Report ``steps[done:]`` to ``trial`` in order; returns (steps reported, round pruned at or ``None``)."""
    for round_, value in steps[done:]:
        trial.report(value, round_)
        done += 1
        if trial.should_prune():
            return done, round_
    return done, None


def failure_reason(err: Exception) -> str:
    """A failed run in one line for ``tuning.md``: which run, its exit code, and why (its log's last ``error:``
    line, else its last line: the exception a traceback ends on).

    Args:
        err: The launcher's error (its first line names the run, the next ones are the end of its log).
    """
    first, *tail = str(err).splitlines() or [""]
    tail = [line.strip() for line in tail if line.strip()]
    reason = next((line for line in reversed(tail) if line.startswith("error:")), tail[-1] if tail else "")
    header = re.sub(r"; the run directory is kept: .*$", ")", first.rstrip(":"))
    return f"{header}: {reason}" if reason else header


def _outcome(trial: Any, runs: Sequence[Run], metric: str, steps: list[tuple[int, float]], pruned_at: int | None,
             errors: Sequence[str]) -> TrialOutcome:
    if pruned_at is not None:
        return TrialOutcome("pruned", steps=steps, pruned_at=pruned_at)
    if errors:
        return TrialOutcome("failed", steps=steps, error=errors[0])
    finals = [series[-1][1] if series else math.nan for series in (val_series(run, metric) for run in runs)]
    if any(math.isnan(v) for v in finals):
        return TrialOutcome("failed", steps=steps, error="no validation score (NaN or no val rows)")
    return TrialOutcome("complete", sum(finals) / len(finals), finals, steps)


def evaluate_trial(trial: Any, runs: Sequence[Run], metric: str,
                   launcher: Callable[[Run], float] | None = None) -> TrialOutcome:
    """Train ``runs`` (one per tuning seed) and report their mean validation ``metric`` per round to ``trial``.

    Args:
        trial: An Optuna trial (``report``, ``should_prune``).
        runs: The trial's runs.
        metric: The ``val/*`` metric.
        launcher: ``None``: train each run in its own process, stopped as soon as the trial is pruned.
            Otherwise trains one run to its end (tests fake it); pruning is then decided on its rows
            afterwards, with the same result.

    Returns:
        A :class:`TrialOutcome`: ``pruned`` at the first step the pruner stops (over the rounds every seed
        reached, so a run that fails later does not change it), else ``failed`` if a run failed.
    """
    if ABORT.is_set():
        raise KeyboardInterrupt
    done, pruned_at = _report(trial, common_steps([val_series(r, metric) for r in runs]), 0)
    todo = [run for run in runs if not is_finished(run)]
    errors: list[str] = []
    if pruned_at is None and todo:
        stop = threading.Event()
        train = partial(launch, train=partial(stoppable_train, stop=stop)) if launcher is None else launcher

        def one(run: Run) -> None:
            try:
                train(run)
            except Pruned:
                pass
            except RuntimeError as err:  # a failed run (e.g. diverged): the trial fails unless pruned first
                # The other seeds go on: the steps reported must not depend on when the failure was seen.
                errors.append(failure_reason(err))

        with ThreadPoolExecutor(max_workers=len(todo)) as pool:
            futures = [pool.submit(one, run) for run in todo]
            while pruned_at is None and not all(f.done() for f in futures):
                stop.wait(POLL_SECONDS)
                done, pruned_at = _report(trial, common_steps([val_series(r, metric) for r in runs]), done)
            if pruned_at is not None:
                stop.set()
        if ABORT.is_set():
            raise KeyboardInterrupt
        if pruned_at is None:
            done, pruned_at = _report(trial, common_steps([val_series(r, metric) for r in runs]), done)
    steps = common_steps([val_series(r, metric) for r in runs])[:done]
    return _outcome(trial, runs, metric, steps, pruned_at, errors)


def release_client_state(runs: Sequence[Run]) -> None:
    """Delete the ``model.client_state: disk`` files of a decided trial's runs and of their set-aside attempts.

    Only a resume reads them, and a decided trial is never resumed: it is reread from its rows and
    ``finished.json``, and a failed one (diverged) is retried from round 0 by the next command. They are
    large (IGFL's deltas: about 4 GB per run of 100 clients on Fashion-MNIST, so a reproduction's tuning runs
    and every retried attempt the launcher sets aside as ``seed_<s>.failed-<n>`` would fill a disk).
    """
    for run in runs:
        for folder in (run.log_dir, *run.log_dir.parent.glob(f"{run.log_dir.name}.*-*")):
            shutil.rmtree(folder / CLIENT_STATE_DIR, ignore_errors=True)
