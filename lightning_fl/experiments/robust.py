"""``make robust``: fairness weightings under attack, with and without a robust combining rule.

FedAvg, FedFa, q-FFL and DWFed (their Synthetic(1,1) configs) train with label flipping and ALIE
attackers at Byzantine fractions 0, 0.1 and 0.2, each with the weighted mean, a trimmed mean and the
geometric median, over several seeds (docs/experiments.md, "Robustness under attack"). The report,
``robust.md`` and ``robust.csv`` in the save directory, gives per cell the honest clients' average and
worst-20% test accuracy (mean and 95% t interval over the seeds), the change of the honest clients'
average against the run without attack on the same clients and seed (a paired difference), everyone's average
(``test/all/acc_mean``), and the share of the aggregation weight the algorithm handed to the
attackers (``attack/byzantine_weight``) beside their share of the cohort (``attack/f_t / K``): a
weighting that rewards attackers gives them more than their share. ``robust.png`` draws the honest
average against the fraction. Finished runs are kept.

Example::

    python -m lightning_fl.experiments.robust --save-dir lightning_logs/robust --seeds 3
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_fl.experiments.grid import GridResult, run_grid
from lightning_fl.experiments.launcher import command_line, launch
from lightning_fl.experiments.results import final_client_accuracy, interval_text, pick_subset
from lightning_fl.experiments.runs import Run, parse_seeds
from lightning_fl.experiments.stats import Stats, stats
from lightning_fl.faults.validation import ConfigError
from lightning_fl.functional.attacks import byzantine_clients
from lightning_fl.reporting.robust_figure import robust_panels

REPO = Path(__file__).resolve().parents[2]
METHODS = {"FedAvg": "fedavg_synthetic.yaml", "FedFa": "fedfa_synthetic.yaml", "q-FFL": "qffl_synthetic.yaml",
           "DWFed": "dwfed_synthetic.yaml"}
ATTACKS = {"label_flip": "lightning_fl.aggregation.attacks.LabelFlip", "alie": "lightning_fl.aggregation.attacks.ALIE"}
FRACTIONS = (0.0, 0.1, 0.2)
RULES = {"mean": None, "trimmed_mean": "lightning_fl.aggregation.TrimmedMean",
         "geometric_median": "lightning_fl.aggregation.GeometricMedian"}
#: The tolerance the robust rules assume: f = ceil(0.2 K), the largest fraction attacked.
F_FRACTION = 0.2


@dataclass(frozen=True)
class Cell:
    """One configuration of the experiment (a method in :func:`run_grid`'s sense)."""

    method: str
    attack: str
    fraction: float
    rule: str

    @property
    def name(self) -> str:
        attack = "none" if self.fraction == 0 else f"{self.attack}{round(self.fraction * 100)}"
        return f"{self.method}-{attack}-{self.rule}"


def cells(methods: Sequence[str] = tuple(METHODS), attacks: Sequence[str] = tuple(ATTACKS),
          rules: Sequence[str] = tuple(RULES)) -> list[Cell]:
    """Every cell: each method x rule without an attack, and x attack x fraction > 0."""
    out = []
    for method in methods:
        for rule in rules:
            out.append(Cell(method, "none", 0.0, rule))
            out += [Cell(method, attack, fraction, rule) for attack in attacks for fraction in FRACTIONS if fraction]
    return out


def cell_config(cell: Cell) -> dict:
    """The method's shipped config with the cell's attack and rule."""
    config = yaml.safe_load((REPO / "configs" / METHODS[cell.method]).read_text())
    config["trainer"]["callbacks"] = [c for c in config["trainer"]["callbacks"]
                                      if not c["class_path"].endswith("RoundsToTarget")]
    if cell.fraction:
        config["model"]["attack"] = {"class_path": ATTACKS[cell.attack], "init_args": {"fraction": cell.fraction}}
    if RULES[cell.rule]:
        config["model"]["aggregation"] = {"rule": {"class_path": RULES[cell.rule]}, "f_fraction": F_FRACTION}
    return config


#: The TensorBoard scalars the report reads from every run.
_TAGS = ("test/all/acc_mean", "attack/byzantine_weight", "attack/f_t")


def _scalars(run: Run) -> dict[str, list[float]]:
    """``run``'s values of :data:`_TAGS` in step order (a tag the run did not log is absent)."""
    events = EventAccumulator(str(run.log_dir), size_guidance={"scalars": 0})
    events.Reload()
    logged = set(events.Tags().get("scalars", []))
    return {tag: [e.value for e in events.Scalars(tag)] for tag in _TAGS if tag in logged}


def paired_drop(attacked: Sequence[Run], clean: Sequence[Run], fraction: float, num_clients: int) -> Stats | None:
    """The honest clients' mean accuracy under attack minus theirs in the run without attack, over the seeds.

    The same clients on both sides (the honest set of ``fraction``, drawn from the seed as the runs draw
    it) and the same seed (so the same data and cohorts up to the attack): a paired difference.
    """
    by_seed = {run.seed: run for run in clean}
    drops = []
    for run in attacked:
        if run.seed not in by_seed:
            continue
        honest = set(range(num_clients)) - set(byzantine_clients(num_clients, fraction, run.seed).tolist())
        under, without = final_client_accuracy(run), final_client_accuracy(by_seed[run.seed])
        common = sorted(honest & set(under) & set(without))
        drops.append(float(np.mean([under[k] for k in common]) - np.mean([without[k] for k in common])))
    return stats(drops) if drops else None


def report(result: GridResult, all_cells: Sequence[Cell], cohort: int, num_clients: int) -> tuple[str, list[dict]]:
    """``robust.md``'s table and ``robust.csv``'s rows from the finished grid."""
    by_method: dict[str, list[Run]] = {}
    for run in result.runs:
        by_method.setdefault(run.method, []).append(run)
    rows, lines = [], ["| Method | Attack | Fraction | Rule | Honest avg % | Change, same clients (pp) |"
                       " Honest worst 20% % | All avg % | Attackers' weight % | Attackers' cohort share % |",
                       "|" + " --- |" * 3 + " ---: |" * 7]
    for cell in all_cells:
        runs = by_method.get(cell.name, [])
        acc = result.summary.get((cell.name, "acc_mean"))
        worst = result.summary.get((cell.name, "acc_worst20"))
        logged = [_scalars(r) for r in runs]
        everyone = [v["test/all/acc_mean"][-1] for v in logged if "test/all/acc_mean" in v]  # the final evaluation
        weight = [float(np.mean(v["attack/byzantine_weight"])) for v in logged if "attack/byzantine_weight" in v]
        share = [float(np.mean(v["attack/f_t"])) / cohort for v in logged if "attack/f_t" in v]
        row = {"method": cell.method, "attack": cell.attack, "fraction": cell.fraction, "rule": cell.rule,
               "honest_acc_mean": acc, "honest_acc_worst20": worst, "all_acc_mean": stats(everyone) if everyone else None,
               "attacker_weight": stats(weight) if weight else None, "attacker_share": stats(share) if share else None,
               "change_same_clients": None if not cell.fraction else paired_drop(
                   runs, by_method.get(Cell(cell.method, "none", 0.0, cell.rule).name, []), cell.fraction, num_clients)}
        rows.append(row)
        cells = (acc, row["change_same_clients"], worst, row["all_acc_mean"], row["attacker_weight"], row["attacker_share"])
        lines.append(f"| {cell.method} | {cell.attack} | {cell.fraction:g} | {cell.rule} | "
                     + " | ".join(interval_text(c) for c in cells) + " |")
    return "\n".join(lines) + "\n", rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--save-dir", required=True, type=Path)
    p.add_argument("--seeds", default="3", help="a count (3: seeds 0, 1, 2) or a list (0,4,7); default 3")
    p.add_argument("--rounds", type=int, help="override trainer.max_epochs (default: the configs' 60)")
    p.add_argument("--jobs", type=int, help="training processes at a time (default: one per CPU core)")
    for name, choices in (("methods", METHODS), ("attacks", ATTACKS), ("rules", RULES)):
        p.add_argument(f"--{name}", default=",".join(choices), help=f"a subset of {', '.join(choices)} (default: all)")
    return p


def main(argv: list[str] | None = None, launcher: Callable[[Run], float] = launch) -> str:
    """Command line: see the module docstring; returns the report (``launcher``: tests train in-process)."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        methods = pick_subset("methods", args.methods, list(METHODS))
        attacks, rules = pick_subset("attacks", args.attacks, list(ATTACKS)), pick_subset("rules", args.rules, list(RULES))
        if args.rounds is not None and args.rounds < 1:
            raise ConfigError(f"--rounds must be an integer >= 1; got {args.rounds}")
        all_cells = cells(methods, attacks, rules)
        config_dir = args.save_dir / "configs"
        config_dir.mkdir(parents=True, exist_ok=True)
        runs = {}
        for cell in all_cells:
            path = config_dir / f"{cell.name}.yaml"
            text = yaml.safe_dump(cell_config(cell), sort_keys=False)
            if not path.exists() or path.read_text() != text:  # an unchanged file keeps its finished runs
                path.write_text(text)
            runs[cell.name] = str(path)
        extra = ["--trainer.max_epochs", str(args.rounds)] if args.rounds else []
        result = run_grid(runs, parse_seeds(args.seeds), args.save_dir, args.jobs, extra,
                          title="Robustness under attack: Synthetic(1,1), 30 clients, 10 per round", launcher=launcher)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    base = yaml.safe_load((REPO / "configs" / METHODS[methods[0]]).read_text())
    table, rows = report(result, all_cells, base["model"]["clients_per_round"], base["data"]["init_args"]["num_clients"])
    text = (f"Honest clients' final test accuracy (mean [95% t interval] over {len(parse_seeds(args.seeds))} seeds);"
            f" robust rules assume f = ceil({F_FRACTION} K).\n\n{table}")
    (args.save_dir / "robust.md").write_text(text)
    _write_csv(rows, args.save_dir / "robust.csv")
    robust_panels(rows, FRACTIONS).savefig(args.save_dir / "robust.png", dpi=100)
    print(f"\n{text}\nSaved robust.md, robust.csv and robust.png to {args.save_dir}", flush=True)
    return text


def _write_csv(rows: Sequence[dict], path: Path) -> None:
    keys = ("honest_acc_mean", "change_same_clients", "honest_acc_worst20", "all_acc_mean", "attacker_weight",
            "attacker_share")
    lines = ["method,attack,fraction,rule," + ",".join(f"{k},{k}_ci" for k in keys)]
    for row in rows:
        values = [f"{row[k].mean!r},{row[k].ci!r}" if row[k] is not None else "," for k in keys]
        lines.append(f"{row['method']},{row['attack']},{row['fraction']},{row['rule']}," + ",".join(values))
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    command_line(main)
