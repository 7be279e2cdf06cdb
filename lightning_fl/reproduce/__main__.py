"""``python -m lightning_fl.reproduce --paper fedfa --seeds 5 --scale small`` (``make reproduce``)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from lightning_fl.experiments.runs import parse_seeds
from lightning_fl.faults.validation import ConfigError
from lightning_fl.reproduce.paper import SCALES, Paper
from lightning_fl.experiments.launcher import command_line

PAPERS = ("fedfa", "igfl", "dwfed", "tempo", "pfedme")


def load_paper(key: str) -> Paper:
    """The :class:`Paper` of ``lightning_fl.reproduce.<key>``."""
    return importlib.import_module(f"lightning_fl.reproduce.{key}").PAPER


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lightning_fl.reproduce",
                                     description="Rerun a seed paper's headline experiment over seeds and judge its"
                                                 " claims (docs/experiments.md, 'Reproducing the papers').")
    parser.add_argument("--paper", required=True, help=f"one of {', '.join(PAPERS)}")
    # 5 seeds: with 4 degrees of freedom t_{0.975} is 2.78 (3 seeds: 4.30), so a claim's interval is narrow
    # enough to survive Holm's correction across a paper's claims.
    parser.add_argument("--seeds", default="5", help="a count (5: seeds 0 to 4) or a list (0,1,2); default 5")
    parser.add_argument("--scale", default="small", help=f"one of {', '.join(SCALES)}; default small")
    parser.add_argument("--jobs", type=int, help="training processes at a time (default: one per core)")
    parser.add_argument("--tune", action=argparse.BooleanOptionalAction, default=None,
                        help="tune every method with the same budget on the validation splits first (default at scale"
                             " small; at scale paper the paper's settings run as printed unless --tune); --no-tune: every"
                             " method at its config's values")
    parser.add_argument("--trials", type=int, help="tuning trials per method (default: the tuner's, see"
                                                   " docs/experiments.md, 'Fair baselines')")
    parser.add_argument("--save-dir", type=Path, help="default lightning_logs/reproduce/<paper>_<scale>")
    parser.add_argument("--docs-dir", type=Path, default=Path("docs/reproduction"),
                        help="where <paper>.md is written (default docs/reproduction; never at scale smoke); 'none' to skip")
    args = parser.parse_args(argv)
    try:
        if args.paper not in PAPERS:
            raise ConfigError(f"paper must be one of {', '.join(PAPERS)}; got {args.paper!r}")
        if args.scale not in SCALES:
            raise ConfigError(f"scale must be one of {', '.join(SCALES)}; got {args.scale!r}")
        seeds = parse_seeds(args.seeds)
        if args.trials is not None and args.trials < 1:
            raise ConfigError(f"trials must be an integer >= 1; got {args.trials}")
    except (ConfigError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from lightning_fl.reproduce.runner import reproduce, tunes_by_default

    default = tunes_by_default(args.scale)
    tune = default if args.tune is None else args.tune
    suffix = "" if tune == default else "_tuned" if tune else "_untuned"
    save_dir = args.save_dir or Path("lightning_logs") / "reproduce" / f"{args.paper}_{args.scale}{suffix}"
    # A smoke run checks the pipeline; its numbers mean nothing, so it never overwrites the docs.
    docs_dir = None if str(args.docs_dir).lower() == "none" or args.scale == "smoke" else args.docs_dir
    command = (f"make reproduce PAPER={args.paper} SEEDS={args.seeds} SCALE={args.scale}"
               + ("" if tune == default else f" TUNE={int(tune)}") + (f" TRIALS={args.trials}" if args.trials else ""))
    report, _ = reproduce(load_paper(args.paper), args.scale, seeds, save_dir, docs_dir, args.jobs, tune, command,
                          trials=args.trials)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(command_line(main))
