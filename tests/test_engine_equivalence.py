"""Sequential and vectorized engines give the same global model (issue 3, SPEC section 1).

Both engines draw the same batches (``epoch_permutation``) and run the same client optimizer and
hooks, so after several rounds through ``FederatedLoop`` + ``Trainer`` the global weights must agree
to float rounding (1e-5 relative) for every client-side algorithm, with clients of unequal sizes
(unequal ``tau_k``), momentum, Adam and a cohort split into chunks.

Client-side algorithms added later append an instance to ``CLIENT_SIDE_CALLBACKS``; each run uses a
deep copy, so stateful callbacks start fresh.
"""

from __future__ import annotations

import copy
import tempfile

import pytest
import pytorch_lightning as pl
import torch
from lightning_fl.callbacks import IGFL, FedAvg, FedDyn, FedProx, IGFLClient, Scaffold
from lightning_fl.datamodules import SyntheticDataModule

from lightning_fl.engines.base import num_local_steps
from lightning_fl.models import MLP, LogisticRegression
from lightning_fl.simulation.loop import FederatedLoop

CLIENT_SIDE_CALLBACKS = [FedAvg(), FedProx(mu=0.1), Scaffold(), IGFLClient(), IGFL(attention="time"), FedDyn(alpha=0.1)]

ROUNDS = 3


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05)


def _momentum(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)


def _adam(params):
    return torch.optim.Adam(params, lr=0.01)


def _data() -> SyntheticDataModule:
    # Capped sizes 54..150 -> 44..120 train samples: tau_k = 2 * ceil(n_k / 10) from 10 to 24.
    return SyntheticDataModule("1_1", num_clients=8, max_samples_per_client=150)


def _fit(engine: str, callback: pl.Callback, optimizer=_sgd, max_parallel: int | None = None,
         model=lambda: LogisticRegression(60, 10)) -> torch.Tensor:
    torch.manual_seed(0)
    loop = FederatedLoop(client=model(), optimizer=optimizer, clients_per_round=4, local_epochs=2, batch_size=10,
                         seed=0, engine=engine, max_parallel_clients=max_parallel)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=ROUNDS, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, callbacks=[copy.deepcopy(callback)])
    trainer.fit(loop, datamodule=_data())
    assert loop.engine.name == engine
    return loop.layout.flatten(loop.model.state_dict()).clone()


def _assert_same(sequential: torch.Tensor, vectorized: torch.Tensor) -> None:
    rel = float((sequential - vectorized).norm() / sequential.norm())
    assert rel < 1e-5, f"global weights differ by {rel:.2e} (relative)"


def test_cohorts_have_unequal_local_steps():
    data = _data()
    data.setup("fit")
    taus = num_local_steps(data.data.train_sizes(), 2, 10)
    assert len(set(taus.tolist())) > 3


@pytest.mark.parametrize("callback", CLIENT_SIDE_CALLBACKS, ids=lambda c: type(c).__name__)
def test_client_side_algorithms_match(callback):
    _assert_same(_fit("sequential", callback), _fit("vectorized", callback))


@pytest.mark.parametrize("optimizer", [_momentum, _adam], ids=["sgd_momentum", "adam"])
def test_stateful_optimizers_match(optimizer):
    _assert_same(_fit("sequential", FedProx(mu=0.1), optimizer), _fit("vectorized", FedProx(mu=0.1), optimizer))


def test_chunks_smaller_than_the_cohort_match():
    # K = 4 in chunks of 3 and 1; momentum so that any leak between chunks would show.
    _assert_same(_fit("sequential", FedAvg(), _momentum), _fit("vectorized", FedAvg(), _momentum, max_parallel=3))


def test_mlp_matches():
    mlp = lambda: MLP(60, 10, hidden=(16,))  # noqa: E731
    _assert_same(_fit("sequential", FedAvg(), _momentum, model=mlp), _fit("vectorized", FedAvg(), _momentum, model=mlp))
