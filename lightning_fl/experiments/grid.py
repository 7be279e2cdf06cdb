"""Run configs x seeds and report them: the experiment runner behind ``make compare`` and ``make tempo``.

:func:`run_grid` trains every ``name=config`` with every seed (optionally after selecting each
method's hyperparameters on the validation splits, :mod:`lightning_fl.experiments.tuning`) and writes
into the save directory (docs/experiments.md, "Running configs over seeds"):

* ``evaluations.csv``: every evaluation of every run, long format
  (``run, method, seed, round, stage, metric, value``);
* ``summary.csv`` and ``comparison.md``: per method and metric, the final evaluation on the clients'
  test splits (under each run's ``model.eval.rounds`` rule) as mean ± sample std and the 95% Student t
  interval over the seeds, with their number;
* ``personal_summary.csv`` and a section of ``comparison.md`` when some run evaluates personal models
  (:mod:`lightning_fl.experiments.personal`): the ``model.eval`` line, the headline in both weightings,
  worst 20%, the participation gap and the gain over Local per seed, with the same intervals;
* ``runs.csv``: per run, the wall time (total and per round), the seed and data seed its TensorBoard
  HParams session records (checked against the run's own) and the final HParams metrics;
* ``curves.png`` (test accuracy per round, mean and min..max band over seeds) and
  ``client_accuracy.png`` (every client's final test accuracy, pooled over seeds, per method).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_fl.experiments.launcher import launch, run_all
from lightning_fl.experiments.results import (
    Row,
    final_client_accuracies,
    history_rows,
    summarize,
    summary_csv,
    summary_markdown,
    write_long_csv,
)
from lightning_fl.experiments.run_info import (
    run_record,
    target_markdown,
    timing_markdown,
    write_records,
)
from lightning_fl.experiments.personal import PersonalComparison, personal_comparison, reported_rows, run_protocols
from lightning_fl.experiments.runs import Run, default_jobs, plan_runs
from lightning_fl.experiments.stats import Stats, seed_bands
from lightning_fl.experiments.tuning import TUNING_SEEDS, TuningResult
from lightning_fl.experiments.tuning import tune as tune_methods_of
from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.reporting.figures import band_curves_figure
from lightning_fl.reporting.seed_figures import client_accuracy_figure

__all__ = ["GridResult", "run_grid"]

#: Panels of ``curves.png``: metric of the long CSV -> y axis label.
CURVES = {"test/acc_mean": "test accuracy, mean over clients", "test/acc_worst20": "test accuracy, worst 20% of clients",
          "test/acc_pooled": "test accuracy, pooled test set"}


@dataclass
class GridResult:
    """What :func:`run_grid` ran and found.

    Attributes:
        runs: Every run (method x seed).
        rows: Every evaluation, long format (see :data:`~lightning_fl.experiments.results.LONG_HEADER`).
        summary: ``{(method, metric): Stats}`` of the final test evaluation across seeds.
        records: ``runs.csv``'s rows: wall time, HParams check and final metrics per run.
        configs: ``{method: config}`` that ran (the tuned ones with ``tune``).
        report: The markdown written to ``comparison.md``.
        personal: The personalized comparison (``None`` when no run evaluates personal models).
        tuning: What the tuner selected (``None`` without ``tune``).
    """

    runs: list[Run]
    rows: list[Row]
    summary: dict[tuple[str, str], Stats]
    records: list[dict[str, Any]]
    configs: dict[str, str]
    report: str
    personal: PersonalComparison | None = None
    tuning: TuningResult | None = None


def _check(runs: Mapping[str, str], seeds: Sequence[int], jobs: int) -> None:
    if not runs:
        raise ConfigError("runs must name at least one method=config.yaml pair")
    if not seeds:
        raise ConfigError("seeds must list at least one seed (a count such as 3, or a list such as 0,1,2)")
    check_positive("jobs", jobs, integer=True)
    for method, config in runs.items():
        if not Path(config).is_file():
            raise ConfigError(f"runs: the config of {method}, {config}, does not exist")


def run_grid(runs: Mapping[str, str], seeds: Sequence[int], save_dir: Path, jobs: int | None = None,
             extra_args: Sequence[str] = (), *, tune: bool = False, tune_seeds: Sequence[int] = TUNING_SEEDS,
             tune_trials: int | None = None, tune_metric: str = "val/acc_mean",
             tune_objectives: Mapping[str, str] | None = None, tune_methods: Sequence[str] | None = None,
             vary_data_seed: bool = True, title: str = "",
             launcher: Callable[[Run], float] = launch) -> GridResult:
    """Train every config with every seed (finished runs are kept) and write the report files.

    Args:
        runs: ``{method name: config file}``.
        seeds: ``seed_everything`` of each run (and the data seed, see ``vary_data_seed``).
        save_dir: Where runs log (``<save_dir>/<method>/seed_<s>``) and the report files go.
        jobs: Training processes at a time (default: one per CPU core); each gets
            ``cores // jobs`` torch threads (at least 1).
        extra_args: Command-line arguments for every run (``--trainer.max_epochs 20``, a dataset switch).
        tune: First tune each method on the validation splits (:func:`~lightning_fl.experiments.tuning.tune`:
            the same trials and tuning seeds for every method).
        tune_seeds: The tuning seeds (at least 2, none of ``seeds``).
        tune_trials: Trials per method (default :data:`~lightning_fl.experiments.tuning.DEFAULT_TRIALS`).
        tune_metric: The default ``val/*`` objective.
        tune_objectives: ``{method: val/* metric}`` for methods tuned on another objective.
        tune_methods: The methods tuned (default: all); the others run their configs as they are.
        vary_data_seed: Set ``data.init_args.seed`` to the seed where the config sets one (every seed
            a new partition, the same for all methods); ``False`` keeps the config's data.
        title: First line of ``comparison.md`` (e.g. the dataset).
        launcher: Trains one run (tests fake it or train in-process).

    Returns:
        A :class:`GridResult`.

    Raises:
        ConfigError: On bad arguments, before anything trains.
        RuntimeError: If a run fails (the runs in flight finish first).
    """
    jobs = default_jobs() if jobs is None else jobs
    _check(runs, seeds, jobs)
    threads = max(1, default_jobs() // jobs)
    save_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    configs, tuning = dict(runs), ""
    tuned: TuningResult | None = None
    if tune:
        for method in tune_methods or ():
            check_choice("tune_methods", method, list(runs))
        chosen = {method: runs[method] for method in (runs if tune_methods is None else tune_methods)}
        trials = {} if tune_trials is None else {"trials": tune_trials}
        objectives = {m: v for m, v in (tune_objectives or {}).items() if m in chosen}
        tuned = tune_methods_of(chosen, save_dir, tune_seeds, objectives=objectives, metric=tune_metric,
                                overrides=extra_args, jobs=jobs, threads=threads, vary_data_seed=vary_data_seed,
                                launcher=None if launcher is launch else launcher, reporting_seeds=seeds, **trials)
        configs |= tuned.configs
        tuning = tuned.report
    planned = plan_runs(configs, seeds, save_dir, extra_args, vary_data_seed, threads)
    run_all(planned, jobs, launcher)

    rows = [row for run in planned for row in history_rows(run)]
    write_long_csv(rows, save_dir / "evaluations.csv")
    protocols = run_protocols(planned)  # model.eval of each run: its rounds rule decides what the summary reads
    summary = summarize(reported_rows(rows, planned, protocols), "test")
    (save_dir / "summary.csv").write_text(summary_csv(summary))
    personal = personal_comparison(planned, protocols)
    if personal is not None:
        (save_dir / "personal_summary.csv").write_text(summary_csv(personal.summary))
    records = [run_record(run) for run in planned]
    write_records(records, save_dir / "runs.csv")
    for problem in (r["hparams_problems"] for r in records if r["hparams_problems"]):
        print(f"warning: {problem}", flush=True)
    _figures(planned, rows, save_dir, len(seeds))

    data_seeds = "the same data for every seed" if not any(run.data_seed is not None for run in planned) else \
        "data.init_args.seed = seed"
    ruled = any(p is not None and p.rounds != "last" for p, _ in protocols.values())
    evaluation = "Reported evaluation (each run's model.eval rounds rule)" if ruled else "Final evaluation"
    report = (f"{title + chr(10) + chr(10) if title else ''}{evaluation} on the clients' test splits: mean ± sample"
              f" std [95% t interval] over {len(seeds)} seeds ({', '.join(map(str, seeds))}; {data_seeds}).\n\n"
              f"{personal.describe + chr(10) * 2 if personal else ''}{summary_markdown(summary)}")
    report += f"\n{personal.markdown()}" if personal else ""
    targets = target_markdown(planned)
    report += f"\n{targets}" if targets else ""
    report += f"\nWall time ({jobs} runs at a time):\n\n{timing_markdown(records)}"
    report += f"\n{tuning}" if tuning else ""
    (save_dir / "comparison.md").write_text(report)
    print(f"\n{report}\nSaved comparison.md, summary.csv, {'personal_summary.csv, ' if personal else ''}evaluations.csv,"
          f" runs.csv, curves.png and client_accuracy.png"
          f" to {save_dir} ({time.perf_counter() - started:.0f} s); curves: tensorboard --logdir {save_dir}", flush=True)
    return GridResult(planned, rows, summary, records, configs, report, personal, tuned)


def _figures(runs: Sequence[Run], rows: Sequence[Row], save_dir: Path, num_seeds: int) -> None:
    flat = [(method, seed, r, f"{stage}/{metric}", value) for _run, method, seed, r, stage, metric, value in rows]
    panels = [(label, bands) for metric, label in CURVES.items() if (bands := seed_bands(flat, metric))]
    if panels:
        band_curves_figure(panels, title=f"Mean over {num_seeds} seeds, band = min..max over seeds").savefig(
            save_dir / "curves.png", dpi=100)
    clients = final_client_accuracies(runs, "test")
    if clients:
        client_accuracy_figure(clients, f"Client test accuracy at the final round, {num_seeds} seeds pooled").savefig(
            save_dir / "client_accuracy.png", dpi=100)
