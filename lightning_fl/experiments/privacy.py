"""``make privacy``: accuracy and its disparate impact under client-level differential privacy.

FedAvg, FedFa and q-FFL, each in its DP-safe form (bounded per-client weights over a fixed denominator,
docs/algorithms.md, Client-level differential privacy), train on the setting of
``configs/privacy/privacy_fmnist.yaml`` (``--config``: another) at epsilon in {inf, 8, 2, 1} over several seeds
(docs/experiments.md, "Privacy: accuracy and disparate impact"). A finite epsilon calibrates the noise
multiplier over the planned rounds (Poisson sampling, PLD accountant, delta = N^-1.1); epsilon = inf is the
same DP-safe form with the same sampling and fixed denominator but no clipping and no noise, so the
difference between the two is the mechanism alone. The save directory gets:

* ``privacy.md`` and ``privacy.csv``: per method and epsilon, the average and worst-20% test accuracy
  (mean and 95% t interval over the seeds) and the realised epsilon (the runs' last ``dp/epsilon``);
* ``privacy.png``: per client, the accuracy lost under DP (``--impact-epsilon``, default 2, against inf, same
  seed and client) against its training-set size and its label rarity (:func:`label_rarity`), with
  Spearman's rank correlation per method in ``privacy.md``.

Finished runs are kept (a rerun only reports). Example::

    python -m lightning_fl.experiments.privacy --save-dir lightning_logs/privacy --seeds 3
"""

from __future__ import annotations

import argparse
import copy
import importlib
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.stats import spearmanr
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_fl.experiments.grid import GridResult, run_grid
from lightning_fl.experiments.launcher import command_line, launch
from lightning_fl.experiments.results import final_client_accuracy, interval_text, pick_subset
from lightning_fl.experiments.runs import Run, parse_seeds
from lightning_fl.experiments.stats import Stats, stats
from lightning_fl.faults.validation import ConfigError
from lightning_fl.reporting.privacy_figure import impact_panels

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "configs" / "privacy" / "privacy_fmnist.yaml"
#: Each method's DP-safe aggregation callback. q-FFL's F_max is ln 10 = 2.3026, the loss of the uniform
#: prediction over the 10 classes: a public number, so its weights a_k = (min(F_k, F_max) / F_max)^q read no data
#: but client k's own loss. FedFa keeps fedfa_synthetic.yaml's weights and server momentum; its DP-safe weights
#: a_k = alpha I(acc_k) + beta I(1 - f_k / (t + 1)) are about 0.04 here (I(0.8) = 0.032 at I_max = 10), so over
#: the fixed denominator qN its update is 1/25 of FedAvg's: server_lr 25 (about 1/mean a_k) restores FedAvg-sized
#: steps without noise (80% against 63% at server_lr 1, one seed). The noise is scaled alike: the form's cost.
METHODS = {
    "FedAvg": {"class_path": "lightning_fl.callbacks.FedAvg", "init_args": {"weighting": "uniform"}},
    "FedFa": {"class_path": "lightning_fl.callbacks.FedFa",
              "init_args": {"alpha": 0.5, "beta": 0.5, "server_momentum": 0.5, "server_lr": 25.0,
                                            "dp_safe": True}},
    "q-FFL": {"class_path": "lightning_fl.callbacks.QFFL",
              "init_args": {"q": 1.0, "dp_safe": True, "f_max": round(math.log(10), 4)}},
}
EPSILONS = (math.inf, 8.0, 2.0, 1.0)


@dataclass(frozen=True)
class Cell:
    """One configuration: a method at a target epsilon (``inf``: no clipping, no noise)."""

    method: str
    epsilon: float

    @property
    def name(self) -> str:
        return f"{self.method}-eps{'inf' if math.isinf(self.epsilon) else f'{self.epsilon:g}'}"


def data_name(config: Mapping) -> str:
    """The federation's short name for titles: ``"Synthetic(1,1)"``, ``"FashionMNIST"``.

    Example:
        >>> data_name({"data": {"class_path": "lightning_fl.datamodules.SyntheticDataModule",
        ...                     "init_args": {"variant": "1_1"}}})
        'Synthetic(1,1)'
    """
    data = config["data"]
    name = data["class_path"].rsplit(".", 1)[-1].removesuffix("DataModule")
    variant = data.get("init_args", {}).get("variant")
    return f"{name}({variant.replace('_', ',')})" if name == "Synthetic" and variant else name


def parse_epsilons(text: str) -> list[float]:
    """``"inf,8,2,1"`` -> ``[inf, 8.0, 2.0, 1.0]``.

    Raises:
        ConfigError: If an entry is not a number > 0 (``inf`` allowed), or none is given.
    """
    try:
        values = [float(e) for e in text.split(",") if e.strip()]
    except ValueError:
        values = []
    if not values or any(not v > 0 for v in values):  # not v > 0 also catches NaN
        raise ConfigError(f"--epsilons must list numbers > 0 (inf: no DP), e.g. inf,8,2,1; got {text!r}")
    return values


def cell_config(cell: Cell, base: Mapping | None = None) -> dict:
    """The shared setting with the cell's DP-safe callback and ``model.dp``."""
    config = copy.deepcopy(dict(base) if base is not None else yaml.safe_load(BASE.read_text()))
    callbacks = config["trainer"]["callbacks"]
    callbacks[0] = copy.deepcopy(METHODS[cell.method])
    if cell.method == "FedFa":  # FedFa's double momentum: the clients' SGD momentum 0.5 (fedfa_synthetic.yaml)
        config["model"]["optimizer"]["init_args"]["momentum"] = 0.5
    if math.isinf(cell.epsilon):  # the same sampling, weights and fixed denominator, no clip, no noise
        config["model"]["dp"] = {"noise_multiplier": 0.0, "clip_norm": math.inf,
                                 "sampling": config["model"]["dp"].get("sampling", "poisson")}
    else:
        config["model"]["dp"]["target_epsilon"] = float(cell.epsilon)
    return config


def label_rarity(histograms: np.ndarray) -> np.ndarray:
    """Each client's label rarity: the mean over its training samples of ``1 / (C P(y))``.

    ``P`` is the population's label distribution (all clients' training labels pooled) and ``C`` the
    number of labels, so a client whose labels follow the population scores 1, and one holding only a
    label of share ``P(c)`` scores ``1 / (C P(c))`` (10 for a label of 1% among 10).

    Args:
        histograms: ``(N, C)`` label counts of the clients' training splits.

    Returns:
        ``(N,)`` rarities (NaN for a client without samples).

    Example:
        >>> label_rarity(np.array([[3, 0], [1, 0], [0, 4]])).tolist()  # P = (0.5, 0.5)
        [1.0, 1.0, 1.0]
    """
    counts = np.asarray(histograms, dtype=np.float64)
    share = counts.sum(axis=0) / counts.sum()
    inverse = np.divide(1.0, counts.shape[1] * share, out=np.zeros_like(share), where=share > 0)
    sizes = counts.sum(axis=1)
    return np.divide(counts @ inverse, sizes, out=np.full(len(sizes), np.nan), where=sizes > 0)


def paired_losses(private: Sequence[Run], public: Sequence[Run]) -> list[tuple[int, int, float]]:
    """``(seed, client, accuracy at inf - accuracy under DP)`` for each client of each seed both sides ran."""
    by_seed = {run.seed: run for run in public}
    out = []
    for run in sorted(private, key=lambda r: r.seed):
        if run.seed not in by_seed:
            continue
        under, without = final_client_accuracy(run), final_client_accuracy(by_seed[run.seed])
        out += [(run.seed, k, without[k] - under[k]) for k in sorted(set(under) & set(without))]
    return out


def build(value: object) -> object:
    """``value`` with every ``{class_path, init_args}`` mapping in it instantiated, innermost first (as the CLI does).

    Example:
        >>> build({"class_path": "fractions.Fraction", "init_args": {"numerator": 1, "denominator": 4}})
        Fraction(1, 4)
    """
    if isinstance(value, Mapping) and "class_path" in value:
        module, _, name = value["class_path"].rpartition(".")
        args = {key: build(arg) for key, arg in (value.get("init_args") or {}).items()}
        return getattr(importlib.import_module(module), name)(**args)
    if isinstance(value, list):
        return [build(item) for item in value]
    return value


def client_features(config: Mapping, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(sizes, rarities)`` of every client's training split for the data of ``seed`` (as the runs build it)."""
    data = config["data"]
    datamodule = build({**data, "init_args": {**data.get("init_args", {}), "seed": seed}})
    datamodule.prepare_data()
    datamodule.setup("fit")
    histograms = datamodule.label_histograms().numpy()
    return histograms.sum(axis=1), label_rarity(histograms)


def _last_epsilon(run: Run) -> float | None:
    events = EventAccumulator(str(run.log_dir), size_guidance={"scalars": 0})
    events.Reload()
    if "dp/epsilon" not in events.Tags().get("scalars", []):
        return None
    return float(events.Scalars("dp/epsilon")[-1].value)


def report(result: GridResult, all_cells: Sequence[Cell]) -> tuple[str, list[dict]]:
    """``privacy.md``'s table and ``privacy.csv``'s rows from the finished grid."""
    by_name: dict[str, list[Run]] = {}
    for run in result.runs:
        by_name.setdefault(run.method, []).append(run)
    lines = ["| Method | Target epsilon | Realised epsilon | Average % | Worst 20% % |", "| --- |" + " ---: |" * 4]
    rows = []
    for cell in all_cells:
        realised = [e for run in by_name.get(cell.name, []) if (e := _last_epsilon(run)) is not None]
        row = {"method": cell.method, "epsilon": cell.epsilon,
               "realised_epsilon": stats(realised) if realised and all(map(math.isfinite, realised)) else None,
               "acc_mean": result.summary.get((cell.name, "acc_mean")),
               "acc_worst20": result.summary.get((cell.name, "acc_worst20"))}
        rows.append(row)
        shown = "inf" if math.isinf(cell.epsilon) else interval_text(row["realised_epsilon"], 1.0).split(" ")[0]
        lines.append(f"| {cell.method} | {cell.epsilon:g} | {shown} | {interval_text(row['acc_mean'])} |"
                     f" {interval_text(row['acc_worst20'])} |")
    return "\n".join(lines) + "\n", rows


def impact(result: GridResult, methods: Sequence[str], epsilon: float, config: Mapping,
           features: Callable[[Mapping, int], tuple[np.ndarray, np.ndarray]] = client_features) -> dict[str, dict]:
    """Per method: each client's accuracy loss at ``epsilon`` against inf with its size and rarity (seeds pooled)."""
    by_name: dict[str, list[Run]] = {}
    for run in result.runs:
        by_name.setdefault(run.method, []).append(run)
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    out = {}
    for method in methods:
        pairs = paired_losses(by_name.get(Cell(method, epsilon).name, []), by_name.get(Cell(method, math.inf).name, []))
        for seed in {seed for seed, _, _ in pairs} - set(cache):
            cache[seed] = features(config, seed)
        out[method] = {"loss": np.array([loss for _, _, loss in pairs]),
                       "size": np.array([cache[s][0][k] for s, k, _ in pairs], dtype=np.float64),
                       "rarity": np.array([cache[s][1][k] for s, k, _ in pairs], dtype=np.float64)}
    return out


def impact_markdown(points: Mapping[str, Mapping[str, np.ndarray]], epsilon: float) -> str:
    """Spearman's rank correlation of the accuracy lost with size and with rarity, per method."""
    lines = [f"Accuracy lost at epsilon {epsilon:g} against inf, per client (same seed and client, seeds pooled):"
             " Spearman's rho (p-value).", "", "| Method | Clients | Mean loss (pp) | rho with size |"
             " rho with label rarity |", "| --- |" + " ---: |" * 4]
    for method, p in points.items():
        if len(p["loss"]) < 3:
            continue
        cells = []
        for axis in ("size", "rarity"):
            rho, pvalue = spearmanr(p[axis], p["loss"])
            cells.append(f"{rho:+.2f} ({pvalue:.2g})")
        lines.append(f"| {method} | {len(p['loss'])} | {100 * float(np.mean(p['loss'])):.1f} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--save-dir", required=True, type=Path)
    p.add_argument("--config", type=Path, default=BASE,
                   help="the shared setting (default configs/privacy/privacy_fmnist.yaml; privacy_synthetic.yaml is the"
                        " Synthetic(1,1) one)")
    p.add_argument("--seeds", default="3", help="a count (3: seeds 0, 1, 2) or a list (0,4,7); default 3")
    p.add_argument("--rounds", type=int, help="override trainer.max_epochs (default: the config's 30)")
    p.add_argument("--jobs", type=int, help="training processes at a time (default: one per CPU core)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"a subset of {', '.join(METHODS)} (default: all)")
    p.add_argument("--epsilons", default="inf,8,2,1", help="target epsilons (inf: no DP); default inf,8,2,1")
    p.add_argument("--impact-epsilon", type=float, default=2.0, help="the epsilon of the disparate-impact figure")
    return p


def main(argv: list[str] | None = None, launcher: Callable[[Run], float] = launch,
         features: Callable[[Mapping, int], tuple[np.ndarray, np.ndarray]] = client_features) -> str:
    """Command line: see the module docstring; returns the report (``launcher``, ``features``: tests fake them)."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        methods = pick_subset("methods", args.methods, list(METHODS))
        epsilons = parse_epsilons(args.epsilons)
        if math.inf not in epsilons or args.impact_epsilon not in epsilons or math.isinf(args.impact_epsilon):
            raise ConfigError(f"--impact-epsilon must be a finite one of --epsilons, which must include inf;"
                              f" got {args.impact_epsilon:g} and {args.epsilons!r}")
        if args.rounds is not None and args.rounds < 1:
            raise ConfigError(f"--rounds must be an integer >= 1; got {args.rounds}")
        all_cells = [Cell(m, e) for m in methods for e in epsilons]
        if not args.config.is_file():
            raise ConfigError(f"--config must name a YAML file; got {str(args.config)!r}")
        base = yaml.safe_load(args.config.read_text())
        config_dir = args.save_dir / "configs"
        config_dir.mkdir(parents=True, exist_ok=True)
        runs = {}
        for cell in all_cells:
            path = config_dir / f"{cell.name}.yaml"
            text = yaml.safe_dump(cell_config(cell, base), sort_keys=False)
            if not path.exists() or path.read_text() != text:  # an unchanged file keeps its finished runs
                path.write_text(text)
            runs[cell.name] = str(path)
        extra = ["--trainer.max_epochs", str(args.rounds)] if args.rounds else []
        n, k = base["data"]["init_args"]["num_clients"], base["model"]["clients_per_round"]
        result = run_grid(runs, parse_seeds(args.seeds), args.save_dir, args.jobs, extra, launcher=launcher,
                          title=f"Client-level DP: {data_name(base)}, {n} clients, q = {k}/{n}")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    table, rows = report(result, all_cells)
    points = impact(result, methods, args.impact_epsilon, base, features)
    text = (f"Final test accuracy over the clients (mean [95% t interval] over {len(parse_seeds(args.seeds))} seeds);"
            f" delta = N^-1.1; epsilon inf: the DP-safe form without clipping or noise.\n\n{table}\n"
            f"{impact_markdown(points, args.impact_epsilon)}")
    (args.save_dir / "privacy.md").write_text(text)
    _write_csv(rows, args.save_dir / "privacy.csv")
    impact_panels(points, args.impact_epsilon).savefig(args.save_dir / "privacy.png", dpi=100)
    print(f"\n{text}\nSaved privacy.md, privacy.csv and privacy.png to {args.save_dir}", flush=True)
    return text


def _write_csv(rows: Sequence[dict], path: Path) -> None:
    keys = ("acc_mean", "acc_worst20", "realised_epsilon")
    lines = ["method,epsilon," + ",".join(f"{k},{k}_ci" for k in keys)]
    for row in rows:
        values = [f"{row[k].mean!r},{row[k].ci!r}" if isinstance(row[k], Stats) else "," for k in keys]
        lines.append(f"{row['method']},{row['epsilon']!r}," + ",".join(values))
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    command_line(main)
