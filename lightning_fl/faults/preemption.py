"""Preemption: SIGTERM, SIGINT and SIGUSR1 stop a run after its current round, and never as a success.

Cluster schedulers stop jobs with a signal (SLURM: SIGTERM, then SIGKILL after a grace period; with
``--signal=USR1@<s>`` a warning SIGUSR1 first), and a user stops a run with Ctrl-C (SIGINT). Left to
Lightning, SIGTERM ends ``fit`` with exit code 0 and no message, so a scheduler or the experiment
launcher takes a half-trained run for a finished one. :class:`Preemption` instead:

- lets the round in progress finish and its checkpoint be written (Lightning's own stop-after-epoch
  path, which also tells the other ranks), so ``last.ckpt`` holds the last completed round; a second
  signal, more than a second after the first, stops at once (``last.ckpt`` then holds the round
  before; with several processes rank 0 decides, the others follow);
- prints one line naming the signal, the round the checkpoint holds and the command that resumes it;
- exits with ``128 + signal`` (143 for SIGTERM, 130 for SIGINT, 138 for SIGUSR1), as a shell reports
  a process killed by that signal;
- with Lightning's ``SLURMEnvironment(auto_requeue=True)`` and its requeue signal, requeues the job
  (``scontrol requeue``) once the checkpoint is safe, after writing where it is to
  ``<default_root_dir>/.lightning_fl_requeue_<job id>.json``; the requeued job runs the same command
  and, given no ``--ckpt_path``, goes on from that checkpoint in the same run directory
  (:func:`requeued_checkpoint`).

Before training starts (parsing, data set-up) a signal stops at once: there is nothing to save.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_fabric.plugins.environments import SLURMEnvironment

from lightning_fl.faults.checkpoint_io import last_checkpoint

__all__ = ["STOP_SIGNALS", "Preempted", "Preemption", "requeued_checkpoint"]

#: The signals that stop a run after its current round.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
#: A repeated signal within this many seconds of the first is the same stop delivered twice.
_REPEAT_SECONDS = 1.0


class Preempted(Exception):
    """A stop signal arrived before training started (or a second one arrived): stop now."""


class Preemption:
    """The process's record of a stop signal, and what it does about it (see the module docstring).

    One instance per process (:meth:`instance`): signal handlers are process-wide.

    Attributes:
        signum: The first stop signal received, ``None`` before one.
        trainer: The trainer of the run being fitted (:meth:`watch`), ``None`` before ``fit`` starts.
    """

    _instance: Preemption | None = None

    def __init__(self) -> None:
        self.signum: int | None = None
        self.trainer: Any = None
        self._first_at = 0.0
        self._previous: dict[int, Any] = {}

    @classmethod
    def instance(cls) -> Preemption:
        """The process's :class:`Preemption` (created on first use)."""
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def install(self) -> None:
        """Handle :data:`STOP_SIGNALS` until :meth:`uninstall` (main thread only; elsewhere nothing changes)."""
        self.signum, self.trainer = None, None
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            previous = signal.signal(signum, self._handle)
            if previous is not self._handle:
                self._previous[signum] = previous

    def uninstall(self) -> None:
        """Give the signals back to the handlers they had before :meth:`install`."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous, self.trainer = {}, None

    def watch(self, trainer: Any) -> None:
        """From now on a stop signal lets ``trainer`` finish (and checkpoint) its round, then stop.

        Called when training starts, after Lightning registered its own SIGTERM handler, which this
        replaces: its handler passes the signal on and broadcasts it from inside the handler, which
        deadlocks when a scheduler signals every rank as well. Without :meth:`install` (a run started
        from Python rather than the CLI) the signals keep Lightning's handling.
        """
        self.trainer = trainer
        if self._previous and threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        trainer, now = self.trainer, time.monotonic()
        if self.signum is None:
            self.signum, self._first_at = signum, now
            if trainer is None or trainer.state.fn != "fit":
                raise Preempted(signal.Signals(signum).name)  # nothing to checkpoint yet
            if trainer.is_global_zero:
                print(f"{signal.Signals(signum).name} received: stopping once round {trainer.current_epoch + 1} is done"
                      " and checkpointed (send it again to stop at once)", file=sys.stderr, flush=True)
                # Lightning's stop-after-epoch flag: checked once the round's checkpoint is written, and
                # broadcast from rank 0 to the other ranks at the next round's start, so they stop together.
                trainer._signal_connector.received_sigterm = True
                launcher = trainer.strategy.launcher
                if getattr(launcher, "procs", None):  # the ranks this process started (ddp): pass it on
                    launcher.kill(signum)
            return
        # A repeat stops at once, except the same stop delivered twice (a scheduler signals every
        # process, and rank 0 passes it on to the ranks it started) and on ranks other than 0, which
        # stop when rank 0 does: alone, they would leave it waiting at the next exchange.
        if trainer is None or trainer.state.fn != "fit" or (now - self._first_at > _REPEAT_SECONDS
                                                            and trainer.is_global_zero):
            raise Preempted(signal.Signals(signum).name)

    def stopped(self) -> bool:
        """Whether a stop signal arrived (the run must then end with :meth:`exit`, whatever happened)."""
        return self.signum is not None

    def exit(self, args: Sequence[str]) -> None:
        """Print the one line (rank 0), requeue a SLURM job if asked to, and exit with ``128 + signal``.

        Args:
            args: The command-line arguments of the run (to print the command that resumes it).
        """
        signum = self.signum or signal.SIGTERM
        name = signal.Signals(signum).name
        trainer, self.trainer = self.trainer, None
        if trainer is None or trainer.is_global_zero:
            print(f"error: {self._summary(name, trainer, args)}", file=sys.stderr, flush=True)
        if trainer is not None and _requeue_signal(trainer) == signum and trainer.is_global_zero:
            last = last_checkpoint(trainer)
            if last is not None:  # the requeued job runs the same command: tell it where to go on from
                _requeue_marker(trainer.default_root_dir).write_text(json.dumps({"ckpt_path": str(last[0].resolve())}))
            _requeue()
        sys.exit(128 + signum)

    @staticmethod
    def _summary(name: str, trainer: Any, args: Sequence[str]) -> str:
        if trainer is None:
            return f"stopped by {name} before training started; nothing was trained or written"
        last = last_checkpoint(trainer)
        if last is None:
            return (f"stopped by {name} during round {trainer.current_epoch + 1}; no checkpoint was written (add a"
                    " ModelCheckpoint with save_on_train_epoch_end: true to resume runs), so it cannot be resumed")
        saved, rounds = last
        resume = " ".join(shlex.quote(a) for a in ("python", "-m", "lightning_fl", *_without_ckpt_path(args),
                                                   "--ckpt_path", str(saved)))
        return f"stopped by {name}; {saved} holds round {rounds} of {trainer.max_epochs}; resume with: {resume}"


def _without_ckpt_path(args: Sequence[str]) -> list[str]:
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    return kept


def _requeue_signal(trainer: Any) -> int | None:
    environment = getattr(trainer._accelerator_connector, "cluster_environment", None)
    if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
        return int(environment.requeue_signal or signal.SIGUSR1)
    return None


def _job_id() -> str | None:
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array_job else os.environ.get("SLURM_JOB_ID")


def _requeue_marker(root: str | os.PathLike | None) -> Path:
    return Path(root or ".") / f".lightning_fl_requeue_{_job_id()}.json"


def requeued_checkpoint(default_root_dir: str | os.PathLike | None) -> str | None:
    """The checkpoint a requeued SLURM job goes on from (what :meth:`Preemption.exit` recorded before
    ``scontrol requeue``), or ``None``: not a SLURM job, not requeued, or the checkpoint is gone."""
    if not _job_id():
        return None
    try:
        path = json.loads(_requeue_marker(default_root_dir).read_text())["ckpt_path"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if Path(path).is_file() else None


def _requeue() -> None:
    """``scontrol requeue`` this SLURM job (as Lightning's own SIGUSR1 handler does)."""
    job = _job_id()
    if not job:
        return
    try:
        result = subprocess.call(["scontrol", "requeue", job])
    except FileNotFoundError:
        result = -1
    print(f"SLURM job {job} {'requeued' if result == 0 else f'could not be requeued (scontrol: {result})'}",
          file=sys.stderr, flush=True)
