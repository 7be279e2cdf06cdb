"""The loop's evaluation hooks: every client's validation and test splits, scored by the global model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from pytorch_lightning import LightningModule
from pytorch_lightning.trainer.states import TrainerFn
from typing_extensions import override

from lightning_fl.engines.evaluation import ClientEvaluation
from lightning_fl.engines.user_metrics import evaluate_split
from lightning_fl.functional.fairness import last_rounds_count
from lightning_fl.reporting.round_logger import RoundLogger

__all__ = ["EvaluationHooks"]


class EvaluationHooks(LightningModule):
    """Evaluation of a :class:`~lightning_fl.simulation.loop.FederatedLoop` (a mixin: it uses the loop's ``data``,
    ``model``, ``rounds``, ``sharding`` and round counters, set up in the loop's ``setup``).

    During ``fit`` every evaluation round scores both splits (``val/*`` for the monitors, ``test/*``
    for the report) and the final model is always evaluated; ``validate`` and ``test`` score one split
    and hand their scalars to Lightning's metric table. A callback with ``evaluate_last_rounds`` gets
    every round of the last ``ceil(0.1 * max_epochs)`` evaluated.
    """

    @override
    def on_train_epoch_start(self) -> None:
        # Lightning reads check_val_every_n_epoch at the end of every epoch (round), so lowering it here
        # evaluates the rest of the run every round. Nothing to save: a resumed run switches again.
        trainer = self.trainer
        if (trainer.max_epochs or 0) <= 0 or not any(c.evaluate_last_rounds for c in self.federated_callbacks):
            return
        if trainer.current_epoch >= trainer.max_epochs - last_rounds_count(trainer.max_epochs):
            trainer.check_val_every_n_epoch = 1

    @override
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.trainer.sanity_checking:
            return
        # During fit every evaluation round scores both splits: val/* for the monitors, test/* for the
        # report; `validate` scores the validation splits only.
        fitting = self.trainer.state.fn == TrainerFn.FITTING
        self._evaluate(*(("val",) if self.data.has_validation else ()), *(("test",) if fitting else ()))

    @override
    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate("test")

    @override
    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self._dispatch_evaluation()

    @override
    def on_test_epoch_end(self) -> None:
        self._dispatch_evaluation()

    @override
    def on_train_end(self) -> None:
        # The final model is always evaluated: when max_epochs is not a multiple of
        # check_val_every_n_epoch (or training stopped between evaluations), the last rounds would
        # otherwise never be scored and the final table would describe an earlier model.
        if self.rounds_completed > 0 and self._evaluated_round != self.rounds_completed:
            self._evaluate(*(("val",) if self.data.has_validation else ()), "test")
            self._dispatch_evaluation(monitor=self._record_metric)

    def _evaluate(self, *stages: str) -> None:
        """Evaluate the global model on every client's ``stages`` splits (``"val"``, ``"test"``)."""
        self._pending_evaluations, self._pending_scalars = [], {}
        for stage in stages:
            if not self.protocol_evaluation.is_default:  # model.eval: personal models, client sets, unseen clients
                evaluations, scalars = self.protocol_evaluation.evaluate(stage, self.rounds_completed,
                                                                         self.honest_clients)
                self._pending_evaluations += evaluations
                self._pending_scalars.update(scalars)
                continue
            x, y, offsets = self.data.split(stage)
            # The module's own validation_step/test_step where it has them; the fast classifier pass otherwise.
            correct, total, loss_sum, values = evaluate_split(self.model, stage, x, y, offsets, self.eval_batch_size,
                                                              self.sharding)
            self._pending_evaluations.append(ClientEvaluation(stage, self.rounds_completed, correct, total, loss_sum,
                                                              self.honest_clients, values))

    def _dispatch_evaluation(self, monitor: Callable[[str, float, bool], None] | None = None) -> None:
        # `validate` and `test` hand their scalars to Lightning (logger=True, with the round as the
        # `step` metric), which prints its metric table and returns them from trainer.validate/test.
        standalone = monitor is None and self.trainer.state.fn in (TrainerFn.VALIDATING, TrainerFn.TESTING)
        if standalone and self._pending_evaluations:
            self.log("step", float(self._pending_evaluations[0].round_number), logger=True, batch_size=1)
        for evaluation in self._pending_evaluations:
            log = RoundLogger(self.loggers, evaluation.round_number,
                              self._log_evaluated if standalone else (monitor or self._monitor), self.run_outputs,
                              scalars_through_monitor=standalone)
            log.log_scalars({f"{evaluation.stage}/loss": evaluation.pooled_loss})
            self.rounds.evaluated(self.rounds_completed - 1, evaluation, log)
            if "/" not in evaluation.stage:  # not the unseen clients' side evaluation
                self.last_evaluation = evaluation
        if self._pending_scalars:  # the participation gap (model.eval.unseen_fraction)
            log.log_scalars(self._pending_scalars)
        self._pending_evaluations, self._pending_scalars = [], {}
        if self.trainer.state.fn == TrainerFn.FITTING:
            self._evaluated_round = self.rounds_completed

    def _log_evaluated(self, name: str, value: float, prog_bar: bool) -> None:
        self.log(name, value, logger=True, prog_bar=prog_bar, batch_size=1)

    def _record_metric(self, name: str, value: float, prog_bar: bool) -> None:
        # After the last round Lightning allows no `self.log`; monitors that read the final evaluation
        # at the end of fit (RoundsToTarget) find it in callback_metrics all the same.
        self.trainer.callback_metrics[name] = torch.tensor(float(value))

