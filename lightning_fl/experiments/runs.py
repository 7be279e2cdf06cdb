"""Training runs of an experiment: one per config and seed, in parallel processes, resumable.

A :class:`Run` is one ``python -m lightning_fl fit`` command logging to ``<save_dir>/<method>/seed_<s>/``.
Its command is its identity: :func:`is_finished` keeps a run whose ``finished.json`` records the same
command and the same config file contents, so rerunning an experiment only trains what is missing.
A run that was interrupted (``started.json`` with the same command, but no ``finished.json``) resumes
from its ``checkpoints/last.ckpt``, which continues bit for bit (README, "Checkpoints and resuming");
without a checkpoint, or if resuming fails, it starts afresh. See docs/experiments.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from lightning_fl.validation import ConfigError

__all__ = ["Run", "default_jobs", "is_finished", "launch", "parse_seeds", "plan_runs", "run_all"]

FINISHED = "finished.json"
STARTED = "started.json"
CHECKPOINT = Path("checkpoints") / "last.ckpt"


@dataclass(frozen=True)
class Run:
    """One training run: a method (config) with one seed, logging to ``log_dir``.

    Attributes:
        method: The method's name in the comparison.
        seed: ``seed_everything`` (model initialisation, cohort sampling, batch order, system draws).
        log_dir: The run's directory.
        command: Arguments after ``python``: ``-m lightning_fl fit --config ...``.
        config: The config file (its contents are part of the run's identity).
        data_seed: ``data.init_args.seed`` set by the runner, or ``None`` (the config's own).
        threads: Torch CPU threads of the process (``model.cpu_threads``; ``None``: the loop's default).
            How the run is executed, not what it computes, so it is not in the command.
    """

    method: str
    seed: int
    log_dir: Path
    command: tuple[str, ...]
    config: str = ""
    data_seed: int | None = None
    threads: int | None = None

    @property
    def name(self) -> str:
        """``<method>/seed_<seed>``: the ``run`` column of the result files."""
        return f"{self.method}/seed_{self.seed}"


def parse_seeds(text: str) -> list[int]:
    """``"3"`` -> ``[0, 1, 2]`` (a count); ``"0,4,7"`` -> ``[0, 4, 7]`` (a list: has a comma).

    Raises:
        ConfigError: For anything else (a count below 1, a seed that is not a non-negative integer, a repeat).
    """
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()] if "," in text else list(range(int(text)))
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be a count >= 1 (3: seeds 0, 1, 2) or a list of distinct seeds >= 0 (0,1,2);"
                          f" got {text!r}")
    return seeds


def default_jobs() -> int:
    """Runs in parallel by default: one per CPU core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def has_data_seed(config: str) -> bool:
    """Whether ``config`` sets ``data.init_args.seed`` (the runner then sets it to each run's seed)."""
    try:
        data = (yaml.safe_load(Path(config).read_text()) or {}).get("data") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return False
    return isinstance(data, dict) and "seed" in (data.get("init_args") or {})


def plan_runs(methods: Mapping[str, str], seeds: Iterable[int], save_dir: Path, overrides: Sequence[str] = (),
              vary_data_seed: bool = False, threads: int | None = None) -> list[Run]:
    """One :class:`Run` per method and seed, seed by seed (so early results cover every method).

    Args:
        methods: ``{method name: config file}``.
        seeds: The ``seed_everything`` values.
        save_dir: Runs log to ``<save_dir>/<method>/seed_<seed>``.
        overrides: Command-line arguments for every run (after the runner's own, so they win).
        vary_data_seed: Also set ``data.init_args.seed`` to the seed where the config sets one (a new
            partition per seed, the same for every method; it comes after ``overrides``); otherwise
            every seed trains on the config's data.
        threads: Torch CPU threads per process.
    """
    runs = []
    for seed in seeds:
        for method, config in methods.items():
            data_seed = seed if vary_data_seed and has_data_seed(config) else None
            command = ("-m", "lightning_fl", "fit", "--config", config, "--seed_everything", str(seed),
                       "--trainer.logger.init_args.save_dir", str(save_dir), "--trainer.logger.init_args.name", method,
                       "--trainer.logger.init_args.version", f"seed_{seed}", "--trainer.enable_progress_bar", "false",
                       *overrides,
                       # last: after a dataset switch in the overrides (``--data <class>``), which would reset it
                       *(("--data.init_args.seed", str(data_seed)) if data_seed is not None else ()))
            runs.append(Run(method, seed, save_dir / method / f"seed_{seed}", command, config, data_seed, threads))
    return runs


def _identity(run: Run) -> dict:
    config = Path(run.config)
    digest = hashlib.sha256(config.read_bytes()).hexdigest() if run.config and config.is_file() else None
    return {"command": list(run.command), "config_sha256": digest}


def _matches(marker: Path, run: Run) -> bool:
    if not marker.exists():
        return False
    recorded, identity = json.loads(marker.read_text()), _identity(run)
    # Markers written before config digests were recorded match on the command alone.
    return recorded["command"] == identity["command"] and recorded.get("config_sha256", identity["config_sha256"]) \
        == identity["config_sha256"]


def is_finished(run: Run) -> bool:
    """Whether ``run.log_dir`` holds a run that finished with exactly ``run.command`` and config contents."""
    return _matches(run.log_dir / FINISHED, run)


def resumable_checkpoint(run: Run) -> Path | None:
    """``last.ckpt`` of an interrupted attempt of exactly this run, or ``None``."""
    checkpoint = run.log_dir / CHECKPOINT
    return checkpoint if checkpoint.is_file() and _matches(run.log_dir / STARTED, run) else None


def train_in_subprocess(run: Run) -> int:
    """Train ``run`` in a fresh Python process, output appended to ``<log_dir>/train.log``; returns its exit code."""
    command, env = [sys.executable, *run.command], dict(os.environ)
    if run.threads is not None:
        env["OMP_NUM_THREADS"] = str(run.threads)  # also the threads of numpy and of torch's inter-op pool
        if "--model.cpu_threads" not in command:
            command += ["--model.cpu_threads", str(run.threads)]
    with open(run.log_dir / "train.log", "a") as log:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False).returncode


def _start_afresh(run: Run) -> None:
    shutil.rmtree(run.log_dir, ignore_errors=True)  # an unfinished, failed or outdated attempt
    run.log_dir.mkdir(parents=True)
    (run.log_dir / STARTED).write_text(json.dumps(_identity(run)))


def launch(run: Run, train: Callable[[Run], int] = train_in_subprocess) -> float:
    """Train ``run`` with ``train`` (resuming an interrupted attempt) and mark it finished; returns the seconds.

    Raises:
        RuntimeError: If training exits non-zero (with the end of ``train.log`` when there is one).
    """
    checkpoint = resumable_checkpoint(run)
    if checkpoint is None:
        _start_afresh(run)
    started = time.perf_counter()
    code = train(run if checkpoint is None else replace(run, command=(*run.command, "--ckpt_path", str(checkpoint))))
    if code != 0 and checkpoint is not None:  # e.g. a checkpoint of an older version of the code
        _start_afresh(run)
        checkpoint, started = None, time.perf_counter()
        code = train(run)
    seconds = time.perf_counter() - started
    if code != 0:
        log = run.log_dir / "train.log"
        tail = log.read_text().splitlines()[-15:] if log.exists() else []
        raise RuntimeError("\n".join([f"{run.method} seed {run.seed} failed (exit {code}):", *tail]))
    marker = {**_identity(run), "seconds": seconds, "resumed": checkpoint is not None}
    (run.log_dir / FINISHED).write_text(json.dumps(marker))
    return seconds


def run_all(runs: Sequence[Run], jobs: int = 2, launcher: Callable[[Run], float] = launch,
            keep_going: bool = False) -> dict[Run, str]:
    """Run every unfinished run, ``jobs`` at a time (``1``: one after another in this thread).

    Args:
        runs: The runs; finished ones are kept.
        jobs: Processes at a time.
        launcher: Trains one run (tests train in-process or fake it).
        keep_going: Record a failed run and go on (hyperparameter search: a setting may diverge)
            instead of raising once the runs in flight have finished.

    Returns:
        ``{run: error message}`` of the runs that failed (only with ``keep_going``).
    """
    todo = [run for run in runs if not is_finished(run)]
    for run in runs:
        if run not in todo:
            print(f"{run.name}: finished before, kept ({run.log_dir})", flush=True)
    failed: dict[Run, str] = {}

    def one(run: Run) -> None:
        print(f"{run.name}: running, log in {run.log_dir}", flush=True)
        try:
            print(f"{run.name}: done in {launcher(run):.1f} s", flush=True)
        except RuntimeError as err:
            if not keep_going:
                raise
            failed[run] = str(err)
            print(f"{run.name}: failed, skipped (see {run.log_dir / 'train.log'})", flush=True)

    if jobs <= 1:
        for run in todo:
            one(run)
        return failed
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, run) for run in todo]
        try:
            for future in futures:
                future.result()
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the runs already started finish; no new ones start
            raise
    return failed
