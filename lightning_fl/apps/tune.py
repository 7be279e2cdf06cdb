"""``python -m lightning_fl tune``: tune any list of configs under one budget (``make tune``).

Every config gets the same number of Optuna trials on the same tuning seeds, selected on the clients'
validation splits (:func:`lightning_fl.experiments.tuning.tune`). Writes ``<save-dir>/tuning.md`` (the
budget, every trial's parameters and validation score, the pruned trials, the selections and the edge
flags), ``tuning.json`` and ``<save-dir>/tuned/<NAME>.yaml``, the selected config of each, which
``python -m lightning_fl fit --config`` trains as it is. Finished trial runs are kept, so the same
command again only reports.

Example::

    python -m lightning_fl tune --config FedAvg=configs/fedavg_synthetic.yaml \\
        --config q-FFL=configs/qffl_synthetic.yaml --objective q-FFL=val/acc_worst20 \\
        --trials 6 --seeds 1000,1001 --save-dir lightning_logs/tune

Everything after ``--`` is passed to every run (e.g. ``-- --trainer.max_epochs 20``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from lightning_fl.experiments.launcher import RunFailed, command_line
from lightning_fl.experiments.runs import Run, default_jobs, parse_seeds
from lightning_fl.experiments.tuning import DEFAULT_TRIALS, TUNE_METRICS, TUNING_SEEDS, TuningResult, tune
from lightning_fl.faults.validation import ConfigError

__all__ = ["main", "pairs", "parser", "run"]


def parser() -> argparse.ArgumentParser:
    """The command line (``--help`` lists it)."""
    p = argparse.ArgumentParser(prog="python -m lightning_fl tune", description=__doc__.splitlines()[0],
                                epilog="Search spaces and budget: docs/experiments.md, 'Fair baselines'. Arguments"
                                       " after -- go to every run.")
    p.add_argument("--config", action="append", default=[], metavar="NAME=CONFIG",
                   help="a method to tune: name=config.yaml (repeat for each)")
    p.add_argument("--save-dir", type=Path, required=True, help="where tuning.md, tuning.json and tuned/ go")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help=f"trials per method (default {DEFAULT_TRIALS})")
    p.add_argument("--seeds", default=",".join(map(str, TUNING_SEEDS)),
                   help=f"tuning seeds, a list of at least 2 (default {','.join(map(str, TUNING_SEEDS))})")
    p.add_argument("--metric", default="val/acc_mean", help=f"the objective: one of {', '.join(TUNE_METRICS)}")
    p.add_argument("--objective", action="append", default=[], metavar="NAME=METRIC",
                   help="another objective for one method (e.g. q-FFL=val/acc_worst20)")
    p.add_argument("--jobs", type=int, help="training processes at a time (default: one per CPU core)")
    p.add_argument("--same-data", action="store_true",
                   help="keep the config's data.init_args.seed (default: data seed = tuning seed)")
    return p


def pairs(values: Sequence[str], option: str) -> dict[str, str]:
    """``["A=a.yaml", ...]`` -> ``{"A": "a.yaml"}``.

    Raises:
        ConfigError: For a value that is not ``name=value`` or a repeated name.
    """
    out: dict[str, str] = {}
    for pair in values:
        name, _, value = pair.partition("=")
        if not name or not value:
            raise ConfigError(f"{option} must be NAME=VALUE; got {pair!r}")
        if name in out:
            raise ConfigError(f"{option}: {name} is named twice")
        out[name] = value
    return out


def main(argv: Sequence[str] | None = None, launcher: Callable[[Run], float] | None = None) -> TuningResult:
    """Command line: see the module docstring; ``launcher`` trains one run (tests fake it).

    Bad input ends in one ``error:`` line and exit code 2, before anything trains.
    """
    argv = list(sys.argv[2:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        configs = pairs(args.config, "--config")
        if not configs:
            raise ConfigError("--config: name at least one method to tune (--config NAME=config.yaml)")
        if "," not in args.seeds:
            raise ConfigError(f"--seeds must list at least 2 tuning seeds (e.g. 1000,1001); got {args.seeds!r}")
        jobs = default_jobs() if args.jobs is None else args.jobs
        if jobs < 1:
            raise ConfigError(f"--jobs must be an integer >= 1; got {jobs}")
        objectives = pairs(args.objective, "--objective")
        result = tune(configs, args.save_dir, parse_seeds(args.seeds), args.trials, objectives,
                      args.metric, extra, jobs, max(1, default_jobs() // jobs), not args.same_data, launcher)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except RunFailed as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    print(f"{result.report}\nSaved tuning.md, tuning.json and tuned/<name>.yaml to {args.save_dir}", flush=True)
    return result


def run(argv: Sequence[str]) -> None:
    """``python -m lightning_fl tune ARGV``: :func:`main` with one line, not a traceback, for a Ctrl-C."""
    command_line(lambda: main(argv))
