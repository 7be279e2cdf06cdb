"""Training runs of an experiment: one per config and seed, and the markers that say where each stands.

A :class:`Run` is one ``python -m lightning_fl fit`` command logging to ``<save_dir>/<method>/seed_<s>/``.
Its command is its identity: :func:`is_finished` keeps a run whose ``finished.json`` records the same
command and the same config file contents, so rerunning an experiment only trains what is missing.
A run that was interrupted (``started.json`` with the same command, but no ``finished.json``) resumes
from its ``checkpoints/last.ckpt`` (:func:`resumable_checkpoint`), which continues bit for bit (docs/running.md,
"Checkpoints and resuming"). :mod:`~lightning_fl.experiments.launcher` trains them; see
docs/experiments.md.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from lightning_fl.faults.validation import ConfigError

__all__ = ["CHECKPOINT", "FINISHED", "OUTPUTS", "STARTED", "Run", "damaged_outputs", "default_jobs", "identity",
           "is_finished", "matches", "output_digests", "parse_seeds", "plan_runs", "resumable_checkpoint"]

FINISHED = "finished.json"
STARTED = "started.json"
CHECKPOINT = Path("checkpoints") / "last.ckpt"
#: Files of a finished run that experiments read back; ``finished.json`` records their sha256.
OUTPUTS = ("fairness_history.csv", "client_accuracy.csv", "rounds_to_target.json")


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


def config_digest(path: Path) -> str:
    """sha256 of a YAML config's *contents*: its parsed values with sorted keys, so comments, key order,
    quoting and layout do not count (the file's bytes when it is not valid YAML)."""
    text = path.read_bytes()
    try:
        values = yaml.safe_load(text)
        canonical = json.dumps(values, sort_keys=True, default=str).encode()
    except (yaml.YAMLError, TypeError, ValueError):
        canonical = text
    return hashlib.sha256(canonical).hexdigest()


def _bytes_digest(run: Run) -> str | None:
    """The digest markers recorded before :func:`config_digest` (the file's bytes)."""
    config = Path(run.config)
    return hashlib.sha256(config.read_bytes()).hexdigest() if run.config and config.is_file() else None


def identity(run: Run) -> dict:
    """What makes two attempts the same run: its command and its config's contents (:func:`config_digest`)."""
    config = Path(run.config)
    digest = config_digest(config) if run.config and config.is_file() else None
    return {"command": list(run.command), "config_sha256": digest}


def matches(marker: Path, run: Run) -> bool:
    """Whether marker file ``marker`` (``started.json``, ``finished.json``) records exactly ``run``."""
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):  # missing, unreadable or damaged: not a record of this run
        return False
    current = identity(run)
    if not isinstance(recorded, dict) or recorded.get("command") != current["command"]:
        return False
    # Markers written before config digests were recorded match on the command alone; those written
    # before digests of the contents, on the file's bytes.
    digest = recorded.get("config_sha256", current["config_sha256"])
    return digest == current["config_sha256"] or digest == _bytes_digest(run)


def output_digests(run: Run) -> dict[str, str]:
    """sha256 of each of the run's :data:`OUTPUTS` that exists (recorded in ``finished.json``)."""
    return {name: hashlib.sha256((run.log_dir / name).read_bytes()).hexdigest()
            for name in OUTPUTS if (run.log_dir / name).is_file()}


def damaged_outputs(run: Run) -> list[str]:
    """The :data:`OUTPUTS` of a finished run that changed or vanished since it finished (none for markers
    written before digests were recorded)."""
    try:
        recorded = json.loads((run.log_dir / FINISHED).read_text()).get("outputs") or {}
    except (OSError, ValueError, AttributeError):
        return []
    current = output_digests(run)
    return [name for name, digest in recorded.items() if current.get(name) != digest]


def is_finished(run: Run) -> bool:
    """Whether ``run.log_dir`` holds a run that finished with exactly ``run.command`` and config contents,
    its result files as they were written (a damaged one is trained again, see the launcher)."""
    return matches(run.log_dir / FINISHED, run) and not damaged_outputs(run)


def resumable_checkpoint(run: Run) -> Path | None:
    """``last.ckpt`` of an interrupted attempt of exactly this run, or ``None``."""
    checkpoint = run.log_dir / CHECKPOINT
    return checkpoint if checkpoint.is_file() and matches(run.log_dir / STARTED, run) else None
