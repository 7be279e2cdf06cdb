"""Write a federation as memory-mappable arrays, and convert a configuration's data (docs/datasets.md, Memory-mapped federations).

``python -m lightning_fl.datamodules.memmap_files --config C.yaml --out DIR`` builds the ``data:`` of ``C.yaml``
(its train and test splits, before the validation split, which
:class:`~lightning_fl.datamodules.MemmapDataModule` draws per client when it reads the folder) and writes it
to ``DIR`` with :func:`write_federation`. With the same ``seed`` and ``val_fraction`` the folder is bitwise
that configuration's federation.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lightning_fl.datamodules.memmap_format import FORMAT, HEADER, SPLITS_ON_DISK, VERSION, array_names
from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import FederatedData

__all__ = ["convert_config", "federation_header", "main", "refuse_existing", "write_federation"]


def federation_header(data: FederatedData) -> dict[str, Any]:
    """``federation.json`` of ``data``: format, version, client and class counts, input shape, dtypes.

    Example:
        >>> import torch
        >>> from lightning_fl.state.data import offsets_from_sizes
        >>> data = FederatedData(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), offsets_from_sizes([1, 2]),
        ...                      torch.zeros(2, 2), torch.zeros(2, dtype=torch.long), offsets_from_sizes([1, 1]), 4)
        >>> header = federation_header(data)
        >>> header["num_clients"], header["num_classes"], header["input_shape"], header["x_dtype"], header["y_dtype"]
        (2, 4, [2], 'float32', 'int64')
    """
    x, y = _as_numpy(data.x_train[:0], "x"), _as_numpy(data.y_train[:0], "y")
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
        raise ConfigError(f"{field + ': ' if field else ''}{folder} already exists and is not an empty folder; nothing was written (write a federation"
                          " to a new folder)")


def write_federation(data: FederatedData, folder: str | Path) -> Path:
    """Write ``data``'s train and test splits to ``folder`` as ``.npy`` arrays, atomically.

    The files are written into a new temporary folder beside ``folder`` and renamed to ``folder`` when
    complete, so ``folder`` either does not exist or holds a whole federation. An existing non-empty
    ``folder`` is refused and left as it was.

    Args:
        data: An eager federation without a validation split (``build_data()``'s).
        folder: Where to write; created with its parents, or an existing empty folder.

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
    header = federation_header(data)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent))
    try:
        for split in SPLITS_ON_DISK:
            x, y, offsets = data.split(split)
            for name, tensor in zip(array_names(split), (x, y, offsets)):
                with open(staging / name, "wb") as handle:
                    np.save(handle, _as_numpy(tensor, name))
                    handle.flush()
                    os.fsync(handle.fileno())
        (staging / HEADER).write_text(json.dumps(header, indent=2) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would make the folder private to its writer
        # rename replaces an empty folder; a folder filled meanwhile makes it fail, and nothing is lost.
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


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
        parsed = parser.parse_object({"data": section})
    except Exception as err:  # jsonargparse reports over many lines: keep its first
        raise ConfigError(f"--config: {config}'s data section cannot be used: {str(err).strip().splitlines()[0]}"
                          ) from err
    return parser.instantiate(parsed).data


def convert_config(config: str | Path, out: str | Path) -> tuple[Path, FederatedDataModule]:
    """Build ``config``'s data (train and test, no validation split) and write it to ``out``.

    Returns:
        ``(out, datamodule)``: the folder and the datamodule it was built with (its ``seed`` and
        ``val_fraction`` give the same federation when read back).
    """
    out = Path(out)
    refuse_existing(out, "--out")  # before building the data, which may take long
    dm = _datamodule(Path(config))
    return write_federation(dm.build_data(), out), dm


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
