"""Per-client fairness metrics of the global model, logged at every evaluation (docs/algorithms.md, Fairness metrics)."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_fl.engines.evaluation import ClientEvaluation
from lightning_fl.engines.user_metrics import judged_as_classifier, logged_names, metric_key, uses_own_metrics
from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.faults.write_failures import writing
from lightning_fl.functional.fairness import (
    FAIRNESS_KEYS,
    client_accuracies,
    fairness_metrics,
    last_rounds_count,
    mean_over_last_rounds,
)
from lightning_fl.functional.value_fairness import VALUE_FAIRNESS_KEYS, default_higher_is_better, value_fairness
from lightning_fl.models.base import ClientModule
from lightning_fl.personalization.protocol import EvalProtocol
from lightning_fl.personalization.round_rules import (
    OPTIMISTIC_PREFIX,
    optimistic,
    optimistic_note,
    reported,
    rounds_phrase,
)
from lightning_fl.reporting.client_accuracy import append_client_rows
from lightning_fl.reporting.figures import accuracy_histogram_figure
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.reporting.tables import (
    LAST_ROUNDS_COLUMNS,
    direction_note,
    fairness_csv,
    fairness_table,
    last_rounds_note,
    metric_csv,
    metric_table,
)
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.federation import Federation
from lightning_fl.reporting.run_directory import run_directory

#: Metrics averaged over the last 10% of rounds (IGFL's tables), logged as ``test/<key>_last10pct``.
_LAST_ROUNDS_KEYS = ("acc_mean", "acc_pooled")


class FairnessMetrics(FederatedCallback):
    """Logs the distribution of client accuracies each time the global model is evaluated.

    On every evaluation (each ``check_val_every_n_epoch`` rounds and once more for the final model
    in ``fit``, and ``validate``/``test``) it logs ``{stage}/acc_mean``, ``acc_weighted``,
    ``acc_pooled``, ``acc_worst20``, ``acc_best20``, ``acc_var`` (percent^2, as FedFa Table 2),
    ``acc_std``, ``acc_min``, ``acc_max`` and ``jain`` with the round number as step, plus a
    TensorBoard histogram of client accuracies; ``stage`` is ``val`` for the clients' validation
    splits and ``test`` for their test splits (``fit`` evaluates both each time). At the end of
    ``fit`` and ``test`` it prints the FedFa Table 2 summary (Average, Worst 20%, Best 20%,
    Variance) on the **client test splits** and saves it as ``fairness_summary.md`` and ``.csv``
    (``fairness_summary_test.*`` after ``test``) in the log directory, with ``fairness_history.csv``
    holding every evaluation of both splits (one row per stage and round). After ``fit`` the table
    follows the declared ``model.eval.rounds`` rule (docs/personalization.md, Which rounds): ``last``
    (the last evaluation), ``mean_last`` (each statistic averaged over the last ``last_r`` test
    evaluations) or ``best_val`` (the test statistics at ``t*``, the first evaluation maximising
    ``val/acc_mean``, or ``val/acc_pooled`` under ``weighting: pooled``); its title names the rule and
    rounds. With ``paper_compat: max_test`` the best-on-test evaluation is also logged at the end of
    ``fit``, as ``test_optimistic/<key>`` (and ``test_optimistic/round``) only, with a line under the
    table saying it is optimistic. The per-round ``test/*`` scalars stay every evaluation's own.
    Every evaluation also appends each client's accuracy and sample count to ``client_accuracy.csv``
    in the run directory (``round,stage,client,accuracy,samples``; rank 0, any logger), the
    distribution behind the summary metrics. Under ``model.attack`` the metrics,
    the histogram and the table cover the honest clients only, and ``{stage}/all/*`` (also in
    ``fairness_history.csv``) every client; ``client_accuracy.csv`` lists every client.

    IGFL's paper metric, the test accuracy averaged over the last 10% of rounds, closes ``fit``: the
    mean of ``test/acc_mean`` (and of ``test/acc_pooled``) over the evaluations of the last
    ``ceil(0.1 * max_epochs)`` rounds up to the final one (only the rounds that were evaluated count;
    with ``check_val_every_n_epoch > 1`` that may be just the final round). It is logged as the scalars
    ``test/acc_mean_last10pct`` and ``test/acc_pooled_last10pct`` at the final round (also in
    ``trainer.callback_metrics``), added as a line under the table in ``fairness_summary.md`` and as
    two columns of ``fairness_summary.csv`` (docs/algorithms.md, Paper metrics). With
    ``evaluate_last_rounds`` every round of that window is evaluated, whatever
    ``check_val_every_n_epoch``, so the average covers all of its rounds as the paper's does.

    With ``fairness_metric`` the statistics, the table and ``fairness_summary.*`` are computed over any
    per-client metric the client module logs in its ``validation_step``/``test_step`` (its stage prefix
    ``val/``, ``test/`` dropped: ``val/mse`` and ``test/mse`` are ``mse``), with its direction:
    ``{stage}/<metric>_mean``, ``_weighted``, ``_worst20``, ``_best20``, ``_var`` (the metric's units
    squared; a logged ``acc`` is a fraction and its ``_var``/``_std`` are in percent units like the
    built-in ``acc_var``), ``_std``, ``_min``, ``_max`` and ``_jain`` (:func:`~lightning_fl.functional.value_fairness.value_fairness`);
    the worst 20% of a lower-is-better metric are its highest values, and a histogram of the per-client
    values is logged as ``{stage}/client_<metric>`` (every ``histogram_every`` evaluations, like the
    accuracy's). The table and both summary files
    name the metric and direction. A classifier's accuracy statistics are logged beside it as before
    (the rounds rules still choose on them); ``acc`` (the default) is the argmax accuracy of the
    classifier pass, ``loss`` its mean cross-entropy unless the module logs a ``loss`` of its own.

    Args:
        histogram_every: Log the accuracy histogram (and a figure of it) every this many evaluations.
        method_name: Row name in the summary table; defaults to the aggregation callback's class name.
        evaluate_last_rounds: Evaluate every round of the last ``ceil(0.1 * max_epochs)`` (IGFL's
            window); earlier rounds keep ``check_val_every_n_epoch``. Default ``False``.
        fairness_metric: The per-client metric the fairness statistics are computed over: ``acc``,
            ``loss`` or any name the module logs (``val/mse``, ``mse``). Default: ``acc`` for a classifier
            (a :class:`~lightning_fl.models.ClientModule`, or a module that logs ``acc``).
        higher_is_better: The metric's direction. Default: ``False`` for names containing ``loss``,
            ``mse``, ``mae`` or ``perplexity``, ``True`` otherwise.

    Raises:
        ConfigError: If ``evaluate_last_rounds`` is not a bool, ``histogram_every`` not an integer >= 1,
            ``higher_is_better`` not a bool, or (before round 1: a set-up call of the module's steps on
            four training samples) the module never logs ``fairness_metric``.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.FairnessMetrics
    """

    logged_scalars = (*(f"{stage}/{key}" for stage in ("val", "test", "val/all", "test/all") for key in FAIRNESS_KEYS),
                      *(f"test/{key}_last10pct" for key in _LAST_ROUNDS_KEYS), f"{OPTIMISTIC_PREFIX}/*")

    def __init__(self, histogram_every: int = 1, method_name: str | None = None,
                 evaluate_last_rounds: bool = False, fairness_metric: str | None = None,
                 higher_is_better: bool | None = None) -> None:
        check_choice("evaluate_last_rounds", evaluate_last_rounds, (False, True))
        check_choice("FairnessMetrics.higher_is_better", higher_is_better, (None, False, True))
        if fairness_metric is not None and not (isinstance(fairness_metric, str) and metric_key(fairness_metric)):
            raise ConfigError(f"FairnessMetrics.fairness_metric must name a metric (acc, loss, val/mse); got"
                              f" {fairness_metric!r}")
        self.fairness_metric = None if fairness_metric is None else metric_key(fairness_metric)
        if self.fairness_metric == "acc" and higher_is_better is False:
            raise ConfigError("FairnessMetrics.higher_is_better: false contradicts fairness_metric acc (accuracy is"
                              " higher-is-better); leave higher_is_better out")
        self.higher_is_better = higher_is_better
        self._resolved: tuple[str, bool] | None = None  # (metric, higher is better) once checked against the module
        if self.fairness_metric not in (None, "acc"):  # what run_checks may find this callback logging
            self.logged_scalars = (*type(self).logged_scalars, *(f"{stage}/{self.fairness_metric}_*"
                                                                 for stage in ("val", "test", "val/all", "test/all")))
        check_positive("FairnessMetrics.histogram_every", histogram_every, integer=True)
        self.histogram_every = histogram_every
        self.method_name = method_name
        self.evaluate_last_rounds = evaluate_last_rounds
        self.add_server_state("history", [])  # every evaluation: stage, round and the metrics
        self._aggregation = "FairnessMetrics"
        self._client_rows_stages: set[str] = set()  # stages this process has written client rows for
        self._left_out = 0  # Byzantine clients the headline metrics leave out
        self._protocol = EvalProtocol()  # model.eval; a federation without one reports the last evaluation

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        self._aggregation = federation.aggregation
        self._evaluated, self._evaluation = federation.evaluated, federation.evaluation
        self._protocol = federation.eval_protocol or EvalProtocol()
        if getattr(federation, "global_model", None) is not None:  # without a run: at the first evaluation
            self._check_metric(federation)

    def _check_metric(self, federation: Federation) -> None:
        """Before round 1: the declared metric must be one the module logs (its steps run on a few samples)."""
        view = federation.global_model
        cls = view.module_class
        classifier = {"acc", "loss"} if judged_as_classifier(cls) else set()
        if classifier and not issubclass(cls, ClientModule):  # a plain module's forward must give class logits
            x, _ = view.training_data()
            with torch.no_grad():
                shape = tuple(view.copy().eval()(x[:2]).shape)
            if shape != (min(2, len(x)), federation.num_classes):
                raise ConfigError(f"FairnessMetrics: model.client {cls.__name__} writes no validation_step/test_step,"
                                  f" so it is scored as a classifier, but its forward returns shape {shape}, not"
                                  f" (batch, {federation.num_classes}); log a metric in validation_step")
        logged = {"val": set(), "test": set()}
        if uses_own_metrics(cls):  # a copy: the dry run leaves no state in the run's model or metrics
            x, y = view.training_data()
            logged = logged_names(view.copy(), x[:4], y[:4])
        common = (classifier | logged["val"]) & (classifier | logged["test"])
        name = self.fairness_metric
        if name is None:
            if "acc" not in common:
                raise ConfigError(f"FairnessMetrics.fairness_metric: model.client {cls.__name__} is not a"
                                  f" classifier and logs no acc; declare one of what its validation_step/test_step"
                                  f" log: {', '.join(sorted(common)) or 'nothing'}")
            name = "acc"
        elif name not in common:
            raise ConfigError(f"FairnessMetrics.fairness_metric {name!r}: model.client {cls.__name__} never"
                              f" logs it in validation_step and test_step; it has {', '.join(sorted(common)) or 'none'}")
        self._resolved = (name, default_higher_is_better(name) if self.higher_is_better is None
                          else self.higher_is_better)

    @property
    def _metric(self) -> tuple[str, bool]:
        """The declared metric and direction; without a set-up (callback driven directly) the defaults."""
        if self._resolved is not None:
            return self._resolved
        name = self.fairness_metric or "acc"
        return name, default_higher_is_better(name) if self.higher_is_better is None else self.higher_is_better

    def _metric_statistics(self, evaluation: ClientEvaluation, name: str, higher_is_better: bool,
                           counted: torch.Tensor | None) -> dict[str, float]:
        try:  # reached only when the set-up check could not run (no global model): the first evaluation fails
            values = evaluation.metric(name)
        except KeyError as err:
            raise ConfigError(f"FairnessMetrics.fairness_metric: {err.args[0]}") from None
        total = evaluation.total
        if counted is not None:
            values, total = values[counted], total[counted]
        values = torch.where(total > 0, values, torch.full_like(values, float("nan")))
        statistics = value_fairness(values, higher_is_better, weights=total)
        if name == "acc":  # a module's own accuracy (a fraction): spread in percent units, as the built-in acc_var
            statistics["var"], statistics["std"] = 1e4 * statistics["var"], 100.0 * statistics["std"]
        return {f"{name}_{key}": value for key, value in statistics.items()}

    @override
    def on_clients_evaluated(self, round_idx: int, evaluation: ClientEvaluation, federation: Federation,
                             log: RoundLogger) -> None:
        self._aggregation = federation.aggregation
        stage = evaluation.stage
        correct, total = evaluation.correct, evaluation.total
        # Accuracy statistics wherever there is an accuracy (NaN: a module that is not a classifier).
        accuracy = not bool(correct.isnan().any())
        name, higher_is_better = self._metric
        declared = name != "acc" or not accuracy
        if evaluation.counted is not None:  # under an attack: everyone as <stage>/all/*, the honest as <stage>/*
            everyone = fairness_metrics(correct, total) if accuracy else {}
            if declared:
                everyone.update(self._metric_statistics(evaluation, name, higher_is_better, None))
            log.log_scalars({f"{stage}/all/{k}": v for k, v in everyone.items()})
            self.history.append({"stage": f"{stage}/all", "round": evaluation.round_number, **everyone})
            correct, total = correct[evaluation.counted], total[evaluation.counted]
            self._left_out = int((~evaluation.counted).sum())
        metrics = fairness_metrics(correct, total) if accuracy else {}
        if declared:
            metrics.update(self._metric_statistics(evaluation, name, higher_is_better, evaluation.counted))
        headline = f"{stage}/acc_mean" if not declared else f"{stage}/{name}_mean"
        log.log_scalars({f"{stage}/{k}": v for k, v in metrics.items()}, prog_bar=(headline,))
        self.history.append({"stage": stage, "round": evaluation.round_number, **metrics})
        histogram_now = (sum(1 for row in self.history if row["stage"] == stage) - 1) % self.histogram_every == 0
        if declared and histogram_now:  # the declared metric's spread over clients, as the accuracy's below
            values = evaluation.metric(name)
            values = values if evaluation.counted is None else values[evaluation.counted]
            log.log_histogram(f"{stage}/client_{name}", values[~values.isnan()])
        if not accuracy:  # the accuracy histogram and client_accuracy.csv need an accuracy
            return
        accuracies = client_accuracies(evaluation.correct, evaluation.total)
        if log.outputs.directory is not None:  # rank 0 of a run with a logger
            append_client_rows(Path(log.outputs.directory) / "client_accuracy.csv", evaluation.round_number, stage,
                               accuracies, evaluation.total, first_of_stage=stage not in self._client_rows_stages)
            self._client_rows_stages.add(stage)
        if histogram_now:
            shown = accuracies if evaluation.counted is None else accuracies[evaluation.counted]
            log.log_histogram(f"{stage}/client_acc", shown[~shown.isnan()])
            log.log_figure(f"{stage}/client_acc_figure", accuracy_histogram_figure(shown, evaluation.round_number))

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._write_summary(trainer, "", self._last_rounds(trainer), fit=True)

    @override
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._write_summary(trainer, "_test")

    def latest(self, stage: str = "test") -> dict[str, float] | None:
        """The most recent metrics of ``stage``, or ``None`` before the first evaluation."""
        rows = [row for row in self.history if row["stage"] == stage]
        return rows[-1] if rows else None

    def _last_rounds(self, trainer: pl.Trainer) -> tuple[dict[str, float], int, list[int]] | None:
        """IGFL's metric after ``fit``: ``(metrics, window, evaluated rounds)``, logged at the final round."""
        tests = [row for row in self.history if row["stage"] == "test"]
        # IGFL's metric is the built-in accuracy, with its pooled value; a module's own logged "acc"
        # (issue 25) is averaged over clients only, so it gets the fairness table without this line.
        if not tests or not all(key in tests[-1] for key in _LAST_ROUNDS_KEYS):
            return None
        final = tests[-1]["round"]
        # max_epochs is the run's length in rounds; -1 (no limit) falls back to the rounds run.
        window = last_rounds_count(trainer.max_epochs if (trainer.max_epochs or 0) > 0 else final)
        rounds = [row["round"] for row in tests]
        metrics: dict[str, float] = {}
        for key in _LAST_ROUNDS_KEYS:
            metrics[f"{key}_last10pct"], used = mean_over_last_rounds(rounds, [row[key] for row in tests], final, window)
        scalars = {f"test/{key}": value for key, value in metrics.items()}
        RoundLogger(trainer.loggers, final).log_scalars(scalars)
        for name, value in scalars.items():  # what trainer.fit leaves for Python callers
            trainer.callback_metrics[name] = torch.tensor(value)
        return metrics, window, used

    def _optimistic(self, trainer: pl.Trainer, final: int) -> str:
        """``paper_compat: max_test`` after ``fit``: log the best-on-test statistics as ``test_optimistic/*``
        (never ``test/*``) at the final round; returns the line under the table."""
        statistics, used = optimistic(self.history, self._protocol, *self._metric)
        scalars = {f"{OPTIMISTIC_PREFIX}/{key}": value for key, value in statistics.items()}
        scalars[f"{OPTIMISTIC_PREFIX}/round"] = float(used[0])
        RoundLogger(trainer.loggers, final).log_scalars(scalars)
        for tag, value in scalars.items():
            trainer.callback_metrics[tag] = torch.tensor(value)
        return optimistic_note(self._protocol, statistics, used, *self._metric)

    def _reported(self, trainer: pl.Trainer, row: dict[str, float]) -> tuple[dict[str, float], str, str]:
        """After ``fit``: the row under the declared ``rounds`` rule, the title's rounds phrase, the notes."""
        protocol, final = self._protocol, row["round"]
        try:
            statistics, used = reported(self.history, protocol, *self._metric)
        except ValueError as err:  # e.g. best_val with a NaN monitor at every evaluation: still write the table
            rank_zero_warn(f"model.eval.rounds {protocol.rounds} could not be applied ({err}); the table reports the"
                           " last evaluation")
            statistics = {}
            phrase = f"after {final} round{'' if final == 1 else 's'} (the last evaluation: rounds={protocol.rounds}"
            phrase += " could not be applied)"
        else:
            phrase = rounds_phrase(protocol, used, final, *self._metric)
        note = ""
        if protocol.paper_compat == "max_test":
            try:
                note = self._optimistic(trainer, final)
            except ValueError as err:  # a NaN test monitor at every evaluation: nothing optimistic to log
                rank_zero_warn(f"model.eval.paper_compat max_test: nothing logged ({err})")
        return {**row, **statistics}, phrase, note

    def _write_summary(self, trainer: pl.Trainer, suffix: str,
                       last_rounds: tuple[dict[str, float], int, list[int]] | None = None, fit: bool = False) -> None:
        row = self.latest("test")  # the final table reports the clients' test splits
        if row is None:
            return
        # A standalone `test` scores one model; the rounds rule chooses among fit's evaluations.
        rounds = f"after {row['round']} round{'' if row['round'] == 1 else 's'}"
        row, rounds, note = self._reported(trainer, row) if fit else (row, rounds, "")
        name = self.method_name or self._aggregation
        metric, higher_is_better = self._metric
        declared = metric != "acc" or "acc_mean" not in row
        table = metric_table({name: row}, metric, higher_is_better) if declared else fairness_table({name: row})
        if declared:
            table = f"{direction_note(metric, higher_is_better)}\n\n{table}"
        note = ("" if last_rounds is None else "\n" + last_rounds_note(*last_rounds)) + (note and "\n" + note)
        privacy = getattr(getattr(trainer, "lightning_module", None), "dp", None)  # model.dp: what the models cost
        line = privacy.report() if privacy is not None else None
        if line:
            note += "\n" + line
        splits = "client test splits" if not self._left_out else \
            f"honest clients' test splits; the {self._left_out} Byzantine clients are in test/all/*"
        evaluated, evaluation = getattr(self, "_evaluated", "global model"), getattr(self, "_evaluation", "")
        protocol = f"{evaluation}\n" if evaluation else ""  # model.eval, declared above every table
        rank_zero_info(f"Fairness of the {evaluated} {rounds} ({splits}):\n{protocol}{table}{note}")
        log_dir = run_directory(trainer)  # a collective with several processes: every rank asks once
        if not log_dir or trainer.global_rank != 0:
            return
        with writing(log_dir, "the run folder"):
            os.makedirs(log_dir, exist_ok=True)
        summary = os.path.join(log_dir, f"fairness_summary{suffix}.md")
        with writing(summary, "the fairness summary"), open(summary, "w") as f:
            f.write(f"{evaluated[0].upper()}{evaluated[1:]} {rounds} ({splits}).\n\n"
                    f"{evaluation + chr(10) * 2 if evaluation else ''}{table}{note}")
        summary = os.path.join(log_dir, f"fairness_summary{suffix}.csv")
        with writing(summary, "the fairness summary"), open(summary, "w") as f:
            if declared:
                f.write(metric_csv({name: row}, metric, higher_is_better))
            elif last_rounds is None:
                f.write(fairness_csv({name: row}))
            else:
                f.write(fairness_csv({name: {**row, **last_rounds[0]}}, LAST_ROUNDS_COLUMNS))
        history = os.path.join(log_dir, "fairness_history.csv")
        with writing(history, "the fairness history"), open(history, "w") as f:
            keys = [*(FAIRNESS_KEYS if "acc_mean" in row else ()),
                    *((f"{metric}_{k}" for k in VALUE_FAIRNESS_KEYS) if declared else ())]
            f.write(",".join(("stage", "round", *keys)) + "\n")
            f.writelines(",".join([h["stage"], str(h["round"]), *(repr(h.get(k, float("nan"))) for k in keys)]) + "\n"
                         for h in self.history)
