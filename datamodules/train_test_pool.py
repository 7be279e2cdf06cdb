"""Image datasets that ship an official train/test split (MNIST, Fashion-MNIST, CIFAR-10) as federations.

:class:`TrainTestPoolDataModule` is a :class:`~lightning_fl.datamodules.pooled.PooledDataModule` whose pool comes
from two files (train and test) and which offers two ways to give clients test data
(``test_set``):

* ``official`` (default): the **official training set** is partitioned among the clients (all of a
  client's share is for training) and the **official test set** is dealt to the clients class by
  class, in proportion to each client's training label counts (:func:`deal_by_label`). Every test
  sample goes to exactly one client, so ``test/acc_pooled`` is the accuracy on the official test set,
  the number DWFed, IGFL and Tempo report, while each client's test labels follow its own training
  distribution (which is what the per-client fairness metrics need).
* ``pooled``: train and test files are pooled, partitioned, and every client's share is split
  ``1 - test_fraction`` / ``test_fraction`` at random (FedFa's and LEAF's "80% / 20% on each device").

``subsample`` keeps a seeded, class-stratified fraction of both files (to fit a small machine).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from typing_extensions import override

from lightning_fl.datamodules.largest_remainder import largest_remainder
from lightning_fl.datamodules.pooled import PooledDataModule
from lightning_fl.faults.validation import ConfigError, check_choice
from lightning_fl.state.data import FederatedData, offsets_from_sizes
from lightning_fl.state.seeding import generator_for

__all__ = ["TEST_SETS", "TrainTestPoolDataModule", "deal_by_label", "stratified_subsample"]

TEST_SETS = ("official", "pooled")


def deal_by_label(train_hist: Tensor, labels: Tensor, generator: torch.Generator) -> list[Tensor]:
    """Deal every sample of ``labels`` to a client, class by class, in proportion to ``train_hist``.

    For each class ``c`` the ``m_c`` samples of that class are shuffled and cut into per-client counts
    proportional to ``train_hist[:, c]`` (largest-remainder rounding, so the counts sum to ``m_c``). A
    class that no client trains on is dealt in proportion to the clients' training sizes.

    Args:
        train_hist: ``(N, C)`` per-client training label counts.
        labels: ``(m,)`` labels of the samples to deal (e.g. the official test set).
        generator: Source of randomness (which sample of a class goes where).

    Returns:
        One sorted ``LongTensor`` of indices into ``labels`` per client; together they cover all ``m``.

    Example:
        >>> hist = torch.tensor([[4, 0], [0, 4], [2, 2]])
        >>> parts = deal_by_label(hist, torch.tensor([0, 0, 0, 1, 1, 1]), torch.Generator().manual_seed(0))
        >>> [len(p) for p in parts]
        [2, 2, 2]
    """
    hist = np.asarray(torch.as_tensor(train_hist).cpu().numpy(), dtype=np.int64)
    y = torch.as_tensor(labels).cpu().numpy().astype(np.int64)
    num_clients = hist.shape[0]
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)
    owner = np.empty(len(y), dtype=np.int64)
    sizes = hist.sum(axis=1)
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        weights = hist[:, c] if c < hist.shape[1] and hist[:, c].sum() > 0 else sizes
        counts = largest_remainder(weights, len(members))
        owner[members] = np.repeat(np.arange(num_clients), counts)
    order = np.argsort(owner, kind="stable")
    cuts = np.cumsum(np.bincount(owner, minlength=num_clients))[:-1]
    return [torch.from_numpy(np.sort(chunk)) for chunk in np.split(order, cuts)]


def stratified_subsample(labels: Tensor, fraction: float | Sequence[float], generator: torch.Generator) -> Tensor:
    """Sorted indices of a seeded ``fraction`` of every class (at least one sample per present class).

    ``fraction`` is one number for every class, or one per class (``fraction[c]`` of class ``c``: a
    long-tailed population from a balanced file).

    Example:
        >>> idx = stratified_subsample(torch.arange(100) % 4, 0.2, torch.Generator().manual_seed(0))
        >>> len(idx)
        20
        >>> len(stratified_subsample(torch.arange(100) % 4, [0.4, 0.4, 0.2, 0.2], torch.Generator().manual_seed(0)))
        30
    """
    y = torch.as_tensor(labels).cpu().numpy()
    per_class = isinstance(fraction, Sequence)
    if per_class and len(y) and int(y.max()) >= len(fraction):
        raise ConfigError(f"subsample must list a fraction for each of the {int(y.max()) + 1} classes;"
                          f" got {len(fraction)}")
    if (min(fraction) if per_class else fraction) >= 1.0:
        return torch.arange(len(labels))
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)
    keep = []
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        share = fraction[int(c)] if per_class else fraction
        keep.append(rng.choice(members, size=max(1, int(round(share * len(members)))), replace=False))
    return torch.from_numpy(np.sort(np.concatenate(keep)))


class TrainTestPoolDataModule(PooledDataModule):
    """A dataset with official train/test files, partitioned into clients (docs/algorithms.md, Data).

    Subclasses implement :meth:`load_train_test` (``uint8`` images and integer labels of both files)
    and set ``MEAN``/``STD`` (per-channel statistics of the training images, in ``[0, 1]`` units).

    Args:
        test_set: ``official`` (partition the train file, deal the test file to clients by label) or
            ``pooled`` (pool both files, split each client ``1 - test_fraction`` / ``test_fraction``).
        normalize: Standardise pixels with the dataset's per-channel mean/std; otherwise scale to
            ``[0, 1]``.
        flatten: Flatten every image to a vector (logistic regression / MLP clients).
        subsample: Fraction of each file kept (class-stratified, seeded by ``seed``), in ``(0, 1]``; or a list
            of one fraction per class (``[0.2, ..., 0.02]``: a long-tailed population, some labels rare).
        **kwargs: :class:`~lightning_fl.datamodules.pooled.PooledDataModule` options (``partition``,
            ``num_clients``, ``num_classes``, ``seed``, ``test_fraction``, ``val_fraction``).
            ``test_fraction`` only applies to ``test_set: pooled``; ``val_fraction`` takes the
            validation split from each client's training share in both modes (with ``official``, from
            the official training file, so the official test set stays whole).

    Raises:
        ConfigError: For an unknown ``test_set`` or a ``subsample`` outside ``(0, 1]``.
    """

    MEAN: tuple[float, ...] = (0.5,)
    STD: tuple[float, ...] = (0.5,)

    def __init__(self, test_set: str = "official", normalize: bool = True, flatten: bool = False,
                 subsample: float | list[float] = 1.0, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        check_choice("test_set", test_set, TEST_SETS)
        fractions = subsample if isinstance(subsample, (list, tuple)) else [subsample]
        if not fractions or any(isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1
                                for f in fractions):
            raise ConfigError(f"subsample must be a number in (0, 1] or a list of one per class; got {subsample!r}")
        self.test_set = test_set
        self.normalize = bool(normalize)
        self.flatten = bool(flatten)
        self.subsample = [float(f) for f in subsample] if isinstance(subsample, (list, tuple)) else float(subsample)

    @abstractmethod
    def load_train_test(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(x_train, y_train, x_test, y_test)``: ``uint8`` images ``(n, C, H, W)`` and integer labels."""

    def prepare(self, x: Tensor) -> Tensor:
        """``uint8`` images -> float32 inputs (scaled, optionally standardised and flattened)."""
        x = x.float().div_(255.0)
        if self.normalize:
            shape = (1, -1) + (1,) * (x.ndim - 2)
            x = x.sub_(torch.tensor(self.MEAN).view(shape)).div_(torch.tensor(self.STD).view(shape))
        return x.reshape(len(x), -1) if self.flatten else x

    def _load_subsampled(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x_tr, y_tr, x_te, y_te = self.load_train_test()
        y_tr, y_te = torch.as_tensor(y_tr).long(), torch.as_tensor(y_te).long()
        if (min(self.subsample) if isinstance(self.subsample, list) else self.subsample) < 1.0:
            keep = stratified_subsample(y_tr, self.subsample, generator_for(self.seed, "subsample", "train"))
            x_tr, y_tr = x_tr[keep], y_tr[keep]
            keep = stratified_subsample(y_te, self.subsample, generator_for(self.seed, "subsample", "test"))
            x_te, y_te = x_te[keep], y_te[keep]
        return self.prepare(x_tr), y_tr, self.prepare(x_te), y_te

    @override
    def load_pooled(self) -> tuple[Tensor, Tensor]:
        x_tr, y_tr, x_te, y_te = self._load_subsampled()
        return torch.cat([x_tr, x_te]), torch.cat([y_tr, y_te])

    @override
    def build_data(self) -> FederatedData:
        if self.test_set == "pooled":
            return super().build_data()
        x_tr, y_tr, x_te, y_te = self._load_subsampled()
        y_tr = self._check_pooled(x_tr, y_tr)
        num_classes = self._infer_num_classes(y_tr)
        if len(y_te) and (int(y_te.min()) < 0 or int(y_te.max()) >= num_classes):
            raise ConfigError(f"test labels must lie in [0, {num_classes}); got {int(y_te.min())}..{int(y_te.max())}")
        clients = self.partition(y_tr, self._num_clients, generator_for(self.seed, "partition"))
        train_idx = torch.cat(clients)
        owner = torch.repeat_interleave(torch.arange(len(clients)), torch.tensor([len(c) for c in clients]))
        hist = torch.zeros(len(clients), num_classes, dtype=torch.long)
        hist.index_put_((owner, y_tr[train_idx]), torch.ones_like(owner), accumulate=True)
        tests = deal_by_label(hist, y_te, generator_for(self.seed, "test_deal"))
        test_idx = torch.cat(tests)
        return FederatedData(
            x_train=x_tr[train_idx], y_train=y_tr[train_idx],
            train_offsets=offsets_from_sizes([len(c) for c in clients]),
            x_test=x_te[test_idx], y_test=y_te[test_idx],
            test_offsets=offsets_from_sizes([len(t) for t in tests]),
            num_classes=num_classes,
        )
