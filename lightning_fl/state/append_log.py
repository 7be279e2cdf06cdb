"""Append-only files of per-client values (``model.client_state: disk``), checksummed record by record.

A value is a byte string appended to ``<directory>/<name>.<generation>.log``; the client's index entry
points at it (file, byte offset, length, CRC-32). Bytes once written never change, so a checkpoint
holds only the index and a later round cannot change what an earlier checkpoint sees. Old versions
are garbage; when they outweigh the live values, the live values are copied to a new file and files
referenced neither by the live index nor by the last saved snapshot are deleted. Resume therefore
works from the most recent checkpoint (``last.ckpt``).

The files are as safe as the checkpoint that indexes them:

- **Checksums.** Every record's CRC-32 is in the index (so in the checksummed checkpoint) and is
  verified whenever the record is read; loading a snapshot reads and verifies every record it refers
  to, so a missing, empty, truncated or altered file fails before round 1 with a
  :class:`~lightning_fl.faults.validation.ClientStateError` naming the file and the client.
- **Relocatable.** The index names files relative to the run folder (``client_state/<name>.0.log``);
  the loop says which run folder a loaded checkpoint's names are relative to
  (:func:`locate_client_state`: the checkpoint's own), so a moved or copied run folder resumes from
  its own files. Files of another folder (a checkpoint
  resumed into a new run directory) are copied in under fresh names first: a run never writes into,
  and its checkpoints never point into, a folder that is not its own.
- **Write failures** (a full disk, a file-size limit, a read-only folder) raise
  :class:`~lightning_fl.faults.validation.ClientStateWriteError`, one line naming the file and the client;
  records the last checkpoint indexes were written before it and stay as they were.
"""

from __future__ import annotations

import os
import re
import shutil
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.utilities import rank_zero_warn

from lightning_fl.faults.validation import ClientStateError, ClientStateWriteError

#: Key a loaded snapshot carries to say which run folder its file names are relative to (see
#: :func:`locate_client_state`); without it they are relative to the log's own ``root``.
DIRECTORY_KEY = "directory"


class AppendOnlyLog:
    """Values as byte strings appended to ``<directory>/<name>.<generation>.log`` (see the module docstring).

    Args:
        directory: Where the files live (created on first write); ``None`` for a reader that only
            loads a snapshot and reads it (a disk checkpoint resumed with ``client_state: memory``).
        name: File-name stem (the state's name, also used in messages).
        root: The run folder: a saved index names files relative to it (default: ``directory``).
    """

    def __init__(self, directory: Path | None, name: str, root: Path | None = None) -> None:
        self.directory, self.name = (None if directory is None else Path(directory)), name
        self.root = Path(root) if root is not None else self.directory
        self.index: dict[int, tuple[str, int, int, int | None]] = {}  # client -> (file, offset, length, crc32)
        self._generation = 0
        self._file: Path | None = None
        self._pinned: set[str] = set()

    def read(self, client_id: int) -> bytes | None:
        """The value of ``client_id`` (``None`` if it has none), verified against its checksum."""
        entry = self.index.get(client_id)
        if entry is None:
            return None
        file, offset, length, crc = entry
        # A positional read, not a memory map: mapped pages would stay in this process's resident memory,
        # which then grows with every row read (1,000 personal CNNs: gigabytes), not with the cohort.
        try:
            with open(file, "rb") as handle:
                data = os.pread(handle.fileno(), length, offset)
        except FileNotFoundError:
            data = b""  # named below: missing
        except OSError as err:
            raise ClientStateError(f"{file}: cannot read the client state file ({err.strerror or err};"
                                   f" it holds {self._whose(client_id)})") from err
        if len(data) < length:  # missing, empty or truncated: one line that says which
            _check_size(Path(file), offset + length, self._whose(client_id))
            raise ClientStateError(f"{file}: short read of {self._whose(client_id)} (bytes {offset}-{offset + length})")
        if crc is not None and zlib.crc32(data) != crc:
            raise ClientStateError(f"{file}: {self._whose(client_id)} (bytes {offset}-{offset + length}) does not"
                                   " match its checksum: the client state file is corrupt; resume from an intact copy"
                                   " of the run folder or start the run afresh")
        return data

    def append(self, client_id: int, data: bytes) -> None:
        """Write ``data`` as the new value of ``client_id`` (compacting the files when garbage dominates)."""
        self._write(client_id, data)
        live = sum(entry[2] for entry in self.index.values())
        if self._file.stat().st_size > 4 * max(live, 16 * len(data)):
            self._compact()

    def _write(self, client_id: int, data: bytes, crc: int | None = None) -> None:
        if self.directory is None:
            raise RuntimeError(f"{self.name}: a snapshot reader cannot write")
        try:
            if self._file is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._generation = max(self._generation, _next_generation(self.directory, self.name))
                self._file = self.directory / f"{self.name}.{self._generation}.log"
            with open(self._file, "ab") as handle:
                offset = handle.tell()
                handle.write(data)
        except OSError as err:
            where = self._file or self.directory
            raise ClientStateWriteError(f"{where}: could not write {self._whose(client_id)} ({err.strerror or err});"
                                        " the checkpoints written before are unchanged") from err
        self.index[client_id] = (str(self._file), offset, len(data), zlib.crc32(data) if crc is None else crc)

    def _compact(self) -> None:
        """Copy the live values to a new file; delete own files no index still needs."""
        self._generation += 1
        self._file = None
        for k in sorted(self.index):  # one value at a time: never every live value in memory at once
            crc = self.index[k][3]
            self._write(k, self.read(k), crc)
        keep = {entry[0] for entry in self.index.values()} | self._pinned
        for old in self.directory.glob(f"{self.name}.*.log"):
            if str(old) not in keep:
                old.unlink()

    def state_dict(self) -> dict[str, Any]:
        files = sorted({entry[0] for entry in self.index.values()})
        self._pinned = set(files)  # the snapshot a checkpoint now refers to stays on disk
        ids = sorted(self.index)
        # Relative to the run folder (every file of the index is in this log's folder: load_state_dict
        # copies others in), so that a moved or copied run folder finds its own files.
        return {"store": "disk", "files": [os.path.relpath(f, self.root) for f in files],
                "ids": torch.tensor(ids, dtype=torch.long),
                "file_index": torch.tensor([files.index(self.index[k][0]) for k in ids], dtype=torch.long),
                "offsets": torch.tensor([self.index[k][1] for k in ids], dtype=torch.long),
                "lengths": torch.tensor([self.index[k][2] for k in ids], dtype=torch.long),
                "crcs": torch.tensor([self.index[k][3] for k in ids], dtype=torch.long)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Point at a snapshot's records after checking that its files hold all of them, intact.

        Raises:
            ClientStateError: A file is missing, empty or shorter than the index needs, or a record
                does not match its checksum.
        """
        source = Path(state.get(DIRECTORY_KEY) or self.root or ".")
        # Relative to the run folder (absolute in checkpoints written before they were relative: kept).
        files = [source / f for f in state["files"]]
        crcs = state["crcs"].tolist() if "crcs" in state else [None] * len(state["ids"])
        if "crcs" not in state and len(state["ids"]):
            rank_zero_warn(f"{self.name}: the checkpoint's client state was written before its records were"
                           " checksummed; reading them unverified")
        self.index = {int(k): (str(files[int(f)]), int(o), int(n), crc) for k, f, o, n, crc in zip(
            state["ids"].tolist(), state["file_index"].tolist(), state["offsets"].tolist(),
            state["lengths"].tolist(), crcs)}
        ends: dict[str, tuple[int, int]] = {}
        for k, (file, offset, length, _) in self.index.items():
            ends[file] = max(ends.get(file, (0, k)), (offset + length, k))
        for file, (end, k) in sorted(ends.items()):
            _check_size(Path(file), end, self._whose(k))
        for k in sorted(self.index):
            data = self.read(k)  # every record verified once now, before round 1
            if self.index[k][3] is None:  # an older checkpoint's: checksummed from now on
                self.index[k] = (*self.index[k][:3], zlib.crc32(data))
        if self.directory is not None:
            self._adopt([f for f in sorted(ends) if Path(f).parent.resolve() != self.directory.resolve()])
        self._pinned = {entry[0] for entry in self.index.values()}
        self._file = None  # the next write starts a fresh generation (see _write)

    def _adopt(self, files: list[str]) -> None:
        """Copy ``files`` (another folder's) into this log's folder under fresh names; repoint the index."""
        if not files:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        renamed = {}
        for file in files:
            self._generation = max(self._generation, _next_generation(self.directory, self.name))
            target = self.directory / f"{self.name}.{self._generation}.log"
            try:
                shutil.copyfile(file, target)
            except OSError as err:
                raise ClientStateWriteError(f"{target}: could not copy the checkpoint's client state file {file}"
                                            f" into the run folder ({err.strerror or err})") from err
            renamed[file] = str(target)
        self.index = {k: (renamed[f], o, n, c) for k, (f, o, n, c) in self.index.items()}

    def _whose(self, client_id: int) -> str:
        return f"client {client_id}'s {self.name}"


def _next_generation(directory: Path, name: str) -> int:
    """One past the highest generation of ``name`` in ``directory``: a new file never reuses a name."""
    pattern = re.compile(rf"{re.escape(name)}\.(\d+)\.log")
    found = [int(m.group(1)) for p in directory.glob(f"{name}.*.log") if (m := pattern.fullmatch(p.name))]
    return max(found, default=-1) + 1


def _check_size(file: Path, end: int, whose: str) -> None:
    """One-line :class:`ClientStateError` unless ``file`` exists and holds at least ``end`` bytes."""
    try:
        size = file.stat().st_size
    except FileNotFoundError:
        raise ClientStateError(f"{file}: client state file missing (it holds {whose}); resume from a complete copy"
                               " of the run folder and its latest checkpoint") from None
    if size == 0:
        raise ClientStateError(f"{file}: empty client state file (0 bytes); the checkpoint needs {end} bytes of it"
                               f" ({whose})")
    if size < end:
        raise ClientStateError(f"{file}: truncated client state file ({size} bytes); the checkpoint needs {end}"
                               f" bytes of it ({whose})")


def locate_client_state(checkpoint: Any, directory: Path) -> None:
    """Tell every disk snapshot in ``checkpoint`` (at any depth) that its file names are relative to
    ``directory`` (the run folder the checkpoint belongs to)."""
    if isinstance(checkpoint, dict):
        if checkpoint.get("store") == "disk" and "files" in checkpoint:
            checkpoint[DIRECTORY_KEY] = str(directory)
            return
        for value in checkpoint.values():
            locate_client_state(value, directory)
    elif isinstance(checkpoint, (list, tuple)):
        for value in checkpoint:
            locate_client_state(value, directory)


__all__ = ["AppendOnlyLog", "locate_client_state"]
