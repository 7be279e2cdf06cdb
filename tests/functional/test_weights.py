"""Tests for lightning_fl.functional.weights (SPEC section 1 fallback rule, FedAvg weights)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.functional.weights import (
    ConfigError,
    as_float_like,
    broadcast_per_client,
    check_choice,
    fedavg_weights,
    normalize_weights,
    weighted_average,
)

F64 = torch.float64


def test_normalize_weights_plain() -> None:
    w, degenerate = normalize_weights(torch.tensor([1.0, 3.0], dtype=F64))
    assert torch.equal(w, torch.tensor([0.25, 0.75], dtype=F64))
    assert degenerate is False


@pytest.mark.parametrize(
    "raw",
    [
        [0.0, 0.0, 0.0],  # zero sum
        [1.0, -1.0, 0.0],  # zero sum from mixed signs
        [1.0, float("nan"), 2.0],  # NaN sum
        [float("inf"), 1.0, 1.0],  # infinite sum
        [float("inf"), float("-inf"), 1.0],  # inf - inf = NaN sum
    ],
)
def test_normalize_weights_degenerate_falls_back_to_uniform(raw: list[float]) -> None:
    w, degenerate = normalize_weights(torch.tensor(raw, dtype=F64))
    assert degenerate is True
    assert torch.equal(w, torch.full((3,), 1.0 / 3.0, dtype=F64))
    assert torch.isfinite(w).all()


def test_normalize_weights_single_client() -> None:
    # A zero sum in a one-member cohort is not worth a warning: weight 1 is the only answer.
    assert normalize_weights(torch.tensor([0.0])) == (torch.tensor([1.0]), False)
    w, degenerate = normalize_weights(torch.tensor([float("nan")]))
    assert torch.equal(w, torch.tensor([1.0])) and degenerate is True
    w, degenerate = normalize_weights(torch.tensor([7.0]))
    assert torch.equal(w, torch.tensor([1.0])) and degenerate is False


def test_normalize_weights_dtypes_and_shapes() -> None:
    w, _ = normalize_weights(torch.tensor([1, 1, 2]))  # integer counts -> float32 (SPEC 1 fp32)
    assert w.dtype == torch.float32
    assert torch.equal(w, torch.tensor([0.25, 0.25, 0.5]))
    assert normalize_weights(torch.ones(2, dtype=F64))[0].dtype == F64
    with pytest.raises(ValueError, match="non-empty 1-D"):
        normalize_weights(torch.ones(2, 2))
    with pytest.raises(ValueError, match="non-empty 1-D"):
        normalize_weights(torch.ones(0))


def test_normalize_weights_does_not_mutate() -> None:
    raw = torch.tensor([2.0, 6.0])
    normalize_weights(raw)
    assert torch.equal(raw, torch.tensor([2.0, 6.0]))


def test_weighted_average() -> None:
    client_w = torch.tensor([[0.0, 2.0], [4.0, 6.0]], dtype=F64)
    # 0.75 * [0, 2] + 0.25 * [4, 6] = [1, 3]
    out = weighted_average(client_w, torch.tensor([0.75, 0.25], dtype=F64))
    assert torch.equal(out, torch.tensor([1.0, 3.0], dtype=F64))
    # extra trailing dimensions are kept; float32 weights are cast to the client dtype
    stacked = torch.arange(12, dtype=F64).reshape(3, 2, 2)
    out = weighted_average(stacked, torch.tensor([1.0, 0.0, 0.0]))
    assert out.dtype == F64 and torch.equal(out, stacked[0])
    with pytest.raises(ValueError, match="weights must have shape"):
        weighted_average(client_w, torch.ones(3))


def test_fedavg_weights_samples_and_uniform() -> None:
    w, degenerate = fedavg_weights(torch.tensor([10.0, 30.0, 60.0], dtype=F64))
    assert torch.allclose(w, torch.tensor([0.1, 0.3, 0.6], dtype=F64), rtol=0, atol=1e-15)
    assert degenerate is False
    w, degenerate = fedavg_weights(torch.tensor([10, 30, 60]), weighting="uniform")
    assert torch.equal(w, torch.full((3,), 1.0 / 3.0)) and degenerate is False
    w, degenerate = fedavg_weights(torch.tensor([0, 0]))
    assert torch.equal(w, torch.tensor([0.5, 0.5])) and degenerate is True


def test_fedavg_weights_one_client() -> None:
    assert fedavg_weights(torch.tensor([5.0])) == (torch.tensor([1.0]), False)


def test_choice_validation_message() -> None:
    with pytest.raises(ValueError) as info:
        fedavg_weights(torch.ones(2), weighting="foo")
    assert str(info.value) == "weighting must be one of samples, uniform; got 'foo'"
    assert isinstance(info.value, ConfigError)
    with pytest.raises(ValueError, match="^mode must be one of self, global, time; got 'x'$"):
        check_choice("mode", "x", ("self", "global", "time"))


def test_as_float_like_and_broadcast() -> None:
    like = torch.zeros(3, 2, 5, dtype=F64)
    t = as_float_like(torch.tensor([1, 2, 3]), like)
    assert t.dtype == F64
    assert broadcast_per_client(torch.tensor([1, 2, 3]), like).shape == (3, 1, 1)
    assert broadcast_per_client(4, like).shape == ()
    assert broadcast_per_client(torch.tensor([4]), torch.zeros(7)).shape == ()  # one value, not per-row
    assert math.isclose(float(broadcast_per_client(2.5, like)), 2.5)
    with pytest.raises(ValueError, match="per-client values"):
        broadcast_per_client(torch.tensor([1, 2]), like)
