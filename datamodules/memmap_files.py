"""Write a federation as memory-mappable arrays; convert a configuration's data (docs/datasets.md).

``python -m lightning_fl.datamodules.memmap_files --config C.yaml --out DIR`` builds the ``data:`` of ``C.yaml``
(its train and test splits: the validation split is drawn per client by
:class:`~lightning_fl.datamodules.MemmapDataModule` when it reads the folder) and writes it to ``DIR`` with
:func:`write_federation` (a lazy datamodule's clients a chunk at a time, never all in memory). With the same
``seed`` and ``val_fraction`` the folder is bitwise that configuration's federation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from numpy.lib.format import open_memmap

from lightning_fl.datamodules.memmap_format import FORMAT, HEADER, SPLITS_ON_DISK, VERSION, array_names
from lightning_fl.faults.validation import ConfigError, exception_chain
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import ClientData, FederatedData, offsets_from_sizes

# jsonargparse's report on a class path that does not import (the line after it says why).
_CLASS_PROBLEM = re.compile(r"Problem with given class_path '([^']+)':\s*\n?\s*(.+)")

__all__ = ["convert_config", "federation_header", "main", "refuse_existing", "unsplit_federation", "write_federation"]


def federation_header(data: ClientData, probe: FederatedData | None = None) -> dict[str, Any]:
    """``federation.json`` of ``data``: format, version, client and class counts, input shape, dtypes.

    Args:
        data: The federation.
        probe: Any staged part of it (its dtypes are read); ``None`` stages client 0.

    Example:
        >>> import torch
        >>> from lightning_fl.state.data import offsets_from_sizes
        >>> data = FederatedData(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), offsets_from_sizes([1, 2]),
        ...                      torch.zeros(2, 2), torch.zeros(2, dtype=torch.long), offsets_from_sizes([1, 1]), 4)
        >>> header = federation_header(data)
        >>> header["num_clients"], header["num_classes"], header["input_shape"], header["x_dtype"], header["y_dtype"]
        (2, 4, [2], 'float32', 'int64')
    """
    probe = data.stage([0], "test") if probe is None else probe
    x, y = _as_numpy(probe.x_train[:0], "x"), _as_numpy(probe.y_train[:0], "y")
    return {"format": FORMAT, "version": VERSION, "num_clients": data.num_clients, "num_classes": data.num_classes,
            "input_shape": list(data.input_shape), "x_dtype": str(x.dtype), "y_dtype": str(y.dtype)}


def _as_numpy(tensor: Any, name: str) -> np.ndarray:
    try:
        return tensor.detach().cpu().contiguous().numpy()
    except TypeError as err:  # e.g. bfloat16, which .npy cannot hold
        raise ConfigError(f"the federation's {name} has dtype {tensor.dtype}, which a .npy file cannot hold") from err


def refuse_existing(folder: Path, field: str = "") -> None:
    """One line (``ConfigError``) when ``folder`` exists and is not an empty folder: a federation is never written over."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"{field + ': ' if field else ''}{folder} already exists and is not an empty folder; nothing"
                          " was written (write a federation to a new folder)")


def _fill(staging: Path, data: ClientData, probe: FederatedData, chunk_clients: int) -> None:
    """Write every array of ``data`` into ``staging``, ``chunk_clients`` clients staged at a time."""
    arrays, written = {}, {}
    for split in SPLITS_ON_DISK:
        x_name, y_name, off_name = array_names(split)
        sizes = data.sizes(split).cpu()
        np.save(staging / off_name, offsets_from_sizes(sizes).numpy())
        rows = int(sizes.sum())
        x, y, _ = probe.split(split)
        arrays[split] = tuple(open_memmap(staging / name, mode="w+", dtype=_as_numpy(t[:0], name).dtype,
                                          shape=(rows, *t.shape[1:])) for name, t in ((x_name, x), (y_name, y)))
        written[split] = 0
    for lo in range(0, data.num_clients, chunk_clients):
        ids = torch.arange(lo, min(lo + chunk_clients, data.num_clients))
        staged = data.stage(ids, "test")
        for split in SPLITS_ON_DISK:
            x, y, offsets = staged.split(split)
            if not torch.equal(offsets.diff(), data.sizes(split)[ids].cpu()):
                raise ValueError(f"clients {lo}..{int(ids[-1])} staged other {split} sizes than sizes({split!r}) says")
            at, x_file, y_file = written[split], *arrays[split]
            x_file[at:at + len(x)], y_file[at:at + len(y)] = _as_numpy(x, "x"), _as_numpy(y, "y")
            written[split] += len(x)
    for split in SPLITS_ON_DISK:
        for array in arrays[split]:
            array.flush()


def write_federation(data: ClientData, folder: str | Path, chunk_clients: int = 1024) -> Path:
    """Write ``data``'s train and test splits to ``folder`` as ``.npy`` arrays, atomically, in bounded memory.

    ``data`` is staged ``chunk_clients`` clients at a time, so a lazy source (a million ``per_client``
    Synthetic clients, a lazy Dataset) is written without holding every sample. The files are written
    into a new temporary folder beside ``folder`` and renamed to ``folder`` when complete, so ``folder``
    either does not exist or holds a whole federation. An existing non-empty ``folder`` is refused and
    left as it was.

    Args:
        data: A federation without a validation split: a datamodule's ``build_data()``, or a lazy source
            built with ``val_fraction`` 0 (the reader draws the validation split per client).
        folder: Where to write; created with its parents, or an existing empty folder.
        chunk_clients: Clients staged (held in memory) at a time.

    Returns:
        ``folder``.

    Raises:
        ConfigError: When ``folder`` exists and is not an empty folder, or ``data`` has a validation split
            or a dtype ``.npy`` cannot hold (one line).
    """
    folder = Path(folder)
    refuse_existing(folder)
    if data.has_validation:
        raise ConfigError("the federation has a validation split; write it before the split (the datamodule's"
                          " build_data()): the reader draws validation per client from seed and val_fraction")
    probe = data.stage([0], "test")
    header = federation_header(data, probe)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent))
    try:
        _fill(staging, data, probe, chunk_clients)
        (staging / HEADER).write_text(json.dumps(header, indent=2) + "\n")
        for path in staging.iterdir():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would make the folder private to its writer
        # rename replaces an empty folder; a folder filled meanwhile makes it fail, and nothing is lost.
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def unsplit_federation(dm: FederatedDataModule) -> ClientData:
    """``dm``'s train and test splits without the validation split, as :func:`write_federation` takes them.

    An eager datamodule's :meth:`build_data`; a lazy one's source built with ``val_fraction`` 0, so the
    whole federation is never in memory.
    """
    if not getattr(dm, "lazy", False):
        return dm.build_data()
    kept = dm.val_fraction
    dm.val_fraction = 0.0
    try:
        return dm.build_source()
    finally:
        dm.val_fraction = kept


def _datamodule(config: Path) -> FederatedDataModule:
    """The datamodule of ``config``'s ``data:`` section, instantiated as the CLI instantiates it."""
    from jsonargparse import ArgumentParser

    try:
        section = (yaml.safe_load(config.read_text()) or {}).get("data")
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"--config: {config} cannot be read as YAML ({err})") from err
    if not isinstance(section, dict) or "class_path" not in section:
        raise ConfigError(f"--config: {config} has no data: {{class_path: ..., init_args: {{...}}}} section")
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(FederatedDataModule, "data", required=True)
    try:
        return parser.instantiate(parser.parse_object({"data": section})).data
    except Exception as err:  # jsonargparse wraps the datamodule's own one-line ConfigError in a long report
        own = next((e for e in exception_chain(err) if isinstance(e, ConfigError)), None)
        problem = _CLASS_PROBLEM.search(str(err))
        why = (str(own) if own is not None else f"class_path {problem.group(1)}: {problem.group(2).strip()}" if problem
               else str(err).strip().splitlines()[-1].strip())
        raise ConfigError(f"--config: {config}'s data section cannot be used: {why}") from err


def convert_config(config: str | Path, out: str | Path) -> tuple[Path, FederatedDataModule]:
    """Build ``config``'s data (train and test, no validation split) and write it to ``out``.

    Returns:
        ``(out, datamodule)``: the folder and the datamodule it was built with (its ``seed`` and
        ``val_fraction`` give the same federation when read back).
    """
    out = Path(out)
    refuse_existing(out, "--out")  # before building the data, which may take long
    dm = _datamodule(Path(config))
    return write_federation(unsplit_federation(dm), out), dm


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lightning_fl.datamodules.memmap_files",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path, help="a run configuration; its data: section is written")
    parser.add_argument("--out", required=True, type=Path, help="a new (or empty) folder to write the federation to")
    args = parser.parse_args(argv)
    try:
        out, dm = convert_config(args.config, args.out)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    clients = json.loads((out / HEADER).read_text())["num_clients"]
    print(f"wrote {clients} clients of {type(dm).__name__} to {out};"
          f" read it with data: {{class_path: lightning_fl.datamodules.MemmapDataModule, init_args: {{folder: {out},"
          f" seed: {dm.seed}, val_fraction: {dm.val_fraction}}}}}")


if __name__ == "__main__":
    main()
