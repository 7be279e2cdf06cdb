"""Launching runs: train each in its own process, resume what was interrupted, and never delete a run.

:func:`launch` trains one :class:`~lightning_fl.experiments.runs.Run`; :func:`run_all` trains many, a
few at a time, and ends with a summary line per run saying whether it was kept, trained, resumed or
restarted, and why. What happens to a run directory that is already there:

- a run that finished with the same command and config (``finished.json``) is kept;
- an interrupted attempt of the same run (``started.json``, ``checkpoints/last.ckpt``) is resumed with
  ``--ckpt_path``; a checkpoint that already holds every round finishes without training;
- a run stopped by a signal while it trains (exit ``128 + signal``, or killed: the child of a
  preempted job, the out-of-memory killer) is resumed from its last checkpoint, up to
  ``max_interruptions`` times in a row without progress;
- a finished run whose result files changed since (``finished.json`` records their sha256) is
  trained again, the damaged one moved aside as below;
- anything else (a failed resume, another command or config, a folder the runner did not write) is
  **moved aside** to ``<log_dir>.<why>-<n>`` with its log, reported with the log's last lines, and the
  run starts afresh. Nothing is ever deleted.

When the launcher itself gets SIGTERM, SIGINT or SIGUSR1 it passes the signal on once to every run in
flight (each finishes and checkpoints its round, see :mod:`lightning_fl.faults.preemption`), starts no new
run, prints the summary and exits with ``128 + signal``; the same command resumes everything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from lightning_fl.experiments.progress import RunProgress
from lightning_fl.experiments.runs import (
    CHECKPOINT,
    FINISHED,
    STARTED,
    Run,
    damaged_outputs,
    identity,
    is_finished,
    output_digests,
    resumable_checkpoint,
)
from lightning_fl.experiments.runs import matches as _same_run
from lightning_fl.simulation.default_callbacks import ROUND_LINES_ENVIRONMENT

__all__ = ["RunFailed", "RunInterrupted", "command_line", "checkpoint_rounds", "interrupting_signal", "launch", "run_all", "train_in_subprocess"]

#: Exits that mean "stopped from outside", not "failed": the run is resumed from its checkpoint.
INTERRUPTING_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGKILL, signal.SIGTERM, signal.SIGUSR1)
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
_ALREADY_DONE = "its checkpoint already held every round"


class RunInterrupted(RuntimeError):
    """The launcher is stopping: the run was interrupted and is left to be resumed."""


class RunFailed(RuntimeError):
    """A training process failed; the message names the run, its kept directory and the end of its log."""


class _Stop:
    """The launcher's own stop signal, and the training processes to pass it on to."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.children: set[subprocess.Popen] = set()
        self.lock = threading.Lock()

    def handle(self, signum: int, frame: object) -> None:
        with self.lock:
            first, self.signum = self.signum is None, self.signum or signum
            children = list(self.children)
        if first:
            print(f"{signal.Signals(signum).name} received: the runs in flight finish their round and stop; no new"
                  " run starts (the same command resumes them)", file=sys.stderr, flush=True)
        for child in children:  # once per signal received, as the user sent it
            child.send_signal(signum)


_STOP = _Stop()


def interrupting_signal(code: int) -> str | None:
    """The signal's name if exit code ``code`` means the process was stopped by one, else ``None``.

    ``-N``: killed by signal ``N`` (``subprocess``); ``128 + N``: stopped by it (the CLI's exit code).
    """
    number = -code if code < 0 else code - 128 if code > 128 else None
    return signal.Signals(number).name if number in INTERRUPTING_SIGNALS else None


def checkpoint_rounds(path: Path | None) -> int | None:
    """Rounds completed in checkpoint ``path``; ``None`` if it is missing or unreadable."""
    if path is None or not path.is_file():
        return None
    import torch  # here only: the runner itself trains nothing

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return int(checkpoint["federated"]["rounds_completed"])
    except Exception:  # noqa: BLE001 - damaged or foreign: the training process reports it in one line
        return None


def train_in_subprocess(run: Run) -> int:
    """Train ``run`` in a fresh Python process, output appended to ``<log_dir>/train.log``; returns its exit code.

    The process gets its own session, so a Ctrl-C at the terminal reaches it once, passed on by the
    launcher, rather than twice (a second signal would stop it without finishing its round).
    """
    command, env = [sys.executable, *run.command], dict(os.environ)
    env[ROUND_LINES_ENVIRONMENT] = "1"  # a line per round in train.log, for the progress display
    if run.threads is not None:
        env["OMP_NUM_THREADS"] = str(run.threads)  # also the threads of numpy and of torch's inter-op pool
        if "--model.cpu_threads" not in command:
            command += ["--model.cpu_threads", str(run.threads)]
    with open(run.log_dir / "train.log", "a") as log, _STOP.lock:
        if _STOP.signum is not None:
            return 128 + _STOP.signum
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _STOP.children.add(process)
    try:
        return process.wait()
    finally:
        with _STOP.lock:
            _STOP.children.discard(process)


def _tail(log: Path, lines: int = 15) -> list[str]:
    return log.read_text(errors="replace").splitlines()[-lines:] if log.is_file() else []


def _set_aside(run: Run, why: str) -> Path:
    """Move the run directory to ``<log_dir>.<why>-<n>`` (the first free ``n``) and return the new path."""
    n = 1
    while (kept := run.log_dir.with_name(f"{run.log_dir.name}.{why}-{n}")).exists():
        n += 1
    run.log_dir.rename(kept)
    return kept


def _start_afresh(run: Run) -> None:
    run.log_dir.mkdir(parents=True, exist_ok=True)
    (run.log_dir / STARTED).write_text(json.dumps(identity(run)))


def _say(run: Run, message: str, notes: list[str], note: str | None = None) -> None:
    notes.append(message if note is None else note)
    print(f"{run.name}: {message}", flush=True)


def _prepare(run: Run, notes: list[str]) -> Path | None:
    """The checkpoint to resume, after moving aside a directory that cannot be resumed."""
    damaged = damaged_outputs(run) if _same_run(run.log_dir / FINISHED, run) else []
    if damaged:  # finished, but a result file was changed since: never read it, train the run again
        kept = _set_aside(run, "damaged")
        _say(run, f"training again: {', '.join(damaged)} changed since the run finished (sha256 differs); the damaged"
                  f" run is kept in {kept}", notes)
    checkpoint = resumable_checkpoint(run)
    if checkpoint is not None:
        rounds = checkpoint_rounds(checkpoint)
        where = f"round {rounds if rounds is not None else '?'} ({checkpoint})"
        _say(run, f"resuming from {where}", notes, f"resumed from {where}")
        return checkpoint
    if run.log_dir.exists() and any(p.name not in (STARTED, "train.log") for p in run.log_dir.iterdir()):
        same = _same_run(run.log_dir / STARTED, run)
        why = "it stopped before its first checkpoint" if same else "another command or config, or not this runner's"
        kept = _set_aside(run, "incomplete" if same else "outdated")
        _say(run, f"starting afresh: the earlier attempt cannot be resumed ({why}); it is kept in {kept}", notes)
    _start_afresh(run)
    return None


def launch(run: Run, train: Callable[[Run], int] = train_in_subprocess, max_interruptions: int = 3) -> float:
    """Train ``run`` with ``train`` (resuming an earlier attempt) and mark it finished; returns the seconds.

    Args:
        run: The run.
        train: Trains it and returns the exit code (tests train in-process or fake it).
        max_interruptions: Interruptions in a row without a new round checkpointed before giving up.

    Raises:
        RunInterrupted: The launcher is stopping (its own signal); the run is left resumable.
        RunFailed: Training failed (with the end of ``train.log``); the run directory is kept.
    """
    notes: list[str] = []
    checkpoint = _prepare(run, notes)
    restarted, stalls, started = False, 0, time.perf_counter()
    while True:
        before = checkpoint_rounds(checkpoint) if checkpoint is not None else 0
        code = train(run if checkpoint is None else replace(run, command=(*run.command, "--ckpt_path", str(checkpoint))))
        if code == 0:
            break
        stopped_by, latest = interrupting_signal(code), resumable_checkpoint(run)
        if _STOP.signum is not None:
            rounds = checkpoint_rounds(latest)
            raise RunInterrupted(f"by {stopped_by or f'exit {code}'} with {rounds or 0} rounds checkpointed"
                                 f" ({latest or 'no checkpoint yet'}); the same command resumes it")
        if stopped_by is not None:
            rounds = checkpoint_rounds(latest) or 0
            stalls = 0 if rounds > (before or 0) else stalls + 1
            if stalls < max_interruptions:
                _say(run, f"interrupted by {stopped_by} with {rounds} rounds checkpointed; resuming", notes)
                checkpoint = latest
                continue
        elif checkpoint is not None and not restarted:  # e.g. a checkpoint of an older version of the code
            last = next(iter(_tail(run.log_dir / "train.log", 1)), "")
            kept = _set_aside(run, "failed")
            _say(run, f"restarted from round 0: resuming round {before} failed (exit {code}: {last.strip()}); that"
                      f" attempt and its log are kept in {kept}", notes)
            _start_afresh(run)
            checkpoint, restarted, started = None, True, time.perf_counter()
            continue
        tail = _tail(run.log_dir / "train.log")
        raise RunFailed("\n".join([f"{run.method} seed {run.seed} failed (exit {code}; the run directory is kept:"
                                      f" {run.log_dir}):", *tail]))
    seconds = time.perf_counter() - started
    rounds = checkpoint_rounds(run.log_dir / CHECKPOINT)
    if checkpoint is not None and rounds is not None and rounds == before:
        notes.append(f"{_ALREADY_DONE} ({rounds}): nothing retrained")
    marker = {**identity(run), "seconds": seconds, "resumed": checkpoint is not None, "restarted": restarted,
              "history": notes, "outputs": output_digests(run)}
    (run.log_dir / FINISHED).write_text(json.dumps(marker))
    return seconds


def command_line(main: Callable[[], Any]) -> Any:
    """Run an experiment command's ``main``: a failed run, or a Ctrl-C between runs (while reports are
    written, say), ends in one line and an exit code instead of a traceback. During :func:`run_all` the
    signals are handled there (the runs in flight finish their round)."""
    try:
        return main()
    except RunFailed as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted; run the same command again to go on (finished runs are kept)", file=sys.stderr,
              flush=True)
        sys.exit(128 + signal.SIGINT)


def run_all(runs: Sequence[Run], jobs: int = 2, launcher: Callable[[Run], float] = launch,
            keep_going: bool = False) -> dict[Run, str]:
    """Run every unfinished run, ``jobs`` at a time (``1``: one after another in this thread).

    Ends with one summary line per run. SIGTERM, SIGINT or SIGUSR1 to this process stop it as the
    module docstring says (exit ``128 + signal`` after the summary).

    Args:
        runs: The runs; finished ones are kept.
        jobs: Processes at a time.
        launcher: Trains one run (tests train in-process or fake it).
        keep_going: Record a failed run and go on (hyperparameter search: a setting may diverge)
            instead of raising once the runs in flight have finished.

    Returns:
        ``{run: error message}`` of the runs that failed (only with ``keep_going``).
    """
    kept = [run for run in runs if is_finished(run)]
    todo = [run for run in runs if run not in kept]
    outcome = {run: "finished before, kept" for run in kept}
    failed: dict[Run, str] = {}
    progress = RunProgress(runs, len(kept))

    def one(run: Run) -> None:
        if _STOP.signum is not None:
            outcome[run] = "not started (stopping)"
            return
        rounds = checkpoint_rounds(resumable_checkpoint(run)) if resumable_checkpoint(run) else None
        how = f"resuming from round {rounds}" if rounds else "running"
        progress.say(f"{run.name}: {how}, log in {run.log_dir / 'train.log'}")
        progress.started(run)
        trained = False
        try:
            seconds = launcher(run)
            trained = True
        except RunInterrupted as err:
            outcome[run] = f"interrupted {err}"
            return
        except RuntimeError as err:
            outcome[run] = f"failed: {str(err).splitlines()[0]}"
            if not keep_going:
                raise
            failed[run] = str(err)
            progress.say(f"{run.name}: failed, skipped (see {run.log_dir / 'train.log'})")
            return
        finally:
            progress.ended(run, trained)
        outcome[run] = _finished_summary(run, seconds)
        progress.say(f"{run.name}: done in {seconds:.1f} s")

    previous = _watch_signals()
    try:
        if jobs <= 1:
            for run in todo:
                one(run)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(one, run) for run in todo]
                try:
                    for future in futures:
                        future.result()
                except BaseException:
                    pool.shutdown(cancel_futures=True)  # the runs already started finish; no new ones start
                    raise
    finally:
        _restore_signals(previous)
        progress.close()
        print("Runs:\n" + "\n".join(f"  {run.name}: {outcome.get(run, 'not started')}" for run in runs), flush=True)
    if _STOP.signum is not None:
        signum, _STOP.signum = _STOP.signum, None
        print(f"error: stopped by {signal.Signals(signum).name}; run the same command again to resume",
              file=sys.stderr, flush=True)
        sys.exit(128 + signum)
    return failed


def _finished_summary(run: Run, seconds: float) -> str:
    marker = json.loads((run.log_dir / FINISHED).read_text()) if (run.log_dir / FINISHED).is_file() else {}
    history = marker.get("history") or []
    if history and history[-1].startswith(_ALREADY_DONE):
        return f"finished, not retrained: {history[-1]}"
    how = "restarted, then trained" if marker.get("restarted") else "trained"
    return f"{how} in {seconds:.1f} s" + (f" ({'; '.join(history)})" if history else "")


def _watch_signals() -> dict[int, object]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    _STOP.signum = None
    return {signum: signal.signal(signum, _STOP.handle) for signum in _STOP_SIGNALS}


def _restore_signals(previous: dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
