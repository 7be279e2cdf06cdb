"""The pFedMe authors' Synthetic generator and split (docs/algorithms.md, Data)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.datamodules.synthetic_pfedme import (
    generate_synthetic_pfedme,
    pfedme_sizes,
    pfedme_train_test_split,
)
from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.resume_check import changed_fields


def expected_sizes(seed: int, num_clients: int) -> list[int]:
    # n_k = (int(lognormal(4, 2)) + 50) * 5 with the first draw of np.random.seed(seed), written out
    # independently: exp(4 + 2 z) truncated towards zero (floor for positive numbers).
    draws = np.random.RandomState(seed).lognormal(mean=4.0, sigma=2.0, size=num_clients)
    return [(math.floor(float(d)) + 50) * 5 for d in draws]


def test_sizes_formula_for_100_users() -> None:
    sizes = pfedme_sizes(np.random.RandomState(0), 100).tolist()
    assert sizes == expected_sizes(0, 100)
    assert all(n % 5 == 0 and n >= 250 for n in sizes)


@pytest.mark.parametrize("seed", [16, 34])
def test_users_have_the_formula_sizes_features_and_labels(seed: int) -> None:
    users = generate_synthetic_pfedme(0.5, 0.5, num_clients=6, seed=seed)
    assert [len(y) for _, y in users] == expected_sizes(seed, 6)
    for x, y in users:
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert x.shape == (len(y), 60)
        assert int(y.min()) >= 0 and int(y.max()) < 10


def test_same_seed_same_data_other_seed_differs() -> None:
    a = generate_synthetic_pfedme(num_clients=3, seed=33)
    b = generate_synthetic_pfedme(num_clients=3, seed=33)
    c = generate_synthetic_pfedme(num_clients=3, seed=35)
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))
    assert not torch.equal(a[0][0], c[0][0])


def replay_script(seed: int, num_clients: int, alpha: float, beta: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """The authors' draw order, re-written here: global seed, then every draw in their sequence."""
    rs = np.random.RandomState(seed)
    sizes = (rs.lognormal(4, 2, num_clients).astype(int) + 50) * 5
    u = rs.normal(0, alpha, num_clients)
    big_b = rs.normal(0, beta, num_clients)
    cov = np.diag([(j + 1) ** -1.2 for j in range(60)])
    v = [rs.normal(big_b[i], 1, 60) for i in range(num_clients)]
    out = []
    for i in range(num_clients):
        w, b = rs.normal(u[i], 1, (60, 10)), rs.normal(u[i], 1, 10)
        x = rs.multivariate_normal(v[i], cov, sizes[i])
        labels = []
        for row in x:  # their per-sample loop: argmax of the softmax of x W + b
            logits = np.dot(row, w) + b
            labels.append(int(np.argmax(np.exp(logits) / np.sum(np.exp(logits)))))
        out.append((x, np.array(labels)))
    return out


def test_replays_the_authors_draw_order() -> None:
    users = generate_synthetic_pfedme(0.5, 0.5, num_clients=3, seed=11)
    for (x, y), (x_ref, y_ref) in zip(users, replay_script(11, 3, 0.5, 0.5)):
        assert torch.equal(x, torch.from_numpy(x_ref.astype(np.float32)))
        assert torch.equal(y, torch.from_numpy(y_ref))


def test_cap_keeps_a_prefix_and_changes_nothing_else() -> None:
    full = generate_synthetic_pfedme(num_clients=3, seed=2)
    capped = generate_synthetic_pfedme(num_clients=3, seed=2, max_samples_per_client=260)
    for (xf, yf), (xc, yc) in zip(full, capped):
        n = min(len(yf), 260)
        assert torch.equal(xc, xf[:n]) and torch.equal(yc, yf[:n])


def test_iid_branch_shares_one_rule_and_centres_the_inputs() -> None:
    # alpha = beta = 0: v_k = B_k = 0 for every user, one shared (W, b). The pooled mean of feature j
    # is within 5 standard errors sqrt(j^-1.2 / n) of 0.
    users = generate_synthetic_pfedme(0.0, 0.0, iid=True, num_clients=4, seed=9)
    x = torch.cat([u[0] for u in users]).double()
    stderr = np.sqrt(np.arange(1, 61) ** -1.2 / len(x))
    assert (np.abs(x.mean(dim=0).numpy()) < 5 * stderr).all()


@pytest.mark.parametrize(("n", "n_train"), [(250, 225), (255, 229), (265, 238), (1000, 900)])
def test_split_rule_is_int_of_ninety_percent(n: int, n_train: int) -> None:
    # the authors: train_len = int(0.9 * n), test = the rest (265: int(238.5) = 238 train, 27 test)
    assert int(0.9 * n) == n_train
    train, test = pfedme_train_test_split(torch.arange(n), 0.1, torch.Generator().manual_seed(0))
    assert (len(train), len(test)) == (n_train, n - n_train)
    assert torch.equal(torch.cat([train, test]).sort().values, torch.arange(n))


def test_datamodule_selects_the_generator_and_split() -> None:
    dm = SyntheticDataModule("0.5_0.5", num_clients=4, seed=35, test_fraction=0.1, val_fraction=0.0,
                             generator="pfedme")
    dm.setup()
    sizes = expected_sizes(35, 4)
    assert dm.data.train_sizes().tolist() == [int(0.9 * n) for n in sizes]
    assert dm.data.test_sizes().tolist() == [n - int(0.9 * n) for n in sizes]
    users = generate_synthetic_pfedme(0.5, 0.5, num_clients=4, seed=35)
    tr, te = dm.data.train_offsets.tolist(), dm.data.test_offsets.tolist()
    for k, (x, _) in enumerate(users):  # each client's two splits hold exactly user k's samples
        split = torch.cat([dm.data.x_train[tr[k]:tr[k + 1]], dm.data.x_test[te[k]:te[k + 1]]])
        assert torch.equal(torch.unique(split, dim=0), torch.unique(x, dim=0))  # rows sorted lexicographically
    again = SyntheticDataModule("0.5_0.5", num_clients=4, seed=35, test_fraction=0.1, val_fraction=0.0,
                                generator="pfedme")
    again.setup()
    assert torch.equal(again.data.x_test, dm.data.x_test)


def test_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="generator"):
        SyntheticDataModule(generator="leaf")
    with pytest.raises(ConfigError, match="seed"):
        generate_synthetic_pfedme(num_clients=1, seed=2**32)


def test_checkpoints_before_the_option_resume_with_the_default() -> None:
    saved = {"data": "SyntheticDataModule", "data.variant": "1_1"}
    assert changed_fields(saved, {**saved, "data.generator": "fedprox"}) == []
    now = {**saved, "data.generator": "fedprox"}
    assert changed_fields(now, {**now, "data.generator": "pfedme"}) == [
        "data.generator: checkpoint 'fedprox' vs config 'pfedme'"]
    # data.lazy came later still: a checkpoint without it resumes, one with it is compared.
    assert changed_fields(now, {**now, "data.lazy": False}) == []
    assert changed_fields({**now, "data.lazy": False}, {**now, "data.lazy": True}) == [
        "data.lazy: checkpoint False vs config True"]
