"""``--ckpt_path last`` and ``--ckpt_path best``: the run the config names, resolved before anything is built.

Lightning resolves these keywords against the checkpoint callback of the *new* run, whose folder is a
fresh ``version_N``: it finds nothing, warns once and trains every round again into that new folder.
A Lightning user who types ``--ckpt_path last`` means the config's latest run. So the CLI resolves the
keyword itself, from the configured logger's folder (``<save_dir>/<name>/version_<N>``; the newest
version with a ``checkpoints/last.ckpt``), and then resumes in that run's folder like any explicit
path. ``best`` is that run's best checkpoint as its monitored ``ModelCheckpoint`` recorded it in
``last.ckpt``. When there is nothing to resume, one line says where it looked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from lightning_fl.faults.validation import ConfigError

#: The keywords resolved here (Lightning's ``hpc`` and ``registry`` are left to Lightning).
KEYWORDS = ("last", "best")
_LOGGERS = ("TensorBoardLogger", "CSVLogger")


def _get(node: Any, key: str, default: Any = None) -> Any:
    if node is None:
        return default
    if isinstance(node, dict):
        return node.get(key, default)
    return getattr(node, key, default)


def runs_folder(trainer: Any) -> Path:
    """``<save_dir>/<name>``: where the configured TensorBoard or CSV logger (or Lightning's default) puts runs.

    Raises:
        ConfigError: For another logger, whose run folders this CLI does not know.
    """
    logger = _get(trainer, "logger")
    root = Path(_get(trainer, "default_root_dir") or ".")
    if logger in (None, True):
        return root / "lightning_logs"
    class_path = str(_get(logger, "class_path", ""))
    if not class_path.endswith(_LOGGERS):
        raise ConfigError(f"--ckpt_path last/best needs a TensorBoardLogger or CSVLogger in trainer.logger to find the"
                          f" run; got {class_path or logger!r}: give the checkpoint's path instead")
    init_args = _get(logger, "init_args") or {}
    return Path(_get(init_args, "save_dir") or root) / (_get(init_args, "name") or "lightning_logs")


def _version(path: Path) -> int:
    suffix = path.name[len("version_"):]
    return int(suffix) if suffix.isdigit() else -1


def latest_last_checkpoint(trainer: Any) -> Path:
    """The ``last.ckpt`` of the newest run folder (highest ``version_N``, or the configured ``version``) that has one.

    Raises:
        ConfigError: No run folder of the config holds a ``checkpoints/last.ckpt``.
    """
    folder = runs_folder(trainer)
    version = _get(_get(_get(trainer, "logger"), "init_args"), "version")
    if version is not None:
        name = version if isinstance(version, str) else f"version_{version}"
        candidates = [folder / name]
    else:
        candidates = sorted(folder.glob("version_*"), key=_version, reverse=True)
    for run in candidates:
        checkpoint = run / "checkpoints" / "last.ckpt"
        if checkpoint.is_file():
            return checkpoint
    raise ConfigError(f"--ckpt_path last: no run of this config has a last.ckpt (looked in {folder}/version_*/"
                      "checkpoints); start it without --ckpt_path, or give a checkpoint's path")


def best_checkpoint(last: Path) -> Path:
    """The best checkpoint the run of ``last`` recorded (its monitored ``ModelCheckpoint``'s ``best_model_path``).

    Raises:
        ConfigError: The run has no monitored checkpoint callback, or its best file is gone.
    """
    state = AtomicCheckpointIO().load_checkpoint(last, map_location="cpu", weights_only=True)
    for key, value in (state.get("callbacks") or {}).items():
        if str(key).startswith("ModelCheckpoint") and isinstance(value, dict) and value.get("monitor"):
            best = Path(value.get("best_model_path") or "")
            if best.is_file():
                return best
            raise ConfigError(f"--ckpt_path best: the best checkpoint {best} recorded in {last} does not exist")
    raise ConfigError(f"--ckpt_path best: {last}'s run has no ModelCheckpoint with a monitor (add one with"
                      " init_args {monitor: val/acc_mean, mode: max}), so it recorded no best checkpoint")


def resolve(keyword: str, trainer: Any) -> str:
    """The checkpoint path ``keyword`` (``last`` or ``best``) names for the run ``trainer`` configures."""
    last = latest_last_checkpoint(trainer)
    return str(last if keyword == "last" else best_checkpoint(last))


__all__ = ["KEYWORDS", "best_checkpoint", "latest_last_checkpoint", "resolve", "runs_folder"]
