"""The deterministic compute model of CommunicationCost: local steps counted x a declared cost per step."""

from __future__ import annotations

import doctest
from types import SimpleNamespace

import pytest
import torch
from lightning_fl.callbacks.communication_cost import CommunicationCost, step_compute_seconds

from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.round_result import RoundResult, RoundTraffic


class _Log:
    def __init__(self) -> None:
        self.scalars: dict[str, float] = {}

    def log_scalars(self, metrics: dict[str, float]) -> None:
        self.scalars.update(metrics)


def _round(num_steps: list[int], compute: list[list[float]], hierarchy: bool) -> RoundResult:
    transfers = {"client": 8, "institution": len(num_steps)} if hierarchy else {"client": len(num_steps)}
    traffic = RoundTraffic(250_000, transfers, compute)
    update = SimpleNamespace(num_steps=torch.tensor(num_steps))
    return RoundResult(0, update, torch.zeros(1), traffic, seconds=123.0)


def test_steps_times_cost_by_hand() -> None:
    # 4 local rounds x 6 epochs x 9 steps = 216 steps at 2.5 ms; 12 epochs: 432 steps.
    assert step_compute_seconds([216, 432], 0.0025) == pytest.approx([0.54, 1.08])
    assert step_compute_seconds([], 0.0025) == []


def test_a_global_iteration_costs_the_slowest_institutions_steps() -> None:
    cost = CommunicationCost(client_bandwidth_mbps=100, institution_bandwidth_mbps=10, institution_latency_ms=50,
                             seconds_per_step=0.005)
    # Three institutions of 2 local rounds (num_steps: per institution, its rounds' slowest clients summed);
    # the measured compute (30 s, a loaded machine) must not count.
    result = _round([100, 400, 250], [[30.0, 30.0], [0.1, 0.1], [0.1, 0.1]], hierarchy=True)
    log = _Log()
    cost.on_round_end(0, result, None, log)
    # By hand: 250,000 bytes = 2 Mbit: 0.02 s each way to a client (100 Mbit/s), 0.2 s + 0.05 s each way to
    # the server. Institution 1: 400 x 5 ms = 2 s + 2 rounds x 0.04 s + 0.5 s = 2.58 s (the slowest).
    assert log.scalars["net/round_seconds"] == pytest.approx(2.58)
    cost.on_round_end(1, result, None, log)
    assert log.scalars["net/elapsed_seconds"] == pytest.approx(5.16)


def test_the_flat_loop_costs_the_slowest_clients_steps() -> None:
    cost = CommunicationCost(client_bandwidth_mbps=8, client_latency_ms=100, seconds_per_step=0.01)
    log = _Log()
    cost.on_round_end(0, _round([30, 50, 20], [[99.0]], hierarchy=False), None, log)
    # 50 steps x 10 ms = 0.5 s, plus 250,000 bytes (0.25 s + 0.1 s) down and up: 1.2 s.
    assert log.scalars["net/round_seconds"] == pytest.approx(1.2)


def test_without_a_cost_the_measured_compute_counts() -> None:
    cost = CommunicationCost(client_bandwidth_mbps=8, client_latency_ms=100)
    log = _Log()
    cost.on_round_end(0, _round([30, 50, 20], [[2.0]], hierarchy=False), None, log)
    assert log.scalars["net/round_seconds"] == pytest.approx(2.7)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"client_bandwidth_mbps": 10, "seconds_per_step": 0.0}, "seconds_per_step"),
    ({"seconds_per_step": 0.01}, "seconds_per_step")])
def test_a_bad_cost_is_refused(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        CommunicationCost(**kwargs)


def test_docstring_examples() -> None:
    import lightning_fl.callbacks.communication_cost as module

    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0
