"""The loop's checkpoint hooks: the federated state saved with every checkpoint, checked on resume."""

from __future__ import annotations

from typing import Any

from pytorch_lightning import LightningModule
from pytorch_lightning.utilities import rank_zero_warn
from typing_extensions import override

from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.resume_check import changed_fields, data_digest, implied_defaults, run_config
from lightning_fl.state.append_log import locate_client_state
from lightning_fl.state.client_state import checkpoint_run_dir

__all__ = ["CheckpointHooks"]


class CheckpointHooks(LightningModule):
    """Saving and resuming a :class:`~lightning_fl.simulation.loop.FederatedLoop` (a mixin over the loop's sampler,
    client-state store, hierarchy and system): rounds completed, the sampler, every client's declared
    state, and the run's configuration, which a resume compares with its own (docs/architecture.md).
    """

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["federated"] = {
            "rounds_completed": self.rounds_completed,
            "sampler": self.sampler.state_dict(),
            "clients": self.store.state_dict(),
            "hierarchy": None if self.hierarchy is None else self.hierarchy.state_dict(),
            "system": None if self.system is None else self.system.state_dict(),
            "lr_schedule": None if self.lr_schedule is None else self.lr_schedule.state_dict(),
            "run_config": self._run_config(),
        }

    def _run_config(self) -> dict[str, Any]:
        if self._data_sha is None:  # hashed once per run: the data does not change while training
            self._data_sha = data_digest(self.trainer.datamodule.data)
        return run_config(self, self.trainer.datamodule, self.federated_callbacks, self._data_sha)

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint["federated"]
        locate_client_state(checkpoint, checkpoint_run_dir(self.trainer.ckpt_path, self.run_dir))
        if "run_config" in state:
            changes = changed_fields(state["run_config"], self._run_config(), implied_defaults(self.federated_callbacks))
            if changes and not self.resume_despite_changes:
                raise ConfigError(f"the checkpoint was trained under another configuration ({'; '.join(changes)}); resume"
                                  " with its settings, or set model.resume_despite_changes: true to continue anyway (the"
                                  " result is then not the continuation of the checkpointed run)")
            if changes:
                rank_zero_warn(f"resuming despite configuration changes: {'; '.join(changes)}")
        self.rounds_completed = state["rounds_completed"]
        self.sampler.load_state_dict(state["sampler"])
        self.store.load_state_dict(state["clients"])
        if (state.get("hierarchy") is None) != (self.hierarchy is None):
            raise ConfigError("model.hierarchy must be set exactly when the checkpoint was written with one")
        if self.hierarchy is not None:
            self.hierarchy.load_state_dict(state["hierarchy"])
        if (state.get("system") is None) != (self.system is None):
            raise ConfigError("model.system must be set exactly when the checkpoint was written with one (its"
                              " simulated clients and clock cannot be resumed otherwise)")
        if self.system is not None:
            self.system.load_state_dict(state["system"])
        if self.lr_schedule is not None and state.get("lr_schedule") is not None:
            self.lr_schedule.load_state_dict(state["lr_schedule"])
        elif self.lr_schedule is not None:  # the run had none (resumed despite the change): the schedule
            for _ in range(self.rounds_completed):  # is where it would be after the rounds already trained
                self.lr_schedule.step()


