"""Run a paper's reproduction: every setting's methods over the seeds, then the report.

``make reproduce PAPER=fedfa SEEDS=5 SCALE=small`` (docs/experiments.md, "Reproducing the papers").
Each setting is one call of the experiment runner (:func:`~lightning_fl.experiments.grid.run_grid`):
its runs are resumable, so an interrupted reproduction picks up where it stopped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from lightning_fl.experiments.grid import run_grid
from lightning_fl.experiments.launcher import launch
from lightning_fl.experiments.runs import Run
from lightning_fl.experiments.tuning import has_validation_splits
from lightning_fl.reproduce.claims import Verdict, judge_all
from lightning_fl.reproduce.paper import Paper, SettingResults, best_of_values
from lightning_fl.reproduce.report import render_report, setting_table
from lightning_fl.reproduce.settings import derive_config

__all__ = ["reproduce", "tunes_by_default"]


def _run_setting(paper: Paper, setting, seeds: Sequence[int], save_dir: Path, jobs: int | None, tune: bool,
                 launcher: Callable[[Run], float], trials: int | None = None) -> SettingResults:
    """Train one setting (its tuned methods first tuned with one equal budget) and collect its results."""
    folder = save_dir / setting.folder
    configs = {}
    for method, base in setting.methods.items():
        changes = {**setting.common, **setting.changes.get(method, {})}
        configs[method] = str(derive_config(base, changes, folder / "configs" / f"{method}.yaml"))
    # By default every method that can be: a config without validation splits (the papers' exact training sets)
    # has nothing to select on, and the report names it among the methods not tuned.
    tuned_methods = [m for m in setting.methods if has_validation_splits(configs[m])] \
        if setting.tuned_methods is None else list(setting.tuned_methods)
    tune = tune and bool(tuned_methods)
    grid = run_grid(configs, seeds, folder, jobs, tune=tune, tune_methods=tuned_methods, tune_trials=trials,
                    tune_objectives=setting.objectives, title=f"{paper.title}: {setting.name}",
                    launcher=launcher)
    tuning = grid.tuning
    budget = {} if tuning is None else {
        method: f"{tuning.budget} on {result['metric']}" for method, result in tuning.methods.items()}
    return SettingResults(setting, list(seeds), grid.rows, grid.runs, [float(r["seconds"]) for r in grid.records],
                          {} if tuning is None else tuning.selected, {} if tuning is None else tuning.at_edge, budget,
                          {} if tuning is None else tuning.failed)


def tunes_by_default(scale: str) -> bool:
    """Whether a reproduction at ``scale`` tunes unless told: at ``small`` yes; at ``paper`` (the paper's settings
    as printed) and ``smoke`` (a check of the pipeline) no."""
    return scale == "small"


def reproduce(paper: Paper, scale: str, seeds: Sequence[int], save_dir: Path, docs_dir: Path | None,
              jobs: int | None = None, tune: bool | None = None, command: str = "",
              launcher: Callable[[Run], float] = launch, trials: int | None = None) -> tuple[str, list[Verdict]]:
    """Run ``paper``'s settings at ``scale`` over ``seeds`` and write the report.

    Args:
        paper: The paper.
        scale: ``small``, ``paper`` or ``smoke`` (seconds; checks the pipeline, not the paper).
        seeds: Seeds of every run.
        save_dir: Runs and the report go to ``<save_dir>/<setting>/`` and ``<save_dir>/report.md``.
        docs_dir: Also write the report to ``<docs_dir>/<paper>.md`` (``None``: don't).
        jobs: Training processes at a time (default: one per core).
        tune: Tune every method of each setting (its ``tuned_methods``) with the same budget on the
            validation splits first (:func:`~lightning_fl.experiments.tuning.tune`, on the tuning seeds,
            never ``seeds``); ``None``: :func:`tunes_by_default` (at ``paper`` the paper's settings run as printed).
        command: The command line shown in the report.
        launcher: Trains one run (tests may fake it).
        trials: Trials per tuned method (default :data:`~lightning_fl.experiments.tuning.DEFAULT_TRIALS`).

    Returns:
        ``(report markdown, verdicts)``.
    """
    started = time.perf_counter()
    tune = tunes_by_default(scale) if tune is None else tune
    sections, evidence, all_values = [], [], {}
    for setting in paper.settings(scale):
        results = _run_setting(paper, setting, seeds, save_dir, jobs, tune, launcher, trials)
        values = _metric_values(paper, results, seeds)
        values |= best_of_values(setting, paper.metrics, values)
        all_values |= {(setting.name, method, key): v for (method, key), v in values.items()}
        sections.append((results, setting_table(paper, results, values)))
        for claim in (c for c in paper.claims if c.setting == setting.name and {c.ours, c.baseline} <= set(setting.reported)):
            evidence.append((claim, values[(claim.ours, claim.metric)], values[(claim.baseline, claim.against)]))
    # All settings' claims at once: Holm's correction runs over the paper's whole family of claims.
    verdicts = judge_all(evidence)
    tuned = {results.setting.name: results.tuned for results, _ in sections if results.tuned}
    # Wall time over every call of this reproduction (runs are resumable, so a later call may only report).
    timing = save_dir / "wall_time.json"
    before = json.loads(timing.read_text())["minutes"] if timing.is_file() else 0.0
    minutes = before + (time.perf_counter() - started) / 60
    save_dir.mkdir(parents=True, exist_ok=True)
    timing.write_text(json.dumps({"minutes": minutes}))
    files = (f"Runs, configs and per-setting `comparison.md`, `evaluations.csv`, `curves.png`,"
             f" `client_accuracy.png`: `{save_dir}/<setting>/`; TensorBoard: `tensorboard --logdir {save_dir}`.")
    run_minutes = sum(sum(results.run_seconds) for results, _ in sections) / 60
    report = render_report(paper, scale, seeds, sections, verdicts, command or f"make reproduce PAPER={paper.key}",
                           minutes, files, run_minutes, tune, paper.discussion(verdicts, all_values, tuned))
    save_dir.mkdir(parents=True, exist_ok=True)
    (save_dir / "report.md").write_text(report)
    if docs_dir is not None:
        docs_dir.mkdir(parents=True, exist_ok=True)
        (docs_dir / f"{paper.key}.md").write_text(report)
    return report, verdicts


def _metric_values(paper: Paper, results: SettingResults, seeds: Sequence[int]) -> dict[tuple[str, str], list[float]]:
    """``{(method, metric): one value per seed}`` for every metric that applies to the method.

    A metric raises ``KeyError`` where it does not apply (e.g. an accuracy reduction on the IID
    reference run); each value is computed once.
    """
    values = {}
    for method in results.setting.methods:
        for key, metric in paper.metrics.items():
            try:
                values[(method, key)] = [metric.value(results, method, seed) for seed in seeds]
            except KeyError:
                continue
    return values
