"""One method's search: an Optuna study (seeded TPE, median pruner over rounds) in stages that widen its space.

Every method gets the same budget: ``trials`` trials, each trained on every tuning seed and scored by
the mean of their final validation values. The budget is split into stages (:func:`stage_sizes`): after
each stage but the last, a best trial in the outer 10% of a range (:func:`~lightning_fl.experiments.
search_space.edges`) widens that range for the following stages (at most ``max_widenings`` times; every
stage boundary can widen once). The same study goes on over the wider space, so the trials already run
still guide TPE, and the total stays ``trials``. A best trial still at an edge after the last stage is
flagged. Trials run one after another within a study, so the same seeds and budget give the same
selections; docs/experiments.md, "Fair baselines".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_fl.experiments.runs import Run, plan_runs
from lightning_fl.experiments.search_space import Param, edges, point_label, widen, write_point_config
from lightning_fl.experiments.tuning_runs import TrialOutcome, evaluate_trial, release_client_state

__all__ = ["MAX_WIDENINGS", "PRUNER_STARTUP_TRIALS", "PRUNER_WARMUP", "best_trial", "rounds_of", "search_method",
           "stage_sizes"]

#: Stage boundaries at which a space may be widened (the declared limit of widenings).
MAX_WIDENINGS = 2
#: Trials never pruned (the median needs some complete curves first).
PRUNER_STARTUP_TRIALS = 3
#: Fraction of a run's rounds before which nothing is pruned (early rounds rank learning rates poorly: a
#: small lr that ends best starts slowest), so only the second half of a run can be saved.
PRUNER_WARMUP = 0.5


def stage_sizes(trials: int, max_widenings: int = MAX_WIDENINGS) -> list[int]:
    """The budget's stages: up to ``max_widenings`` equal later stages sharing at most half the trials, and a
    first stage of the rest (where TPE samples at random).

    Example:
        >>> stage_sizes(6), stage_sizes(8), stage_sizes(12), stage_sizes(3), stage_sizes(1)
        ([4, 1, 1], [4, 2, 2], [6, 3, 3], [2, 1], [1])
    """
    later = min(max_widenings, trials // 2)
    if later == 0:
        return [trials]
    size = (trials // 2) // later
    return [trials - later * size, *[size] * later]


def best_trial(trials: Sequence[Mapping[str, Any]], maximize: bool) -> Mapping[str, Any] | None:
    """The complete trial with the best score (the first on ties); ``None`` if none completed."""
    complete = [t for t in trials if t["state"] == "complete"]
    if not complete:
        return None
    sign = 1.0 if maximize else -1.0
    return max(complete, key=lambda t: (sign * t["score"], -t["number"]))


def _study(maximize: bool, seed: int, startup: int, warmup: int) -> Any:
    import optuna  # here only: the rest of the package does not need it

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS, n_warmup_steps=warmup)
    return optuna.create_study(direction="maximize" if maximize else "minimize", sampler=sampler, pruner=pruner)


def _distributions(space: Sequence[Param]) -> dict[str, Any]:
    from optuna.distributions import FloatDistribution

    return {p.name: FloatDistribution(p.low, p.high, log=p.log) for p in space}


def _tell(study: Any, trial: Any, outcome: TrialOutcome) -> None:
    from optuna.trial import TrialState

    if outcome.state == "complete":
        study.tell(trial, outcome.score)
    else:
        study.tell(trial, state=TrialState.PRUNED if outcome.state == "pruned" else TrialState.FAIL)


def search_method(name: str, config: str, space: Sequence[Param], trials: int, seeds: Sequence[int], metric: str,
                  maximize: bool, save_dir: Path, rounds: int, overrides: Sequence[str] = (),
                  vary_data_seed: bool = True, threads: int | None = None,
                  launcher: Callable[[Run], float] | None = None) -> dict[str, Any]:
    """Search ``name``'s ``space`` with ``trials`` trials on ``seeds``; see the module docstring.

    Trial ``n`` writes ``<save_dir>/tuning/configs/<name>/trial_<n>.yaml`` and trains into
    ``<save_dir>/tuning/<name>/trial_<n>/seed_<s>/`` (finished runs are kept and reread).

    Args:
        name: The method.
        config: Its config.
        space: Its parameters (:func:`~lightning_fl.experiments.search_space.space_for`).
        trials: The budget.
        seeds: The tuning seeds; the first also seeds the TPE sampler.
        metric: The ``val/*`` objective.
        maximize: Its direction.
        save_dir: See above.
        rounds: The runs' rounds (the pruner's warm-up is :data:`PRUNER_WARMUP` of them).
        overrides: Command-line arguments for every run.
        vary_data_seed: Set ``data.init_args.seed`` to each seed where the config sets one.
        threads: Torch threads per run.
        launcher: See :func:`~lightning_fl.experiments.tuning_runs.evaluate_trial`.

    Returns:
        ``{"metric", "maximize", "space" (final ranges), "widenings", "trials", "selected", "score",
        "at_edge" ({param: side} of the selection in the final space)}``; ``selected`` is ``None`` when
        no trial completed.
    """
    sizes = stage_sizes(trials)
    study = _study(maximize, seeds[0], sizes[0], int(rounds * PRUNER_WARMUP))
    space, widenings, records = list(space), [], []
    for stage, size in enumerate(sizes):
        for _ in range(size):
            trial = study.ask(_distributions(space))
            point = {p.name: trial.params[p.name] for p in space}
            number = len(records)
            path = write_point_config(config, point, save_dir / "tuning" / "configs" / name / f"trial_{number}.yaml")
            runs = plan_runs({f"{name}/trial_{number}": str(path)}, seeds, save_dir / "tuning", overrides,
                             vary_data_seed, threads)
            outcome = evaluate_trial(trial, runs, metric, launcher)
            _tell(study, trial, outcome)
            release_client_state(runs)
            records.append({"number": number, "stage": stage, "params": point, "label": point_label(point),
                            "state": outcome.state, "score": outcome.score, "seed_scores": outcome.seed_scores,
                            "pruned_at": outcome.pruned_at, "steps": outcome.steps, "error": outcome.error})
            done = {"complete": f"{metric} {outcome.score:.4f}" if outcome.score is not None else "",
                    "pruned": f"pruned at round {outcome.pruned_at}", "failed": f"failed: {outcome.error}"}
            print(f"tune {name}: trial {number + 1}/{trials} (stage {stage + 1}) {point_label(point)}:"
                  f" {done[outcome.state]}", flush=True)
        best = best_trial(records, maximize)
        if stage < len(sizes) - 1 and best is not None and (sides := edges(best["params"], space)):
            before = {p.name: [p.low, p.high] for p in space if p.name in sides}
            space = [widen(p, sides[p.name]) if p.name in sides else p for p in space]
            widenings.append({"after_stage": stage, "trial": best["number"],
                              "ranges": {p.name: [before[p.name], [p.low, p.high]] for p in space if p.name in sides}})
    best = best_trial(records, maximize)
    return {"metric": metric, "maximize": maximize, "stages": sizes,
            "space": {p.name: [p.low, p.high, "log" if p.log else "linear"] for p in space},
            "widenings": widenings, "trials": records, "selected": None if best is None else best["params"],
            "score": None if best is None else best["score"],
            "at_edge": {} if best is None else edges(best["params"], space)}


def rounds_of(config: str, overrides: Sequence[str]) -> int:
    """``trainer.max_epochs`` of a run: the last ``--trainer.max_epochs`` override, else the config's (else 1)."""
    import yaml

    values = [overrides[i + 1] for i, arg in enumerate(overrides[:-1]) if arg == "--trainer.max_epochs"]
    if values:
        return int(values[-1])
    trainer = (yaml.safe_load(Path(config).read_text()) or {}).get("trainer") or {}
    epochs = trainer.get("max_epochs")
    return epochs if isinstance(epochs, int) and not isinstance(epochs, bool) and epochs > 0 else 1
