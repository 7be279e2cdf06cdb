"""The global model's loss on every client's training data, the training loss the FedProx paper plots."""

from __future__ import annotations

from typing_extensions import override

from lightning_fl.engines.evaluation import ClientEvaluation
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.federation import Federation


class GlobalTrainLoss(FederatedCallback):
    """Logs ``train/global_loss`` and ``train/global_acc`` each time the global model is evaluated.

    ``train/loss`` (logged by the loop every round) is the mean loss the cohort's clients saw while
    training locally, over the steps of their last local epoch: after many local epochs it measures
    how well each client fits its own data, and it covers only the clients that reported. The
    FedProx paper (Li et al., MLSys 2020, Fig. 1) plots instead the global objective
    ``f(w) = sum_k p_k F_k(w)``, ``p_k = n_k / n``: the global model's mean loss over the training
    samples of all ``N`` clients. This callback computes that, with the same chunked evaluation as
    the test splits, at every evaluation of the global model (each ``check_val_every_n_epoch``
    rounds), logged with the round number as step. One extra pass over the training data per
    evaluation.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.GlobalTrainLoss
    """

    logged_scalars = ("train/global_loss", "train/global_acc")

    @override
    def on_clients_evaluated(self, round_idx: int, evaluation: ClientEvaluation, federation: Federation,
                             log: RoundLogger) -> None:
        if federation.global_model is None or evaluation.stage != "test":
            return
        correct, total, loss_sum = federation.global_model.evaluate("train")
        samples = total.sum().clamp_min(1)
        log.log_scalars({"train/global_loss": float(loss_sum.sum() / samples),
                         "train/global_acc": float(correct.sum() / samples)})
