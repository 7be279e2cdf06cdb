"""Simulated system heterogeneity: round fates against hand-computed schedules, and bad input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.sampling import ClientSampler
from lightning_fl.simulation.system import SystemHeterogeneity


def _speeds(tmp_path: Path, speeds: list[float]) -> str:
    path = tmp_path / "speeds.csv"
    path.write_text("client,steps_per_second\n" + "".join(f"{k},{s}\n" for k, s in enumerate(speeds)))
    return str(path)


def _system(sizes: list[int], *, epochs: int = 2, batch: int = 10, model_bytes: int = 0, seed: int = 0,
            **options) -> SystemHeterogeneity:
    system = SystemHeterogeneity(**options)
    system.setup(len(sizes), seed, epochs, batch, torch.tensor(sizes), model_bytes)
    return system


def _all(n: int) -> ClientSampler:
    return ClientSampler(n, n, "all", seed=0)


# Four clients with n_k = 10, 20, 30, 40, B = 10, E = 2: tau_k = 2, 4, 6, 8 steps. Speeds 1, 2, 1, 4
# steps/s: compute 2, 2, 6, 2 s. A 3 s deadline makes client 2 the only straggler (6 > 3); it fits
# floor(3 * 1) = 3 of its 6 steps.
SIZES = [10, 20, 30, 40]
SPEEDS = [1.0, 2.0, 1.0, 4.0]


def test_deadline_drop_keeps_the_clients_that_finish(tmp_path) -> None:
    system = _system(SIZES, speed_trace=_speeds(tmp_path, SPEEDS), deadline=3.0, stragglers="drop")
    fates = system.fates(0, _all(4))
    assert fates.client_ids.tolist() == [0, 1, 3]
    assert fates.num_steps.tolist() == [2, 4, 8] == fates.full_steps.tolist()
    assert fates.stragglers.tolist() == [2]
    assert fates.round_seconds == 2.0  # the slowest kept client
    assert fates.metrics()["clients/partial_steps"] == 0.0


def test_deadline_partial_keeps_the_steps_that_fit(tmp_path) -> None:
    system = _system(SIZES, speed_trace=_speeds(tmp_path, SPEEDS), deadline=3.0, stragglers="partial")
    fates = system.fates(0, _all(4))
    assert fates.client_ids.tolist() == [0, 1, 2, 3]
    assert fates.num_steps.tolist() == [2, 4, 3, 8]
    assert fates.full_steps.tolist() == [2, 4, 6, 8]
    assert fates.round_seconds == 3.0
    metrics = fates.metrics()
    assert (metrics["clients/stragglers"], metrics["clients/partial_steps"], metrics["clients/kept"]) == (1.0, 3.0, 4.0)


def test_transfers_count_against_the_deadline_and_the_clock(tmp_path) -> None:
    # 1,000,000 bytes at 8 Mbit/s + 0 ms: 1 s each way, so a 5 s deadline leaves 3 s of compute
    # (the same stragglers as above) and every round time grows by 2 s.
    system = _system(SIZES, speed_trace=_speeds(tmp_path, SPEEDS), deadline=5.0, stragglers="partial",
                     bandwidth_mbps=8.0, model_bytes=1_000_000)
    fates = system.fates(0, _all(4))
    assert fates.num_steps.tolist() == [2, 4, 3, 8]
    assert fates.round_seconds == pytest.approx(5.0)


def test_at_least_one_step_even_when_none_fits(tmp_path) -> None:
    system = _system(SIZES, speed_trace=_speeds(tmp_path, SPEEDS), deadline=0.1, stragglers="partial")
    fates = system.fates(0, _all(4))
    assert fates.num_steps.tolist() == [1, 1, 1, 1]
    assert fates.round_seconds == 1.0  # client 0 and 2 need 1 s for their one step


def test_over_selection_keeps_the_first_k_to_finish(tmp_path) -> None:
    # K = 2, o = 0.5: ceil(3) = 3 sampled out of 3; equal tau = 4 steps at 1, 2, 4 steps/s finish at
    # 4, 2, 1 s, so clients 2 and 1 are kept and the round lasts 2 s.
    system = _system([20, 20, 20], speed_trace=_speeds(tmp_path, [1.0, 2.0, 4.0]), over_selection=0.5)
    fates = system.fates(0, ClientSampler(3, 2, "uniform", seed=0))
    assert fates.sampled.tolist() == [0, 1, 2]
    assert fates.client_ids.tolist() == [1, 2]
    assert fates.over_selected.tolist() == [0]
    assert fates.round_seconds == 2.0


def test_everyone_dropping_out_is_an_empty_round() -> None:
    system = _system(SIZES)
    system.dropout = 1.0  # refused as an option (nothing would ever train); the fates still follow it
    fates = system.fates(3, _all(4))
    assert fates.empty and fates.dropped.tolist() == [0, 1, 2, 3]
    assert fates.round_seconds == 0.0


def test_nobody_online_waits_for_the_deadline(tmp_path) -> None:
    system = _system(SIZES, speed_trace=_speeds(tmp_path, SPEEDS), deadline=7.0)
    system.online_probability = 0.0  # availability 0.0 is refused as an option (nothing would ever train)
    fates = system.fates(0, _all(4))
    assert fates.empty and fates.num_available == 0 and fates.round_seconds == 7.0


def test_dropout_is_a_client_s_own_draw() -> None:
    # A client's fate in a round does not depend on who else was sampled: the same client drops out
    # (or not) in a cohort of 10 and in the whole federation, and about p_drop of them do.
    system = _system([10] * 2000, dropout=0.3)
    whole = system.fates(5, _all(2000))
    share = len(whole.dropped) / 2000
    assert abs(share - 0.3) < 4 * math.sqrt(0.3 * 0.7 / 2000)
    small = system.fates(5, ClientSampler(2000, 10, "uniform", seed=0))
    assert set(small.dropped.tolist()) == set(small.sampled.tolist()) & set(whole.dropped.tolist())
    assert set(small.client_ids.tolist()) == set(small.sampled.tolist()) - set(whole.dropped.tolist())


def test_availability_samples_only_online_clients() -> None:
    system = _system([10] * 1000, availability=0.2)
    for round_idx in range(3):
        online = set(system.online(round_idx).tolist())
        assert abs(len(online) / 1000 - 0.2) < 0.06
        fates = system.fates(round_idx, ClientSampler(1000, 50, "uniform", seed=0))
        assert set(fates.client_ids.tolist()) <= online and len(fates.client_ids) == 50


def test_availability_beta_is_drawn_once_per_client() -> None:
    # Beta(1, 3) has mean 1/4; each client keeps its a_k across rounds.
    system = _system([10] * 4000, availability_beta=[1.0, 3.0])
    a = system.online_probability
    assert abs(float(a.mean()) - 0.25) < 0.02
    counts = torch.zeros(4000)
    for round_idx in range(40):
        counts[system.online(round_idx)] += 1
    assert torch.corrcoef(torch.stack([counts, a.float()]))[0, 1] > 0.8


def test_availability_trace_repeats(tmp_path) -> None:
    trace = tmp_path / "available.csv"
    trace.write_text("round,client,available\n1,0,1\n1,1,1\n1,2,0\n2,2,1\n")
    system = _system(SIZES, availability_trace=str(trace))
    assert [system.online(t).tolist() for t in range(4)] == [[0, 1], [2], [0, 1], [2]]
    assert system.fates(1, _all(4)).client_ids.tolist() == [2]


def test_fedprox_stragglers_train_a_uniform_number_of_epochs() -> None:
    # x = 0.5 of a cohort of 10: exactly 5 stragglers per round, each with 1..E whole epochs.
    system = _system([30] * 10, epochs=4, straggler_fraction=0.5, stragglers="partial")
    seen_epochs = set()
    for round_idx in range(20):
        fates = system.fates(round_idx, _all(10))
        assert len(fates.stragglers) == 5 and len(fates.client_ids) == 10
        partial = fates.num_steps[torch.isin(fates.client_ids, fates.stragglers)]
        assert ((partial % 3) == 0).all() and (partial >= 3).all() and (partial <= 12).all()
        seen_epochs |= set((partial // 3).tolist())
    assert seen_epochs == {1, 2, 3, 4}
    dropped = _system([30] * 10, epochs=4, straggler_fraction=0.5, stragglers="drop").fates(0, _all(10))
    assert len(dropped.client_ids) == 5 and not torch.isin(dropped.client_ids, dropped.stragglers).any()


def test_lognormal_speeds_have_the_configured_mean() -> None:
    system = _system([10] * 20000, speed_mean=10.0, speed_sigma=0.5)
    assert float(system.speeds.mean()) == pytest.approx(10.0, rel=0.02)
    assert float(system.speeds.log().std()) == pytest.approx(0.5, rel=0.03)


@pytest.mark.parametrize(("options", "message"), [
    ({"availability": 1.5}, "system.availability must be between 0.0 and 1.0; got 1.5"),
    ({"dropout": -0.1}, "system.dropout must be between 0.0 and 1.0; got -0.1"),
    ({"speed_mean": 1.0, "deadline": 0.0}, "system.deadline must be a finite number > 0; got 0.0"),
    ({"over_selection": -1.0}, "system.over_selection must be a finite number >= 0; got -1.0"),
    ({"straggler_fraction": 2.0}, "system.straggler_fraction must be between 0.0 and 1.0; got 2.0"),
    ({"stragglers": "wait"}, "system.stragglers must be one of drop, partial; got 'wait'"),
    ({"deadline": 3.0}, "system.deadline needs a speed model: system.speed_mean or system.speed_trace"),
    ({"availability": 0.5, "availability_beta": [1.0, 1.0]},
     "system: set one of availability, availability_beta, availability_trace; got availability, availability_beta"),
])
def test_bad_options_fail_with_one_line(options, message) -> None:
    with pytest.raises(ConfigError) as err:
        SystemHeterogeneity(**options)
    assert str(err.value) == message


@pytest.mark.parametrize(("rows", "message"), [
    ("1,9,1\n", "line 2: client must be between 0 and 3 (the federation's clients); got 9"),
    ("0,1,1\n", "line 2: round must be >= 1 (rounds count from 1); got 0"),
    ("1,1,yes\n", "line 2: available must be 0 or 1; got 'yes'"),
    ("1,1,1\n1,1,0\n", "line 3: round 1, client 1 is listed twice"),
])
def test_bad_availability_traces_name_the_line(tmp_path, rows: str, message: str) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("round,client,available\n" + rows)
    with pytest.raises(ConfigError) as err:
        _system(SIZES, availability_trace=str(trace))
    assert str(err.value) == f"system.availability_trace: {trace} {message}"


def test_a_speed_trace_must_list_every_client(tmp_path) -> None:
    path = tmp_path / "speeds.csv"
    path.write_text("client,steps_per_second\n0,1.0\n1,2.0\n")
    with pytest.raises(ConfigError, match=r"no steps_per_second for clients 2, 3 \(2 of 4\)"):
        _system(SIZES, speed_trace=str(path))
    path.write_text("client,steps_per_second\n0,1.0\n1,-2\n")
    with pytest.raises(ConfigError, match="line 3: steps_per_second must be a finite number > 0; got '-2'"):
        _system(SIZES, speed_trace=str(path))
