"""A file the run cannot write stops it with one line naming the file and the cause, never a traceback.

Shared clusters fill disks, cap file sizes (``ulimit -f``: ``[Errno 27] File too large``) and mount
folders read-only. A run writes checkpoints (:mod:`~lightning_fl.faults.checkpoint_io`), client state files
(:mod:`~lightning_fl.state.append_log`) and outputs: figures and histogram CSVs
(:mod:`~lightning_fl.reporting.round_logger`), ``client_accuracy.csv``, the fairness summary and history, and
whatever Lightning and its loggers write (``config.yaml``, ``hparams.yaml``, event files,
``metrics.csv``). Each of those failures becomes a :class:`~lightning_fl.faults.validation.RunWriteError`
whose message is one line:

- the project's own writers wrap their writes in :func:`writing`, which names the file even when
  the operating system does not (a ``write`` that hits a full disk reports no file name);
- the CLI turns any other write failure (Lightning's, a logger's) with :func:`write_failure`.

Checkpoints are written atomically and client state files only appended to, so whatever failed,
the checkpoints written before it are unchanged and resume as usual.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lightning_fl.faults.validation import OutputWriteError, RunWriteError, exception_chain

#: Errors that mean "this file cannot be written here": permissions, read-only, full, too large, quota.
WRITE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EFBIG, errno.EDQUOT})

_EITHER_WAY = frozenset({errno.EACCES, errno.EPERM})

#: Appended to every message: what the user still has.
KEPT = "the checkpoints written before are unchanged"


@contextmanager
def writing(path: Path | str, what: str) -> Iterator[None]:
    """Turn an ``OSError`` raised while writing ``what`` to ``path`` into a one-line :class:`OutputWriteError`.

    Example:
        >>> import errno
        >>> try:
        ...     with writing("run/fairness_history.csv", "the fairness history"):
        ...         raise OSError(errno.ENOSPC, "No space left on device")  # a write() names no file
        ... except OutputWriteError as err:
        ...     print(err)
        run/fairness_history.csv: could not write the fairness history (No space left on device); the
        checkpoints written before are unchanged
    """
    try:
        yield
    except RunWriteError:
        raise
    except OSError as err:
        failure = OutputWriteError(f"{path}: could not write {what} ({_reason(err)}); {KEPT}")
        failure.errno = err.errno
        raise failure from err


def write_failure(err: BaseException, folder: Path | str | None = None) -> str | None:
    """One line for a write failure anywhere in ``err``'s cause/context chain, ``None`` if there is none.

    Args:
        err: What stopped the run.
        folder: The run folder, named when the failure names no file (a ``write`` to a full disk).

    Example:
        >>> import errno
        >>> write_failure(RuntimeError("teardown")) is None
        True
        >>> write_failure(PermissionError(errno.EACCES, "Permission denied", "run/config.yaml"))
        'run/config.yaml: Permission denied; the checkpoints written before are unchanged'
        >>> print(write_failure(OSError(errno.ENOSPC, "No space left on device"), "logs/run/version_0"))
        a file under logs/run/version_0: could not write (No space left on device); the checkpoints
        written before are unchanged
    """
    for cause in exception_chain(err):
        if isinstance(cause, OSError) and cause.errno in WRITE_ERRNOS:
            # TensorBoard opens its event file by a bytes path; print it as text.
            where = (os.fsdecode(cause.filename) if cause.filename is not None
                     else "a file of the run" if folder is None else f"a file under {folder}")
            # A permission error may also come from a read: then "could not write" would be untrue.
            reason = _reason(cause) if cause.errno in _EITHER_WAY else f"could not write ({_reason(cause)})"
            return f"{where}: {reason}; {KEPT}"
    return None


def _reason(err: OSError) -> str:
    return err.strerror or str(err) or type(err).__name__


__all__ = ["KEPT", "WRITE_ERRNOS", "write_failure", "writing"]
