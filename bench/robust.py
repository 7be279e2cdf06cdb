"""``make bench`` (robust rules): aggregation time per rule beside FedAvg's weighted sum, in one run.

Usage::

    .venv/bin/python -m bench.robust [--cohorts 10,100] [--dims 100000,1600000] [--repeats 3] [--f-frac 0.1]

For each cohort size ``K`` and model size ``d`` one random ``(K, d)`` fp32 stack is built; every rule
then runs on it once untimed and ``repeats`` times timed, alternating rule by rule so background load hits them alike, and
a rule's time is its best repeat (as ``timeit`` reports). The ratio column divides by the weighted
sum ``p @ U`` (what FedAvg computes) measured in the same loop. Writes ``bench/results/robust.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # `python bench/robust.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from lightning_fl.functional import robust, robust_distance

RESULTS = Path(__file__).resolve().parent / "results" / "robust.json"


def rules(K: int, f: int) -> dict[str, Callable[[torch.Tensor, torch.Tensor], object]]:
    """The rules timed, each a call on ``(U, p)`` with the tolerance ``f`` (``b = f`` trimmed per side).

    A rule whose requirement ``K`` and ``f`` do not meet is left out of the table (Bulyan at ``K = 10``).
    """
    table: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
        "fedavg_sum": lambda U, p: p @ U,
        "median": lambda U, p: robust.coordinate_median(U),
        "median_weighted": lambda U, p: robust.coordinate_median(U, p, weighted=True),
        "trimmed_mean": lambda U, p: robust.trimmed_mean(U, f),
        "geometric_median": lambda U, p: robust.geometric_median(U, p),
        "centered_clipping": lambda U, p: robust.centered_clipping(U, p, torch.zeros(U.shape[1]), tau=1.0),
        "krum": lambda U, p: robust_distance.krum(U, f),
        "krum_gram": lambda U, p: robust_distance.krum(U, f, distance="gram"),
        "multi_krum": lambda U, p: robust_distance.multi_krum(U, f),
        "bulyan": lambda U, p: robust_distance.bulyan(U, f),
        "nnm": lambda U, p: robust_distance.nearest_neighbour_mixing(U, f),
    }
    requirement = {"krum": "krum", "krum_gram": "krum", "multi_krum": "multi_krum", "bulyan": "bulyan",
                   "trimmed_mean": "trimmed_mean"}
    return {name: rule for name, rule in table.items()
            if name not in requirement or robust.meets_requirement(requirement[name], K, f)}


def time_rules(K: int, d: int, repeats: int, f_frac: float) -> dict[str, float]:
    generator = torch.Generator().manual_seed(0)
    U = torch.randn(K, d, generator=generator)
    p = torch.full((K,), 1.0 / K)
    f = max(1, int(f_frac * K))
    table = rules(K, f)
    best = {name: float("inf") for name in table}
    for rule in table.values():  # untimed warm-up: first-call allocations and kernel selection
        rule(U, p)
    for _ in range(repeats):
        for name, rule in table.items():
            started = time.perf_counter()
            rule(U, p)
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", default="10,100")
    parser.add_argument("--dims", default="100000,1600000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--f-frac", type=float, default=0.1)
    args = parser.parse_args(argv)
    results = []
    print("| K | d | rule | seconds (best) | x FedAvg's sum |\n| ---: | ---: | :--- | ---: | ---: |")
    for K in (int(k) for k in args.cohorts.split(",")):
        for d in (int(x) for x in args.dims.split(",")):
            best = time_rules(K, d, args.repeats, args.f_frac)
            for name, seconds in best.items():
                ratio = seconds / best["fedavg_sum"]
                print(f"| {K} | {d:,} | {name} | {seconds:.4f} | {ratio:.1f} |", flush=True)
                results.append({"K": K, "d": d, "rule": name, "seconds": seconds, "ratio_to_sum": ratio})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                   "threads": torch.get_num_threads(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
