"""Tests for Tempo's adaptive local epochs (SPEC section 6)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.functional.tempo import institution_distances, tempo_local_epochs


def _literal(distances: list[float], c: int) -> list[float]:
    """Paper eq. 9 exactly as printed, before ceil."""
    logs = [math.log(x) for x in distances]
    lo, hi = min(logs), max(logs)
    return [(c / 2) / (lo - hi) * (3 * lm + lo - 4 * hi) for lm in logs]


def test_hand_example_c6() -> None:
    # l = [0, 1, 2] (omega = 1, e, e^2): closest 2c = 12; middle ceil(3 * 2.5) = ceil(7.5) = 8; farthest c/2 = 3
    out = tempo_local_epochs(torch.tensor([1.0, math.e, math.e**2]), 6)
    assert out.dtype == torch.long
    assert out.tolist() == [12, 8, 3]
    # order does not matter
    assert tempo_local_epochs(torch.tensor([math.e**2, 1.0, math.e]), 6).tolist() == [3, 12, 8]


@pytest.mark.parametrize("c", [1, 2, 3, 5, 6, 7, 10, 13])
def test_endpoints_are_exact(c: int) -> None:
    gen = torch.Generator().manual_seed(c)
    for _ in range(20):
        d = torch.rand(5, generator=gen, dtype=torch.float64) * 50 + 1e-3
        out = tempo_local_epochs(d, c)
        assert int(out[d.argmin()]) == 2 * c
        assert int(out[d.argmax()]) == max(1, math.ceil(c / 2))
        # larger distance, no more epochs
        order = torch.argsort(d)
        assert all(out[order[i]] >= out[order[i + 1]] for i in range(4))


def test_matches_literal_formula_away_from_integers() -> None:
    gen = torch.Generator().manual_seed(99)
    checked = 0
    for _ in range(50):
        d = (torch.rand(6, generator=gen, dtype=torch.float64) * 10 + 0.01).tolist()
        out = tempo_local_epochs(torch.tensor(d), 6).tolist()
        for got, x in zip(out, _literal(d, 6), strict=True):
            if abs(x - round(x)) > 1e-6:  # the literal form's round-off could flip ceil at integers
                assert got == max(1, math.ceil(x))
                checked += 1
    assert checked > 100


def test_degenerate_cases_give_c() -> None:
    assert tempo_local_epochs(torch.tensor([2.0, 2.0, 2.0]), 6).tolist() == [6, 6, 6]  # l_max == l_min
    assert tempo_local_epochs(torch.tensor([0.0, 1.0, 3.0]), 6).tolist() == [6, 6, 6]  # omega == 0
    assert tempo_local_epochs(torch.tensor([4.2]), 5).tolist() == [5]  # M == 1


def test_validation() -> None:
    with pytest.raises(ValueError, match="initial_epochs must be an integer >= 1"):
        tempo_local_epochs(torch.tensor([1.0, 2.0]), 0)
    with pytest.raises(ValueError, match="initial_epochs must be an integer >= 1"):
        tempo_local_epochs(torch.tensor([1.0, 2.0]), 6.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite and >= 0"):
        tempo_local_epochs(torch.tensor([1.0, float("nan")]), 6)
    with pytest.raises(ValueError, match="finite and >= 0"):
        tempo_local_epochs(torch.tensor([1.0, -2.0]), 6)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        tempo_local_epochs(torch.tensor([]), 6)


def test_institution_distances() -> None:
    g = torch.tensor([1.0, 1.0])
    inst = torch.tensor([[4.0, 5.0], [1.0, 1.0], [0.0, 1.0]])
    assert torch.equal(institution_distances(g, inst), torch.tensor([5.0, 0.0, 1.0]))
