"""Download, verification and missing-file messages (datamodules/downloads.py)."""

from __future__ import annotations

import hashlib

import pytest
from lightning_fl.datamodules.downloads import (
    CorruptDataError,
    DataNotFoundError,
    DownloadError,
    FileSpec,
    download_file,
    download_first,
    missing_message,
    verify_file,
)

from lightning_fl.faults.validation import ConfigError


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "remote" / "blob.bin"
    path.parent.mkdir()
    payload = bytes(range(256)) * 40
    path.write_bytes(payload)
    return path, FileSpec("blob.bin", size=len(payload), md5=hashlib.md5(payload).hexdigest(),
                          sha256=hashlib.sha256(payload).hexdigest())


def test_download_file_url_verified_and_idempotent(source, tmp_path):
    path, spec = source
    dest = tmp_path / "local" / "blob.bin"
    assert download_file(path.as_uri(), dest, spec) == dest
    assert dest.read_bytes() == path.read_bytes()
    assert not dest.with_name("blob.bin.part").exists()
    path.unlink()  # a verified file is not downloaded again
    assert download_file(path.as_uri(), dest, spec) == dest


@pytest.mark.parametrize("field", ["md5", "sha256", "size"])
def test_download_checksum_mismatch_discards_the_file(source, tmp_path, field):
    path, spec = source
    wrong = {"md5": "0" * 32, "sha256": "0" * 64, "size": spec.size - 1}[field]
    bad = FileSpec(spec.name, **{**{"size": spec.size, "md5": spec.md5, "sha256": spec.sha256}, field: wrong})
    dest = tmp_path / "local" / "blob.bin"
    with pytest.raises(CorruptDataError, match=f"download of {path.as_uri()} discarded") as info:
        download_file(path.as_uri(), dest, bad)
    assert "\n" not in str(info.value)
    assert not dest.exists() and not dest.with_name("blob.bin.part").exists()


def test_download_replaces_a_corrupt_existing_file(source, tmp_path):
    path, spec = source
    dest = tmp_path / "blob.bin"
    dest.write_bytes(b"truncated")
    download_file(path.as_uri(), dest, spec)
    assert dest.read_bytes() == path.read_bytes()


def test_download_errors_are_one_line(tmp_path):
    missing = (tmp_path / "nowhere.bin").as_uri()
    with pytest.raises(DownloadError, match="could not download") as info:
        download_file(missing, tmp_path / "x.bin")
    assert "\n" not in str(info.value)
    with pytest.raises(DownloadError, match="nowhere.bin.*also.bin"):
        download_first([missing, (tmp_path / "also.bin").as_uri()], tmp_path / "x.bin")


def test_download_first_uses_the_next_mirror(source, tmp_path):
    path, spec = source
    dest = download_first([(tmp_path / "dead.bin").as_uri(), path.as_uri()], tmp_path / "out.bin", spec)
    assert dest.read_bytes() == path.read_bytes()


def test_verify_file(source, tmp_path):
    path, spec = source
    verify_file(path, spec)
    short = tmp_path / "short.bin"
    short.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(CorruptDataError, match=r"short.bin: 10239 bytes, expected 10240 \(truncated\)"):
        verify_file(short, spec)
    flipped = tmp_path / "flipped.bin"
    flipped.write_bytes(b"\xff" + path.read_bytes()[1:])
    with pytest.raises(CorruptDataError, match="flipped.bin: md5"):
        verify_file(flipped, spec)
    with pytest.raises(DataNotFoundError):
        verify_file(tmp_path / "absent.bin", spec)


def test_errors_are_config_errors_with_one_line_messages():
    message = missing_message("X (x.bin)", ["data/x", "/usr/share/x"], "make data")
    assert message == "X (x.bin) not found; looked in: data/x, /usr/share/x; fetch it with: make data"
    assert issubclass(DataNotFoundError, ConfigError) and issubclass(DataNotFoundError, FileNotFoundError)
    assert issubclass(CorruptDataError, ConfigError) and issubclass(DownloadError, ConfigError)
