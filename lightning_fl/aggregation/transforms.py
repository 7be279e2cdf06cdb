"""Client-update transforms: maps applied to each row before the combining rule (docs/algorithms.md, Aggregation pipeline).

A transform sees the ``(K_t, P)`` stack of update rows ``u_k`` and returns a stack of the same shape,
each row a function of that row alone (a row transform), so it commutes with how the cohort is split
over processes. Transforms run in the order the config lists them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.aggregation.stage import PipelineStage, StageContext
from lightning_fl.faults.validation import check_positive


class UpdateTransform(PipelineStage):
    """Base of the client-update transforms: ``U -> U'``, row by row."""

    def transform(self, U: Tensor, ctx: StageContext) -> Tensor:
        """The transformed ``(K_t, P)`` rows."""
        raise NotImplementedError


class AggregateTransform(PipelineStage):
    """Base of the aggregate transforms (stage 3): a map of the combined ``(P,)`` aggregate, once per round.

    They run after the gather, on the same aggregate on every process, never per rank (the DP noise of
    docs/algorithms.md, Client-level differential privacy); ``model.dp`` installs them.
    """

    def apply(self, aggregate: Tensor, ctx: StageContext) -> Tensor:
        """The transformed ``(P,)`` aggregate."""
        raise NotImplementedError


def clip_rows(U: Tensor, max_norm: float) -> Tensor:
    """Each row scaled by ``min(1, C / ||u_k||)``: ``||u_k'|| <= C``, direction kept; a zero row stays 0.

    Example:
        >>> clip_rows(torch.tensor([[3.0, 4.0], [0.3, 0.4]]), 1.0)
        tensor([[0.6000, 0.8000],
                [0.3000, 0.4000]])
    """
    norms = torch.linalg.vector_norm(U, dim=1)
    # C / 0 is inf, whose min with 1 is the factor 1 a zero row needs.
    factor = torch.clamp(max_norm / norms, max=1.0)
    return U * factor.unsqueeze(1)


class NormClip(UpdateTransform):
    """Clip each update to L2 norm ``C``: ``u_k * min(1, C / ||u_k||)``.

    Logs ``robust/clipped_fraction``, the share of rows that were scaled down.

    Args:
        max_norm: ``C > 0``.

    Example (YAML)::

        model:
          aggregation:
            transforms:
              - class_path: lightning_fl.aggregation.NormClip
                init_args: {max_norm: 1.0}
    """

    def __init__(self, max_norm: float) -> None:
        check_positive("model.aggregation.transforms[].init_args.max_norm", max_norm)
        self.max_norm = float(max_norm)

    def transform(self, U: Tensor, ctx: StageContext) -> Tensor:
        clipped = torch.linalg.vector_norm(U, dim=1) > self.max_norm
        ctx.log.log_scalars({"robust/clipped_fraction": float(clipped.double().mean())})
        return clip_rows(U, self.max_norm)


__all__ = ["AggregateTransform", "NormClip", "UpdateTransform", "clip_rows"]
