"""Checks of a run's settings that Lightning would otherwise report mid-run, or not at all.

Each problem is one line, before round 1: a ``ConfigError`` naming the field and what it accepts
where the run cannot mean what was asked (``--trainer.check_val_every_n_epoch 0``, a monitor no
callback logs, a Trainer option that has no meaning when a round is one training step), a
``rank_zero_warn`` where an option is merely ignored. :func:`check_trainer` runs on the parsed
configuration (``FederatedCLI.before_instantiate_classes``); :func:`check_setup` and
:func:`check_engine` run in the loop's ``setup``, once the data and the callbacks are known.
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

import torch
from pytorch_lightning import LightningModule
from pytorch_lightning.cli import OptimizerCallable
from pytorch_lightning.strategies import DDPStrategy, SingleDeviceStrategy
from pytorch_lightning.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from lightning_fl.engines import ENGINE_CHOICES
from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.simulation.distributed import CohortSharding
from lightning_fl.simulation.sampling import SAMPLING_MODES

#: The largest seed numpy (and so ``seed_everything``) accepts.
SEED_MAX = 2 ** 32 - 1
#: Trainer options whose per-batch meaning does not carry over to a round, with the only value allowed.
ROUND_IS_ONE_STEP = {
    "gradient_clip_val": (None, "the clients' local steps are not Lightning's, so it would clip nothing"),
    "accumulate_grad_batches": (1, "each round's update is already the whole cohort's, there is nothing to"
                                   " accumulate"),
    "limit_train_batches": (1.0, "the round is the epoch's only batch, and a part of it is no round"),
}
_NON_FINITE = re.compile(r"(?:Given|Got) value: ([+-]?(?:nan|inf|infinity))\b", re.IGNORECASE)
#: The scalars the loop logs itself, whatever its callbacks (``val/loss`` only with validation splits).
LOOP_SCALARS = ("train/loss", "train/acc", "round/seconds", "round/clients", "val/loss", "test/loss")
#: Logged with ``model.system`` (docs/system.md).
SYSTEM_SCALARS = ("clients/available", "clients/sampled", "clients/kept", "clients/dropped", "clients/stragglers",
                  "clients/over_selected", "clients/partial_steps", "sim/round_seconds", "sim/elapsed_seconds")
#: Modules whose callbacks declare what they log (``FederatedCallback.logged_scalars``) or log nothing.
_KNOWN_MODULES = ("lightning_fl.", "pytorch_lightning.", "lightning.")

#: Allowed values of ``client_state``, ``exchange`` and ``on_client_divergence``.
CLIENT_STATE_STORES = ("memory", "disk")
EXCHANGES = ("gather", "reduce")
DIVERGENCE_POLICIES = ("stop", "drop")


def check_seed(seed: Any) -> None:
    """``seed_everything``: a seed numpy accepts, or ``true`` (random) / ``false`` (not seeded)."""
    if not isinstance(seed, bool) and not (isinstance(seed, int) and 0 <= seed <= SEED_MAX):
        raise ConfigError(f"seed_everything must be an integer between 0 and {SEED_MAX} (or true for a random"
                          f" seed); got {seed!r}")


def non_finite_error(message: str) -> str | None:
    """One line for jsonargparse's report on ``--field nan`` / ``inf`` (a float option); else ``None``."""
    value = _NON_FINITE.search(message)
    keys = re.findall(r'Parser key "([^"]+)"', message)
    if value is None or not keys or "<class 'float'>" not in message:
        return None
    field = keys[0] + "".join(f".init_args.{key}" for key in keys[1:])
    return f"{field} must be a finite number; got {value.group(1)}"


#: Optional loggers and the extra of this package that installs each one's package.
LOGGER_EXTRAS = {"wandb": "wandb", "mlflow": "mlflow", "comet_ml": "comet", "neptune": "neptune"}
_MISSING = re.compile(r"Requirement '(?P<requirement>(?P<package>[A-Za-z0-9_.-]+?)(?:[<>=!~].*?)?)' not met")


def missing_package_error(message: str) -> str | None:
    """One line for jsonargparse's report on a class whose optional package is missing (``WandbLogger``
    without ``wandb``: 85 lines of chained tracebacks); else ``None``."""
    missing = _MISSING.search(message)
    if missing is None:
        return None
    package = missing.group("package")
    classes = re.findall(r"class_path[= ]'([\w.]+)'", message)
    what = classes[0].rsplit(".", 1)[-1] if classes else "this configuration"
    extra = LOGGER_EXTRAS.get(package)
    how = f"pip install -e '.[{extra}]'" if extra else f"pip install '{missing.group('requirement')}'"
    return f"{what} needs the package {package}, which is not installed: {how}"


def check_trainer(subcommand: str | None, trainer: Mapping[str, Any]) -> None:
    """One-line errors for Trainer settings the loop cannot honour (see the module docstring)."""
    every = trainer.get("check_val_every_n_epoch")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ConfigError(f"trainer.check_val_every_n_epoch must be an integer >= 1 (evaluate every this many"
                          f" rounds); got {every!r}")
    check_accelerator(trainer.get("accelerator"))
    for field, (allowed, why) in ROUND_IS_ONE_STEP.items():
        value = trainer.get(field)
        if value is not None and value != allowed and not (allowed == 1.0 and value == 1):
            shown = "null" if allowed is None else allowed
            raise ConfigError(f"trainer.{field} must be {shown} (a round is one training step of the loop:"
                              f" {why}); got {value!r}")
    rounds = trainer.get("max_epochs")
    if subcommand == "fit" and isinstance(rounds, int) and not isinstance(rounds, bool) and rounds == 0:
        raise ConfigError("trainer.max_epochs must be an integer >= 1 (the number of rounds; -1: no limit); got 0,"
                          " which trains nothing")


def check_accelerator(accelerator: Any) -> None:
    """``gpu``/``cuda``/``mps`` without such a device is one line, not Lightning's traceback."""
    name = str(getattr(accelerator, "class_path", accelerator)).rsplit(".", 1)[-1].lower()
    missing = {"gpu": not torch.cuda.is_available() and not _mps(), "cuda": not torch.cuda.is_available(),
               "cudaaccelerator": not torch.cuda.is_available(), "mps": not _mps()}
    if missing.get(name, False):
        raise ConfigError(f"trainer.accelerator {name} needs a device of that kind and this machine has none; use"
                          " cpu or auto")


def _mps() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def check_setup(loop: Any, data: Any, stage: str) -> None:
    """Before round 1, once the data and callbacks are known: test splits and monitored metric names."""
    if data.test_offsets[-1] == 0 and stage in ("fit", "test"):
        fraction = getattr(loop.trainer.datamodule, "test_fraction", None)
        raise ConfigError(f"data.test_fraction must be in (0, 1): no client has a test sample, so the run could not be"
                          f" evaluated; got {fraction}")
    sizes = data.test_offsets.diff()
    empty = (sizes == 0).nonzero().flatten().tolist()
    if empty and stage in ("fit", "test"):
        shown = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
        rank_zero_warn(f"data: {len(empty)} of {len(sizes)} clients ({shown}) have no test sample; they are left out"
                       " of the test/* fairness metrics")
    if stage == "fit":
        check_monitors(loop.trainer.callbacks, data.has_validation, loop.system is not None,
                       loop.on_client_divergence == "drop")


def logged_scalars(callbacks: Iterable[Any], validation: bool, system: bool, drop: bool) -> list[str] | None:
    """Names (``fnmatch`` patterns) of the scalars a run logs; ``None`` if a callback's are unknown."""
    names = [n for n in LOOP_SCALARS if validation or not n.startswith("val/")]
    names += list(SYSTEM_SCALARS) if system else []
    names += ["clients/diverged"] if drop else []
    for callback in callbacks:
        declared = getattr(callback, "logged_scalars", None)
        if declared is None and not type(callback).__module__.startswith(_KNOWN_MODULES):
            return None  # a third-party callback may log anything
        names += [n for n in declared or () if validation or not n.startswith("val/")]
    return names


def check_monitors(callbacks: list[Any], validation: bool, system: bool, drop: bool) -> None:
    """Every ``monitor`` (EarlyStopping, ModelCheckpoint, RoundsToTarget) names a scalar the run logs."""
    names = logged_scalars(callbacks, validation, system, drop)
    if names is None:
        return
    for callback in callbacks:
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str) and not any(fnmatchcase(monitor, n) for n in names):
            near = [n for n in names if n.split("/")[0] == monitor.split("/")[0]] or names
            raise ConfigError(f"{type(callback).__name__}.monitor must be a metric this run logs, one of"
                              f" {', '.join(near)}; got {monitor!r}")


def check_engine(engine: Any, max_parallel_clients: int | None) -> None:
    """``max_parallel_clients`` bounds a vectorized engine only; with the sequential one it is a no-op."""
    if max_parallel_clients is not None and engine.name == "sequential":
        rank_zero_warn(f"model.max_parallel_clients {max_parallel_clients} is ignored: the sequential engine trains"
                       " one client at a time (it bounds the vectorized engine)")


def check_hierarchy_options(hierarchy: Any, clients_per_round: int, sampling: str) -> None:
    """With a hierarchy every client trains each round: a cohort size or sampling mode is ignored."""
    ignored = [f"{name} {value}" for name, value, default in (("clients_per_round", clients_per_round, 10),
                                                              ("sampling", sampling, "uniform"))
               if value not in (default, "all")]
    if hierarchy is not None and ignored:
        verb = "are" if len(ignored) > 1 else "is"
        rank_zero_warn(f"model.{' and model.'.join(ignored)} {verb} ignored: with model.hierarchy every client of"
                       " every institution trains each round")


__all__ = ["check_accelerator", "check_engine", "check_hierarchy_options", "check_monitors", "check_seed",
           "check_setup", "check_trainer", "logged_scalars", "missing_package_error", "non_finite_error",
           "set_cpu_threads"]


#: Precisions the engines train in (``16-mixed``: CUDA only).
SUPPORTED_PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")


def check_finite_inputs(data: Any) -> None:
    """One-line ``ConfigError`` naming the first client whose inputs hold NaN or inf.

    Checked once before training, so a NaN that comes from the data is reported as such instead of
    surfacing rounds later as a "diverged" client whose learning rate looks to blame.
    """
    splits = [("training", data.x_train, data.train_offsets), ("test", data.x_test, data.test_offsets)]
    if getattr(data, "has_validation", False):
        splits.append(("validation", data.x_val, data.val_offsets))
    for split, x, offsets in splits:
        if not x.is_floating_point() or not len(x):  # token ids, or an empty split: nothing to check
            continue
        bad = (~torch.isfinite(x.reshape(len(x), -1))).any(1).nonzero().flatten()
        if len(bad):
            row = int(bad[0])
            client = int(torch.searchsorted(offsets, torch.tensor([row], device=offsets.device), right=True)[0]) - 1
            raise ConfigError(f"data: the {split} inputs of client {client} contain NaN or inf (sample"
                              f" {row - int(offsets[client])} of its {split} split, {len(bad)} samples in all);"
                              " clean the data before training")


def check_precision(precision: Any, accelerator: Any) -> None:
    """``16-mixed`` without a GPU is an error: Lightning would silently train in ``bf16-mixed`` instead."""
    if str(precision) in ("16-mixed", "16") and (
            str(accelerator) == "cpu" or (str(accelerator) in ("auto", "None") and not torch.cuda.is_available())):
        raise ConfigError("trainer.precision 16-mixed needs a GPU (on CPU Lightning would switch to bf16-mixed"
                          " without asking); use bf16-mixed or 32-true on CPU")


def probe_optimizer(optimizer: OptimizerCallable) -> tuple[float, float]:
    """Build the client optimizer on a dummy parameter to validate it and read ``lr`` and ``momentum``."""
    try:
        probe = optimizer([torch.nn.Parameter(torch.zeros(1))])
    except (TypeError, ValueError) as err:
        # torch says e.g. "Invalid learning rate: -1.0" / "Invalid momentum value: -0.5".
        message = str(err)
        for phrase, field, bound in (("learning rate", "lr", "> 0"), ("momentum", "momentum", ">= 0"),
                                     ("weight_decay", "weight_decay", ">= 0")):
            if phrase in message:
                value = message.rsplit(":", 1)[-1].strip()
                raise ConfigError(f"optimizer.init_args.{field} must be a number {bound}; got {value}") from None
        raise ConfigError(f"optimizer: {message}") from None
    lr = probe.defaults.get("lr")
    lr = float(lr) if isinstance(lr, (int, float, Tensor)) else None
    if lr is None or not 0 < lr < float("inf"):  # NaN fails too; YAML reads 1e400 as inf
        raise ConfigError(f"optimizer.init_args.lr must be a finite number > 0; got {probe.defaults.get('lr')!r}")
    return lr, float(probe.defaults.get("momentum", 0.0) or 0.0)


#: ``trainer.strategy`` values the loop can shard clients under: one device, or DDP processes.
STRATEGIES = ("auto", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "single_device")


def check_strategy(strategy: Any) -> None:
    """One-line ``ConfigError`` unless ``strategy`` (a name or a config entry) is one the loop supports.

    The loop shards each round's cohort over the processes itself; strategies that shard a model
    (``fsdp``, ``deepspeed``) or split batches (``dp``) have nothing to do here.
    """
    if isinstance(strategy, dict):  # {class_path: ..., init_args: ...}
        strategy = str(strategy.get("class_path", "")).rsplit(".", 1)[-1]
    elif getattr(strategy, "class_path", None):  # the same, as the CLI parser's namespace
        strategy = str(strategy.class_path).rsplit(".", 1)[-1]
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    if name in STRATEGIES or name in ("DDPStrategy", "SingleDeviceStrategy") or name.startswith("ddp_find_unused"):
        return
    raise ConfigError(f"trainer.strategy must be one of {', '.join(STRATEGIES)} or a DDPStrategy (torchrun and SLURM"
                      f" launch ddp too); got {name}: the loop shards each round's clients over the processes itself")


def check_without_validation(trainer: Any, stage: str) -> None:
    """One-line errors for what needs validation splits when ``data.val_fraction`` is 0."""
    if stage == "validate":
        raise ConfigError("validate needs the clients' validation splits, but data.val_fraction is 0; set"
                          " data.val_fraction > 0 (e.g. 0.1), or use test for the test splits")
    if stage != "fit":
        return
    for callback in trainer.callbacks:
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str) and monitor.startswith("val/"):
            raise ConfigError(f"{type(callback).__name__}.monitor is {monitor}, but data.val_fraction is 0, so no"
                              " val/* metric is logged; set data.val_fraction > 0 (e.g. 0.1) or remove the monitor")

def cohort_sharding(trainer: Any, collective_timeout: float) -> CohortSharding:
    """The cohort split over the run's processes; one-line errors for strategies that cannot work."""
    strategy = trainer.strategy
    if type(strategy) not in (SingleDeviceStrategy, DDPStrategy):
        check_strategy(getattr(strategy, "strategy_name", None) or type(strategy).__name__)
    world = trainer.world_size
    if world > 1 and isinstance(strategy, DDPStrategy) and strategy.process_group_backend == "nccl":
        local_ranks = max(1, world // max(1, trainer.num_nodes))
        if torch.cuda.is_available() and local_ranks > torch.cuda.device_count():
            raise ConfigError(f"trainer.strategy: nccl cannot run {local_ranks} ranks on"
                              f" {torch.cuda.device_count()} GPU(s); use class_path"
                              " pytorch_lightning.strategies.DDPStrategy with init_args {process_group_backend: gloo}")
    return CohortSharding(world, trainer.global_rank, collective_timeout)


def set_cpu_threads(device: torch.device, model: torch.nn.Module, cpu_threads: int | None) -> None:
    """Torch's intra-op threads on the CPU: ``model.cpu_threads``, or 1 for models under a million
    parameters (their ops are too small to split; the threads would only contend)."""
    if device.type != "cpu":
        return
    threads = cpu_threads
    if threads is None and sum(p.numel() for p in model.parameters()) < 1_000_000:
        threads = 1
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
        rank_zero_info(f"torch intra-op threads: {threads} (model.cpu_threads)")


def check_loop_arguments(client: object, *, clients_per_round: int, local_epochs: int, batch_size: int,
                         eval_batch_size: int, sampling: str, engine: str, client_state: str,
                         max_parallel_clients: int | None, cpu_threads: int | None = None) -> None:
    """The :class:`~lightning_fl.simulation.loop.FederatedLoop` arguments checkable before set-up (one-line errors)."""
    if not isinstance(client, LightningModule):
        raise ConfigError(f"client must be a pytorch_lightning.LightningModule (e.g. a lightning_fl.models.ClientModule);"
                          f" got {type(client).__name__}")
    check_positive("clients_per_round", clients_per_round, integer=True)
    check_positive("local_epochs", local_epochs, integer=True)
    check_positive("batch_size", batch_size, integer=True)
    check_positive("eval_batch_size", eval_batch_size, integer=True)
    check_choice("sampling", sampling, SAMPLING_MODES)
    check_choice("engine", engine, ENGINE_CHOICES)
    check_choice("client_state", client_state, CLIENT_STATE_STORES)
    for name, value in (("max_parallel_clients", max_parallel_clients), ("cpu_threads", cpu_threads)):
        if value is not None:
            check_positive(name, value, integer=True)


#: The run folder's subfolder of ``model.client_state: disk`` files.
CLIENT_STATE_DIR = "client_state"


def client_state_dir(run_dir: Path, client_state: str, trainer: Any) -> Path | None:
    """Where ``model.client_state: disk`` keeps per-client rows (``None``: in memory).

    Every rank holds the whole state (identical on every rank) and writes its own files.
    """
    if client_state == "memory":
        return None
    root = run_dir / CLIENT_STATE_DIR
    return root if trainer.world_size == 1 else root / f"rank{trainer.global_rank}"
