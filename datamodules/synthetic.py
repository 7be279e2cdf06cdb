"""FedProx Synthetic(alpha, beta) and Synthetic-IID data (docs/algorithms.md, Data; FedFa Sec. 4.1).

The generator follows the FedProx reference code (``data/synthetic_*/generate_*.py``, Li et al.
2020), which the FedFa paper uses with ``(alpha, beta) in {(0, 0), (0.5, 0.5), (1, 1)}`` and IID:

* ``n_k = int(lognormal(4, 2)) + 50`` samples for user ``k``;
* ``u_k ~ N(0, alpha)``, ``B_k ~ N(0, beta)`` (second arguments are standard deviations);
* ``v_k ~ N(B_k, 1)^d``; ``Sigma = diag(j^-1.2)``, ``j = 1..d``;
* ``W_k ~ N(u_k, 1)^(d x C)``, ``b_k ~ N(u_k, 1)^C``;
* ``x ~ N(v_k, Sigma)``, ``y = argmax(x W_k + b_k)`` (FedProx takes the argmax of the softmax: the
  same label);
* IID: one ``W, b ~ N(0, 1)`` shared by all users and ``v_k = 0``.

Randomness (``np.random.default_rng(seed)``, so numbers differ from FedProx's legacy global RNG but
the distribution is identical) is drawn in this order: the sizes
(``rng.lognormal(4, 2, N)``), ``u`` (``rng.normal(0, alpha, N)``), ``B`` (``rng.normal(0, beta, N)``),
then for non-IID ``v_k`` for every user followed by ``W_k``, ``b_k`` user by user (FedProx
also draws all ``v_k`` first); for IID the shared ``W`` then ``b``. The inputs of user ``k`` come from a separate stream
``np.random.default_rng([seed, k])``, so capping one user's size (``max_samples_per_client``) only
truncates that user's samples (a prefix of the uncapped draw) and changes nothing else.

``SyntheticDataModule(generator="pfedme")`` uses the pFedMe authors' copy of the generator instead
(:mod:`lightning_fl.datamodules.synthetic_pfedme`: sizes times 5, their random stream, their 90/10 split).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.assemble import build_from_pooled
from lightning_fl.datamodules.lazy_synthetic import LazySyntheticData
from lightning_fl.datamodules.split import split_train_test
from lightning_fl.datamodules.synthetic_pfedme import generate_synthetic_pfedme, pfedme_train_test_split
from lightning_fl.faults.validation import ConfigError, check_choice, check_non_negative, check_positive
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import ClientData, FederatedData, offsets_from_sizes
from lightning_fl.state.seeding import generator_for

__all__ = ["SYNTHETIC_GENERATORS", "SYNTHETIC_VARIANTS", "SyntheticDataModule", "generate_synthetic"]

# FedFa's four synthetic data sets: variant -> (alpha, beta, iid).
SYNTHETIC_VARIANTS: dict[str, tuple[float, float, bool]] = {
    "0_0": (0.0, 0.0, False),
    "0.5_0.5": (0.5, 0.5, False),
    "1_1": (1.0, 1.0, False),
    "iid": (0.0, 0.0, True),
}
#: ``generator`` -> the paper whose copy of the Synthetic script it replays.
SYNTHETIC_GENERATORS = {"fedprox": "FedProx / FedFa", "pfedme": "pFedMe (T. Dinh et al. 2020)",
                        "per_client": "FedProx's distribution, every draw keyed by (seed, client); lazy-capable"}


def generate_synthetic(
    alpha: float,
    beta: float,
    iid: bool,
    num_clients: int = 30,
    num_features: int = 60,
    num_classes: int = 10,
    seed: int = 0,
    max_samples_per_client: int | None = None,
) -> list[tuple[Tensor, Tensor]]:
    """Generate FedProx Synthetic(alpha, beta) or Synthetic-IID users (docs/algorithms.md, Data).

    Args:
        alpha: Standard deviation of ``u_k`` (how much the users' models differ). Ignored when ``iid``.
        beta: Standard deviation of ``B_k`` (how much the users' input means differ). Ignored when ``iid``.
        iid: Synthetic-IID: one shared ``W, b ~ N(0, 1)`` and ``v_k = 0``.
        num_clients: Number of users (30 in FedProx / FedFa).
        num_features: Input dimension ``d`` (60).
        num_classes: Number of classes ``C`` (10).
        seed: Seed of the numpy generators.
        max_samples_per_client: Optional cap on ``n_k``. ``lognormal(4, 2)`` has a heavy tail (a user
            can get tens of thousands of samples); ``None`` keeps the exact formula.

    Returns:
        One ``(x, y)`` pair per user: ``x`` float32 ``(n_k, d)``, ``y`` int64 ``(n_k,)`` in ``[0, C)``.

    Raises:
        ConfigError: If a size is not a positive integer, ``alpha``/``beta`` is negative, or the cap
            is below 1.

    Example:
        >>> users = generate_synthetic(1.0, 1.0, iid=False, seed=0, max_samples_per_client=200)
        >>> len(users), users[0][0].shape[1], all(len(y) >= 50 for _, y in users)
        (30, 60, True)
    """
    for name, value in (("num_clients", num_clients), ("num_features", num_features), ("num_classes", num_classes)):
        check_positive(name, value, integer=True)
    check_non_negative("alpha", alpha)
    check_non_negative("beta", beta)
    if max_samples_per_client is not None:
        check_positive("max_samples_per_client", max_samples_per_client, integer=True)

    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4, 2, num_clients).astype(np.int64) + 50
    if max_samples_per_client is not None:
        sizes = np.minimum(sizes, max_samples_per_client)
    mean_w = rng.normal(0, alpha, num_clients)  # u_k; FedProx uses the same mean for b_k
    big_b = rng.normal(0, beta, num_clients)  # B_k
    std_x = np.power(np.arange(1, num_features + 1, dtype=np.float64), -1.2) ** 0.5  # sqrt(diag(Sigma))

    if iid:
        mean_x = np.zeros((num_clients, num_features))
        w_shared = rng.normal(0, 1, (num_features, num_classes))
        b_shared = rng.normal(0, 1, num_classes)
        models = [(w_shared, b_shared)] * num_clients
    else:
        mean_x = np.stack([rng.normal(big_b[k], 1, num_features) for k in range(num_clients)])
        models = [
            (rng.normal(mean_w[k], 1, (num_features, num_classes)), rng.normal(mean_w[k], 1, num_classes))
            for k in range(num_clients)
        ]

    users = []
    for k, ((w, b), n_k) in enumerate(zip(models, sizes)):
        # Sigma is diagonal, so N(v_k, Sigma) is v_k + sqrt(diag(Sigma)) * standard normal.
        x = mean_x[k] + np.random.default_rng([seed, k]).standard_normal((int(n_k), num_features)) * std_x
        y = np.argmax(x @ w + b, axis=1)
        users.append((torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))))
    return users


class SyntheticDataModule(FederatedDataModule):
    """FedFa's synthetic federations: ``Synthetic_0_0``, ``_0.5_0.5``, ``_1_1`` and ``_iid`` (docs/algorithms.md, Data).

    The clients are the generator's natural users; each user's samples are split at random into
    train and test (80/20 by default, as FedFa). Generation and split use independent seeded streams.

    ``generator: pfedme`` selects the pFedMe authors' generator and split (docs/algorithms.md, Data);
    their Table 1 data set is ``generator: pfedme, variant: "0.5_0.5", num_clients: 100,
    test_fraction: 0.1`` (add ``val_fraction: 0`` for their whole training sets).

    Args:
        variant: ``"0_0"``, ``"0.5_0.5"``, ``"1_1"`` (``alpha_beta``) or ``"iid"``.
        num_clients: Number of users (30 as in the papers).
        seed: Seed of the generator and of the train/test split.
        test_fraction: Fraction of every user's samples held out for testing, in ``[0, 1)``.
        val_fraction: Fraction of each client's training samples moved to its validation split, in ``[0, 1)``; ``0``: none (the papers' exact training sets).
        max_samples_per_client: Optional cap on a user's sample count (``None``: exact formula).
        generator: ``"fedprox"`` (default: FedProx's script as FedFa uses it), ``"pfedme"`` (the pFedMe
            authors' copy: ``n_k = (int(lognormal(4, 2)) + 50) * 5``, their random stream, so seed 0 is
            their data, and their split: the first ``int((1 - test_fraction) n_k)`` shuffled samples train)
            or ``"per_client"`` (the same distribution as ``fedprox``, every draw keyed by ``(seed, client)``:
            :mod:`lightning_fl.datamodules.lazy_synthetic`; the only one that ``lazy`` can produce).
        lazy: Produce each client's samples when a round stages it (docs/scaling.md, Many clients): set-up
            holds the ``N`` sizes only, so ``N = 10**6`` fits in memory. Needs ``generator: per_client``;
            the samples are bitwise those of ``lazy: false`` with the same generator and seed.

    Raises:
        ConfigError: For an unknown variant or an out-of-range argument (one line naming the field).

    Example:
        >>> dm = SyntheticDataModule("1_1", max_samples_per_client=500)
        >>> dm.setup()
        >>> dm.num_clients, dm.num_classes, dm.input_shape
        (30, 10, (60,))

    Example (YAML, pFedMe's Synthetic(0.5, 0.5))::

        data:
          class_path: lightning_fl.datamodules.SyntheticDataModule
          init_args: {generator: pfedme, variant: "0.5_0.5", num_clients: 100, test_fraction: 0.1, seed: 0}
    """

    def __init__(
        self,
        variant: str = "1_1",
        num_clients: int = 30,
        seed: int = 0,
        test_fraction: float = 0.2,
        max_samples_per_client: int | None = None,
        val_fraction: float = 0.1,
        generator: str = "fedprox",
        lazy: bool = False,
    ) -> None:
        super().__init__(seed=seed, test_fraction=test_fraction, val_fraction=val_fraction)
        check_choice("variant", variant, SYNTHETIC_VARIANTS)
        check_choice("generator", generator, SYNTHETIC_GENERATORS)
        check_positive("num_clients", num_clients, integer=True)
        if max_samples_per_client is not None:
            check_positive("max_samples_per_client", max_samples_per_client, integer=True)
        self.variant = variant
        self._num_clients = num_clients
        self.max_samples_per_client = max_samples_per_client
        self.generator = generator
        if not isinstance(lazy, bool):
            raise ConfigError(f"data.lazy must be true or false; got {lazy!r}")
        if lazy and generator != "per_client":
            raise ConfigError(f"data.lazy: true needs data.generator: per_client (the {generator} generator draws every"
                              " client's model from one stream, so a client cannot be produced alone); got"
                              f" generator: {generator}")
        self.lazy = lazy

    def _per_client(self) -> LazySyntheticData:
        alpha, beta, iid = SYNTHETIC_VARIANTS[self.variant]
        return LazySyntheticData(alpha, beta, iid, self._num_clients, self.seed, self.test_fraction,
                                 self.val_fraction if self.lazy else 0.0, self.max_samples_per_client)

    @override
    def build_source(self) -> ClientData:
        if self.lazy:  # the validation split is drawn per client by the source, as split_validation would
            return self._per_client()
        return super().build_source()

    @override
    def build_data(self) -> FederatedData:
        if self.generator == "per_client":  # every client staged: the eager federation of the lazy source
            return self._per_client().stage(torch.arange(self._num_clients), "test")
        alpha, beta, iid = SYNTHETIC_VARIANTS[self.variant]
        pfedme = self.generator == "pfedme"
        users = (generate_synthetic_pfedme if pfedme else generate_synthetic)(
            alpha, beta, iid, num_clients=self._num_clients, seed=self.seed,
            max_samples_per_client=self.max_samples_per_client,
        )
        sizes = [len(y) for _, y in users]
        bounds = offsets_from_sizes(sizes).tolist()
        client_indices = [torch.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
        return build_from_pooled(
            torch.cat([x for x, _ in users]),
            torch.cat([y for _, y in users]),
            client_indices,
            num_classes=10,
            test_fraction=self.test_fraction,
            generator=generator_for(self.seed, "synthetic_pfedme" if pfedme else "synthetic", "train_test_split"),
            split=pfedme_train_test_split if pfedme else split_train_test,
        )
