"""FedAvg aggregation (docs/algorithms.md, FedAvg)."""

from __future__ import annotations

from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import check_choice
from lightning_fl.functional.weights import WEIGHTINGS, fedavg_weights
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation


class FedAvg(AggregationCallback):
    """Federated averaging: ``w^{t+1} = sum_k n_k y_k / sum_k n_k`` (docs/algorithms.md, FedAvg).

    The default aggregation when a run configures none.

    Args:
        weighting: ``samples`` (weights ``n_k / sum n``, McMahan et al.) or ``uniform`` (``1 / K``).

    Raises:
        ConfigError: If ``weighting`` is not ``samples`` or ``uniform``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedAvg
              init_args: {weighting: samples}
    """

    supports_hierarchy = True
    supports_reduce = True

    def __init__(self, weighting: str = "samples") -> None:
        super().__init__()
        check_choice("weighting", weighting, WEIGHTINGS)
        self.weighting = weighting

    @override
    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        return Combination(self.sample_weights(round_idx, global_w, update))

    def sample_weights(self, round_idx: int, global_w: Tensor, update: CohortUpdate) -> Tensor:
        """``p``: this callback's ``weighting`` over the cohort (``global_w``'s dtype and device)."""
        weights, degenerate = fedavg_weights(update.num_samples.to(global_w.device), self.weighting)
        if degenerate:
            self.warn_degenerate_once("sample-count weights", round_idx)
        return weights.to(global_w.dtype)
