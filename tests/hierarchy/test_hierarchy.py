"""Three-layer training (SPEC 6): equivalence, schedule, Tempo epochs, communication accounting, resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lightning_fl.callbacks.communication_cost import estimate_round_seconds
from lightning_fl.callbacks.fedavg import FedAvg
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_fl.faults.validation import ConfigError
from lightning_fl.functional.system import transfer_seconds
from lightning_fl.simulation.hierarchy import Hierarchy, InstitutionAggregation, assign_clients
from lightning_fl.simulation.rounds import RoundTraffic
from tests.callbacks.helpers import make_update
from tests.conftest import run_cli

CKPT = {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint", "init_args": {"save_last": True, "save_top_k": 0}}


def _run_dir(tmp_path: Path, version: int) -> Path:
    return tmp_path / "logs" / "run" / f"version_{version}"


def _weights(tmp_path: Path, version: int) -> dict[str, torch.Tensor]:
    return torch.load(_run_dir(tmp_path, version) / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


def _scalars(tmp_path: Path, version: int, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(_run_dir(tmp_path, version)), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _hierarchy(num_institutions=2, local_rounds=2, **extra):
    return {"num_institutions": num_institutions, "local_rounds": local_rounds, **extra}


def test_two_single_client_institutions_equal_flat_fedavg(tiny, tmp_path):
    two_clients = {"data.init_args.num_clients": 2, "model.clients_per_round": 2, "trainer.max_epochs": 3}
    assert run_cli("fit", "--config", str(tiny(**two_clients))) == 0
    hierarchical = tiny(**two_clients, **{"model.hierarchy": _hierarchy(2, 1)})
    assert run_cli("fit", "--config", str(hierarchical)) == 0
    flat, tiered = _weights(tmp_path, 0), _weights(tmp_path, 1)
    for name in flat:
        assert torch.equal(flat[name], tiered[name]), name


def test_sequential_and_vectorized_engines_agree(tiny, tmp_path):
    # Both engines train client k of institution round r on epoch_permutation(seed, t, k, e, n_k, r) for
    # tau_k steps from the same institution model, so the global models may differ only by fp32 rounding:
    # measured 2e-8 here, while reusing round 0's batches in round 1 in one engine moves them by 4e-3.
    # lr 0.01 (the shipped hierarchy configs'): at the tiny config's 0.05, client 0 (inputs of norm ~18)
    # takes steps with lr * lambda_max up to 8 > 2, which amplify rounding ~1000-fold in one institution
    # round; the engines then differ by 6e-5 after these 2 iterations and either engine against itself
    # started one ulp away by up to 2e-5, while float64 runs of the two agree to 1e-15 (docs/performance.md).
    run = {"model.hierarchy": _hierarchy(2, 2), "trainer.max_epochs": 2, "model.optimizer.init_args.lr": 0.01}
    for engine in ("sequential", "vectorized"):
        assert run_cli("fit", "--config", str(tiny(**run, **{"model.engine": engine}))) == 0
    sequential, vectorized = _weights(tmp_path, 0), _weights(tmp_path, 1)
    for name in sequential:
        torch.testing.assert_close(vectorized[name], sequential[name], atol=1e-5, rtol=0,
                                   msg=lambda default, name=name: f"{name}: {default}")


class _Recorder(FedAvg):
    """FedAvg that records the order of local trainings and server aggregations."""

    events: list[tuple] = []

    def on_local_train_start(self, ctx):
        for client in ctx.client_ids.tolist():
            _Recorder.events.append(("local", ctx.round_idx, ctx.sub_round, client))

    def aggregate(self, round_idx, global_w, update, federation, log):
        _Recorder.events.append(("server", round_idx, tuple(update.client_ids.tolist())))
        return super().aggregate(round_idx, global_w, update, federation, log)


def test_institution_rounds_happen_before_each_server_aggregation(tiny):
    _Recorder.events = []
    config = tiny(**{"model.hierarchy": _hierarchy(2, 3), "trainer.max_epochs": 2, "model.engine": "sequential",
                     "trainer.callbacks": [{"class_path": "tests.hierarchy.test_hierarchy._Recorder"}]})
    assert run_cli("fit", "--config", str(config)) == 0
    events = _Recorder.events
    # 6 clients in 2 contiguous institutions ([0,1,2], [3,4,5]); tau_i = 3 -> 18 local trainings per round.
    expected = []
    for t in range(2):
        for members in ([0, 1, 2], [3, 4, 5]):
            expected += [("local", t, r, k) for r in range(3) for k in members]
        expected.append(("server", t, (0, 1)))
    assert events == expected


def test_communication_bytes_follow_the_parameter_count(tiny, tmp_path):
    comm = {"class_path": "lightning_fl.callbacks.CommunicationCost"}
    flat = tiny(**{"trainer.callbacks": [comm, CKPT]})
    assert run_cli("fit", "--config", str(flat)) == 0
    model_bytes = (60 * 10 + 10) * 4  # LogisticRegression(60, 10) in fp32
    assert _scalars(tmp_path, 0, "comm/client_up_bytes")[0] == (1, 3 * model_bytes)  # K = 3 clients
    assert _scalars(tmp_path, 0, "comm/total_bytes")[-1] == (4, 4 * 2 * 3 * model_bytes)
    tiered = tiny(**{"trainer.callbacks": [comm, CKPT], "model.hierarchy": _hierarchy(2, 2)})
    assert run_cli("fit", "--config", str(tiered)) == 0
    assert _scalars(tmp_path, 1, "comm/client_up_bytes")[0] == (1, 6 * 2 * model_bytes)  # N clients x tau_i
    assert _scalars(tmp_path, 1, "comm/institution_down_bytes")[0] == (1, 2 * model_bytes)
    per_round = 2 * (12 + 2) * model_bytes
    assert _scalars(tmp_path, 1, "comm/total_bytes")[-1] == (4, 4 * per_round)


def test_scaffold_traffic_counts_its_control_variates(tiny, tmp_path):
    comm = {"class_path": "lightning_fl.callbacks.CommunicationCost"}
    scaffold = {"class_path": "lightning_fl.callbacks.Scaffold"}
    config = tiny(**{"trainer.callbacks": [scaffold, comm], "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config)) == 0
    model_bytes = (60 * 10 + 10) * 4  # LogisticRegression(60, 10) in fp32
    # K = 3 clients; each receives w^t and c and sends y_k and c_k+ - c_k: 3 x 2 x 2440 = 14640 bytes each way.
    assert _scalars(tmp_path, 0, "comm/client_down_bytes") == [(1, 14640.0), (2, 14640.0)]
    assert _scalars(tmp_path, 0, "comm/client_up_bytes") == [(1, 14640.0), (2, 14640.0)]
    assert _scalars(tmp_path, 0, "comm/total_bytes")[-1] == (2, 2 * 2 * 3 * 2 * model_bytes)  # rounds x ways x K x 2


def test_network_time_model_by_hand():
    # 1 MB over 8 Mbit/s = 1 s, plus 100 ms latency.
    assert transfer_seconds(1_000_000, 8.0, 100.0) == pytest.approx(1.1)
    traffic = RoundTraffic(1_000_000, {"client": 4, "institution": 2}, [[0.5, 0.5], [2.0, 1.0]])
    # institution 0: 2 x (0.5 + 2 x 1.1) = 5.4; institution 1: (2 + 2.2) + (1 + 2.2) = 7.4; + 2 x 0.5 s uplink.
    assert estimate_round_seconds(traffic, (8.0, 100.0), (16.0, 0.0)) == pytest.approx(7.4 + 1.0)
    # Two model-sized vectors down, one up (one message each way): 2 MB at 8 Mbit/s = 2 s + 0.1 s down,
    # 1.1 s up, so one flat round of 0.5 s compute takes 0.5 + 2.1 + 1.1.
    flat = RoundTraffic(1_000_000, {"client": 3}, [[0.5]], {"client": (2, 1)})
    assert flat.transfer_bytes("client") == (2_000_000, 1_000_000)
    assert estimate_round_seconds(flat, (8.0, 100.0), None) == pytest.approx(3.7)


def test_tempo_runs_and_resumes_exactly(tiny, tmp_path):
    tempo = {"class_path": "lightning_fl.callbacks.Tempo", "init_args": {"initial_epochs": 2}}
    settings = {"model.hierarchy": _hierarchy(3, 2), "trainer.callbacks": [tempo, CKPT]}
    assert run_cli("fit", "--config", str(tiny(**settings))) == 0
    epochs = [_scalars(tmp_path, 0, f"tempo/epochs_{m}") for m in range(3)]
    distances = [_scalars(tmp_path, 0, f"tempo/distance_{m}") for m in range(3)]
    for r in range(4):
        d = torch.tensor([distances[m][r][1] for m in range(3)])
        e = [epochs[m][r][1] for m in range(3)]
        # c = 2: the closest institution gets 2c = 4 epochs, the farthest c/2 = 1.
        assert e[int(d.argmin())] == 4 and e[int(d.argmax())] == 1
    assert run_cli("fit", "--config", str(tiny(**settings, **{"trainer.max_epochs": 2}))) == 0
    half = _run_dir(tmp_path, 1) / "checkpoints" / "last.ckpt"
    assert run_cli("fit", "--config", str(tiny(**settings)), "--ckpt_path", str(half)) == 0
    full, resumed = _weights(tmp_path, 0), _weights(tmp_path, 1)  # resumed in its run directory
    for name in full:
        assert torch.equal(full[name], resumed[name]), name


@pytest.mark.parametrize(("hierarchy", "message"), [
    (_hierarchy(2, 0), "hierarchy.local_rounds must be an integer >= 1; got 0"),
    (_hierarchy(9, 1), "hierarchy.num_institutions must be between 1 and 6 (the number of clients); got 9"),
    ({"assignment": "explicit", "institutions": [[0, 1], []]}, "hierarchy institution 1 has no clients"),
    ({"assignment": "explicit", "institutions": [[0, 1], [1, 2]]}, "assigns client 1 more than once"),
    ({"assignment": "spread"}, "hierarchy.assignment must be one of contiguous, round_robin, explicit"),
])
def test_bad_hierarchy_fails_with_one_line(tiny, capsys, hierarchy, message):
    assert run_cli("fit", "--config", str(tiny(**{"model.hierarchy": hierarchy}))) == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_tempo_needs_a_hierarchy_and_positive_c(tiny, capsys):
    assert run_cli("fit", "--config", str(tiny(**{"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Tempo"}]}))) == 2
    assert "Tempo needs model.hierarchy" in capsys.readouterr().err
    bad_c = {"class_path": "lightning_fl.callbacks.Tempo", "init_args": {"initial_epochs": 0}}
    config = tiny(**{"trainer.callbacks": [bad_c], "model.hierarchy": _hierarchy()})
    assert run_cli("fit", "--config", str(config)) == 2
    assert "initial_epochs must be an integer >= 1; got 0" in capsys.readouterr().err


def test_round_robin_and_explicit_assignment():
    assert [m.tolist() for m in assign_clients(5, 2, "round_robin")] == [[0, 2, 4], [1, 3]]
    assert [m.tolist() for m in assign_clients(5, 2, "contiguous")] == [[0, 1, 2], [3, 4]]
    assert [m.tolist() for m in assign_clients(5, 2, "explicit", [[4, 0], [1]])] == [[0, 4], [1]]
    with pytest.raises(ConfigError, match="between 0 and 4"):
        assign_clients(5, 2, "explicit", [[5], [1]])


def _fedadp_reference(w, ys, n, prev, m):
    """FedAdp written out (docs/algorithms.md, FedAdp): returns (aggregate, smoothed angles)."""
    g_k = [[a - b for a, b in zip(w, y)] for y in ys]
    p = [x / sum(n) for x in n]
    g = [sum(p[k] * g_k[k][i] for k in range(len(ys))) for i in range(len(w))]

    def norm(v):
        return math.sqrt(sum(x * x for x in v))

    theta = [math.acos(sum(a * b for a, b in zip(gk, g)) / (norm(gk) * norm(g))) for gk in g_k]
    th = [t if mk == 1 else ((mk - 1) * pk + t) / mk for t, pk, mk in zip(theta, prev, m)]
    raw = [nk * math.exp(5 * (1 - math.exp(-math.exp(-5 * (a - 1))))) for nk, a in zip(n, th)]
    psi = [r / sum(raw) for r in raw]
    return [sum(psi[k] * ys[k][i] for k in range(len(ys))) for i in range(len(w))], th


def test_institution_fedadp_by_hand_over_two_institution_rounds():
    agg = InstitutionAggregation("fedadp")
    agg.bind_client_state(2)
    # Round 1 (m = 1, 1): from w = 0, y = [1, 0] (n = 1) and [0, 1] (n = 3): g_k = -y_k, g = -[0.25, 0.75],
    # cos = 1/sqrt(10) and 3/sqrt(10); the client closer to g gets more than its 3/4 share.
    w0, ys1 = [0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]]
    expected1, th1 = _fedadp_reference(w0, ys1, [1, 3], [0.0, 0.0], [1, 1])
    got1 = agg.combine(torch.tensor(w0), make_update(0, [4, 7], ys1, num_samples=[1, 3], participation=[1, 1]))
    torch.testing.assert_close(got1, torch.tensor(expected1))
    assert th1[0] == pytest.approx(math.acos(1 / math.sqrt(10))) and got1[1] > 0.75
    # Round 2 (m = 2, 2), from the institution model: the angles are averaged with the stored ones.
    w1 = got1.tolist()
    ys2 = [[w1[0] + 1.0, w1[1] + 1.0], [w1[0] + 2.0, w1[1] - 1.0]]
    expected2, th2 = _fedadp_reference(w1, ys2, [1, 3], th1, [2, 2])
    got2 = agg.combine(got1, make_update(0, [4, 7], ys2, num_samples=[1, 3], participation=[2, 2]))
    torch.testing.assert_close(got2, torch.tensor(expected2))
    torch.testing.assert_close(agg.smoothed_angle.gather(torch.tensor([4, 7])), torch.tensor(th2))
    # fedavg (the default): |D_n|-weighted, 1/4 [1, 0] + 3/4 [0, 1].
    fedavg = InstitutionAggregation().combine(torch.zeros(2), make_update(0, [4, 7], ys1, num_samples=[1, 3]))
    torch.testing.assert_close(fedavg, torch.tensor([0.25, 0.75]))


def test_institution_aggregation_is_checked_and_must_match_on_resume():
    with pytest.raises(ConfigError) as err:
        Hierarchy(2, institution_aggregation="median")
    assert str(err.value) == "hierarchy.institution_aggregation must be one of fedavg, fedadp; got 'median'"
    saved, resumed = Hierarchy(2, local_rounds=1), Hierarchy(2, local_rounds=1, institution_aggregation="fedadp")
    saved.setup(4, 1)
    resumed.setup(4, 1)
    with pytest.raises(ConfigError, match=r"institution_aggregation differs from the checkpoint's \(fedavg\)"):
        resumed.load_state_dict(saved.state_dict())
