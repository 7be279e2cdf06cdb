"""Tests for the attacks' math (SPEC 11.3 and 11.4; docs/algorithms.md, Attacks (Byzantine clients)).

Every expected value is computed by hand in the comments and written as a literal.
"""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.faults.validation import ConfigError
from lightning_fl.functional.attacks import (
    alie,
    alie_z,
    attack_masks,
    byzantine_clients,
    flip_labels,
    gaussian_rows,
    ipm,
    scale,
    sign_flip,
)
from lightning_fl.state.seeding import generator_for

F64 = torch.float64

# Phi^{-1} values, from scipy.stats.norm.ppf (checked against scipy below when it imports).
PPF_4_5 = 0.8416212335729143  # Phi^-1(4/5)
PPF_2_3 = 0.43072729929545744  # Phi^-1(2/3)
PPF_3_5 = 0.2533471031357997  # Phi^-1(3/5)
PPF_5_6 = 0.967421566101701  # Phi^-1(5/6)

# The honest stack of the ALIE cases: column means [3, 5]; deviations [-2, 0, 2] and [-3, 3, 0], sums of squares
# 8 and 18, so the unbiased (ddof = 1) variances are 8/2 = 4 and 18/2 = 9 and sigma = [2, 3]. (ddof = 0 would give
# sqrt(8/3) and sqrt(6).)
HONEST = [[1.0, 2.0], [3.0, 8.0], [5.0, 5.0]]


# --- the Byzantine set -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "fraction", "size"),
    [(10, 0.0, 0), (10, 0.1, 1), (10, 0.3, 3), (10, 0.49, 4), (30, 0.2, 6), (7, 0.2, 1), (100, 0.29, 29), (1, 0.4, 0)],
)
def test_byzantine_set_size_is_floor_of_fraction_times_n(n: int, fraction: float, size: int) -> None:
    # 0.29 * 100 == 28.999999999999996 in binary: the decimal fraction still means 29 clients.
    b = byzantine_clients(n, fraction, seed=3)
    assert b.dtype == torch.int64 and b.shape == (size,)
    assert b.tolist() == sorted(set(b.tolist()))
    assert all(0 <= k < n for k in b.tolist())


def test_byzantine_set_is_the_head_of_the_keyed_permutation() -> None:
    perm = torch.randperm(20, generator=generator_for(5, "byzantine"))
    assert byzantine_clients(20, 0.25, seed=5).tolist() == sorted(perm[:5].tolist())


def test_byzantine_set_depends_only_on_the_seed() -> None:
    first = byzantine_clients(50, 0.2, seed=11)
    # Disturb everything global: the RNG state, other draws, other seeds drawn in between.
    torch.manual_seed(12345)
    torch.rand(100)
    others = [byzantine_clients(50, 0.2, seed=s) for s in (0, 1, 2)]
    again = byzantine_clients(50, 0.2, seed=11)
    assert torch.equal(first, again)
    assert any(not torch.equal(first, o) for o in others)  # a different seed gives a different set


def test_larger_fraction_gives_a_superset() -> None:
    small = set(byzantine_clients(40, 0.1, seed=2).tolist())
    large = set(byzantine_clients(40, 0.3, seed=2).tolist())
    assert len(small) == 4 and len(large) == 12 and small <= large


@pytest.mark.parametrize("fraction", [-0.1, 0.5, 0.7, 1.0, float("nan"), float("inf"), "0.1", None, True])
def test_fraction_outside_range_is_a_config_error(fraction: object) -> None:
    with pytest.raises(ConfigError, match=r"attack\.fraction must be a number in \[0, 0\.5\)") as info:
        byzantine_clients(10, fraction, seed=0, field="attack.fraction")  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_default_field_name_and_bad_num_clients() -> None:
    with pytest.raises(ConfigError, match=r"^fraction must be a number in \[0, 0\.5\); got 0\.5$"):
        byzantine_clients(10, 0.5, seed=0)
    with pytest.raises(ConfigError, match="num_clients must be an integer >= 1"):
        byzantine_clients(0, 0.1, seed=0)


def test_masks_in_cohort_order() -> None:
    byz, honest = attack_masks(torch.tensor([7, 2, 5, 9]), torch.tensor([9, 5, 7, 100]))
    assert byz.tolist() == [True, False, True, True]
    assert honest.tolist() == [False, True, False, False]
    byz, honest = attack_masks(torch.tensor([1, 3]), torch.tensor([], dtype=torch.int64))
    assert byz.tolist() == [False, False] and honest.tolist() == [True, True]


# --- the simple attacks ------------------------------------------------------------------------------------------


def test_flip_labels_by_hand() -> None:
    # C = 10: 0 -> 9, 3 -> 6, 9 -> 0, 4 -> 5; C = 2: 0 <-> 1.
    assert flip_labels(torch.tensor([0, 3, 9, 4]), 10).tolist() == [9, 6, 0, 5]
    assert flip_labels(torch.tensor([[0, 1], [1, 1]]), 2).tolist() == [[1, 0], [0, 0]]
    assert flip_labels(torch.tensor([2], dtype=torch.int32), 3).dtype == torch.int32
    with pytest.raises(ConfigError, match="num_classes"):
        flip_labels(torch.tensor([0]), 0)


def test_sign_flip_and_scale_by_hand() -> None:
    delta = torch.tensor([[0.5, -2.0, 0.0], [1.0, 3.0, -4.0]])
    assert sign_flip(delta).tolist() == [[-0.5, 2.0, 0.0], [-1.0, -3.0, 4.0]]
    # gamma = K / eta_s = 10 / 0.5 = 20
    assert scale(delta, 20.0).tolist() == [[10.0, -40.0, 0.0], [20.0, 60.0, -80.0]]
    with pytest.raises(ConfigError, match="gamma"):
        scale(delta, float("nan"))


def test_ipm_by_hand() -> None:
    # mean over the rows [[1, 2], [3, -4], [2, 5]] = [2, 1]; -2 * [2, 1] = [-4, -2]; eps = 1: [-2, -1].
    honest = torch.tensor([[1.0, 2.0], [3.0, -4.0], [2.0, 5.0]])
    assert ipm(honest).tolist() == [-4.0, -2.0]
    assert ipm(honest, eps=1.0).tolist() == [-2.0, -1.0]
    assert ipm(honest, eps=0.5).tolist() == [-1.0, -0.5]
    assert ipm(torch.empty(0, 2)) is None


# --- gaussian ----------------------------------------------------------------------------------------------------


def test_gaussian_row_of_a_client_does_not_depend_on_the_cohort() -> None:
    together = gaussian_rows(torch.tensor([3, 8, 1]), 50, seed=4, t=7)
    reversed_ = gaussian_rows(torch.tensor([1, 8, 3]), 50, seed=4, t=7)
    alone = {k: gaussian_rows(torch.tensor([k]), 50, seed=4, t=7)[0] for k in (3, 8, 1)}
    for i, k in enumerate([3, 8, 1]):
        assert torch.equal(together[i], alone[k])
        assert torch.equal(reversed_[2 - i], alone[k])
    # Different clients, rounds and seeds draw different rows.
    assert not torch.equal(together[0], together[1])
    assert not torch.equal(alone[3], gaussian_rows(torch.tensor([3]), 50, seed=4, t=8)[0])
    assert not torch.equal(alone[3], gaussian_rows(torch.tensor([3]), 50, seed=5, t=7)[0])


def test_gaussian_row_is_keyed_seed_round_client_attack() -> None:
    expected = torch.randn(6, generator=generator_for(2, 3, 9, "attack"), dtype=F64)
    torch.manual_seed(0)  # global RNG state must not matter
    assert torch.equal(gaussian_rows(torch.tensor([9]), 6, seed=2, t=3, dtype=F64)[0], expected)


def test_gaussian_mean_and_scale() -> None:
    ids = torch.tensor([0, 5])
    base = gaussian_rows(ids, 20, seed=1, t=0, dtype=F64)
    shifted = gaussian_rows(ids, 20, mu=3.0, sigma=2.0, seed=1, t=0, dtype=F64)
    assert torch.allclose(shifted, 3.0 + 2.0 * base, rtol=0, atol=1e-12)
    big = gaussian_rows(torch.tensor([0]), 200_000, mu=-1.0, sigma=0.5, seed=0, t=0)
    assert big.dtype == torch.float32 and big.shape == (1, 200_000)
    assert abs(float(big.mean()) + 1.0) < 0.01 and abs(float(big.std()) - 0.5) < 0.01
    assert gaussian_rows(torch.tensor([4]), 3, sigma=0.0).tolist() == [[0.0, 0.0, 0.0]]


def test_gaussian_bad_input() -> None:
    with pytest.raises(ConfigError, match="sigma must be a finite number >= 0"):
        gaussian_rows(torch.tensor([0]), 3, sigma=-1.0)
    with pytest.raises(ConfigError, match="mu must be a finite number"):
        gaussian_rows(torch.tensor([0]), 3, mu=float("inf"))


# --- ALIE --------------------------------------------------------------------------------------------------------


def test_phi_inverse_literals_match_scipy() -> None:
    norm = pytest.importorskip("scipy.stats").norm
    for q, literal in [(4 / 5, PPF_4_5), (2 / 3, PPF_2_3), (3 / 5, PPF_3_5), (5 / 6, PPF_5_6)]:
        assert float(norm.ppf(q)) == pytest.approx(literal, rel=1e-14)


@pytest.mark.parametrize(
    ("k", "f", "option", "expected"),
    [
        # K = 5, f = 2: s = max(1, floor(3.5) - 2) = 1; z = Phi^-1(4/5); honest: Phi^-1((5-2-1)/(5-2)) = Phi^-1(2/3)
        (5, 2, None, PPF_4_5),
        (5, 2, "honest", PPF_2_3),
        # K = 5, f = 1: s = max(1, 3 - 1) = 2; z = Phi^-1(3/5); honest: Phi^-1((4-2)/4) = Phi^-1(1/2) = 0
        (5, 1, None, PPF_3_5),
        (5, 1, "honest", 0.0),
        # K = 6, f = 1: s = max(1, floor(4) - 1) = 3; z = Phi^-1(3/6) = 0
        (6, 1, None, 0.0),
        # K = 6, f = 3: s = max(1, 4 - 3) = 1; z = Phi^-1(5/6)
        (6, 3, None, PPF_5_6),
        (6, 3, -1.5, -1.5),
    ],
)
def test_alie_z_by_hand(k: int, f: int, option: object, expected: float) -> None:
    assert alie_z(k, f, option) == pytest.approx(expected, rel=1e-15, abs=1e-15)


def test_alie_by_hand_k5_f2() -> None:
    # mu = [3, 5], sigma = [2, 3]; z = Phi^-1(4/5): mu - z sigma = [3 - 2 z, 5 - 3 z]
    out = alie(torch.tensor(HONEST, dtype=F64), 5, 2)
    assert out is not None and out.dtype == F64
    assert out.tolist() == pytest.approx([3 - 2 * PPF_4_5, 5 - 3 * PPF_4_5], rel=1e-15)
    assert out.tolist() == pytest.approx([1.3167575328541714, 2.475136299281257], rel=1e-15)


def test_alie_by_hand_fp32() -> None:
    out = alie(torch.tensor(HONEST), 5, 2)
    assert out is not None and out.dtype == torch.float32
    assert out.tolist() == pytest.approx([1.3167575328541714, 2.475136299281257], rel=1e-6)


def test_alie_options_by_hand() -> None:
    honest = torch.tensor(HONEST, dtype=F64)
    # honest: z = Phi^-1(2/3) -> [3 - 2 z, 5 - 3 z]
    assert alie(honest, 5, 2, "honest").tolist() == pytest.approx([3 - 2 * PPF_2_3, 5 - 3 * PPF_2_3], rel=1e-15)
    # a number: z = 1.5 -> [3 - 3, 5 - 4.5]; ByzFL's tau = 1.5 is z = -1.5 -> [6, 9.5]
    assert alie(honest, 5, 2, 1.5).tolist() == [0.0, 0.5]
    assert alie(honest, 5, 2, -1.5).tolist() == [6.0, 9.5]
    # K = 6, f = 1: z = 0, the honest mean
    assert alie(honest, 6, 1).tolist() == [3.0, 5.0]


def test_alie_needs_two_honest_rows() -> None:
    assert alie(torch.tensor([[1.0, 2.0]]), 3, 2) is None
    assert alie(torch.empty(0, 2), 3, 3) is None
    # K = 1, f = 1 (or K = 2, f = 0): s_t = K_t, z = Phi^-1(0) = -inf, named instead of sending inf.
    with pytest.raises(ValueError, match="too few honest members"):
        alie_z(1, 1)
    with pytest.raises(ValueError, match="too few honest members"):
        alie_z(4, 3, "honest")  # s = max(1, 3 - 3) = 1; (4 - 3 - 1)/(4 - 3) = 0


@pytest.mark.parametrize("option", ["foo", float("nan"), float("inf"), True])
def test_alie_bad_option_is_a_config_error(option: object) -> None:
    with pytest.raises(ConfigError, match="alie_z must be"):
        alie(torch.tensor(HONEST), 5, 2, option)  # type: ignore[arg-type]


def test_alie_bad_counts() -> None:
    with pytest.raises(ConfigError, match=r"f_t must be an integer in \[0, K_t=5\]"):
        alie_z(5, 6)
    with pytest.raises(ConfigError, match="K_t must be an integer >= 1"):
        alie_z(0, 0)


def test_alie_is_one_vector_on_the_rows_device_and_ignores_row_order() -> None:
    honest = torch.tensor(HONEST, dtype=F64)
    a, b = alie(honest, 5, 2), alie(honest.flip(0), 5, 2)
    assert a is not None and b is not None and a.shape == (2,)
    assert torch.allclose(a, b, rtol=0, atol=1e-15)
    assert not math.isnan(float(a.sum()))
