"""The :class:`Partition` contract and the checks every partition shares (docs/algorithms.md, Data).

A partition is a small configuration object: its ``__init__`` checks the options that need no data
(one-line :class:`~lightning_fl.faults.validation.ConfigError` naming ``partition.<option>``), and
:meth:`Partition.validate` checks the rest against the labels and the number of clients, before
anything is drawn. Calling the object draws the split.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError

__all__ = ["FIELD", "Partition", "as_labels", "check_min_size", "check_num_clients", "choices", "not_a_partition"]

#: How configuration errors name a partition's options: the datamodule argument that holds it.
FIELD = "partition"


class Partition(ABC):
    """Seeded split of a pooled labelled dataset into clients.

    Subclasses take their options in ``__init__`` (validated there, so a YAML typo fails at once) and
    keep each one as the attribute of the same name (:meth:`options`, ``repr`` and ``==`` read them),
    extend :meth:`validate` with the checks that need the data, and implement :meth:`split`. Every
    random draw comes from the ``generator`` passed in, so the same generator state gives the same
    partition; each client's indices are sorted ascending and every index is used at most once,
    unless :attr:`shares_samples` says otherwise.

    Datamodules take one as ``partition``; from YAML::

        partition:
          class_path: lightning_fl.datamodules.partitions.Dirichlet
          init_args: {alpha: 0.1, min_size: 2}
    """

    def __call__(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> list[Tensor]:
        """Validate, then draw the partition.

        Args:
            labels: ``(n,)`` integer labels of the pooled dataset (label-blind partitions only use ``n``).
            num_clients: Number of clients, ``1 <= num_clients <= n``.
            generator: Source of randomness.

        Returns:
            One sorted ``LongTensor`` of sample indices per client.

        Raises:
            ConfigError: If :meth:`validate` rejects the request, or the draw itself cannot satisfy the
                options (one line naming the field).
        """
        self.validate(labels, num_clients)
        return self.split(labels, num_clients, generator)

    def validate(self, labels: Tensor, num_clients: int) -> None:
        """Check that the partition is feasible for ``labels`` and ``num_clients``, drawing nothing.

        Subclasses add their data-dependent checks after calling this.

        Raises:
            ConfigError: If ``labels`` is not a 1-D non-negative integer tensor or ``num_clients`` is
                outside ``[1, n]``.
        """
        check_num_clients(num_clients, len(as_labels(labels)))

    @abstractmethod
    def split(self, labels: Tensor, num_clients: int, generator: torch.Generator) -> list[Tensor]:
        """Draw the partition; :meth:`__call__` runs :meth:`validate` first.

        Args:
            labels: ``(n,)`` integer labels of the pooled dataset.
            num_clients: Number of clients.
            generator: Source of randomness.

        Returns:
            One sorted ``LongTensor`` of sample indices per client.
        """

    @property
    def shares_samples(self) -> bool:
        """Whether one sample may go to several clients (a per-client train/test split would then leak)."""
        return False

    @classmethod
    def option_names(cls) -> list[str]:
        """The names of the ``__init__`` arguments (the keys ``init_args`` may hold in YAML)."""
        return [p.name for p in inspect.signature(cls).parameters.values()
                if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]

    def options(self) -> dict[str, Any]:
        """The ``__init__`` arguments as configured (what ``init_args`` holds in YAML)."""
        return {name: getattr(self, name) for name in self.option_names()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.options().items())})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.options() == self.options()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # equal by value, and the options are mutable


def as_labels(labels: Tensor) -> np.ndarray:
    """``labels`` as an ``int64`` numpy array, after checking it is a 1-D tensor of integers ``>= 0``.

    Raises:
        ConfigError: For another dtype or shape, or a negative label.
    """
    labels = torch.as_tensor(labels)
    if labels.ndim != 1 or labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ConfigError(
            f"labels must be a 1-D integer tensor; got dtype {labels.dtype} and shape {tuple(labels.shape)}"
        )
    if labels.numel() and int(labels.min()) < 0:
        raise ConfigError(f"labels must be >= 0; got minimum {int(labels.min())}")
    return labels.detach().cpu().numpy().astype(np.int64)


def check_num_clients(num_clients: int, num_samples: int) -> None:
    """Raise ``ConfigError`` unless ``num_clients`` is an integer in ``[1, num_samples]``."""
    if not isinstance(num_clients, int) or isinstance(num_clients, bool) or not 1 <= num_clients <= num_samples:
        raise ConfigError(
            f"num_clients must be an integer between 1 and {num_samples} (the number of samples); got {num_clients!r}"
        )


def check_min_size(min_size: int, num_clients: int, num_samples: int) -> None:
    """Raise ``ConfigError`` unless every client can get ``min_size`` samples (``min_size`` checked in ``__init__``)."""
    if num_clients * min_size > num_samples:
        raise ConfigError(
            f"{FIELD}.min_size must be at most {num_samples // num_clients} ({num_samples} samples over"
            f" {num_clients} clients); got {min_size}"
        )


def choices() -> str:
    """The partition classes a configuration may name, for error messages: ``Dirichlet, IID, ...``.

    Every concrete subclass imported so far counts, so a user's own partition is listed too.
    """
    found, todo = set(), [Partition]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if not inspect.isabstract(sub):
                found.add(sub.__name__)
    return ", ".join(sorted(found))


def not_a_partition(given: object) -> str:
    """The one-line error for a ``partition`` that names no partition class (e.g. the old ``dirichlet``)."""
    return (f"{FIELD} must be one of {choices()} (lightning_fl.datamodules.partitions, as {{class_path: ...,"
            f" init_args: {{...}}}}); got {given!r}")
