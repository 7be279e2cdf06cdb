"""``python -m lightning_fl {fit,validate,test} --config configs/<...>.yaml`` through LightningCLI."""

from __future__ import annotations

import datetime
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn

import torch
from lightning_fabric.utilities.cloud_io import _is_local_file_protocol
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.utilities.rank_zero import rank_zero_info

import lightning_fl.callbacks  # noqa: F401  (registers the default callbacks: FedAvg, FairnessMetrics, the round bar)
from lightning_fl.aggregation.config_errors import stage_config_error
from lightning_fl.apps import checkpoint_keywords
from lightning_fl.apps.algorithm_choice import algorithm_names, keep_last_aggregation
from lightning_fl.apps.loggerless_runs import assign_run_folder, forget_run_folder
from lightning_fl.datamodules.dataset import dataset_config_error
from lightning_fl.datamodules.partitions.config_errors import partition_config_error
from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from lightning_fl.faults.dead_rank import lost_rank
from lightning_fl.faults.preemption import Preemption, requeued_checkpoint
from lightning_fl.faults.validation import (CheckpointError, ClientStateError, ConfigError, DivergenceError,
                                            OutputWriteError, RunWriteError, exception_chain)
from lightning_fl.faults.write_failures import write_failure
from lightning_fl.privacy.config import dp_config_error
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.simulation.distributed import RankFailure
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.simulation.out_of_memory import OutOfMemory, explain_out_of_memory, memory_failure
from lightning_fl.simulation.run_checks import (check_precision, check_seed, check_strategy, check_trainer,
                                                missing_package_error, non_finite_error)

# One "batch" (a round ticket) per epoch by design: no workers needed, nothing to log per batch.
# With several processes every rank computes the same metrics from the same gathered results (the
# cohort is sharded, then all-gathered), so Lightning's advice to sync them across devices does not apply.
for _pattern in (".*does not have many workers which may be a bottleneck.*",
                 ".*The number of training batches .* is smaller than the logging interval.*",
                 ".*when logging on epoch level in distributed setting to accumulate the metric.*"):
    warnings.filterwarnings("ignore", _pattern)
# Printed once per run by Lightning/torch internals, about nothing a user of this CLI can change.
warnings.filterwarnings("ignore", r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
# `validate`/`test` read a checkpoint of another run directory; ModelCheckpoint's bookkeeping is not used there.
warnings.filterwarnings("ignore", r".*The dirpath has changed from.*")
# A resumed run continues in its checkpoint's run directory and rewrites last.ckpt there by design.
warnings.filterwarnings("ignore", r"Checkpoint directory .* exists and is not empty\.")


def _plain_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                   line: str | None = None) -> str:
    """``warning: <message>``: the source file and line of the ``warnings.warn`` call mean nothing to a user."""
    return f"warning: {message}\n"


warnings.formatwarning = _plain_warning


class _NoAdverts(logging.Filter):
    """Drops Lightning's "💡 Tip: try installing litlogger/litmodels" lines (adverts, not information)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.getMessage())
        # The round bar replacing Lightning's bar is by design, not news.
        return not (message.startswith("💡 Tip") or message.endswith("will override existing callbacks passed to"
                                                                       " Trainer: TQDMProgressBar"))


logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_NoAdverts())
# "[rank: 0] Received SIGTERM: 15": lightning_fl.faults.preemption says what the signal does instead.
logging.getLogger("pytorch_lightning.trainer.connectors.signal_connector").setLevel(logging.WARNING)

#: ``ckpt_path`` values that name no file: Lightning resolves them when training starts.
_CKPT_KEYWORDS = ("last", "best", "hpc", "registry")


class FederatedArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, except that a malformed ``partition``, pipeline stage or attack, or a ``nan``/``inf`` float,
    fails with one line.

    jsonargparse checks a partition's class path and option names while parsing, before our own
    checks run, and reports a mistake as a multi-line account of every type it tried. Every other
    parse error keeps jsonargparse's usual usage-and-report output.
    """

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        # Nested parsers (exit_on_error off) only pass the report up; translate where it would be printed.
        if self.exit_on_error:
            partition = (partition_config_error(message) or stage_config_error(message) or dp_config_error(message)
                         or dataset_config_error(message) or non_finite_error(message) or missing_package_error(message))
            if partition is not None:
                raise ConfigError(partition)
        super().error(message, ex)


class FederatedCLI(LightningCLI):
    """LightningCLI for a :class:`~lightning_fl.simulation.loop.FederatedLoop` and any federated datamodule.

    ``seed_everything`` (model initialisation) also seeds the loop (``model.seed``: cohort sampling
    and batch order), so one number reproduces a run; the data partition has its own
    ``data.init_args.seed``.
    """

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        # Lightning's model summary shows the loop (FLOPs 0: a round is not a forward pass); the loop
        # prints a one-line summary of the client model instead.
        kwargs.setdefault("trainer_defaults", {"num_sanity_val_steps": 0, "enable_model_summary": False})
        kwargs.setdefault("seed_everything_default", 0)
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault("parser_class", FederatedArgumentParser)
        epilog = (f"Algorithms (trainer.callbacks): {', '.join(algorithm_names())}. Switch a config's with"
                  " --trainer.callbacks+=NAME (the last one given is the run's); --trainer.callbacks.help NAME"
                  " lists its options. docs/algorithms.md describes each.")
        kwargs.setdefault("parser_kwargs", {name: {"epilog": epilog} for name in ("fit", "validate", "test")})
        try:
            super().__init__(FederatedLoop, FederatedDataModule, *args, subclass_mode_data=True, **kwargs)
        except Exception as err:
            # Explained here, where the loop and trainer (and so the numbers, the run folder) are still at hand.
            failure = memory_failure(err)
            if failure is not None:
                raise explain_out_of_memory(failure, getattr(self, "model", None),
                                            getattr(self, "trainer", None)) from err
            if _root_cause(err, _EXPLAINED) is None:  # a file of Lightning's or a logger's, say
                line = write_failure(err, getattr(getattr(self, "model", None), "run_dir", None))
                if line is not None:
                    raise OutputWriteError(line) from err
            raise

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """LightningCLI's ``--optimizer``/``--lr_scheduler`` habits, as the client's ``model.optimizer``/``model.lr_scheduler``.

        The loop has no single optimizer for LightningCLI to configure (each client builds its own from
        ``model.optimizer``), so the top-level forms a Lightning user types are read as the loop's own.
        """
        if isinstance(args, list):
            super().parse_arguments(parser, [_loop_alias(arg) for arg in args])
            return
        argv = sys.argv
        sys.argv = [argv[0], *(_loop_alias(arg) for arg in argv[1:])]  # LightningCLI reads sys.argv itself
        try:
            super().parse_arguments(parser, args)
        finally:
            sys.argv = argv

    def _set_seed(self) -> None:
        # Lightning seeds before `before_instantiate_classes`; a seed numpy refuses would be a traceback.
        check_seed(self._get(self.config, "seed_everything"))
        super()._set_seed()

    def _parse_ckpt_path(self) -> None:
        """Check ``--ckpt_path`` before anything is built: a damaged file fails in one line, at once.

        LightningCLI reads the checkpoint here with a bare ``torch.load`` (to apply saved
        hyperparameters, which the loop never saves), and a damaged file would end in a traceback.
        Read it through :class:`AtomicCheckpointIO` instead, which verifies its checksum.
        """
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path in checkpoint_keywords.KEYWORDS:  # the config's own run, not the new run's empty folder
            ckpt_path = checkpoint_keywords.resolve(ckpt_path, self.config[subcommand].get("trainer", {}))
            rank_zero_info(f"--ckpt_path {self.config[subcommand]['ckpt_path']}: {ckpt_path}")
            self.config[subcommand]["ckpt_path"] = ckpt_path
        if subcommand == "fit" and not ckpt_path:  # a requeued SLURM job goes on where it was stopped
            ckpt_path = requeued_checkpoint(self.config[subcommand].get("trainer", {}).get("default_root_dir"))
            if ckpt_path:
                print(f"requeued SLURM job: resuming from {ckpt_path}", file=sys.stderr, flush=True)
                self.config[subcommand]["ckpt_path"] = ckpt_path
        if not ckpt_path or str(ckpt_path) in _CKPT_KEYWORDS or not _is_local_file_protocol(str(ckpt_path)):
            return
        checkpoint = AtomicCheckpointIO().load_checkpoint(ckpt_path, map_location="cpu", weights_only=True)
        if subcommand == "fit":
            check_rounds_left(checkpoint, self.config[subcommand].get("trainer", {}), str(ckpt_path))
            federated = checkpoint.get("federated")
            self._resumed_rounds = federated.get("rounds_completed") if isinstance(federated, dict) else None
        if checkpoint.get("hyper_parameters"):
            super()._parse_ckpt_path()

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """``fit``, ``validate`` and ``test``. ``predict`` is not offered: a federation has no single
        prediction set (the loop evaluates every client's splits in ``validate`` and ``test``)."""
        return {name: skip for name, skip in LightningCLI.subcommands().items() if name != "predict"}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("seed_everything", "model.seed")

    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand, self.config) if self.subcommand else self.config
        trainer = config.get("trainer", {})
        switched = keep_last_aggregation(trainer)
        if switched:
            rank_zero_info(switched)
        check_strategy(trainer.get("strategy", "auto"))
        check_trainer(self.subcommand, trainer)
        check_precision(trainer.get("precision"), trainer.get("accelerator", "auto"))
        if self.subcommand == "fit":
            assign_run_folder(trainer, config.get("ckpt_path"))
        if self.subcommand == "fit" and config.get("ckpt_path"):
            continue_run_directory(trainer.get("logger"), str(config["ckpt_path"]),
                                   getattr(self, "_resumed_rounds", None))
        if self.subcommand in ("validate", "test") and not config.get("ckpt_path"):
            raise ConfigError(f"{self.subcommand} needs --ckpt_path (e.g. <run dir>/checkpoints/last.ckpt): without a"
                              " checkpoint it would score the untrained initial model")


#: Top-level LightningCLI arguments that configure the client training of the loop.
_LOOP_ALIASES = ("--optimizer", "--lr_scheduler", "--lr_scheduler_interval")


def _loop_alias(arg: Any) -> Any:
    """``--optimizer...`` -> ``--model.optimizer...`` (and ``--lr_scheduler``); anything else unchanged."""
    if isinstance(arg, str):
        for alias in _LOOP_ALIASES:
            if arg == alias or arg.startswith((f"{alias}.", f"{alias}=", f"{alias}+")):
                return f"--model.{arg[2:]}"
    return arg


def continue_run_directory(logger: Any, ckpt_path: str, rounds: int | None = None) -> None:
    """A resumed run logs on in the run directory of its checkpoint, not in a new ``version_N``.

    Applies when ``ckpt_path`` is ``<save_dir>/<name>/version_<N>/checkpoints/<file>`` of the configured
    TensorBoard or CSV logger and the config names no ``version`` itself. A TensorBoard logger also gets
    ``purge_step = rounds + 1``: TensorBoard then drops what the stopped run logged after its
    checkpoint (the round in progress when it was killed), so every round shows once.
    """
    init_args = getattr(logger, "init_args", None)
    if init_args is None or not str(getattr(logger, "class_path", "")).endswith(("TensorBoardLogger", "CSVLogger")):
        return
    if isinstance(rounds, int) and str(logger.class_path).endswith("TensorBoardLogger"):
        init_args["purge_step"] = rounds + 1
    if init_args.get("version") is not None:
        return
    path = Path(ckpt_path).resolve()
    run_dir = path.parent.parent
    if path.parent.name != "checkpoints" or not run_dir.name.startswith("version_"):
        return
    save_dir, name = init_args.get("save_dir") or ".", init_args.get("name") or "lightning_logs"
    if run_dir.parent == (Path(save_dir) / name).resolve() and run_dir.name[len("version_"):].isdigit():
        init_args["version"] = int(run_dir.name[len("version_"):])


class NothingToTrain(Exception):
    """``fit`` resumed a checkpoint that already holds every round asked for: a finished run, not an error."""


def check_rounds_left(checkpoint: dict[str, Any], trainer: Any, ckpt_path: str) -> None:
    """Compare the checkpoint's completed rounds with ``trainer.max_epochs`` before anything is built.

    Raises:
        NothingToTrain: The checkpoint holds exactly ``max_epochs`` rounds (the CLI says so and exits 0).
        ConfigError: ``max_epochs`` is below the checkpoint's rounds (a run cannot be trained backwards).
    """
    federated = checkpoint.get("federated")
    done = federated.get("rounds_completed") if isinstance(federated, dict) else None
    max_epochs = trainer.get("max_epochs")
    if max_epochs is None and trainer.get("max_steps", -1) == -1:
        max_epochs = 1000  # Lightning's default when neither limit is set
    if not isinstance(done, int) or not isinstance(max_epochs, int) or max_epochs > done:
        return
    if max_epochs == done:
        raise NothingToTrain(f"{ckpt_path} already holds all {done} rounds of trainer.max_epochs {max_epochs}; nothing"
                             f" to train (raise --trainer.max_epochs above {done} to train on, or evaluate it with"
                             " validate/test)")
    raise ConfigError(f"trainer.max_epochs is {max_epochs}, below the {done} rounds {ckpt_path} already holds; set"
                      f" --trainer.max_epochs above {done} to train on (rounds cannot be undone)")


def _root_cause(err: BaseException, kind: type[BaseException] | tuple[type[BaseException], ...]
                ) -> BaseException | None:
    """The first ``kind`` exception in ``err``'s cause/context chain (jsonargparse wraps init errors)."""
    return next((cause for cause in exception_chain(err) if isinstance(cause, kind)), None)


#: Errors that already say what went wrong in one line.
_EXPLAINED = (ConfigError, CheckpointError, DivergenceError, OutOfMemory, RankFailure, RunWriteError)


def main(args: list[str] | None = None) -> None:
    """Entry point; configuration, checkpoint, divergence and memory errors print one line and exit non-zero.

    Exit codes: 2 for an invalid configuration, an unreadable ``--ckpt_path`` or a damaged
    ``client_state`` file (nothing was trained), 1 for a run that stopped: diverged, out of memory, a
    rank lost, a file that could not be written (checkpoint, client state, log, figure, CSV: full disk,
    file-size limit, read-only folder; the checkpoints written before are kept); ``128 + signal`` for a
    run stopped by SIGTERM, SIGINT or SIGUSR1 (:mod:`lightning_fl.faults.preemption`: ``last.ckpt`` holds the
    last completed round). 0 also when ``--ckpt_path`` already holds every round asked for (one line
    says so).
    """
    argv = list(sys.argv[1:] if args is None else args)
    if argv[:1] == ["tune"]:  # not a LightningCLI subcommand: tunes many runs, each its own fit process
        from lightning_fl.apps.tune import run as tune

        tune(argv[1:])
        return
    preemption = Preemption.instance()
    preemption.install()
    try:
        _run(args, preemption, argv)
        multi_process = close_process_group()
    finally:
        preemption.uninstall()
        forget_run_folder()
    if multi_process:
        # Everything is written and flushed, and every rank has passed the last barrier; skip the C++
        # teardown of gloo's and the rendezvous store's threads, which can abort a finished run at
        # interpreter exit ("terminate called without an active exception", exit -6).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def close_process_group() -> bool:
    """End a multi-process run's process group after a normal end; whether there was one.

    Every rank first waits for the others (a monitored barrier: one that died is named, not waited on
    forever), so no rank tears down its connections while another still uses them, then the group is
    destroyed. Only after a normal end: with a peer lost, tearing the group down could wait on it.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False
    if torch.distributed.get_world_size() > 1 and torch.distributed.get_backend() == "gloo":
        torch.distributed.monitored_barrier(timeout=datetime.timedelta(seconds=120))
    else:
        torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return True


def _run(args: list[str] | None, preemption: Preemption, argv: list[str]) -> None:
    try:
        FederatedCLI(args=args)
    except NothingToTrain as done:
        print(str(done), file=sys.stderr)
        return
    except BaseException as err:
        if preemption.stopped():  # whatever Lightning made of the signal (SIGTERMException, exit 1)
            preemption.exit(argv)
        if not isinstance(err, Exception):
            raise
        # ClientStateError before CheckpointError (its base): the file it names is not --ckpt_path.
        for kind, code, prefix in ((ConfigError, 2, ""), (ClientStateError, 2, ""),
                                   (CheckpointError, 2, "--ckpt_path "), (DivergenceError, 1, ""),
                                   (OutOfMemory, 1, ""), (RankFailure, 1, ""), (RunWriteError, 1, "")):
            cause = _root_cause(err, kind)
            if cause is not None:
                print(f"error: {prefix}{cause}", file=sys.stderr)
                sys.exit(code)
        chain = list(exception_chain(err))
        if any(isinstance(cause, ModuleNotFoundError) for cause in chain):  # WandbLogger without wandb, say
            missing = missing_package_error("\n".join(str(cause) for cause in chain))
            if missing is not None:
                print(f"error: {missing}", file=sys.stderr)
                sys.exit(2)
        failure = write_failure(err) or lost_rank(err, preemption.trainer)  # Lightning's own files, collectives
        if failure is not None:
            print(f"error: {failure}", file=sys.stderr)
            sys.exit(1)
        raise
    if preemption.stopped():  # the signal came after the last round: still not a normal end
        preemption.exit(argv)


__all__ = ["FederatedArgumentParser", "FederatedCLI", "NothingToTrain", "check_rounds_left", "main"]
