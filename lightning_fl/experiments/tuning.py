"""Fair baselines: a small hyperparameter grid per method, selected on the validation splits.

Every method gets the same treatment: each setting of its grid (:data:`GRIDS`, looked up by the
config's aggregation callback; :data:`DEFAULT_GRID` for the others) trains once, on one seed, and the
setting with the best final score on the clients' **validation** splits (``val/acc_mean`` by default)
wins; ties go to the first setting in grid order. A *staged* search (``reference``, the protocol of the
FedProx and q-FFL papers) costs far fewer runs: the reference method (FedAvg) selects the client lr
over :data:`CLIENT_LR`, and every other method then searches only its own parameters at that lr (a
method without any, e.g. another epoch count of the reference, takes it without a run). Only ``val/*`` metrics can be selected on, and the
scores are read from the ``val`` rows of each run's ``fairness_history.csv`` alone, so test data never
influence the choice. The chosen setting is then written as a config of its own
(``<save_dir>/tuned/<method>.yaml``) that the comparison runs over all seeds. See
docs/experiments.md, "Fair baselines".
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from lightning_fl.experiments.launcher import launch, run_all
from lightning_fl.experiments.runs import Run, plan_runs
from lightning_fl.faults.validation import ConfigError, check_choice

__all__ = ["DEFAULT_GRID", "GRIDS", "TUNE_METRICS", "aggregation_of", "at_grid_edge", "grid_for", "own_grid", "point_label",
           "select", "tune", "tuning_markdown", "val_score", "write_point_config"]

#: Client learning rates tried for every method (half-decade steps around the configs' 0.01).
CLIENT_LR: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1)
#: The grid of a method whose aggregation callback has no entry in :data:`GRIDS`.
DEFAULT_GRID: dict[str, tuple[float, ...]] = {"client_lr": CLIENT_LR}
#: Per aggregation callback: ``client_lr`` is the client optimizer's ``lr``; every other key is an
#: init argument of the callback (FedAdam/FedYogi/FedAdagrad's server learning rate is their ``lr``).
GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "FedAvg": DEFAULT_GRID,
    "FedProx": {"client_lr": CLIENT_LR, "mu": (0.001, 0.01, 0.1, 1.0)},  # the FedProx paper's grid
    "QFFL": {"client_lr": CLIENT_LR, "q": (0.1, 1.0, 5.0)},  # its step is L = 1/lr: the client lr
    "FedAvgM": {"client_lr": CLIENT_LR, "server_lr": (0.1, 0.3, 1.0)},
    **{name: {"client_lr": CLIENT_LR, "lr": (0.001, 0.01, 0.1, 1.0)} for name in ("FedAdam", "FedYogi", "FedAdagrad")},
}
#: Validation metrics a grid can be selected on (higher is better for each).
TUNE_METRICS = ("val/acc_mean", "val/acc_weighted", "val/acc_pooled", "val/acc_worst20", "val/acc_best20",
                "val/acc_min", "val/jain")


def _load(config: str | Path) -> dict[str, Any]:
    return yaml.safe_load(Path(config).read_text()) or {}


def aggregation_of(config: str | Path) -> str | None:
    """The class name of the first callback in ``config`` that has a grid (``None``: none has)."""
    for callback in (_load(config).get("trainer") or {}).get("callbacks") or []:
        name = str(callback.get("class_path", "")).rpartition(".")[2] if isinstance(callback, dict) else ""
        if name in GRIDS:
            return name
    return None


def grid_for(config: str | Path) -> list[dict[str, float]]:
    """Every setting of ``config``'s grid, in grid order (the last key varies fastest)."""
    grid = GRIDS.get(aggregation_of(config) or "", DEFAULT_GRID)
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def own_grid(config: str | Path) -> list[dict[str, float]]:
    """The settings of ``config``'s grid without ``client_lr`` (``[{}]`` where the grid has nothing else)."""
    grid = {k: v for k, v in GRIDS.get(aggregation_of(config) or "", DEFAULT_GRID).items() if k != "client_lr"}
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def point_label(point: Mapping[str, float]) -> str:
    """``{"client_lr": 0.01, "mu": 0.1}`` -> ``"client_lr=0.01,mu=0.1"`` (also a folder name)."""
    return ",".join(f"{key}={value:g}" for key, value in point.items())


def check_tunable(config: str | Path, method: str) -> None:
    """Raise :class:`ConfigError` if ``config`` has no validation splits (``data.init_args.val_fraction: 0``)."""
    init_args = (_load(config).get("data") or {}).get("init_args") or {}
    if init_args.get("val_fraction", 0.1) == 0:
        raise ConfigError(f"--tune: data.init_args.val_fraction of {method} ({config}) is 0; tuning selects on the"
                          " validation splits, so it must be > 0")


def write_point_config(config: str | Path, point: Mapping[str, float], path: Path) -> Path:
    """Write ``config`` with ``point`` applied to ``path`` (``client_lr``: the optimizer; others: the callback)."""
    data = _load(config)
    aggregation = aggregation_of(config)
    for key, value in point.items():
        if key == "client_lr":
            data["model"]["optimizer"].setdefault("init_args", {})["lr"] = value
            continue
        [callback] = [c for c in data["trainer"]["callbacks"] if str(c.get("class_path", "")).endswith(f".{aggregation}")]
        callback.setdefault("init_args", {})[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {config} with {point_label(point)} (written by the experiment runner's --tune)\n"
                    + yaml.safe_dump(data, sort_keys=False))
    return path


def val_score(log_dir: Path, metric: str = "val/acc_mean") -> float | None:
    """``metric`` at the run's last validation evaluation, from the ``val`` rows of ``fairness_history.csv``.

    Returns ``None`` for a run without that file or without validation rows, and for a NaN score.
    """
    check_choice("tune metric", metric, TUNE_METRICS)
    path = log_dir / "fairness_history.csv"
    if not path.exists():
        return None
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r["stage"] == "val"]  # test rows are never looked at
    if not rows:
        return None
    score = float(max(rows, key=lambda r: int(r["round"]))[metric.partition("/")[2]])
    return None if math.isnan(score) else score


def select(scores: Sequence[tuple[Mapping[str, float], float | None]]) -> int | None:
    """Index of the best ``(setting, score)``: highest score, the first on ties; ``None`` if none has one."""
    valid = [(i, score) for i, (_, score) in enumerate(scores) if score is not None]
    return max(valid, key=lambda item: (item[1], -item[0]))[0] if valid else None


def at_grid_edge(selected: Mapping[str, float], grid: Sequence[Mapping[str, float]]) -> list[str]:
    """The keys of ``selected`` at the smallest or largest value the grid tried, where it tried several.

    Example:
        >>> at_grid_edge({"client_lr": 0.1, "mu": 0.01}, [{"client_lr": lr, "mu": 0.01} for lr in (0.01, 0.1)])
        ['client_lr']
    """
    edges = []
    for key, value in selected.items():
        tried = {point[key] for point in grid if key in point}
        if len(tried) > 1 and value in (min(tried), max(tried)):
            edges.append(key)
    return edges


def tuning_markdown(results: Mapping[str, Mapping[str, Any]], metric: str, seed: int, reference: str | None = None) -> str:
    """The grids' validation scores per method, the selected setting in bold."""
    staged = (f" Staged: {reference} selected the client lr, the others their own parameters at that lr"
              " (a single setting is taken without a run)." if reference else "")
    lines = [f"Hyperparameters selected on the validation splits ({metric} at the final round), seed {seed}.{staged}",
             ""]
    for method, result in results.items():
        chosen = point_label(result["selected"]) if result["selected"] else "nothing (every setting failed)"
        edges = at_grid_edge(result["selected"], [entry["setting"] for entry in result["grid"]])
        if edges:
            chosen += f" ({', '.join(edges)} at the edge of the grid: a wider grid may do better)"
        lines += [f"{method} ({result['aggregation'] or 'default grid'}): selected {chosen}", "",
                  f"| Setting | {metric} |", "| :--- | ---: |"]
        for entry in result["grid"]:
            score = ("not run" if len(result["grid"]) == 1 else "failed") if entry["score"] is None else \
                f"{entry['score']:.4f}"
            label = point_label(entry["setting"])
            lines.append(f"| **{label}** | **{score}** |" if entry["setting"] == result["selected"] else
                         f"| {label} | {score} |")
        lines.append("")
    return "\n".join(lines)


def write_tuning(results: Mapping[str, Mapping[str, Any]], metric: str, seed: int, save_dir: Path,
                 reference: str | None = None) -> str:
    """Write ``tuning.json`` and ``tuning.md`` into ``save_dir``; returns the markdown."""
    report = tuning_markdown(results, metric, seed, reference)
    (save_dir / "tuning.json").write_text(json.dumps({"metric": metric, "seed": seed, "reference": reference,
                                                      "methods": results}, indent=2))
    (save_dir / "tuning.md").write_text(report)
    return report


def _search(methods: Mapping[str, str], grids: Mapping[str, list[dict[str, float]]], save_dir: Path, seed: int,
            overrides: Sequence[str], jobs: int, threads: int | None, metric: str, vary_data_seed: bool,
            launcher: Callable[[Run], float]) -> dict[str, dict[str, Any]]:
    """Train every point of every grid of more than one point on ``seed``; select each method's on ``metric``."""
    candidates = {f"{method}/{point_label(point)}": str(write_point_config(
        methods[method], point, save_dir / "tuning" / "configs" / method / f"{point_label(point)}.yaml"))
        for method, grid in grids.items() if len(grid) > 1 for point in grid}
    runs = plan_runs(candidates, [seed], save_dir / "tuning", overrides, vary_data_seed, threads)
    failed = run_all(runs, jobs, launcher, keep_going=True)
    scores = {run.method: None if run in failed else val_score(run.log_dir, metric) for run in runs}
    results: dict[str, dict[str, Any]] = {}
    for method, grid in grids.items():
        scored = [(point, scores.get(f"{method}/{point_label(point)}")) for point in grid]
        best = 0 if len(grid) == 1 else select(scored)
        if best is None:
            raise ConfigError(f"--tune: every setting of {method}'s grid failed; see {save_dir / 'tuning' / method}")
        results[method] = {"config": methods[method], "aggregation": aggregation_of(methods[method]),
                           "selected": scored[best][0], "grid": [{"setting": p, "score": s} for p, s in scored]}
    return results


def tune(methods: Mapping[str, str], save_dir: Path, seed: int, overrides: Sequence[str] = (), jobs: int = 1,
         threads: int | None = None, metric: str = "val/acc_mean", vary_data_seed: bool = True,
         launcher: Callable[[Run], float] = launch, reference: str | None = None) -> tuple[dict[str, str], str]:
    """Train every method's grid on ``seed`` and select each method's setting on ``metric``.

    Runs go to ``<save_dir>/tuning/<method>/<setting>/seed_<seed>`` (finished ones are kept; a setting
    that fails, e.g. diverges, scores nothing). Writes ``tuning.json`` and ``tuning.md`` to ``save_dir``
    and each winner's config to ``<save_dir>/tuned/<method>.yaml``.

    Args:
        methods: ``{method: config}`` to tune.
        save_dir: See above.
        seed: The seed of every selection run (one the reported runs do not use).
        overrides: Command-line arguments for every run.
        jobs: Training processes at a time.
        threads: Torch threads per run.
        metric: The ``val/*`` metric maximised.
        vary_data_seed: Set ``data.init_args.seed`` to ``seed`` where the config sets one.
        launcher: Trains one run.
        reference: ``None``: every method searches its whole grid. A method name: a staged search (see
            the module's docstring): ``reference`` selects the client lr, the others their own
            parameters at that lr.

    Returns:
        ``({method: config of its selected setting}, markdown report)``.

    Raises:
        ConfigError: For a metric outside :data:`TUNE_METRICS`, a config without validation splits or a
            ``reference`` that is not a method (before anything trains), or a method whose every
            setting failed.
    """
    check_choice("tune metric", metric, TUNE_METRICS)
    if reference is not None:
        check_choice("tune reference", reference, list(methods))
    for method, config in methods.items():
        check_tunable(config, method)
    search = (overrides, jobs, threads, metric, vary_data_seed, launcher)
    if reference is None:
        results = _search(methods, {m: grid_for(c) for m, c in methods.items()}, save_dir, seed, *search)
    else:
        results = _search(methods, {reference: [{"client_lr": lr} for lr in CLIENT_LR]}, save_dir, seed, *search)
        lr = results[reference]["selected"]["client_lr"]
        others = {m: [{"client_lr": lr, **own} for own in own_grid(c)] for m, c in methods.items() if m != reference}
        results |= _search(methods, others, save_dir, seed, *search)
        results = {m: results[m] for m in methods}  # the caller's order
    selected = {m: str(write_point_config(methods[m], r["selected"], save_dir / "tuned" / f"{m}.yaml"))
                for m, r in results.items()}
    return selected, write_tuning(results, metric, seed, save_dir, reference)
