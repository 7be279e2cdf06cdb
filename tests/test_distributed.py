"""Many processes give the single-process model, checked with 2 gloo processes.

One ``torchrun --nproc-per-node 2`` run trains every algorithm with both engines in one process group
(tests/distributed/worker.py); each result is compared here with the same case in this process. The
CLI tests launch the ways a user does: Lightning's ``ddp`` strategy, and ``torchrun --nnodes 2``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import run_cli, tiny_config
from tests.distributed.cases import COMPARED, run_case

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _launch(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run a multi-process command; one retry when it fails to start or hangs.

    Process groups meet over localhost ports; on a busy machine a port picked as free can be taken
    before the rendezvous binds it. A second failure is a real one and is reported with both outputs.
    """
    errors = []
    for _ in range(2):
        try:
            result = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            errors.append(f"timed out after {timeout} s: {str(err.stderr)[-1500:]}")
            continue
        if result.returncode == 0:
            return result
        errors.append(result.stderr[-3000:])
    raise AssertionError("\n---\n".join(errors))


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("w2") / "results.pt"
    _launch([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "tests.distributed.worker",
             str(out)], timeout=600)
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize(("name", "engine"), COMPARED)
def test_two_processes_train_the_single_process_model(two_processes, name: str, engine: str) -> None:
    torch.set_num_threads(1)
    one, two = run_case(name, engine), two_processes[f"{name}/{engine}"]
    exact = engine == "sequential" and not name.endswith("-reduce")
    if exact:  # all-gather in cohort order: bitwise
        assert torch.equal(one["weights"], two["weights"])
        # Evaluation is sharded by chunks of samples and gathered: the same fairness metrics.
        assert one["history"] == two["history"]
    else:  # other chunks (vectorized) or partial sums (reduce): equal to float rounding (docs/scaling.md, "Scaling out")
        torch.testing.assert_close(two["weights"], one["weights"], rtol=1e-5, atol=1e-6)
        _assert_history_close(one["history"], two["history"])


def _assert_history_close(one: list[dict], two: list[dict]) -> None:
    """The same evaluations (stage, round, metric names), every metric equal to float rounding."""
    assert [(r["stage"], r["round"], sorted(r)) for r in two] == [(r["stage"], r["round"], sorted(r)) for r in one]
    for a, b in zip(one, two, strict=True):
        for key, value in a.items():
            if key not in ("stage", "round"):
                assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-6), (a["stage"], a["round"], key)


def test_reduce_moves_a_model_per_rank_instead_of_every_client(two_processes) -> None:
    gathered, reduced = two_processes["FedAvg/sequential"]["bytes"], two_processes["FedAvg-reduce/sequential"]["bytes"]
    # 2 rounds of 5 clients (shares of 3 and 2, padded to 3) x 610 fp32 values, vs 2 rounds x 2 ranks x 610.
    assert gathered == 2 * 2 * 3 * 610 * 4
    assert reduced == 2 * 2 * 610 * 4


def test_local_training_issues_no_collective(two_processes) -> None:
    # Three times the local steps, the same number of collectives per run: none per local step.
    assert two_processes["calls/epochs=1"] == two_processes["calls/epochs=3"] > 0


# ---------------------------------------------------------------------------------------- the CLI
def _config(tmp_path: Path, name: str, **overrides) -> Path:
    config = tiny_config(tmp_path / "logs", **{"data.init_args.num_clients": 8, "model.clients_per_round": 5,
                                               "trainer.logger.init_args.name": name, **overrides})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lightning_fl", *args], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def _weights(tmp_path: Path, name: str, version: int = 0) -> dict[str, torch.Tensor]:
    ckpt = tmp_path / "logs" / name / f"version_{version}" / "checkpoints" / "last.ckpt"
    return torch.load(ckpt, weights_only=False)["state_dict"]


DDP2 = ("--trainer.strategy", "ddp", "--trainer.devices", "2")


def test_checkpoints_move_between_one_and_two_processes(tmp_path: Path) -> None:
    scaffold = {"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Scaffold"},
                                      {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                                       "init_args": {"save_last": True, "save_top_k": 0}}],
                "model.engine": "sequential", "model.keep_client_optimizer_state": True,
                "model.optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05, "momentum": 0.5}},
                # dropout, partial stragglers and over-selection: their draws replay on any number of processes
                "model.system": {"dropout": 0.3, "speed_mean": 3.0, "speed_sigma": 1.0, "deadline": 3.0,
                                 "stragglers": "partial", "over_selection": 0.5}}
    full = _config(tmp_path, "one", **scaffold)
    assert run_cli("fit", "--config", str(full)) == 0
    reference = _weights(tmp_path, "one")
    # 2 rounds on 2 processes, then 2 more on 1 process; and 2 + 2 on 2 processes.
    half = _config(tmp_path, "two", **scaffold, **{"trainer.max_epochs": 2})
    result = _cli("fit", "--config", str(half), *DDP2)
    assert result.returncode == 0, result.stderr[-3000:]
    ckpt = tmp_path / "logs" / "two" / "version_0" / "checkpoints" / "last.ckpt"
    resumed = _config(tmp_path, "two", **scaffold)
    # Both resume the same checkpoint, so each names its own run directory (by default a resume continues
    # the checkpoint's).
    assert run_cli("fit", "--config", str(resumed), "--ckpt_path", str(ckpt), "--trainer.logger.init_args.version",
                   "1") == 0
    result = _cli("fit", "--config", str(resumed), "--ckpt_path", str(ckpt), *DDP2, "--trainer.logger.init_args.version",
                  "2")
    assert result.returncode == 0, result.stderr[-3000:]
    for version in (1, 2):
        weights = _weights(tmp_path, "two", version)
        for key, value in reference.items():
            assert torch.equal(value, weights[key]), (version, key)
    # One voice: one run directory per run, files written once.
    assert sorted(p.name for p in (tmp_path / "logs" / "two").iterdir()) == ["version_0", "version_1", "version_2"]
    assert (tmp_path / "logs" / "two" / "version_2" / "fairness_history.csv").read_text() == \
        (tmp_path / "logs" / "two" / "version_1" / "fairness_history.csv").read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_with_torchrun_train_the_single_process_model(tmp_path: Path) -> None:
    config = _config(tmp_path, "nodes", **{"model.engine": "sequential"})
    assert run_cli("fit", "--config", str(config)) == 0
    reference = _weights(tmp_path, "nodes")
    outputs = []
    for _attempt in range(2):  # a port picked as free can be taken before torchrun binds it: retry once
        port = _free_port()
        nodes = [subprocess.Popen([str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "1", "--node-rank",
                                   str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port), "-m",
                                   "lightning_fl", "fit", "--config", str(config), "--trainer.strategy", "ddp",
                                   "--trainer.num_nodes", "2", "--trainer.devices", "1"],
                                  cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
                 for rank in (0, 1)]
        try:
            outputs = [node.communicate(timeout=180) for node in nodes]
        except subprocess.TimeoutExpired:
            for node in nodes:  # the agent and its worker: the whole session
                os.killpg(node.pid, signal.SIGKILL)
                node.communicate()
            continue
        if [node.returncode for node in nodes] == [0, 0]:
            break
    else:
        raise AssertionError("two torchrun nodes failed twice: " + " | ".join(err[-2000:] for _, err in outputs))
    runs = sorted((tmp_path / "logs" / "nodes").glob("version_*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    weights = torch.load(runs[-1], weights_only=False)["state_dict"]
    for key, value in reference.items():
        assert torch.equal(value, weights[key]), key


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed", "dp"])
def test_strategies_that_cannot_shard_clients_get_one_line(tmp_path: Path, strategy: str, capsys) -> None:
    # In this process: the check runs before any process is started (tests/test_cli_errors.py checks the
    # line from the shell).
    assert run_cli("fit", "--config", str(_config(tmp_path, "bad")), "--trainer.strategy", strategy) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: trainer.strategy must be one of auto, ddp") and strategy in last


def test_a_dead_rank_stops_the_others_with_its_name(tmp_path: Path) -> None:
    dies = {"class_path": "tests.distributed.faults.DieAtRound", "init_args": {"rank": 1, "round_idx": 1}}
    config = _config(tmp_path, "dies", **{"trainer.callbacks": [dies], "model.collective_timeout": 20.0})
    result = _cli("fit", "--config", str(config), *DDP2, timeout=240)  # a hang guard, not a timing check
    assert result.returncode != 0
    assert re.search(r"error: round 2: rank 1 (did not reach the exchange|closed its connection)", result.stderr), \
        result.stderr[-3000:]


def test_reduce_needs_an_averaging_aggregation(tiny, capsys) -> None:
    config = tiny(**{"model.exchange": "reduce", "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Scaffold"}]})
    assert run_cli("fit", "--config", str(config)) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: model.exchange: reduce needs an aggregation that only averages") and "Scaffold" in last
