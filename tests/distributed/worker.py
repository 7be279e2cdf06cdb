"""Run under ``torchrun --nproc-per-node 2``: every case with both engines in one process group.

Rank 0 saves ``{case/engine: result}`` to the file named by the first argument, with the number of
torch.distributed collectives each run issued (counted by wrapping the public functions) for two
different numbers of local epochs: a count that does not grow with local steps shows that local
training never communicates.
"""

from __future__ import annotations

import functools
import sys

import torch
import torch.distributed as dist

from tests.distributed.cases import COMPARED, run_case

COUNTED = ("all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_object_list", "barrier",
           "monitored_barrier", "reduce", "gather", "scatter", "reduce_scatter", "all_to_all")
calls = {"n": 0}


def _counting(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        calls["n"] += 1
        return fn(*args, **kwargs)
    return wrapper


def main(out: str) -> None:
    for name in COUNTED:
        setattr(dist, name, _counting(getattr(dist, name)))
    torch.set_num_threads(1)
    results = {}
    for name, engine in COMPARED:
        results[f"{name}/{engine}"] = run_case(name, engine, world_size=2)
    for epochs in (1, 3):
        before = calls["n"]
        run_case("FedAvg", "sequential", world_size=2, local_epochs=epochs)
        results[f"calls/epochs={epochs}"] = calls["n"] - before
    if dist.get_rank() == 0:
        torch.save(results, out)


if __name__ == "__main__":
    main(sys.argv[1])
