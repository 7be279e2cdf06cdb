"""What every stage of the aggregation pipeline is and sees (docs/architecture.md, Aggregation pipeline).

A stage is a small class over pure functions of :mod:`lightning_fl.functional`, with its state
declared up front (:class:`~lightning_fl.state.declared_state.DeclaredState`), so checkpoints save and
restore it with no code in the stage. The pipeline (:mod:`lightning_fl.aggregation.pipeline`) calls
the stages in a fixed order on the stacked update rows of the cohort, identically on every process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.state.declared_state import DeclaredState
from lightning_fl.state.init_args import RecordsInitArgs, describe


@dataclass
class StageContext:
    """What a stage may read besides the rows and weights it is given.

    Attributes:
        round_idx: The round ``t`` (0-based).
        client_ids: ``(K_t,)`` ids of the rows, in cohort order.
        global_w: ``w^t`` flattened, fp32 (the rows are ``y_k - w^t``).
        seed: The run's seed (keyed draws: ``(seed, t, name)``).
        f: The configured tolerance ``f`` (``robust.f`` of docs/algorithms.md), before any reduction for
            a small cohort.
        log: Logs at step ``t + 1``.
        warn_once: ``warn_once(key, message)`` warns the first time ``key`` is seen in this run.
        own_weights: The algorithm's DP-safe ``(K_t,)`` weights ``a_k`` (``Combination.own_weights``), if any.
    """

    round_idx: int
    client_ids: Tensor
    global_w: Tensor
    seed: int
    f: int
    log: RoundLogger
    warn_once: Callable[[str, str], None]
    own_weights: Tensor | None = None


class PipelineStage(RecordsInitArgs, DeclaredState):
    """Base of every pipeline stage: remembers its arguments (resume checks) and declares its state.

    Subclasses declare state in ``__init__`` with ``self.add_server_state(name)``; ``state_dict`` and
    ``load_state_dict`` then cover it.
    """

    @property
    def name(self) -> str:
        """The stage's class name, as a user writes it in ``class_path``."""
        return type(self).__name__

    def __eq__(self, other: object) -> bool:
        # The same configuration (class and arguments), whatever state either has reached.
        return type(other) is type(self) and describe(other) == describe(self)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.init_args.items())
        return f"{self.name}({args})"


__all__ = ["PipelineStage", "StageContext"]
