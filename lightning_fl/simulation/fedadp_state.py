"""FedAdp with its smoothed angles kept per member: shared by the FedAdp callback and the hierarchy's institutions.

docs/algorithms.md, FedAdp. The math is :func:`lightning_fl.functional.fedadp.fedadp_weights`; this
module only reads and writes each member's stored angle ``th_k`` in a declared
:class:`~lightning_fl.state.client_table.ClientTable`, so the server (FedAdp over the cohort or the
institutions) and the institutions (FedAdp over their clients, ``hierarchy.institution_aggregation:
fedadp``) smooth their angles the same way.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.functional.fedadp import FedAdpWeights, fedadp_weights
from lightning_fl.state.client_table import ClientTable


def fedadp_step(angles: ClientTable, reference_w: Tensor, update: CohortUpdate, alpha: float) -> FedAdpWeights:
    """FedAdp weights of ``update``'s members against ``reference_w``; stores their new smoothed angles.

    ``m_k`` is ``update.participation`` (this round included). A member without a stored angle (its
    first participation, or a run resumed from a checkpoint written without FedAdp) starts from this
    round's angle, as on a first participation.

    Args:
        angles: ``th_k`` per member (a declared client state of shape ``()``), updated in place.
        reference_w: The model the members started from (``w^t``, or the institution's model), ``(d,)``.
        update: The members' stacked results (``weights``, ``num_samples``, ``participation``).
        alpha: Gompertz ``a``.

    Returns:
        The :class:`~lightning_fl.functional.fedadp.FedAdpWeights`; aggregate with
        ``weighted_average(update.weights, out.weights)``.
    """
    counts = update.participation.clone()
    seen = torch.tensor(angles.seen(update.client_ids), dtype=torch.bool)
    counts[~seen] = 1  # nothing to average with: start from this round's angle
    prev = angles.gather(update.client_ids, reference_w.device).to(reference_w.dtype)
    out = fedadp_weights(reference_w, update.weights, update.num_samples, prev, counts, alpha)
    angles.scatter(update.client_ids, out.smoothed_angle)
    return out
