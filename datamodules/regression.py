"""A synthetic linear-regression federation: real-valued targets, one true model per client (issue 25).

Client ``k`` draws its own weights ``w_k = w + heterogeneity * e_k`` around a shared ``w`` (both
standard normal, ``(d, 1)``), its inputs ``x ~ N(0, I_d)`` and its targets ``y = x w_k + noise * eps``
(``float32``, shape ``(n, 1)``). The shared ``w`` comes from ``generator_for(seed, "regression", "w")``
and client ``k``'s draws from ``generator_for(seed, "regression", k)``, so a client's data does not
depend on how many clients the federation has. The targets are real-valued, so the federation has
``num_classes == 0`` and empty label histograms (no label-based report or weighting applies).
"""

from __future__ import annotations

import torch
from typing_extensions import override

from lightning_fl.datamodules.split import split_train_test
from lightning_fl.faults.validation import check_non_negative, check_positive
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import FederatedData, offsets_from_sizes
from lightning_fl.state.seeding import generator_for

__all__ = ["SyntheticRegressionDataModule"]


class SyntheticRegressionDataModule(FederatedDataModule):
    """Clients of ``y = x w_k + noise``, ``w_k`` scattered around a shared ``w`` (float targets).

    Args:
        num_clients: Number of clients.
        samples_per_client: Samples drawn per client before the train/test/validation splits.
        num_features: Input dimension ``d``.
        heterogeneity: Standard deviation of the clients' weights around the shared ``w`` (``0``: IID).
        noise: Standard deviation of the target noise.
        seed: Seed of the draws and of the splits.
        test_fraction: Fraction of every client's samples held out for testing, in ``[0, 1)``.
        val_fraction: Fraction of each client's training samples moved to its validation split.

    Raises:
        ConfigError: For a non-positive size or a negative standard deviation (one line naming the field).

    Example:
        >>> dm = SyntheticRegressionDataModule(num_clients=3, samples_per_client=20, num_features=4)
        >>> dm.setup()
        >>> dm.num_clients, dm.num_classes, dm.input_shape, dm.data.y_train.dtype, tuple(dm.label_histograms().shape)
        (3, 0, (4,), torch.float32, (3, 0))
    """

    def __init__(self, num_clients: int = 10, samples_per_client: int = 60, num_features: int = 10,
                 heterogeneity: float = 0.5, noise: float = 0.1, seed: int = 0, test_fraction: float = 0.2,
                 val_fraction: float = 0.1) -> None:
        super().__init__(seed=seed, test_fraction=test_fraction, val_fraction=val_fraction)
        for name, value in (("num_clients", num_clients), ("samples_per_client", samples_per_client),
                            ("num_features", num_features)):
            check_positive(name, value, integer=True)
        check_non_negative("heterogeneity", heterogeneity)
        check_non_negative("noise", noise)
        self._num_clients = num_clients
        self.samples_per_client = samples_per_client
        self.num_features = num_features
        self.heterogeneity = float(heterogeneity)
        self.noise = float(noise)

    def client_samples(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``k``'s ``(x, y)`` before any split: ``x`` ``(n, d)``, ``y`` ``(n, 1)``, both float32."""
        d, n = self.num_features, self.samples_per_client
        w = torch.randn(d, 1, generator=generator_for(self.seed, "regression", "w"))
        g = generator_for(self.seed, "regression", k)
        w_k = w + self.heterogeneity * torch.randn(d, 1, generator=g)
        x = torch.randn(n, d, generator=g)
        return x, x @ w_k + self.noise * torch.randn(n, 1, generator=g)

    @override
    def build_data(self) -> FederatedData:
        clients = [self.client_samples(k) for k in range(self._num_clients)]
        split = generator_for(self.seed, "regression", "train_test_split")
        parts = [split_train_test(torch.arange(self.samples_per_client), self.test_fraction, split)
                 for _ in clients]
        return FederatedData(
            x_train=torch.cat([x[tr] for (x, _), (tr, _) in zip(clients, parts)]),
            y_train=torch.cat([y[tr] for (_, y), (tr, _) in zip(clients, parts)]),
            train_offsets=offsets_from_sizes([len(tr) for tr, _ in parts]),
            x_test=torch.cat([x[te] for (x, _), (_, te) in zip(clients, parts)]),
            y_test=torch.cat([y[te] for (_, y), (_, te) in zip(clients, parts)]),
            test_offsets=offsets_from_sizes([len(te) for _, te in parts]),
            num_classes=0,
        )
