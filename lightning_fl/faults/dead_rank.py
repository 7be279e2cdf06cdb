"""A rank that dies is always reported by one ``error:`` line, whoever notices first.

Inside a round, :class:`~lightning_fl.simulation.distributed.CohortSharding` names a rank that misses an exchange.
Two other paths used to end without the project's line:

- **Lightning's process watcher.** With the ``ddp`` strategy, rank 0 started the other ranks and
  polls them every few seconds; when one has died it SIGKILLs every rank, itself included (exit
  137, no message), often before rank 0 reaches an exchange (a long round, client state on disk).
  :func:`report_dead_children` has the watcher print the line first, naming the rank, its exit code
  and the checkpoint that is intact, then stop the ranks as before (rank 0 exits with 1).
- **A collective outside the round's exchange** (set-up, Lightning's own per-round broadcasts, a
  checkpoint's) fails with gloo's ``Connection reset by peer`` and a traceback. :func:`lost_rank`
  turns it into one line.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from lightning_fl.faults.checkpoint_io import last_checkpoint
from lightning_fl.faults.validation import exception_chain

__all__ = ["lost_rank", "report_dead_children"]

#: Words of gloo's and NCCL's errors when a peer process is gone.
_LOST_PEER = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "failed to pass monitoredBarrier",
              "NCCL communicator was aborted", "remote process exited")


def _resume_hint(trainer: Any) -> str:
    last = None if trainer is None else last_checkpoint(trainer)
    if last is None:
        return "no checkpoint was written"
    path, rounds = last
    return f"{path} ({rounds} rounds) is intact: resume with --ckpt_path {path}"


def lost_rank(err: BaseException, trainer: Any = None) -> str | None:
    """The one line for a collective that failed because another rank is gone, else ``None``."""
    for cause in exception_chain(err):
        text = " ".join(str(cause).split())
        reason = next((words for words in _LOST_PEER if words in text), None)
        if isinstance(cause, RuntimeError) and reason is not None:
            return f"another rank's process died or hangs ({reason}); every rank stops; {_resume_hint(trainer)}"
    return None


def report_dead_children(trainer: Any) -> None:
    """Have Lightning's process watcher (rank 0 of a ``ddp`` launch) print the line before it kills.

    Does nothing where there is no watcher (one process, ``torchrun``, SLURM, other ranks).
    """
    observer = next((t for t in threading.enumerate() if t.name == "child-process-observer"), None)
    if observer is None or not hasattr(observer, "_child_processes"):
        return

    def run_once() -> bool:
        children = observer._child_processes
        for child in children:
            child.poll()
        if all(child.returncode == 0 for child in children):
            return True
        dead = [(rank, child) for rank, child in enumerate(children, start=1) if child.returncode]
        if not dead:
            return False
        rank, child = dead[0]
        code = child.returncode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        round_number = trainer.current_epoch + 1
        print(f"error: rank {rank} (PID {child.pid}) {how} during round {round_number}; the other ranks are"
              f" stopped; {_resume_hint(trainer)}", file=sys.stderr, flush=True)
        for other in children:
            if other.poll() is None:
                other.send_signal(signal.SIGKILL)  # as Lightning's watcher: ranks hanging in a collective
        os._exit(1)

    observer._run = run_once  # the watcher's poll; its loop, period and daemon thread are unchanged
