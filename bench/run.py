"""``make bench``: time naive / sequential / vectorized / centralized rounds for J1-J4 (issues 3 and 24).

Usage::

    .venv/bin/python -m bench.run [--jobs J1,J2,J3,J4] [--rounds N] [--quick] [--threads 1] [--device cpu]

Every variant runs the same cohorts (uniform sampling, seed 0). Round 0 is an untimed warm-up; the
variants then alternate round by round, so background load on a shared machine hits all of them
alike, and the timed rounds are run ``passes`` times (the model keeps training; the cohorts and batch
orders repeat): a variant's seconds per round are those of its best pass, as ``timeit`` reports the
best repeat (every pass is in the JSON). Evaluation is off everywhere. Prints a table with ratios
and peak memory and writes ``bench/results/bench.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.jobs import Job, build_jobs
from bench.memory import PeakMemory
from bench.report import check_targets, format_table
from bench.variants import CentralizedRunner, EngineRunner, NaiveRunner
from lightning_fl.simulation.sampling import ClientSampler

VARIANTS = ("naive", "sequential", "vectorized", "centralized")


def machine_info(device: torch.device, threads: str) -> dict:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {"nproc": os.cpu_count(), "cpu": cpu, "torch": torch.__version__, "python": platform.python_version(),
            "torch_threads": threads, "device": str(device)}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def _load() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def run_job(job: Job, device: torch.device, variants: tuple[str, ...]) -> dict:
    """Time ``variants`` of ``job`` side by side; returns its JSON record."""
    data = job.make_data().to(device)
    sampler = ClientSampler(data.num_clients, job.clients_per_round, "uniform", 0, data.train_sizes())
    runners = {}
    for name in variants:
        if name == "naive":
            runners[name] = NaiveRunner(job, data, device)
        elif name == "centralized":
            runners[name] = CentralizedRunner(job, data, device)
        else:
            runners[name] = EngineRunner(job, data, device, name)
    # passes[name][p] = (wall seconds, cpu seconds) of every timed round of pass p.
    passes: dict[str, list[list[tuple[float, float]]]] = {name: [] for name in variants}
    peak = {name: 0.0 for name in variants}
    loads = [_load()]
    cohorts = [sampler.sample(t) for t in range(job.rounds + 1)]
    _time_round(runners, 0, cohorts[0], device)  # warm-up: first-call allocations, lazy imports, kernels
    print(f"  {job.name} warm-up done", flush=True)
    for number in range(job.passes):
        for name in variants:
            passes[name].append([])
        for round_idx in range(1, job.rounds + 1):
            timed = _time_round(runners, round_idx, cohorts[round_idx], device)
            for name, (elapsed, elapsed_cpu, memory) in timed.items():
                scale = job.epoch_scale * (job.clients_per_round / job.naive_clients
                                           if name == "naive" and job.naive_clients else 1)
                passes[name][-1].append((elapsed * scale, elapsed_cpu * scale))
                peak[name] = max(peak[name], memory or 0.0)
        means = {n: sum(w for w, _ in passes[n][-1]) / job.rounds for n in variants}
        print(f"  {job.name} pass {number + 1}/{job.passes}: "
              + ", ".join(f"{n} {m:.4f}s/round" for n, m in means.items()), flush=True)
    loads.append(_load())
    record = {"title": job.title, "rounds_timed": job.rounds, "passes": job.passes, "load_average": loads,
              "variants": {}}
    for name in variants:
        per_pass = [(sum(w for w, _ in p) / len(p), sum(c for _, c in p) / len(p)) for p in passes[name]]
        best = min(range(len(per_pass)), key=lambda i: per_pass[i][0])
        seconds, cpu_seconds = per_pass[best]
        record["variants"][name] = {
            "sec_per_round": seconds,
            "cpu_sec_per_round": cpu_seconds,
            "client_updates_per_sec": job.clients_per_round / seconds,
            "sec_per_round_each_pass": [w for w, _ in per_pass],
            "sec_per_round_all_passes_mean": sum(w for w, _ in per_pass) / len(per_pass),
            "peak_mib": peak[name],
            "round_seconds_best_pass": [w for w, _ in passes[name][best]],
            "extrapolated": (job.epoch_scale > 1) or (name == "naive" and job.naive_clients is not None),
        }
        if name == "vectorized":
            record["variants"][name]["formulation"] = getattr(runners[name].engine.forward, "kind", "sequential")
    if "sequential" in runners and "vectorized" in runners:
        a, b = runners["sequential"].weights(), runners["vectorized"].weights()
        record["sequential_vs_vectorized_rel_diff"] = float((a - b).norm() / a.norm())
    notes = []
    if job.epoch_scale > 1:
        notes.append(f"each timed round ran {job.run_epochs} of {job.local_epochs} local epochs;"
                     f" times x{job.epoch_scale}")
    if job.naive_clients:
        notes.append(f"naive trained {job.naive_clients} of {job.clients_per_round} clients per round;"
                     f" its time is scaled to {job.clients_per_round}")
    if job.data_source is not None:
        record["data_source"] = job.data_source
        notes.append(f"data: {job.data_source}")
    record["notes"] = notes
    return record


def _threads(setting: str, job: Job, default: int) -> int:
    if setting != "auto":
        return int(setting)
    # The same rule as FederatedLoop's cpu_threads=None: small models run faster on one thread.
    return 1 if sum(p.numel() for p in job.make_model().parameters()) < 1_000_000 else default


def _time_round(runners: dict, round_idx: int, client_ids: torch.Tensor, device: torch.device
                ) -> dict[str, tuple[float, float, float | None]]:
    """Run one round of every variant, in turn: ``{name: (wall s, cpu s, peak MiB)}``."""
    out = {}
    for name, runner in runners.items():
        # As timeit does: collect garbage before (untimed), no garbage collection while timing, so
        # one variant's garbage (the naive baseline's Lightning objects) is not charged to another.
        gc.collect()
        gc.disable()
        try:
            with PeakMemory(device) as memory:
                started, started_cpu = time.perf_counter(), time.process_time()
                runner.round(round_idx, client_ids)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                elapsed, elapsed_cpu = time.perf_counter() - started, time.process_time() - started_cpu
        finally:
            gc.enable()
        out[name] = (elapsed, elapsed_cpu, memory.peak_mib)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="J1,J2,J3,J4")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per job (default: per job)")
    parser.add_argument("--quick", action="store_true", help="few rounds: a smoke run")
    parser.add_argument("--threads", default="auto",
                        help="torch intra-op threads for every variant; auto: FederatedLoop's policy (1 for models"
                             " under 1M parameters, all cores otherwise)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "bench.json"))
    args = parser.parse_args(argv)
    default_threads = torch.get_num_threads()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    jobs = build_jobs(args.quick, args.rounds)
    if device.type == "cuda":  # a GPU runs J3 in full
        jobs["J3"].epoch_scale, jobs["J3"].naive_clients = 1, None
        jobs["J3"].rounds = args.rounds or (1 if args.quick else 3)
        jobs["J4"].rounds, jobs["J4"].passes = args.rounds or (1 if args.quick else 20), 1 if args.quick else 3
    variants = tuple(v for v in args.variants.split(",") if v)
    command = " ".join(["python -m bench.run", *(sys.argv[1:] if argv is None else argv)])
    result = {"machine": machine_info(device, args.threads), "command": command, "jobs": {}}
    started = time.perf_counter()
    for name in args.jobs.split(","):
        job = jobs[name]
        threads = _threads(args.threads, job, default_threads)
        torch.set_num_threads(threads)
        print(f"{name}: {job.title} ({threads} torch thread{'s' if threads > 1 else ''})", flush=True)
        result["jobs"][name] = run_job(job, device, variants)
        result["jobs"][name]["torch_threads"] = threads
    result["total_seconds"] = time.perf_counter() - started
    result["targets"] = check_targets(result["jobs"], device)
    print(format_table(result))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    from bench.variants import quiet_lightning

    quiet_lightning()
    main()
