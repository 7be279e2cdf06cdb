"""Tests for the FedProx synthetic generator and SyntheticDataModule (SPEC section 8)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning_fl.datamodules.synthetic import SyntheticDataModule, generate_synthetic


def reference_sizes(seed: int, num_clients: int = 30) -> np.ndarray:
    # SPEC 8: n_k = int(lognormal(4, 2)) + 50, the first draw of np.random.default_rng(seed).
    return np.random.default_rng(seed).lognormal(4, 2, num_clients).astype(int) + 50


def seed_with_large_client(min_size: int, max_total: int = 200_000) -> int:
    """A seed whose largest user has >= min_size samples, found with the reference size draw."""
    for seed in range(1000):
        sizes = reference_sizes(seed)
        if sizes.max() >= min_size and sizes.sum() <= max_total:
            return seed
    raise AssertionError("no seed found")


@pytest.mark.parametrize(
    ("alpha", "beta", "iid"), [(0.0, 0.0, False), (0.5, 0.5, False), (1.0, 1.0, False), (0.0, 0.0, True)]
)
def test_shapes_labels_and_sizes(alpha, beta, iid):
    users = generate_synthetic(alpha, beta, iid, seed=3)
    assert len(users) == 30
    sizes = np.array([len(y) for _, y in users])
    assert (sizes >= 50).all()
    np.testing.assert_array_equal(sizes, reference_sizes(3))
    for x, y in users:
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert x.shape == (len(y), 60)
        assert int(y.min()) >= 0 and int(y.max()) < 10


def test_same_seed_same_data_other_seed_differs():
    a = generate_synthetic(1.0, 1.0, False, seed=5, max_samples_per_client=80)
    b = generate_synthetic(1.0, 1.0, False, seed=5, max_samples_per_client=80)
    c = generate_synthetic(1.0, 1.0, False, seed=6, max_samples_per_client=80)
    assert all(torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b))
    assert not torch.equal(a[0][0], c[0][0])


def test_cap_truncates_users_without_changing_anything_else():
    full = generate_synthetic(0.5, 0.5, False, seed=1)
    capped = generate_synthetic(0.5, 0.5, False, seed=1, max_samples_per_client=60)
    for (xf, yf), (xc, yc) in zip(full, capped):
        n = min(len(yf), 60)
        assert len(yc) == n
        assert torch.equal(xc, xf[:n]) and torch.equal(yc, yf[:n])


def test_feature_variances_decay_like_j_to_the_minus_1_2():
    # Sigma = diag(j^-1.2). The sample variance of n >= 3000 draws has relative standard error
    # sqrt(2 / n) < 2.6%, so all 60 features lie within 15% of j^-1.2 (about 6 standard errors).
    seed = seed_with_large_client(3000)
    users = generate_synthetic(1.0, 1.0, False, seed=seed)
    x, _ = max(users, key=lambda u: len(u[1]))
    assert len(x) >= 3000
    expected = np.arange(1, 61) ** -1.2
    np.testing.assert_allclose(x.double().var(dim=0).numpy(), expected, rtol=0.15)


def test_iid_inputs_are_centred():
    # IID: v_k = 0, so every feature's pooled mean is 0 within 5 standard errors sqrt(j^-1.2 / n).
    users = generate_synthetic(0.0, 0.0, True, seed=2)
    x = torch.cat([u[0] for u in users]).double()
    stderr = np.sqrt(np.arange(1, 61) ** -1.2 / len(x))
    assert (np.abs(x.mean(dim=0).numpy()) < 5 * stderr).all()


def test_iid_labels_follow_one_shared_linear_rule():
    # Reference re-draw with the documented call order: sizes, u, B, then the shared W and b.
    seed = 4
    rng = np.random.default_rng(seed)
    rng.lognormal(4, 2, 30)
    rng.normal(0, 0.0, 30)
    rng.normal(0, 0.0, 30)
    w = rng.normal(0, 1, (60, 10))
    b = rng.normal(0, 1, 10)
    for x, y in generate_synthetic(0.0, 0.0, True, seed=seed):
        logits = x.double().numpy() @ w + b
        np.testing.assert_array_equal(np.argmax(logits, axis=1), y.numpy())


def test_non_iid_users_have_their_own_linear_rule():
    # Reference re-draw for Synthetic(1, 1): sizes, u_k, B_k, then v_k for every user, then (W_k, b_k)
    # user by user. Each user's labels are the argmax of its own affine map ...
    seed = 7
    rng = np.random.default_rng(seed)
    rng.lognormal(4, 2, 30)
    u = rng.normal(0, 1.0, 30)
    big_b = rng.normal(0, 1.0, 30)
    v = np.stack([rng.normal(big_b[k], 1, 60) for k in range(30)])
    models = [(rng.normal(u[k], 1, (60, 10)), rng.normal(u[k], 1, 10)) for k in range(30)]
    users = generate_synthetic(1.0, 1.0, False, seed=seed)
    for (x, y), (w, b) in zip(users, models):
        np.testing.assert_array_equal(np.argmax(x.double().numpy() @ w + b, axis=1), y.numpy())
    # ... and x ~ N(v_k, Sigma): the largest user's sample mean is within 5 standard errors of v_k.
    k = int(np.argmax([len(y) for _, y in users]))
    x = users[k][0].double().numpy()
    stderr = np.sqrt(np.arange(1, 61) ** -1.2 / len(x))
    assert (np.abs(x.mean(axis=0) - v[k]) < 5 * stderr).all()
    # ... while user 0's labels are not explained by user 1's rule (different W_k: ~10% agreement).
    x0, y0 = users[0]
    agreement = (np.argmax(x0.double().numpy() @ models[1][0] + models[1][1], axis=1) == y0.numpy()).mean()
    assert agreement < 0.6


def test_beta_controls_the_spread_of_user_input_means():
    # v_k ~ N(B_k, 1)^60 with B_k ~ N(0, beta): the average of v_k over the 60 features is B_k plus
    # noise of sd 1/sqrt(60) ~ 0.13. Across 30 users its sd is ~0.13 for beta = 0 and ~1 for beta = 1.
    def spread(beta: float) -> float:
        users = generate_synthetic(beta, beta, False, seed=11, max_samples_per_client=200)
        return float(np.std([x.double().mean().item() for x, _ in users]))

    assert spread(0.0) < 0.35
    assert spread(1.0) > 0.5


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"alpha": -1.0}, "alpha"), ({"beta": -0.1}, "beta"), ({"num_clients": 0}, "num_clients"),
     ({"max_samples_per_client": 0}, "max_samples_per_client")],
)
def test_generator_errors_name_the_field(kwargs, field):
    args = {"alpha": 1.0, "beta": 1.0, "iid": False} | kwargs
    with pytest.raises(ValueError, match=f"^{field} must be"):
        generate_synthetic(**args)


# ----------------------------------------------------------------------------- datamodule
def test_datamodule_splits_every_user_80_20():
    dm = SyntheticDataModule("0.5_0.5", seed=3)
    dm.setup("fit")
    sizes = reference_sizes(3)
    # round(0.2 * n_k) test samples, the rest train (n_k >= 50, so both splits are non-empty)
    expected_test = np.round(0.2 * sizes).astype(int)
    np.testing.assert_array_equal(dm.data.test_sizes().numpy(), expected_test)
    # then round(0.1 * n_train) of the rest go to validation (val_fraction's default)
    expected_val = np.round(0.1 * (sizes - expected_test)).astype(int)
    np.testing.assert_array_equal(dm.data.val_sizes().numpy(), expected_val)
    np.testing.assert_array_equal(dm.data.train_sizes().numpy(), sizes - expected_test - expected_val)
    assert (dm.num_clients, dm.num_classes, dm.input_shape) == (30, 10, (60,))


def test_datamodule_clients_are_the_generator_users():
    dm = SyntheticDataModule("1_1", seed=8, max_samples_per_client=120)
    dm.setup()
    users = generate_synthetic(1.0, 1.0, False, seed=8, max_samples_per_client=120)
    for k, (x, y) in enumerate(users):
        xk = torch.cat([dm.data.client_train(k)[0], dm.data.client_val(k)[0], dm.data.client_test(k)[0]])
        yk = torch.cat([dm.data.client_train(k)[1], dm.data.client_val(k)[1], dm.data.client_test(k)[1]])
        # same multiset of rows: sort rows by their first feature
        order_a, order_b = xk[:, 0].argsort(), x[:, 0].argsort()
        assert torch.equal(xk[order_a], x[order_b]) and torch.equal(yk[order_a], y[order_b])


def test_datamodule_iid_variant_and_seed():
    a = SyntheticDataModule("iid", seed=1, max_samples_per_client=100)
    b = SyntheticDataModule("iid", seed=1, max_samples_per_client=100)
    a.setup(), b.setup()
    assert torch.equal(a.data.x_train, b.data.x_train) and torch.equal(a.data.y_test, b.data.y_test)
    # IID labels: every user sees a broad label mix, far from the one-or-two-class users of 1_1.
    assert a.emd_to_population().mean() < 0.8


def test_datamodule_unknown_variant():
    with pytest.raises(ValueError) as err:
        SyntheticDataModule("x")
    assert str(err.value) == "variant must be one of 0_0, 0.5_0.5, 1_1, iid; got 'x'"


@pytest.mark.parametrize("bad", [1.0, -0.2])
def test_datamodule_rejects_test_fraction(bad):
    with pytest.raises(ValueError, match="^test_fraction must be a number in"):
        SyntheticDataModule("1_1", test_fraction=bad)
