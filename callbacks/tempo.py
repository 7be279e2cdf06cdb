"""Tempo: adaptive local epochs per institution in three-layer training (docs/algorithms.md, Tempo)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.functional.tempo import institution_distances, tempo_local_epochs
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.federation import Federation
from lightning_fl.simulation.round_result import RoundPlan, RoundResult


class Tempo(FederatedCallback):
    """Sets each institution's local epochs from its distance to the new global model.

    After every global iteration (docs/algorithms.md, Tempo; Tempo ICASSP 2022):
    ``omega_m = ||w^(m) - w^(c)||`` (flattened L2 between institution ``m``'s model and the new server
    model), ``l_m = ln(omega_m)`` and
    ``tau_c^(m) = max(1, ceil((c/2) / (l_min - l_max) * (3 l_m + l_min - 4 l_max)))``:
    ``2c`` epochs for the closest institution down to ``c/2`` for the farthest. If
    ``l_max == l_min``, any ``omega == 0`` or ``M == 1``, every institution gets ``c``.
    The first global iteration runs ``c`` epochs everywhere. Needs ``model.hierarchy``; logs
    ``tempo/epochs_m`` and ``tempo/distance_m`` per institution. The epochs are returned to the loop as a
    :class:`~lightning_fl.simulation.round_result.RoundPlan` and kept in its checkpoint (hierarchy state), so a
    resumed run continues with the same schedule.

    Args:
        initial_epochs: ``c``, the initial epoch count (the paper uses 6).

    Raises:
        ConfigError: If ``initial_epochs < 1`` or the loop has no hierarchy.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.Tempo
          init_args: {initial_epochs: 6}
    """

    logged_scalars = ("tempo/epochs_*", "tempo/distance_*")

    def __init__(self, initial_epochs: int = 6) -> None:
        check_positive("initial_epochs", initial_epochs, integer=True)
        self.initial_epochs = initial_epochs
        self.add_server_state("last_distances")

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        if federation.hierarchy is None:
            raise ConfigError("Tempo needs model.hierarchy (institutions of clients); add a hierarchy to the model")

    @override
    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation,
                       log: RoundLogger) -> RoundPlan | None:
        if round_idx > 0:
            return None  # later iterations run the epochs decided at the end of the previous one
        return RoundPlan(institution_epochs=torch.full((federation.hierarchy.num_institutions,), self.initial_epochs))

    @override
    def on_round_end(self, round_idx: int, result: RoundResult, federation: Federation,
                     log: RoundLogger) -> RoundPlan:
        distances = institution_distances(result.global_w, result.update.weights)
        epochs = tempo_local_epochs(distances, self.initial_epochs)
        self.last_distances = distances.detach().cpu()
        metrics = {f"tempo/epochs_{m}": float(e) for m, e in enumerate(epochs.tolist())}
        metrics.update({f"tempo/distance_{m}": float(d) for m, d in enumerate(self.last_distances.tolist())})
        log.log_scalars(metrics)
        return RoundPlan(institution_epochs=epochs)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "initial_epochs": self.initial_epochs}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict["initial_epochs"] != self.initial_epochs:
            raise ConfigError(f"initial_epochs differs from the checkpoint's ({state_dict['initial_epochs']})")
        super().load_state_dict(state_dict)
