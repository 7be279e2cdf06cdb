"""The benchmark jobs of issues 3 and 24: data, model and local-training settings.

* J1: FedProx Synthetic(1,1) (exact size formula, seed 0), logistic regression 60 -> 10, 30 clients,
  10 per round, 20 local epochs, batch 10.
* J2: MNIST-shaped logistic regression 784 -> 10, 1000 clients with lognormal sizes (mean about 69),
  10 per round, 1 local epoch, batch 10; random pixels (only the timing matters).
* J3: the McMahan 28x28 CNN, 100 clients x 600 samples, 10 per round, 5 local epochs, batch 10;
  random pixels.
* J4 (issue 24): pfl-research's CIFAR-10 benchmark workload (apple/pfl-research ``publications/pfl/``):
  1,000 users x 50 images (CIFAR-10 when present in ``data/``, else CIFAR-shaped synthetic images,
  :mod:`bench.cifar_like`), its 2-conv CNN of 1,626,442 parameters (:class:`~lightning_fl.models.PflCNN`),
  50 users per round, 1 local epoch at batch 10 (5 steps), SGD lr 0.1. pfl-research trains it 1,500
  rounds (75,000 client updates).

J1-J3 use plain SGD (lr 0.01), the optimizer of the FedProx/FedAvg papers' experiments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from lightning_fl.datamodules.synthetic import SyntheticDataModule
from bench.cifar_like import cifar_like
from lightning_fl.models import CNN28, LogisticRegression, PflCNN
from lightning_fl.models.base import ClientModule
from lightning_fl.state.data import FederatedData, offsets_from_sizes


@dataclass
class Job:
    """One benchmark job.

    Attributes:
        name: ``J1`` to ``J4``.
        title: One-line description for the table.
        make_data: Builds the federation (train split only matters).
        make_model: Builds the client model (seeded by the caller).
        local_epochs: ``E``.
        batch_size: ``B``.
        clients_per_round: ``K``.
        rounds: Timed rounds (after one untimed warm-up round).
        passes: Times the timed rounds are repeated; the best pass counts (as ``timeit``'s best repeat).
        naive_clients: Clients per round the naive baseline actually trains (``None``: all ``K``); the
            rest of its round time is extrapolated per client.
        epoch_scale: Local epochs actually run per timed round are ``local_epochs / epoch_scale``; times
            are multiplied by ``epoch_scale`` (every epoch of J3 costs the same: equal client sizes).
        lr: The client SGD learning rate.
        data_source: What ``make_data`` built, once it ran (J4: CIFAR-10 or synthetic images).
    """

    name: str
    title: str
    make_data: Callable[[], FederatedData]
    make_model: Callable[[], ClientModule]
    local_epochs: int
    batch_size: int
    clients_per_round: int
    rounds: int
    naive_clients: int | None = None
    epoch_scale: int = 1
    passes: int = 3
    lr: float = 0.01
    data_source: str | None = None

    def optimizer(self, params) -> torch.optim.Optimizer:  # noqa: ANN001 - any iterable of tensors
        return torch.optim.SGD(params, lr=self.lr)

    @property
    def run_epochs(self) -> int:
        return math.ceil(self.local_epochs / self.epoch_scale)


def _synthetic() -> FederatedData:
    module = SyntheticDataModule("1_1", num_clients=30, seed=0)
    module.setup("fit")
    return module.data


def _random_images(sizes: list[int], shape: tuple[int, ...], seed: int) -> FederatedData:
    gen = torch.Generator().manual_seed(seed)
    total = sum(sizes)
    x = torch.rand(total, *shape, generator=gen)
    y = torch.randint(0, 10, (total,), generator=gen)
    ones = [1] * len(sizes)
    num = len(sizes)
    return FederatedData(x, y, offsets_from_sizes(sizes), x[:num], y[:num], offsets_from_sizes(ones), 10)


def _mnist_lognormal() -> FederatedData:
    # lognormal(mu, 1) has mean exp(mu + 1/2): mu = ln(69) - 1/2 gives a mean of about 69 samples.
    rng = np.random.default_rng(0)
    sizes = np.maximum(rng.lognormal(math.log(69) - 0.5, 1.0, 1000).astype(np.int64), 2)
    return _random_images(sizes.tolist(), (784,), seed=1)


def build_jobs(quick: bool = False, rounds: int | None = None) -> dict[str, Job]:
    """The jobs; ``quick`` shrinks rounds (and J3's epochs) for a smoke run."""
    jobs = {
        "J1": Job("J1", "Synthetic(1,1) logreg, 30 clients, K=10, E=20, B=10", _synthetic,
                  lambda: LogisticRegression(60, 10), 20, 10, 10, rounds=1 if quick else 5),
        "J2": Job("J2", "MNIST-shaped logreg 784->10, 1000 lognormal clients, K=10, E=1, B=10", _mnist_lognormal,
                  lambda: LogisticRegression(784, 10), 1, 10, 10, rounds=3 if quick else 40),
        # On a CPU a J3 round takes tens of seconds per variant: one timed round of one local epoch
        # (x5, as every epoch costs the same), and the naive baseline on 2 of the 10 clients.
        "J3": Job("J3", "CNN28, 100 clients x 600, K=10, E=5, B=10",
                  lambda: _random_images([600] * 100, (1, 28, 28), 2), lambda: CNN28(10), 5, 10, 10, rounds=1,
                  naive_clients=2, epoch_scale=5, passes=1),
    }
    jobs["J4"] = pfl_job()
    if rounds is not None:
        for job in jobs.values():
            job.rounds = rounds
    if quick:  # a smoke run of the whole pipeline, not a measurement: J3 shrinks to 60 samples per client
        jobs["J3"] = Job("J3", "CNN28 smoke run: 100 clients x 60, K=10, E=1, B=10",
                         lambda: _random_images([60] * 100, (1, 28, 28), 2), lambda: CNN28(10), 1, 10, 10, rounds=1,
                         naive_clients=1)
        jobs["J4"].naive_clients = 1
        for job in jobs.values():
            job.passes = 1
    return jobs


def pfl_job(num_users: int = 1000, dropout: bool = True) -> Job:
    """J4, pfl-research's CIFAR-10 workload (module docstring); on a CPU 2 timed rounds, naive on 5 of 50 clients.

    Args:
        num_users: Users (1,000 in pfl-research; fewer for a smoke test).
        dropout: Keep the CNN's dropout layers (pfl-research's model); ``False`` for deterministic runs.
    """
    job = Job("J4", "pfl-research CIFAR-10: PflCNN 1.63M params, 1000 users x 50, K=50, E=1, B=10, lr 0.1",
              None, lambda: PflCNN(dropout=dropout), 1, 10, 50, rounds=2, naive_clients=5, passes=1, lr=0.1)
    if num_users != 1000:
        job.title = job.title.replace("1000 users", f"{num_users} users")

    def make_data() -> FederatedData:
        data, job.data_source = cifar_like(num_users=num_users)
        return data

    job.make_data = make_data
    return job
