"""Callbacks that make a run fail or slow down at a chosen round (checkpoint and out-of-memory tests).

They are named by class path in test configs (``tests.checkpoint_faults.<Name>``), so they also run in
a ``python -m lightning_fl`` subprocess started from the repository root.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import Tensor

from lightning_fl.engines.cohort import LocalTrainingContext
from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.federation import Federation


class SlowRounds(FederatedCallback):
    """Sleeps ``seconds`` at the end of every round, so that a test can kill the run between two rounds.

    With ``gate`` (a file path) the first round waits until that file exists: a test starts the
    process, does other work while it imports and sets up, then lets it train.
    """

    def __init__(self, seconds: float = 0.05, gate: str | None = None) -> None:
        super().__init__()
        self.seconds, self.gate = seconds, gate

    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation, log: RoundLogger) -> None:
        deadline = time.monotonic() + 300
        while self.gate is not None and not Path(self.gate).exists() and time.monotonic() < deadline:
            time.sleep(0.005)

    def on_round_end(self, round_idx: int, result: object, federation: Federation, log: RoundLogger) -> None:
        time.sleep(self.seconds)


class NaNAtRound(FederatedCallback):
    """Every client's weights become NaN after its first local step in round index ``round_idx`` (divergence)."""

    def __init__(self, round_idx: int = 2) -> None:
        super().__init__()
        self.round_idx, self.current = round_idx, -1

    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation, log: RoundLogger) -> None:
        self.current = round_idx

    def after_local_step(self, ctx: LocalTrainingContext, params: dict[str, Tensor],
                         step_delta: dict[str, Tensor]) -> None:
        if self.current == self.round_idx:
            for value in params.values():
                value.fill_(float("nan"))


class AllocateAtRound(FederatedCallback):
    """Asks for ``2**gib_log2`` GiB at the start of round index ``round_idx``: a real allocation failure.

    ``kind``: ``torch`` (torch's CPU allocator raises ``RuntimeError: ... DefaultCPUAllocator: can't
    allocate memory``) or ``python`` (``MemoryError``).
    """

    def __init__(self, round_idx: int = 1, kind: str = "torch", gib_log2: int = 30) -> None:
        super().__init__()
        self.round_idx, self.kind, self.size = round_idx, kind, 2 ** (gib_log2 + 30)

    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation, log: RoundLogger) -> None:
        if round_idx == self.round_idx:
            if self.kind == "torch":
                torch.empty(self.size, dtype=torch.uint8)
            else:
                bytearray(self.size)


class LastCheckpointProbe(FederatedCallback):
    """At the start of round index ``t >= 1``, requires ``last.ckpt`` to be verified and to hold ``t`` rounds."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.trainer = trainer

    def on_round_start(self, round_idx: int, client_ids: Tensor, federation: Federation, log: RoundLogger) -> None:
        if round_idx == 0:
            return
        path = Path(self.trainer.checkpoint_callback.dirpath) / "last.ckpt"
        rounds = AtomicCheckpointIO().load_checkpoint(path)["federated"]["rounds_completed"]
        if rounds != round_idx:
            raise AssertionError(f"round {round_idx} starts with {path} holding {rounds} rounds")


class SignalAtRound(FederatedCallback):
    """Sends ``signum`` to this process ``times`` times, ``gap`` seconds apart: at the end of round index ``round_idx``, while
    that round's checkpoint is being written (``during_save``), or during set-up (``round_idx`` -1).

    A preemption as a scheduler or a user delivers it, at a chosen moment (tests/faults).
    """

    def __init__(self, signum: int = 15, round_idx: int = 1, times: int = 1, during_save: bool = False,
                 gap: float = 1.1) -> None:
        super().__init__()
        self.signum, self.round_idx, self.times, self.during_save, self.gap = signum, round_idx, times, during_save, gap

    def _send(self) -> None:
        for i in range(self.times):
            if i:
                time.sleep(self.gap)  # within a second a repeat counts as the same stop delivered twice
            os.kill(os.getpid(), self.signum)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.round_idx < 0:
            self._send()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.during_save:
            return
        io, target = trainer.strategy.checkpoint_io, self.round_idx + 1
        serialize = io._serialize

        def interrupted_write(checkpoint: dict, file: object) -> None:
            if checkpoint["federated"]["rounds_completed"] == target:
                self._send()  # the temporary file is open: the signal lands mid-save
            serialize(checkpoint, file)

        io._serialize = interrupted_write

    def on_round_end(self, round_idx: int, result: object, federation: Federation, log: RoundLogger) -> None:
        if round_idx == self.round_idx and not self.during_save:
            self._send()
