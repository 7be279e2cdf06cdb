"""Simulated write failures under one folder: read-only (``EACCES``) or full (``ENOSPC``), in-process.

``chmod`` does not stop root, and CI may run the tests as root; a full disk needs a small filesystem.
:func:`deny_writes` makes Python's own file functions fail under a folder the way the operating
system would, so the code path is the same whoever runs the tests.
"""

from __future__ import annotations

import builtins
import io
import os
from pathlib import Path
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class _FullFile:
    """A file open for writing whose writes fail (the disk filled up after ``open``)."""

    def __init__(self, file: Any, error: int) -> None:
        self._file, self._error = file, error

    def write(self, data: Any) -> int:
        raise OSError(self._error, os.strerror(self._error))  # as the OS reports it: no file name

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __enter__(self) -> _FullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def deny_writes(monkeypatch: Any, folder: Path, error: int, at: str = "open", after: int = 0) -> list[str]:
    """Make writing under ``folder`` fail with OSError ``error``; returns the paths it refused.

    Args:
        monkeypatch: pytest's fixture (undone at the end of the test).
        folder: Everything at or under it (existing or not) is affected.
        error: ``errno.EACCES`` (a read-only folder), ``errno.ENOSPC`` (a full disk), ...
        at: ``"open"``: creating, opening for writing, renaming into, removing or making folders
            fails (a read-only folder); ``"write"``: ``open`` succeeds, its writes fail (a full disk).
        after: Let this many opens for writing under ``folder`` succeed first.
    """
    folder_path = os.path.realpath(folder)
    refused: list[str] = []
    opens = [0]

    def inside(path: Any) -> bool:
        if isinstance(path, int):  # a file descriptor
            return False
        real = os.path.realpath(os.fsdecode(path))
        return real == folder_path or real.startswith(folder_path + os.sep)

    def due(path: Any) -> bool:
        if not inside(path):
            return False
        opens[0] += 1
        return opens[0] > after

    def fail(path: Any) -> None:
        refused.append(os.fsdecode(path))
        # As the OS reports it: PermissionError for EACCES, and a bytes path stays bytes (TensorBoard's are).
        raise OSError(error, os.strerror(error), os.fspath(path))

    real_open, real_os_open, real_mkdir = builtins.open, os.open, os.mkdir
    real_replace, real_rename, real_unlink = os.replace, os.rename, os.unlink

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+") and due(file):
            if at == "open":
                fail(file)
            refused.append(os.fsdecode(file))
            return _FullFile(real_open(file, mode, *args, **kwargs), error)
        return real_open(file, mode, *args, **kwargs)

    def fake_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if at == "open" and flags & _WRITE_FLAGS and due(path):
            fail(path)
        return real_os_open(path, flags, *args, **kwargs)

    def fake_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if at == "open" and inside(path) and not os.path.exists(path):
            fail(path)
        real_mkdir(path, *args, **kwargs)

    def moving(real: Any) -> Any:
        def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if at == "open" and (inside(dst) or inside(src)):
                fail(dst)
            real(src, dst, *args, **kwargs)
        return move

    def fake_unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if at == "open" and inside(path):
            fail(path)
        real_unlink(path, *args, **kwargs)

    for module in (builtins, io):
        monkeypatch.setattr(module, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)
    monkeypatch.setattr(os, "mkdir", fake_mkdir)
    monkeypatch.setattr(os, "replace", moving(real_replace))
    monkeypatch.setattr(os, "rename", moving(real_rename))
    monkeypatch.setattr(os, "unlink", fake_unlink)
    monkeypatch.setattr(os, "remove", fake_unlink)
    return refused
