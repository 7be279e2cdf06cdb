"""DWFed's model divergence: the federated model against centralised SGD on the pooled data."""

from __future__ import annotations

from torch import Tensor
from typing_extensions import override

from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.functional.dwfed import model_divergence
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.centralised import CentralisedSGD
from lightning_fl.simulation.federation import Federation
from lightning_fl.simulation.round_result import RoundResult


class ModelDivergence(FederatedCallback):
    """Logs ``server/model_divergence = ||w^f - w^c|| / ||w^c||`` every round (DWFed eq. 2).

    ``w^c`` is a centralised reference run (docs/algorithms.md, Paper metrics): the same client model
    from the same initial weights ``w^0``, trained with plain SGD at the client learning rate on every
    client's training data pooled together. Reading of "the same number of steps": in round ``t`` the
    reference takes as many steps as the round's clients took on average (the mean of ``tau_k`` over
    the clients that reported, rounded), so after ``T`` rounds it has done the work of one average
    client over the whole run. Batches have the run's batch size unless ``batch_size`` is given (DWFed's
    derivation, eqs. 4-5, compares against ``K`` population-distributed devices, whose average step is
    close to one step on ``K`` times the batch: ``batch_size: K * B`` gives that reading).

    The reference weights are declared state, so a resumed run continues the same reference exactly.
    Cost: one extra client's training per round on the pooled data, on every process.

    Args:
        batch_size: Samples per reference step; ``None`` (default) uses the run's batch size.

    Raises:
        ConfigError: On ``batch_size < 1`` or in three-layer mode (the reference has no institution level).

    Example (YAML)::

        - class_path: lightning_fl.callbacks.ModelDivergence
    """

    logged_scalars = ("server/model_divergence",)

    def __init__(self, batch_size: int | None = None) -> None:
        super().__init__()
        if batch_size is not None:
            check_positive("ModelDivergence.batch_size", batch_size, integer=True)
        self.batch_size = batch_size
        self.add_server_state("centralised")  # (d,) fp32 w^c, set from w^0 at the first round
        self._reference: CentralisedSGD | None = None

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        if federation.hierarchy is not None:
            raise ConfigError("ModelDivergence compares a flat federation with centralised SGD; it cannot be used"
                              " with model.hierarchy")
        view = federation.global_model
        if view is None:
            return
        x, y = view.training_data()
        self._reference = CentralisedSGD(view.copy(), federation.layout, x, y, federation.optimizer.lr,
                                         self.batch_size or federation.batch_size, federation.seed)

    @override
    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation, log: RoundLogger) -> None:
        if self.centralised is None and federation.global_model is not None:  # w^0: the run's initial global model
            self.centralised = federation.global_model.weights()

    @override
    def on_round_end(self, round_idx: int, result: RoundResult, federation: Federation, log: RoundLogger) -> None:
        if self._reference is None or self.centralised is None or len(result.update.num_steps) == 0:
            return
        steps = int(result.update.num_steps.double().mean().round())
        self.centralised = self._reference.advance(self.centralised, steps, round_idx)
        log.log_scalars({"server/model_divergence": float(model_divergence(result.global_w, self.centralised))})
