"""Warnings that a run gives once per kind, however many rounds repeat the cause."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytorch_lightning.utilities import rank_zero_warn


@dataclass
class WarnOnce:
    """``warn(key, message)`` warns (on rank zero) the first time ``key`` is seen, and never again.

    Example:
        >>> warn = WarnOnce()
        >>> warn("ignores_p", "Median ignores FedAvg's weights")  # warns
        >>> warn("ignores_p", "Median ignores FedAvg's weights")  # silent
    """

    seen: set[str] = field(default_factory=set)  # the keys warned about (equal when the same were seen)

    def __call__(self, key: str, message: str) -> None:
        if key not in self.seen:
            self.seen.add(key)
            rank_zero_warn(message)


__all__ = ["WarnOnce"]
