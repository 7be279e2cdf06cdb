"""FedAvg aggregation (docs/algorithms.md, FedAvg)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.base import fixed_minibatches
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.functional.weights import WEIGHTINGS, fedavg_weights
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation


class FedAvg(AggregationCallback):
    """Federated averaging: ``w^{t+1} = sum_k n_k y_k / sum_k n_k`` (docs/algorithms.md, FedAvg).

    The default aggregation when a run configures none.

    Args:
        weighting: ``samples`` (weights ``n_k / sum n``, McMahan et al.) or ``uniform`` (``1 / K``).
        local_steps: Every client takes exactly this many minibatch steps per round (cycling through its
            epochs) instead of ``model.local_epochs`` epochs, and is weighted by its whole ``n_k``: the
            FedAvg of the pFedMe code, whose ``local_epochs`` counts minibatches. ``None``: epochs.

    Raises:
        ConfigError: If ``weighting`` is not ``samples`` or ``uniform``, ``local_steps`` is not an integer
            >= 1, or ``local_steps`` is combined with ``model.hierarchy``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedAvg
              init_args: {weighting: samples}
    """

    supports_hierarchy = True
    supports_reduce = True

    def __init__(self, weighting: str = "samples", local_steps: int | None = None) -> None:
        super().__init__()
        check_choice("weighting", weighting, WEIGHTINGS)
        if local_steps is not None:
            check_positive("local_steps", local_steps, integer=True)
        self.weighting, self.local_steps = weighting, local_steps

    @property
    def init_args(self) -> dict[str, Any]:
        """The recorded arguments; ``local_steps`` only when set, so checkpoints from before it resume unchanged."""
        args = super().init_args
        if args.get("local_steps") is None:
            args.pop("local_steps", None)
        return args

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        if self.local_steps is not None and federation.hierarchy is not None:
            raise ConfigError("FedAvg.local_steps: institutions train model.local_epochs epochs in model.hierarchy"
                              " mode; remove local_steps or model.hierarchy")

    @override
    def train_round(self, train: Callable[..., CohortUpdate], round_idx: int, client_ids: Tensor,
                    participation: Tensor, federation: Federation) -> CohortUpdate:
        if self.local_steps is None:
            return train(client_ids, participation)
        sizes = federation.train_sizes[client_ids]
        epochs, steps = fixed_minibatches(sizes, federation.batch_size, self.local_steps)
        update = train(client_ids, participation, local_epochs=epochs, num_steps=steps)
        # Weighted by the whole train split (the pFedMe code's train_samples), not the samples of its steps.
        return replace(update, num_samples=federation.train_sizes[update.client_ids])

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
