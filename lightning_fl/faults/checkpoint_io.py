"""Checkpoints that are never torn and never silently corrupt.

Lightning's own writer serializes a checkpoint and lets fsspec copy it from a temporary file in
``/tmp``; when the log folder is on another filesystem the copy happens in place, so a kill during
it leaves a 0-byte ``last.ckpt`` and a full disk a truncated one. Its reader loads a file with
flipped bytes in a tensor without complaint. :class:`AtomicCheckpointIO` replaces both:

- **Atomic save.** The checkpoint is written next to its destination under a temporary name
  (``.last.ckpt.<random>.tmp``), flushed and fsynced, then renamed over the destination with
  ``os.replace``. Until the rename the previous file is untouched; a failed write removes its
  temporary file and raises :class:`~lightning_fl.faults.validation.CheckpointWriteError`. A temporary
  file left by a killed process is removed at the next successful save of the same file.
- **Checksum.** The saved dictionary carries the sha256 of its contents
  (:func:`~lightning_fl.faults.state_digest.state_digest`) under :data:`CHECKSUM_KEY`; loading recomputes
  it. A missing, empty, truncated, corrupt or foreign file raises
  :class:`~lightning_fl.faults.validation.CheckpointError` with one line naming the file.
- **Older checkpoints** (written before checksums existed) load with a warning, unverified.

``FederatedLoop.setup`` installs it on the run's strategy unless the run configured its own
``CheckpointIO`` plugin, so it covers the CLI and ``Trainer(...).fit(FederatedLoop(...), ...)``
alike; ``setup`` runs before Lightning loads ``ckpt_path``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.utilities.cloud_io import _is_local_file_protocol
from pytorch_lightning.plugins.io import TorchCheckpointIO
from pytorch_lightning.strategies import Strategy
from pytorch_lightning.utilities import rank_zero_warn
from typing_extensions import override

from lightning_fl.faults.state_digest import state_digest
from lightning_fl.faults.validation import CheckpointError, CheckpointWriteError, exception_chain

#: Key of the checksum entry in a saved checkpoint: ``{"sha256": <hex digest of everything else>}``.
CHECKSUM_KEY = "lightning_fl_checksum"
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive


def _default_file_mode() -> int:
    # mkstemp creates files readable by their owner only; give checkpoints the usual umask mode.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _default_file_mode()


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with atomic, checksummed saves and verified loads (see the module docstring).

    Attributes:
        last_saved: The file of the latest successful save, ``None`` before one.
        last_saved_rounds: Rounds completed in that checkpoint (``None`` if it does not say).
    """

    def __init__(self) -> None:
        super().__init__()
        self.last_saved: Path | None = None
        self.last_saved_rounds: int | None = None

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        payload = {**checkpoint, CHECKSUM_KEY: {"sha256": state_digest(checkpoint)}}
        if storage_options is not None or not _is_local_file_protocol(path):
            # Remote stores replace whole objects on upload; Lightning's writer handles them.
            super().save_checkpoint(payload, path, storage_options)
            return
        target = Path(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            failure = CheckpointWriteError(f"{target.parent}: could not create the checkpoint folder"
                                           f" ({err.strerror or err}); no checkpoint was written there")
            failure.errno = err.errno
            raise failure from err
        _write_atomically(target, lambda file: self._serialize(payload, file))
        self.last_saved = target
        federated = checkpoint.get("federated")
        rounds = federated.get("rounds_completed") if isinstance(federated, dict) else None
        self.last_saved_rounds = rounds if isinstance(rounds, int) else None

    def _serialize(self, checkpoint: dict[str, Any], file: Any) -> None:
        """Write ``checkpoint`` into the open ``file`` (tests replace this to simulate a full disk)."""
        torch.save(checkpoint, file)

    @override
    def load_checkpoint(self, path: Any, map_location: Callable | None = lambda storage, loc: storage,
                        weights_only: bool | None = None) -> dict[str, Any]:
        if _is_local_file_protocol(path):
            _check_file(Path(path))
        try:
            checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        except Exception as err:  # torch.load reports damage as RuntimeError, UnpicklingError, EOFError, ...
            if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)) or "can't allocate memory" in str(err):
                raise  # too big for the memory there is, not damaged: explained as out of memory
            raise CheckpointError(_unreadable(path, err)) from err
        return verify_checkpoint(checkpoint, path)


def verify_checkpoint(checkpoint: Any, path: Any) -> dict[str, Any]:
    """Check a loaded checkpoint against its stored checksum and remove the checksum entry.

    Raises:
        CheckpointError: ``checkpoint`` is not a Lightning checkpoint, or its contents do not match
            the checksum saved with it.
    """
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        what = f"a {type(checkpoint).__name__}" + (" without 'state_dict'" if isinstance(checkpoint, dict) else "")
        raise CheckpointError(f"{path}: not a Lightning checkpoint (the file holds {what})")
    stored = checkpoint.pop(CHECKSUM_KEY, None)
    if stored is None:
        rank_zero_warn(f"{path} has no checksum (it was written before lightning_fl checksummed checkpoints);"
                       " loading it unverified")
        return checkpoint
    if not isinstance(stored, dict) or stored.get("sha256") != state_digest(checkpoint):
        raise CheckpointError(f"{path}: checksum mismatch (the file is corrupt); resume from another copy or"
                              " start the run afresh")
    return checkpoint


def install_checkpoint_io(strategy: Strategy) -> None:
    """Give ``strategy`` an :class:`AtomicCheckpointIO` unless the run configured its own CheckpointIO.

    Only Lightning's default (a plain ``TorchCheckpointIO``) is replaced: a plugin the user chose
    (``trainer.plugins``) is theirs to keep.
    """
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


def _write_atomically(target: Path, write: Callable[[Any], None]) -> None:
    """``write(file)`` into a temporary file beside ``target``, fsync it, and rename it over ``target``."""
    temporary = None
    try:
        # Inside the try: a read-only folder refuses the temporary file itself (PermissionError).
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(handle, "wb") as file:
            os.fchmod(file.fileno(), _FILE_MODE)
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException as err:
        with contextlib.suppress(OSError, TypeError):  # TypeError: no temporary file was made
            os.unlink(temporary)
        cause = _os_error(err)
        if cause is not None:
            kept = "the previous checkpoint there is unchanged" if target.exists() else "no checkpoint was written"
            reason = cause.strerror or cause
            failure = CheckpointWriteError(f"{target}: could not write the checkpoint ({reason}); {kept}")
            failure.errno = cause.errno
            raise failure from err
        raise
    _fsync_directory(target.parent)  # so that the rename itself survives a power cut
    for stale in target.parent.glob(f".{target.name}.*.tmp"):  # left by a process killed mid-write
        with contextlib.suppress(OSError):
            stale.unlink()


def _os_error(err: BaseException) -> OSError | None:
    """The OSError behind ``err``: torch's zip writer reports a failed write (a full disk) as a
    ``RuntimeError`` ("unexpected pos ...") raised while handling the ``OSError``."""
    return next((cause for cause in exception_chain(err) if isinstance(cause, OSError)), None)


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened or synced
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _check_file(path: Path) -> None:
    if not path.exists():
        raise CheckpointError(f"{path}: no such file")
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty file (0 bytes); it was never completely written")


def _unreadable(path: Any, err: Exception) -> str:
    try:
        with open(path, "rb") as file:
            is_zip = file.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
        size = f"{os.path.getsize(path):,} bytes"
    except OSError:
        return f"{path}: cannot be read ({_reason(err)})"
    if is_zip:
        return f"{path}: truncated or damaged checkpoint ({size}; torch.load: {_reason(err)})"
    return f"{path}: not a checkpoint written by torch.save ({size}; torch.load: {_reason(err)})"


def _reason(err: Exception) -> str:
    """The informative part of a ``torch.load`` error, on one short line."""
    text = str(err)
    # A damaged pickle fails in the weights-only unpickler, whose message is mostly advice on trusting
    # the file; the reason follows "WeightsUnpickler error:".
    match = re.search(r"WeightsUnpickler error:\s*(.+)", text)
    if match:
        text = match.group(1)
    text = " ".join(text.split())
    text = text.split(". ", 1)[0].rstrip(".")  # miniz and friends append paragraphs of advice
    return f"{type(err).__name__}: {text}"[:160] if text else type(err).__name__


def last_checkpoint(trainer: Any) -> tuple[Path, int | None] | None:
    """The newest checkpoint of ``trainer``'s run and its rounds: the last one this process saved, else
    the one it resumed from; ``None`` if there is none on disk (for the one line a stopped run prints)."""
    io = getattr(trainer.strategy, "checkpoint_io", None)
    saved, rounds = getattr(io, "last_saved", None), getattr(io, "last_saved_rounds", None)
    if saved is None and trainer.ckpt_path:
        saved, rounds = Path(trainer.ckpt_path), getattr(trainer.lightning_module, "rounds_completed", None)
    return (Path(saved), rounds) if saved is not None and Path(saved).is_file() else None


__all__ = ["CHECKSUM_KEY", "AtomicCheckpointIO", "install_checkpoint_io", "last_checkpoint", "verify_checkpoint"]
