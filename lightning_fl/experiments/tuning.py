"""Equal-budget tuning: every method searched with the same trials and seeds, selected on the validation splits.

:func:`tune` gives every method the same budget: ``trials`` Optuna trials (seeded TPE, a median pruner
over the rounds' validation evaluations), each trained on every one of the tuning seeds
(:data:`TUNING_SEEDS`, at least two, never a reporting seed) and scored by the mean over them of the
method's objective (``objectives[method]``, a ``val/*`` metric; ``val/acc_mean`` by default) at the
final validation round. Scores come from the ``val`` rows of each run's history only, so test data
never influence a choice. A space whose best trial sits at its edge is widened for the next stage of
the budget (:mod:`~lightning_fl.experiments.optuna_search`). Each method's selection is written as a
config of its own (``<save_dir>/tuned/<method>.yaml``), and ``tuning.md`` / ``tuning.json`` record the
budget, every trial's parameters and validation score, the pruned trials, the widenings, the selections
and the edge flags. See docs/experiments.md, "Fair baselines".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lightning_fl.experiments.optuna_search import MAX_WIDENINGS, rounds_of, search_method
from lightning_fl.experiments.runs import Run
from lightning_fl.experiments.search_space import aggregation_of, point_label, space_for, write_point_config
from lightning_fl.experiments.tuning_runs import ABORT
from lightning_fl.faults.validation import ConfigError, check_choice

__all__ = ["DEFAULT_TRIALS", "METRIC_DIRECTIONS", "TUNE_METRICS", "TUNING_SEEDS", "TuningResult", "budget_text",
           "check_tuning", "has_validation_splits", "tune", "tuning_markdown"]

#: The seeds of every tuning run: fixed, and never among a comparison's reporting seeds (checked).
TUNING_SEEDS: tuple[int, ...] = (1000, 1001)
#: Trials per method by default. ``make reproduce PAPER=fedfa SCALE=small`` (4 settings x 5 methods) then
#: trains 20 x 6 x 2 = 240 tuning runs (fewer rounds where pruned) beside the 100 reported runs of 5 seeds:
#: at the 10 s per run (two at a time on 2 cores) its earlier reproduction measured, about an hour.
DEFAULT_TRIALS = 6
#: The validation metrics a method can be tuned on, with the direction that is better.
METRIC_DIRECTIONS: dict[str, str] = {
    **{f"val/{k}": "maximize" for k in ("acc_mean", "acc_weighted", "acc_pooled", "acc_worst20", "acc_best20",
                                        "acc_min", "jain")},
    "val/acc_var": "minimize", "val/acc_std": "minimize",
}
TUNE_METRICS = tuple(METRIC_DIRECTIONS)


@dataclass(frozen=True)
class TuningResult:
    """What :func:`tune` selected.

    Attributes:
        configs: ``{method: config of its selected setting}``.
        methods: ``{method: search result}`` (see :func:`~lightning_fl.experiments.optuna_search.search_method`).
        budget: The budget in words (``"8 trials x 2 seeds (1000, 1001)"``).
        report: The markdown written to ``tuning.md``.
    """

    configs: dict[str, str]
    methods: dict[str, dict[str, Any]]
    budget: str
    report: str

    @property
    def selected(self) -> dict[str, str]:
        """``{method: "client_lr=0.0123,mu=0.1"}``."""
        return {m: point_label(r["selected"]) for m, r in self.methods.items()}

    @property
    def failed(self) -> dict[str, str]:
        """``{method: "2 of 6"}``: the trials that failed (e.g. diverged) of the methods that had any; they score
        nothing and use up the budget, so a method that loses many selects from fewer points."""
        counts = {m: sum(t["state"] == "failed" for t in r["trials"]) for m, r in self.methods.items()}
        return {m: f"{n} of {len(self.methods[m]['trials'])}" for m, n in counts.items() if n}

    @property
    def at_edge(self) -> dict[str, list[str]]:
        """``{method: parameters}`` of the selections still at an edge of their final space (flagged)."""
        return {m: list(r["at_edge"]) for m, r in self.methods.items() if r["at_edge"]}


def budget_text(trials: int, seeds: Sequence[int]) -> str:
    """``"8 trials x 2 seeds (1000, 1001)"``."""
    return f"{trials} trials x {len(seeds)} seeds ({', '.join(map(str, seeds))})"


def has_validation_splits(config: str | Path) -> bool:
    """Whether ``config`` keeps validation splits (``data.init_args.val_fraction`` is not 0; default 0.1)."""
    init_args = ((yaml.safe_load(Path(config).read_text()) or {}).get("data") or {}).get("init_args") or {}
    return init_args.get("val_fraction", 0.1) != 0


def check_tuning(methods: Mapping[str, str], seeds: Sequence[int], trials: int, objectives: Mapping[str, str],
                 reporting_seeds: Sequence[int] = ()) -> None:
    """Raise :class:`ConfigError` (one line) for input the tuner cannot use, before anything trains."""
    if not methods:
        raise ConfigError("tune: name at least one method=config.yaml pair")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigError(f"tune trials must be an integer >= 1; got {trials!r}")
    if len(set(seeds)) < 2 or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ConfigError(f"tune seeds must be at least 2 distinct seeds >= 0 (e.g. 1000,1001); got {list(seeds)}")
    if shared := sorted(set(seeds) & set(reporting_seeds)):
        raise ConfigError(f"tune seeds must not be reporting seeds; {shared} are both (tuning seeds: {list(seeds)})")
    for method, metric in objectives.items():
        check_choice("tune objective's method", method, list(methods))
        check_choice("tune metric", metric, TUNE_METRICS)
    for method, config in methods.items():
        if not Path(config).is_file():
            raise ConfigError(f"tune: the config of {method}, {config}, does not exist")
        if not has_validation_splits(config):
            raise ConfigError(f"tune: data.init_args.val_fraction of {method} ({config}) is 0; tuning selects on the"
                              " validation splits, so it must be > 0")


def _score(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def _range(low: float, high: float, scale: str) -> str:
    return f"{low:.3g}..{high:.3g}{' (log)' if scale == 'log' else ''}"


def tuning_markdown(results: Mapping[str, Mapping[str, Any]], budget: str) -> str:
    """The budget, then per method: objective, space, widenings, every trial (selected in bold), edge flag."""
    lines = [f"Tuning budget, the same for every method: {budget}, selected on the validation splits only (each"
             f" trial's score: the mean over the seeds of the objective at the final validation round; TPE sampler"
             f" seeded with the first tuning seed, median pruner over rounds). A best trial in the outer 10% of a"
             f" range widens it for the next stage, at most {MAX_WIDENINGS} times.", ""]
    for method, r in results.items():
        direction = "higher" if r["maximize"] else "lower"
        space = ", ".join(f"{name} {_range(*bounds)}" for name, bounds in r["space"].items())
        chosen = "nothing (no trial completed)" if r["selected"] is None else \
            f"{point_label(r['selected'])} (score {_score(r['score'])})"
        lines.append(f"### {method}\n\nAggregation {r['aggregation'] or 'default'}; objective {r['metric']}"
                     f" ({direction} is better); stages {r['stages']}; final space: {space}. Selected: **{chosen}**.")
        for w in r["widenings"]:
            ranges = "; ".join(f"{n} {old[0]:.3g}..{old[1]:.3g} -> {new[0]:.3g}..{new[1]:.3g}"
                               for n, (old, new) in w["ranges"].items())
            lines.append(f"Widened after stage {w['after_stage'] + 1} (trial {w['trial']} at an edge): {ranges}.")
        if r["at_edge"]:
            edge = ", ".join(f"{n} ({side})" for n, side in r["at_edge"].items())
            limit = "the limit of widenings reached" if len(r["widenings"]) >= len(r["stages"]) - 1 else "no stage left"
            lines.append(f"**Flagged: still at the edge of its space: {edge}** ({limit}; a wider search may do"
                         " better).")
        lines += ["", "| Trial | Stage | Parameters | Seeds | Score | State |",
                  "| ---: | ---: | :--- | :--- | ---: | :--- |"]
        for t in r["trials"]:
            seeds = ", ".join(f"{v:.4f}" for v in t["seed_scores"])
            state = {"pruned": f"pruned at round {t['pruned_at']}", "failed": f"failed: {t['error']}"}.get(t["state"],
                                                                                                         "complete")
            row = f"| {t['number']} | {t['stage'] + 1} | {t['label']} | {seeds} | {_score(t['score'])} | {state} |"
            lines.append(row.replace(f"| {t['label']} |", f"| **{t['label']}** |")
                         if r["selected"] is not None and t["params"] == r["selected"] else row)
        lines.append("")
    return "\n".join(lines)


def tune(methods: Mapping[str, str], save_dir: Path, seeds: Sequence[int] = TUNING_SEEDS,
         trials: int = DEFAULT_TRIALS, objectives: Mapping[str, str] | None = None, metric: str = "val/acc_mean",
         overrides: Sequence[str] = (), jobs: int = 1, threads: int | None = None, vary_data_seed: bool = True,
         launcher: Callable[[Run], float] | None = None, reporting_seeds: Sequence[int] = ()) -> TuningResult:
    """Tune every method with the same budget; write ``tuning.md``, ``tuning.json`` and ``tuned/<method>.yaml``.

    Args:
        methods: ``{method: config}``.
        save_dir: Trials go to ``<save_dir>/tuning/``, the reports and selected configs beside.
        seeds: The tuning seeds (at least 2; none may be in ``reporting_seeds``).
        trials: Trials per method.
        objectives: ``{method: val/* metric}``; methods not named use ``metric``.
        metric: The default objective.
        overrides: Command-line arguments for every run.
        jobs: Training processes at a time (methods are searched ``jobs // len(seeds)`` at a time, each
            trial's seeds in parallel).
        threads: Torch threads per run.
        vary_data_seed: Set ``data.init_args.seed`` to the seed where the config sets one.
        launcher: ``None``: real runs, stopped when pruned; tests pass a fake (see
            :func:`~lightning_fl.experiments.tuning_runs.evaluate_trial`).
        reporting_seeds: The seeds the comparison reports (refused as tuning seeds).

    Returns:
        A :class:`TuningResult`.

    Raises:
        ConfigError: On bad input (before anything trains), or when no trial of a method completed.
    """
    for method in objectives or {}:
        check_choice("tune objective's method", method, list(methods))
    objectives = {m: (objectives or {}).get(m, metric) for m in methods}
    check_choice("tune metric", metric, TUNE_METRICS)
    check_tuning(methods, seeds, trials, objectives, reporting_seeds)
    ABORT.clear()

    def one(method: str) -> dict[str, Any]:
        config = methods[method]
        result = search_method(method, config, space_for(config), trials, list(seeds), objectives[method],
                               METRIC_DIRECTIONS[objectives[method]] == "maximize", save_dir,
                               rounds_of(config, overrides), overrides, vary_data_seed, threads, launcher)
        return {"config": config, "aggregation": aggregation_of(config), **result}

    with ThreadPoolExecutor(max_workers=max(1, jobs // len(seeds))) as pool:
        futures = {m: pool.submit(one, m) for m in methods}
        try:
            results = {m: f.result() for m, f in futures.items()}
        except BaseException:
            ABORT.set()  # every trial in flight stops its processes (they stay resumable); no new one starts
            pool.shutdown(cancel_futures=True)
            raise
    for method, r in results.items():
        if r["selected"] is None:
            raise ConfigError(f"tune: no trial of {method} completed; see {save_dir / 'tuning' / method}")
    budget = budget_text(trials, seeds)
    configs = {m: str(write_point_config(methods[m], r["selected"], save_dir / "tuned" / f"{m}.yaml"))
               for m, r in results.items()}
    report = tuning_markdown(results, budget)
    save_dir.mkdir(parents=True, exist_ok=True)
    (save_dir / "tuning.md").write_text(f"# Tuning\n\n{report}")
    (save_dir / "tuning.json").write_text(json.dumps({"budget": budget, "trials": trials, "seeds": list(seeds),
                                                      "methods": results}, indent=2))
    return TuningResult(configs, results, budget, report)
