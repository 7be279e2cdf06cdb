"""Run several configs over several seeds and report mean, spread and 95% intervals per method.

``make compare`` (FedFa Table 2 layout: Average, Worst 20%, Best 20%, Variance per method) and
``make tempo`` (also rounds and estimated deployment time to a target accuracy, Tempo Table 1) both
use this command line to :func:`lightning_fl.experiments.run_grid`. Every run logs to
``<save_dir>/<method>/seed_<s>`` so ``tensorboard --logdir <save_dir>`` overlays the curves and lists
every run in the HParams tab. Finished runs are kept; an interrupted one resumes from its last
checkpoint. ``--tune`` first selects each method's hyperparameters on the validation splits
(docs/experiments.md, "Fair baselines").

Example::

    python -m lightning_fl.apps.compare --save-dir lightning_logs/compare_synthetic_1_1 --data synthetic_1_1 \\
        --seeds 3 fedavg=configs/fedavg_synthetic.yaml fedfa=configs/fedfa_synthetic.yaml

Everything after ``--`` is passed to every run (e.g. ``-- --data.init_args.num_clients 10``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from lightning_fl.experiments import GridResult, Run, parse_seeds, run_grid
from lightning_fl.experiments.launcher import RunFailed, command_line, launch
from lightning_fl.experiments.tuning import DEFAULT_TRIALS, TUNE_METRICS, TUNING_SEEDS
from lightning_fl.faults.validation import ConfigError

# Command-line overrides that switch every config to one dataset (same partition for every method).
DATASETS: dict[str, list[str]] = {
    **{f"synthetic_{v}": ["--data", "lightning_fl.datamodules.SyntheticDataModule", "--data.variant", v,
                          "--model.client.init_args.in_features", "60"]
       for v in ("0_0", "0.5_0.5", "1_1", "iid")},
    "digits": ["--data", "lightning_fl.datamodules.DigitsDataModule",
               "--data.partition", "lightning_fl.datamodules.partitions.Dirichlet", "--data.partition.alpha", "0.5",
               "--model.client.init_args.in_features", "64"],
    # Fashion-MNIST (`make data`), 50 clients, Dirichlet(0.3) label skew, 784 pixels into the configs' model.
    "fmnist": ["--data", "lightning_fl.datamodules.FashionMNISTDataModule", "--data.num_clients", "50", "--data.flatten", "true",
               "--data.partition", "lightning_fl.datamodules.partitions.Dirichlet", "--data.partition.alpha", "0.3",
               "--model.client.init_args.in_features", "784"],
}


def parser() -> argparse.ArgumentParser:
    """The command line (``--help`` lists it)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="Outputs and options: docs/experiments.md. Arguments after -- go to every run.")
    p.add_argument("runs", nargs="+", help="name=config.yaml pairs")
    p.add_argument("--save-dir", required=True, type=Path)
    p.add_argument("--data", choices=sorted(DATASETS), help="switch every run to this dataset")
    p.add_argument("--rounds", type=int, help="override trainer.max_epochs")
    p.add_argument("--seeds", default="3", help="a count (3: seeds 0, 1, 2) or a list (0,4,7); default 3")
    p.add_argument("--same-data", action="store_true",
                   help="keep the config's data.init_args.seed for every seed (default: data seed = seed)")
    p.add_argument("--jobs", type=int, help="training processes at a time (default: one per CPU core)")
    p.add_argument("--tune", action="store_true",
                   help="first tune every method with the same budget on the validation splits (docs/experiments.md)")
    p.add_argument("--tune-seeds", default=",".join(map(str, TUNING_SEEDS)),
                   help=f"tuning seeds, at least 2, none a reported seed (default {','.join(map(str, TUNING_SEEDS))})")
    p.add_argument("--tune-trials", type=int, help=f"tuning trials per method (default {DEFAULT_TRIALS})")
    p.add_argument("--tune-metric", default="val/acc_mean", help=f"one of {', '.join(TUNE_METRICS)}")
    return p


def main(argv: list[str] | None = None, launcher: Callable[[Run], float] = launch) -> GridResult:
    """Command line: see the module docstring; ``launcher`` trains one run (tests train in-process)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        runs = {}
        for pair in args.runs:
            name, _, config = pair.partition("=")
            if not name or not config:
                raise ConfigError(f"runs must be name=config.yaml pairs; got {pair!r}")
            runs[name] = config
        if args.rounds is not None and args.rounds < 1:
            raise ConfigError(f"--rounds must be an integer >= 1; got {args.rounds}")
        overrides = [*(DATASETS[args.data] if args.data else []),
                     *(["--trainer.max_epochs", str(args.rounds)] if args.rounds else []), *extra]
        title = f"Dataset: {args.data}." if args.data else ""
        return run_grid(runs, parse_seeds(args.seeds), args.save_dir, args.jobs, overrides, tune=args.tune,
                        tune_seeds=parse_seeds(args.tune_seeds), tune_trials=args.tune_trials,
                        tune_metric=args.tune_metric, vary_data_seed=not args.same_data,
                        title=title, launcher=launcher)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except RunFailed as err:  # the failed run's own log tail says why; a traceback of the runner would not
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    command_line(main)
