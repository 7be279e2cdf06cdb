"""The four ways of training one round that the benchmark puts side by side.

* :class:`NaiveRunner` (a): what a user would write with Lightning alone: per client and round a
  fresh copy of the global model, a new ``pytorch_lightning.Trainer(max_epochs=E)`` and ``fit`` on a
  ``DataLoader`` over that client's tensors (shuffled, batch ``B``). Speed-minded settings: no logger,
  no checkpointing, no progress bar, no model summary, no sanity validation, ``num_workers=0`` (the
  data are in-memory tensors; worker processes would only add start-up cost).
* :class:`EngineRunner` (b, c): the sequential or vectorized client engine with FedAvg, driven like
  ``FederatedLoop.training_step`` does (sample, train the cohort, aggregate), without the Trainer.
* :class:`CentralizedRunner` (d): the lower bound of issue 3: one model trained with batch ``K * B``
  on the cohort's pooled data for ``max_k tau_k`` optimizer steps, as a plain PyTorch loop
  (autograd, ``optimizer.step()``) over batches gathered once per round, as the engine does.
"""

from __future__ import annotations

import copy
import logging
import warnings

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from bench.jobs import Job
from lightning_fl.callbacks.fedavg import FedAvg
from lightning_fl.engines import ClientHookSet, LocalTrainingPlan, SequentialEngine, VectorizedEngine
from lightning_fl.engines.base import num_local_steps
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData
from lightning_fl.state.flat_state import FlatStateLayout



def quiet_lightning() -> None:
    """Silence Lightning's INFO lines (one set per naive client's Trainer) for a benchmark's command line.

    Called by the ``bench`` entry points, never on import: a test that imports a bench module keeps its
    logging (raising these loggers' level hid every later test's ``rank_zero_info`` lines from ``caplog``).
    """
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)

warnings.filterwarnings("ignore", message=".*does not have many workers.*")
warnings.filterwarnings("ignore", message=".*The number of training batches.*")


class _Runner:
    def __init__(self, job: Job, data: FederatedData, device: torch.device, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.job, self.data, self.device = job, data, device
        self.model = job.make_model().to(device)
        self.layout = FlatStateLayout(self.model.state_dict())
        self.sizes = data.train_sizes()

    def weights(self) -> Tensor:
        return self.layout.flatten(self.model.state_dict()).cpu()

    def _fedavg(self, client_weights: Tensor, client_ids: Tensor) -> None:
        n = self.sizes[client_ids].to(client_weights).unsqueeze(1)
        self.layout.load_into((n * client_weights).sum(0) / n.sum(), self.model.state_dict())


class NaiveRunner(_Runner):
    """(a) A new Lightning ``Trainer`` + ``fit`` per client per round."""

    name = "naive"

    def round(self, round_idx: int, client_ids: Tensor) -> None:
        job, ids = self.job, client_ids[: self.job.naive_clients]
        finals = []
        for client in ids.tolist():
            local = copy.deepcopy(self.model)
            local.configure_optimizers = lambda local=local: job.optimizer(local.parameters())
            trainer = pl.Trainer(
                max_epochs=job.run_epochs, accelerator=self.device.type, devices=1, logger=False,
                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                num_sanity_val_steps=0, limit_val_batches=0,
            )
            x, y = self.data.client_train(client)
            loader = DataLoader(TensorDataset(x, y), batch_size=job.batch_size, shuffle=True, num_workers=0)
            trainer.fit(local, loader)
            finals.append(FlatStateLayout(local.state_dict()).flatten(local.state_dict()))
        self._fedavg(torch.stack(finals), ids)


class EngineRunner(_Runner):
    """(b) and (c): a client engine plus FedAvg."""

    def __init__(self, job: Job, data: FederatedData, device: torch.device, engine: str,
                 precision: str = "32-true") -> None:
        super().__init__(job, data, device)
        self.name = engine
        # precision: the vectorized engine autocasts itself (and scales 16-mixed losses); the
        # sequential one relies on the Trainer's autocast, so here it trains in fp32 whatever is set.
        plan = LocalTrainingPlan(job.optimizer, job.run_epochs, job.batch_size, seed=0, lr=job.lr, precision=precision)
        self.engine = (SequentialEngine if engine == "sequential" else VectorizedEngine)(plan)
        self.engine.setup(self.model, data, ClientStateStore(data.num_clients))
        self.hooks = ClientHookSet([FedAvg()])
        self.aggregator = FedAvg()

    def round(self, round_idx: int, client_ids: Tensor) -> None:
        ones = torch.ones(len(client_ids), dtype=torch.long)
        update = self.engine.train_cohort(round_idx, client_ids, ones, self.hooks)
        global_w = self.layout.flatten(self.model.state_dict())
        new_w = self.aggregator.aggregate(round_idx, global_w, update, None, RoundLogger([], round_idx + 1))
        self.layout.load_into(new_w, self.model.state_dict())


class CentralizedRunner(_Runner):
    """(d) One model, batch ``K * B`` from the cohort's pooled data, ``max_k tau_k`` steps."""

    name = "centralized"

    def round(self, round_idx: int, client_ids: Tensor) -> None:
        job, data, model = self.job, self.data, self.model
        tau = num_local_steps(self.sizes[client_ids], job.run_epochs, job.batch_size)
        steps = int(tau.max())
        pool = torch.cat([torch.arange(int(data.train_offsets[k]), int(data.train_offsets[k + 1]))
                          for k in client_ids.tolist()])
        gen = torch.Generator().manual_seed(round_idx)
        picks = pool[torch.randint(len(pool), (steps * len(client_ids) * job.batch_size,), generator=gen)]
        picks = picks.to(self.device)
        # Staged like the vectorized engine stages its batches: one gather per round (when it fits).
        xs, ys = data.x_train.index_select(0, picks), data.y_train.index_select(0, picks)
        xs, ys = xs.view(steps, -1, *xs.shape[1:]).unbind(0), ys.view(steps, -1).unbind(0)
        optimizer = job.optimizer(model.parameters())
        model.train()
        for x, y in zip(xs, ys):
            loss = model.loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
