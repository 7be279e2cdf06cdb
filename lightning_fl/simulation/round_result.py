"""What one communication round produced, and what a callback decides for the next one."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from lightning_fl.engines.cohort import CohortUpdate


@dataclass
class RoundTraffic:
    """Model transfers and compute of one round, per link level.

    Attributes:
        model_bytes: Size of one model-sized vector (floating-point state in fp32).
        transfers: Link level (``client`` or ``institution``) to the number of members served, i.e. of
            transfers each way.
        compute_seconds: Per institution (one entry in the flat loop), per local round: the estimated
            critical-path compute time, i.e. the slowest client's share of the measured training time.
        vectors: Link level to the model-sized vectors ``(down, up)`` in one transfer; ``(1, 1)`` (the
            model each way) where absent. SCAFFOLD sends its control variates too: ``(2, 2)``
            (docs/algorithms.md, Communication accounting).
    """

    model_bytes: int
    transfers: dict[str, int] = field(default_factory=dict)
    compute_seconds: list[list[float]] = field(default_factory=list)
    vectors: dict[str, tuple[int, int]] = field(default_factory=dict)

    def transfer_bytes(self, level: str) -> tuple[int, int]:
        """Bytes ``(down, up)`` of one transfer at ``level`` (one member's download and upload)."""
        down, up = self.vectors.get(level, (1, 1))
        return down * self.model_bytes, up * self.model_bytes


@dataclass(frozen=True)
class RoundResult:
    """The outcome of round ``t``, handed to every callback's ``on_round_end``.

    Attributes:
        round_idx: The round ``t``.
        update: The cohort's stacked results (the institutions' in hierarchy mode).
        global_w: ``w^{t+1}``, the new global model flattened (fp32, ``(d,)``).
        traffic: Transfers and compute of the round (for communication accounting).
        seconds: Wall-clock seconds of the round.
    """

    round_idx: int
    update: CohortUpdate
    global_w: Tensor
    traffic: RoundTraffic
    seconds: float


@dataclass(frozen=True)
class RoundPlan:
    """A callback's decision for the rounds to come, returned from a round hook.

    Attributes:
        institution_epochs: ``(M,)`` local epochs per institution from now on (hierarchy mode).
    """

    institution_epochs: Tensor | None = None
