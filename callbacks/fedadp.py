"""FedAdp: aggregation weights from the angle between each client's update and the cohort's (docs/algorithms.md, FedAdp)."""

from __future__ import annotations

from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import check_non_negative
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.fedadp_state import fedadp_step
from lightning_fl.simulation.federation import Federation


class FedAdp(AggregationCallback):
    """FedAdp (Wu & Wang 2021; the Tempo paper's baseline): angle-adaptive aggregation weights.

    docs/algorithms.md, FedAdp, each round::

        g_k = w^t - y_k;   g = sum_k p_k g_k,   p_k = n_k / sum_j n_j
        theta_k = arccos(cos(g_k, g))                         (radians)
        th_k <- ((m_k - 1) th_k + theta_k) / m_k              (m_k: participation count, this round included)
        f(th) = a (1 - exp(-exp(-a (th - 1))))                (Gompertz, a = alpha)
        psi_k = n_k exp(f(th_k)) / sum_j n_j exp(f(th_j))
        w^{t+1} = sum_k psi_k y_k

    State: the smoothed angle ``th_k`` of every client seen so far (checkpointed, so a resumed run
    continues exactly). Math: :func:`lightning_fl.functional.fedadp.fedadp_weights`.

    Readings (see the functional module):

    - The cosine is clamped to ``[-1, 1]``; a zero ``g_k`` or ``g`` has no direction and gets the
      angle ``pi / 2`` (so a round whose updates cancel reduces to FedAvg weights).
    - First participation (``m_k = 1``): ``th_k = theta_k``. A client whose count is above 1 but
      whose angle this callback never stored (e.g. a run resumed from a checkpoint written with
      another aggregation) also starts from ``theta_k``.
    - ``m_k`` is the loop's participation count (``CohortUpdate.participation``). In hierarchy mode
      the members are the institutions and ``m_k`` counts global iterations; with
      ``hierarchy.institution_aggregation: fedadp`` the institutions combine their clients with
      FedAdp too (the Tempo paper's three-layer FedAdp baseline; docs/algorithms.md, Three-layer hierarchy).
    - Normalisations that sum to 0/NaN/inf (e.g. all ``n_k`` zero) fall back to uniform weights and
      warn once (docs/algorithms.md, Server arithmetic).

    TensorBoard (step = round number ``t + 1``): ``server/weights`` (histogram of ``psi``),
    ``server/smoothed_angle`` (histogram of the cohort's ``th_k``) and the scalar
    ``server/smoothed_angle_mean`` (radians).

    Args:
        alpha: Gompertz constant ``a >= 0``. Default 5.0.

    Raises:
        ConfigError: If ``alpha`` is negative.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedAdp
              init_args: {alpha: 5.0}
    """

    logged_scalars = ("server/smoothed_angle_mean",)

    supports_hierarchy = True

    def __init__(self, alpha: float = 5.0) -> None:
        super().__init__()
        check_non_negative("alpha", alpha)
        self.alpha = float(alpha)
        self.add_client_state("smoothed_angle", shape=())  # th_k of every client seen

    @override
    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        out = fedadp_step(self.smoothed_angle, global_w, update, self.alpha)
        if out.degenerate:
            self.warn_degenerate_once("weights", round_idx)
        log.log_scalars({"server/smoothed_angle_mean": float(out.smoothed_angle.mean())})
        log.log_histogram("server/weights", out.weights.detach().float())
        log.log_histogram("server/smoothed_angle", out.smoothed_angle.detach().float())
        return Combination(out.weights)
