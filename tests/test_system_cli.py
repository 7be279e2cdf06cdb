"""``model.system`` through the CLI: the simulated clock in TensorBoard and rounds-to-target, one-line errors."""

from __future__ import annotations

import json

import pytest
import torch
from lightning_fl.datamodules import SyntheticDataModule

from lightning_fl.simulation.sampling import ClientSampler
from tests.callbacks.helpers import events
from tests.conftest import run_cli

TARGET = {"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedAvg"},
                                {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                                {"class_path": "lightning_fl.callbacks.RoundsToTarget",
                                 "init_args": {"monitor": "val/acc_mean", "target": 0.0}}]}


def test_the_simulated_clock_is_logged_and_reported_with_the_target(tiny, tmp_path) -> None:
    speeds = tmp_path / "speeds.csv"
    speeds.write_text("client,steps_per_second\n" + "".join(f"{k},{k + 1}\n" for k in range(6)))
    # 2 Mbit/s, 10 ms: a LogisticRegression(60, 10) has 610 fp32 values = 2440 bytes each way.
    system = {"speed_trace": str(speeds), "bandwidth_mbps": 2.0, "latency_ms": 10.0}
    config = tiny(**TARGET, **{"model.system": system})
    assert run_cli("fit", "--config", str(config)) == 0
    # By hand: each round lasts max over its cohort of 2 (0.01 + 2440 * 8 / 2e6) + tau_k / (k + 1).
    data = SyntheticDataModule("1_1", num_clients=6, max_samples_per_client=80)
    data.setup("fit")
    taus = 2 * ((data.data.train_sizes() + 9) // 10)
    transfer = 2 * (0.01 + 2440 * 8 / 2e6)
    sampler = ClientSampler(6, 3, "uniform", seed=0)
    expected = [max(transfer + float(taus[k]) / (k + 1) for k in sampler.sample(t).tolist()) for t in range(4)]
    logged = events(tmp_path)
    assert [e.value for e in logged.Scalars("sim/round_seconds")] == pytest.approx(expected)
    assert [e.step for e in logged.Scalars("sim/elapsed_seconds")] == [1, 2, 3, 4]
    assert logged.Scalars("sim/elapsed_seconds")[-1].value == pytest.approx(sum(expected))
    assert [e.value for e in logged.Scalars("clients/kept")] == [3.0] * 4
    result = json.loads(next((tmp_path / "logs" / "run").glob("version_0/rounds_to_target.json")).read_text())
    assert result["round"] == 2 and result["sim_seconds"] == pytest.approx(sum(expected[:2]))


@pytest.mark.parametrize(("system", "message"), [
    ({"dropout": 1.5}, "system.dropout must be between 0.0 and 1.0; got 1.5"),
    ({"speed_mean": 2.0, "deadline": -1.0}, "system.deadline must be a finite number > 0; got -1.0"),
    ({"over_selection": -0.5}, "system.over_selection must be a finite number >= 0; got -0.5"),
    # Settings under which no client ever reports: today's run would "finish" having trained nothing.
    ({"availability": 0.0}, "system.availability must be in (0.0, 1.0] (0.0: no client is ever online, so nothing"
                            " trains); got 0.0"),
    ({"dropout": 1.0}, "system.dropout must be in [0.0, 1.0) (1.0: every sampled client drops out, so nothing"
                       " trains); got 1.0"),
    ({"straggler_fraction": 1.0}, "system.straggler_fraction must be below 1.0 with stragglers: drop (every client"
                                  " would be a dropped straggler, so nothing trains); got 1.0"),
])
def test_bad_system_options_fail_before_training(tiny, capsys, system, message) -> None:
    assert run_cli("fit", "--config", str(tiny(**{"model.system": system}))) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {message}"


def test_a_trace_naming_an_unknown_client_fails_before_training(tiny, tmp_path, capsys) -> None:
    trace = tmp_path / "available.csv"
    trace.write_text("round,client,available\n1,0,1\n1,6,1\n")
    assert run_cli("fit", "--config", str(tiny(**{"model.system": {"availability_trace": str(trace)}}))) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (f"error: system.availability_trace: {trace} line 3: client must be between 0 and 5"
                    " (the federation's clients); got 6")
    assert not list((tmp_path / "logs").rglob("last.ckpt"))


def test_system_and_hierarchy_together_fail_in_one_line(tiny, capsys) -> None:
    config = tiny(**{"model.system": {"dropout": 0.1}, "model.hierarchy": {"num_institutions": 2}})
    assert run_cli("fit", "--config", str(config)) == 2
    assert "model.system cannot be combined with model.hierarchy" in capsys.readouterr().err.strip().splitlines()[-1]


def test_resuming_under_other_system_options_is_an_error(tiny, tmp_path, capsys) -> None:
    first = tiny(**{"trainer.max_epochs": 2, "model.system": {"dropout": 0.1}})
    assert run_cli("fit", "--config", str(first)) == 0
    checkpoint = next((tmp_path / "logs").rglob("last.ckpt"))
    assert torch.load(checkpoint, weights_only=False)["federated"]["system"]["elapsed_seconds"] == 0.0
    second = tiny(**{"model.system": {"dropout": 0.2}})
    assert run_cli("fit", "--config", str(second), "--ckpt_path", str(checkpoint)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: model.system differs from the checkpoint (dropout: checkpoint 0.1 vs config 0.2)")


@pytest.mark.parametrize(("content", "message"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "is not a CSV text file with the header round,client,available"),
    (b"round,client,available\n1,0,0\n1,1,0\n2,0,0\n", "lists no client as available in any round (every available"
                                                           " is 0), so nothing would train"),
])
def test_an_unusable_availability_trace_fails_before_training(tiny, tmp_path, capsys, content, message) -> None:
    trace = tmp_path / "available.csv"
    trace.write_bytes(content)
    assert run_cli("fit", "--config", str(tiny(**{"model.system": {"availability_trace": str(trace)}}))) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"error: system.availability_trace: {trace} ")
    assert message in err.strip().splitlines()[-1]
    assert not list((tmp_path / "logs").rglob("last.ckpt"))
