"""Federations stored in LEAF's JSON format (LEAF, FedProx and q-FFL data: FEMNIST, Shakespeare, ...).

A LEAF data directory has ``train/*.json`` and usually ``test/*.json``; every file is an object::

    {"users": ["f0000_14", ...], "num_samples": [134, ...],
     "user_data": {"f0000_14": {"x": [[...], ...], "y": [3, ...]}, ...}}

(an optional ``"hierarchies"`` list is ignored). Each user is one client, loaded as it is: the natural
partition of the data set (docs/algorithms.md, Data). Inputs may be numbers (FEMNIST: 784 floats per sample,
reshaped with ``input_shape``) or strings (Shakespeare: 80-character windows, encoded with LEAF's
80-letter alphabet :data:`LEAF_LETTERS`; the target is the next character). Sent140's raw tweets need
a word embedding (GloVe) that is not bundled and are rejected with a one-line message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.downloads import CorruptDataError, DataNotFoundError, missing_message
from lightning_fl.datamodules.split import split_train_test
from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import FederatedData, offsets_from_sizes
from lightning_fl.state.seeding import generator_for

__all__ = ["LEAF_LETTERS", "LeafDataModule", "encode_text", "read_leaf_dir", "read_leaf_json"]

#: LEAF's character vocabulary for Shakespeare (``ALL_LETTERS`` of LEAF's ``language_utils.py``); 80 symbols.
LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
_SPACE = LEAF_LETTERS.index(" ")
_LOOKUP = np.full(256, _SPACE, dtype=np.uint8)
_LOOKUP[np.frombuffer(LEAF_LETTERS.encode(), dtype=np.uint8)] = np.arange(len(LEAF_LETTERS), dtype=np.uint8)


def encode_text(text: str) -> np.ndarray:
    """Indices of ``text``'s characters in :data:`LEAF_LETTERS` as ``uint8``; unknown characters map to space.

    (LEAF's ``str.find`` gives ``-1`` for them, which its TensorFlow models would reject.)

    Example:
        >>> encode_text("Ab\\n_").tolist()
        [25, 54, 0, 1]
    """
    return _LOOKUP[np.frombuffer(text.encode("ascii", errors="replace"), dtype=np.uint8)]


def read_leaf_json(path: str | Path) -> dict[str, dict[str, list]]:
    """Read one LEAF JSON file into ``{user: {"x": [...], "y": [...]}}`` (order of ``users``), validated.

    Raises:
        CorruptDataError: Invalid JSON (e.g. a truncated file), missing keys, or a user whose sample
            count disagrees with ``num_samples``; the message names the file (and user).
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as stream:
            blob = json.load(stream)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptDataError(f"{path}: not valid JSON ({err}); truncated or damaged file") from err
    if not isinstance(blob, dict) or any(key not in blob for key in ("users", "num_samples", "user_data")):
        found = sorted(blob) if isinstance(blob, dict) else type(blob).__name__
        raise CorruptDataError(f"{path}: a LEAF file needs keys users, num_samples, user_data; found {found}")
    users, counts, data = blob["users"], blob["num_samples"], blob["user_data"]
    if not isinstance(data, dict):
        raise CorruptDataError(f"{path}: user_data must be an object mapping each user to its x and y; got a"
                               f" {type(data).__name__}")
    if len(users) != len(counts):
        raise CorruptDataError(f"{path}: {len(users)} users but {len(counts)} num_samples entries")
    out: dict[str, dict[str, list]] = {}
    for user, count in zip(users, counts):
        record = data.get(user)
        if not isinstance(record, dict) or "x" not in record or "y" not in record:
            raise CorruptDataError(f"{path}: user {user!r} has no x/y in user_data")
        if not len(record["x"]) == len(record["y"]) == count:
            raise CorruptDataError(f"{path}: user {user!r} has {len(record['x'])} x and {len(record['y'])} y,"
                                   f" num_samples says {count}")
        out[str(user)] = record
    return out


def read_leaf_dir(folder: str | Path) -> dict[str, dict[str, list]]:
    """Merge every ``*.json`` of ``folder`` (sorted by name) with :func:`read_leaf_json`.

    Raises:
        DataNotFoundError: If ``folder`` has no JSON file.
        CorruptDataError: For a damaged file, or a user present in two files.
    """
    folder = Path(folder)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise DataNotFoundError(missing_message(f"LEAF JSON files (*.json) in {folder}", [folder],
                                                "LEAF's preprocess.sh (see docs/datasets.md)"))
    merged: dict[str, dict[str, list]] = {}
    origin: dict[str, Path] = {}
    for path in files:
        for user, record in read_leaf_json(path).items():
            if user in merged:
                raise CorruptDataError(f"{path}: user {user!r} also appears in {origin[user]}")
            merged[user], origin[user] = record, path
    return merged


def _to_inputs(samples: list, what: str) -> Tensor:
    if not samples:
        return torch.zeros(0)
    first = samples[0]
    if isinstance(first, str):
        lengths = {len(s) for s in samples}
        if len(lengths) != 1:
            raise CorruptDataError(f"{what}: text inputs of different lengths {sorted(lengths)[:5]}")
        return torch.from_numpy(np.stack([encode_text(s) for s in samples]))
    if isinstance(first, (list, tuple)) and any(isinstance(v, str) for v in first):
        raise ConfigError(f"{what}: inputs are lists of strings (e.g. Sent140's raw tweets), which need a word"
                          " embedding that is not bundled; convert them to numbers first")
    try:
        return torch.as_tensor(np.asarray(samples, dtype=np.float32))
    except (ValueError, TypeError):
        lengths = sorted({len(s) for s in samples if isinstance(s, (list, tuple))})
        raise CorruptDataError(f"{what}: inputs must be a rectangular array of numbers (every sample the same"
                               f" number of features); got samples of {lengths[:5] or 'other'} features") from None


def _to_labels(labels: list, what: str) -> Tensor:
    if labels and isinstance(labels[0], str):
        if any(len(s) != 1 for s in labels):
            raise CorruptDataError(f"{what}: string labels must be single characters")
        return torch.from_numpy(encode_text("".join(labels)).astype(np.int64))
    values = np.asarray(labels)
    if values.dtype.kind == "f":  # np.int64 would truncate 0.7 to class 0 without a word
        whole = np.isfinite(values) & (values == np.round(values))
        if not whole.all():
            bad = int(np.flatnonzero(~whole)[0])
            raise CorruptDataError(f"{what}: labels must be whole numbers (class indices); sample {bad} has {values[bad].item()!r}")
    try:
        return torch.as_tensor(np.asarray(labels, dtype=np.int64))
    except (ValueError, TypeError) as err:
        raise CorruptDataError(f"{what}: labels are not integers ({err})") from err


def _check_shape(x: Tensor, x_test: Tensor, first: Tensor, first_user: str, what: str) -> None:
    """Every user's train and test samples have the first user's per-sample shape (features)."""
    for split, tensor in (("train", x), ("test", x_test)):
        if len(tensor) and tuple(tensor.shape[1:]) != tuple(first.shape[1:]):
            raise CorruptDataError(f"{what}: {split} samples have shape {tuple(tensor.shape[1:])}, but the train"
                                   f" samples of user {first_user!r} have {tuple(first.shape[1:])}; every sample"
                                   " needs the same number of features")


class LeafDataModule(FederatedDataModule):
    """A LEAF-format data set, one client per user, as the JSON files partition it (docs/algorithms.md, Data).

    Users come in the order of the train files (sorted by file name, then each file's ``users``).
    With a ``test`` folder, a user's test samples are the ones listed there (users without test
    samples get an empty test split; test-only users are ignored). Without one, every user's samples
    are split ``1 - test_fraction`` / ``test_fraction`` at random (seeded).

    Args:
        data_dir: The LEAF ``data`` directory holding ``train/`` (and ``test/``).
        train_dir: Train sub-directory name.
        test_dir: Test sub-directory name; ``null`` (or a missing/empty directory) splits the train
            files per user instead.
        input_shape: Reshape numeric inputs to this per-sample shape (FEMNIST: ``[1, 28, 28]``).
        num_classes: Number of classes; default: 80 for text targets (Shakespeare), else ``max(y) + 1``.
        min_samples: Drop users with fewer train samples.
        max_clients: Keep a seeded random subset of this many users (after ``min_samples``).
        seed: Seed of the user subset and of the per-user split.
        test_fraction: Per-user test fraction when there is no test folder.
        val_fraction: Fraction of each client's training samples moved to its validation split, in ``[0, 1)``; ``0``: none (the papers' exact training sets).

    Raises:
        DataNotFoundError: At setup, when ``<data_dir>/<train_dir>`` has no JSON file.
        CorruptDataError: At setup, for invalid JSON or inconsistent counts (the message names the file).
        ConfigError: For out-of-range options, unsupported inputs, or no user left after filtering.

    Example (YAML)::

        data:
          class_path: lightning_fl.datamodules.LeafDataModule
          init_args: {data_dir: data/femnist/data, input_shape: [1, 28, 28], num_classes: 62}
    """

    def __init__(
        self,
        data_dir: str = "data/leaf",
        train_dir: str = "train",
        test_dir: str | None = "test",
        input_shape: list[int] | None = None,
        num_classes: int | None = None,
        min_samples: int = 1,
        max_clients: int | None = None,
        seed: int = 0,
        test_fraction: float = 0.2,
        val_fraction: float = 0.1,
    ) -> None:
        super().__init__(seed=seed, test_fraction=test_fraction, val_fraction=val_fraction)
        check_positive("min_samples", min_samples, integer=True)
        if max_clients is not None:
            check_positive("max_clients", max_clients, integer=True)
        if num_classes is not None:
            check_positive("num_classes", num_classes, integer=True)
        if input_shape is not None:
            for size in input_shape:
                check_positive("input_shape", size, integer=True)
        self.data_dir = data_dir
        self.train_dir = train_dir
        self.test_dir = test_dir
        self.leaf_input_shape = tuple(input_shape) if input_shape is not None else None
        self._num_classes = num_classes
        self.min_samples = min_samples
        self.max_clients = max_clients
        self.users: list[str] = []

    @override
    def build_data(self) -> FederatedData:
        root = Path(self.data_dir)
        train = read_leaf_dir(root / self.train_dir)
        test_folder = root / self.test_dir if self.test_dir else None
        has_test = test_folder is not None and test_folder.is_dir() and any(test_folder.glob("*.json"))
        test = read_leaf_dir(test_folder) if has_test else {}
        users = [u for u, rec in train.items() if len(rec["y"]) >= self.min_samples]
        if not users:
            raise ConfigError(f"no LEAF user in {root / self.train_dir} has >= {self.min_samples} samples"
                              " (min_samples)")
        if self.max_clients is not None and self.max_clients < len(users):
            pick = torch.randperm(len(users), generator=generator_for(self.seed, "leaf_users"))[: self.max_clients]
            users = [users[i] for i in sorted(pick.tolist())]
        self.users = users
        xs_tr, ys_tr, xs_te, ys_te = [], [], [], []
        split_gen = generator_for(self.seed, "train_test_split")
        for user in users:
            x, y = self._convert(train[user], f"{root / self.train_dir} user {user!r}")
            if has_test:
                record = test.get(user, {"x": [], "y": []})
                x_te, y_te = self._convert(record, f"{test_folder} user {user!r}", like=x)
            else:
                tr, te = split_train_test(torch.arange(len(y)), self.test_fraction, split_gen)
                x, y, x_te, y_te = x[tr], y[tr], x[te], y[te]
            _check_shape(x, x_te, xs_tr[0] if xs_tr else x, users[0], f"{root} user {user!r}")
            xs_tr.append(x)
            ys_tr.append(y)
            xs_te.append(x_te)
            ys_te.append(y_te)
        y_train, y_test = torch.cat(ys_tr), torch.cat(ys_te)
        text = isinstance(train[users[0]]["y"][0], str) if train[users[0]]["y"] else False
        num_classes = self._num_classes or (len(LEAF_LETTERS) if text else int(torch.cat([y_train, y_test]).max()) + 1)
        for y, kind in ((y_train, "train"), (y_test, "test")):
            if len(y) and (int(y.min()) < 0 or int(y.max()) >= num_classes):
                raise ConfigError(f"LEAF {kind} labels must lie in [0, {num_classes}) (num_classes); got"
                                  f" {int(y.min())}..{int(y.max())}")
        return FederatedData(
            x_train=torch.cat(xs_tr), y_train=y_train, train_offsets=offsets_from_sizes([len(y) for y in ys_tr]),
            x_test=torch.cat(xs_te), y_test=y_test, test_offsets=offsets_from_sizes([len(y) for y in ys_te]),
            num_classes=num_classes,
        )

    def _convert(self, record: dict[str, Any], what: str, like: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x = _to_inputs(record["x"], what)
        y = _to_labels(record["y"], what)
        if self.leaf_input_shape is not None and x.numel():
            try:
                x = x.reshape(len(x), *self.leaf_input_shape)
            except RuntimeError as err:
                raise ConfigError(f"input_shape {list(self.leaf_input_shape)} does not fit {what}'s samples of"
                                  f" {tuple(x.shape[1:])}") from err
        if like is not None and not x.numel():  # a user without test samples
            x = like.new_zeros((0, *like.shape[1:]))
        return x, y
