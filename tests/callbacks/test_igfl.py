"""IGFL-C / IGFL-S / IGFL callbacks (SPEC section 4): hand-computed math, engines, resume, the CLI."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from lightning_fl.callbacks.fedavg import FedAvg
from lightning_fl.callbacks.igfl import IGFL
from lightning_fl.callbacks.igfl_client import IGFLClient
from lightning_fl.callbacks.igfl_server import IGFLServer

from lightning_fl.engines import (
    ENGINES,
    ClientHookSet,
    LocalTrainingContext,
    LocalTrainingPlan,
    SequentialEngine,
)
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import LogisticRegression
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData
from lightning_fl.state.flat_state import FlatStateLayout
from tests.callbacks.helpers import (
    RecordingLogger,
    aggregate,
    assert_cli_exits_2,
    events,
    fake_federation,
    load_last,
    namespace_update,
    prepared,
    run_4_and_2_plus_2,
    shipped_config,
    small_federated_data,
    vector_layout,
    with_checkpoint,
)
from tests.conftest import reference_epoch_order, run_cli

F64 = torch.float64
FED = fake_federation(vector_layout(2))


def update(round_idx, ids, weights, samples=None):
    return namespace_update(ids, weights, samples, round_idx=round_idx)


def bound(cb, layout=FED.layout):
    """``cb`` with its client state bound to ``layout`` (as the loop does at set-up)."""
    cb.bind_client_state(layout.numel)
    return cb


def run_round(cb, round_idx, global_w, update_, log=None):
    """``cb.aggregate`` for round ``round_idx`` on the two-entry federation ``FED``."""
    return aggregate(cb, FED, round_idx, global_w, update_, log)


def prev_deltas(cb):
    """Client id to its stored ``dW_k_prev`` (only the clients that have one)."""
    state = cb.prev_delta.state_dict()
    return {k: state["rows"][i] for i, k in enumerate(state["ids"].tolist())}


def set_prev_delta(cb, client, delta):
    cb.prev_delta.scatter(torch.tensor([client]), delta.unsqueeze(0))


def softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def add(w, *vs, scale=1.0):
    out = list(w)
    for v in vs:
        out = [o + scale * x for o, x in zip(out, v)]
    return out


W0 = [1.0, -1.0]
# Cohort deltas D = y - w^0 = [[1, 0], [0, 2]].
Y0 = [[2.0, -1.0], [1.0, 1.0]]
D0 = [[1.0, 0.0], [0.0, 2.0]]


# ------------------------------------------------------------------------------- IGFL-S by hand
def test_self_attention_by_hand():
    # scores D D^T = [[1, 0], [0, 4]]; rows: alpha_0 = softmax(1, 0), alpha_1 = softmax(0, 4)
    # w^1 = w^0 + (1/K) sum_i sum_j alpha_ij D_j
    a0, a1 = softmax([1.0, 0.0]), softmax([0.0, 4.0])
    col = [(a0[j] + a1[j]) / 2 for j in range(2)]
    expected = add(W0, *[[col[j] * x for x in D0[j]] for j in range(2)])
    log = RecordingLogger()
    cb = prepared(IGFLServer(attention="self"), FED)
    got = run_round(cb, 0, torch.tensor(W0, dtype=F64), update(0, [3, 5], Y0), log)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cb.last_attention, torch.tensor([a0, a1], dtype=F64), rtol=1e-12, atol=1e-12)
    # The attention matrix is logged as an image, the effective weights as a histogram (step t + 1).
    assert log.figures == [("server/attention_figure", 1)]
    assert log.histograms[0][0] == "server/weights" and log.histograms[0][2] == 1
    torch.testing.assert_close(log.histograms[0][1].double(), torch.tensor(col, dtype=F64), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("similarity", "temperature"), [("dot", 1.0), ("scaled_dot", 1.0), ("cosine", 0.5),
                                                          ("dot", 4.0)])
def test_global_attention_by_hand(similarity, temperature):
    q = [0.5, 1.0]  # mean delta
    if similarity == "dot":
        s = [dot(q, d) for d in D0]  # [0.5, 2]
    elif similarity == "scaled_dot":
        s = [dot(q, d) / math.sqrt(2) for d in D0]
    else:
        s = [dot(q, d) / math.sqrt(dot(q, q) * dot(d, d)) for d in D0]  # [1/sqrt(5), 2/sqrt(5)]
    alpha = softmax([x / temperature for x in s])
    expected = add(W0, *[[alpha[j] * x for x in D0[j]] for j in range(2)])
    cb = prepared(IGFLServer(attention="global", similarity=similarity, temperature=temperature), FED)
    got = run_round(cb, 0, torch.tensor(W0, dtype=F64), update(0, [3, 5], Y0))
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)


def test_time_attention_over_two_rounds_with_a_first_timer():
    cb = prepared(IGFLServer(attention="time"), FED)
    log = RecordingLogger()
    # Round 0: nobody has a previous delta: scores [0, 0] -> alpha uniform -> w^1 = w^0 + mean(D).
    w1 = run_round(cb, 0, torch.tensor(W0, dtype=F64), update(0, [3, 5], Y0), log)
    expected1 = add(W0, [0.5, 1.0])
    torch.testing.assert_close(w1, torch.tensor(expected1, dtype=F64))
    # Round 1: cohort {3, 7}; client 3's previous delta is [1, 0], client 7 is new (zeros).
    d1 = [[2.0, 1.0], [-1.0, 0.5]]
    y1 = [add(expected1, d) for d in d1]
    s = [dot([1.0, 0.0], d1[0]), 0.0]  # [2, 0]
    alpha = softmax(s)
    expected2 = add(expected1, *[[alpha[j] * x for x in d1[j]] for j in range(2)])
    w2 = run_round(cb, 1, w1, update(1, [3, 7], y1), log)
    torch.testing.assert_close(w2, torch.tensor(expected2, dtype=F64), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cb.last_attention, torch.tensor(alpha, dtype=F64), rtol=1e-12, atol=1e-12)
    # The store now holds each client's latest delta y_k - w^t (in its fp32 rows).
    torch.testing.assert_close(prev_deltas(cb)[3].double(), torch.tensor(d1[0], dtype=F64))
    torch.testing.assert_close(prev_deltas(cb)[5].double(), torch.tensor(D0[1], dtype=F64))
    torch.testing.assert_close(prev_deltas(cb)[7].double(), torch.tensor(d1[1], dtype=F64))
    assert log.figures == [("server/attention_figure", 1), ("server/attention_figure", 2)]


@pytest.mark.parametrize("callback_class", [IGFLServer, IGFL])
def test_time_matrix_reading_over_two_rounds(callback_class):
    cb = prepared(callback_class(attention="time", time_reading="matrix", temperature=2.0), FED)
    log = RecordingLogger()
    # Round 0: every dW_prev is 0, so every row is uniform: w^1 = w^0 + mean(D) = W0 + [0.5, 1].
    w1 = run_round(cb, 0, torch.tensor(W0, dtype=F64), update(0, [3, 5], Y0), log)
    expected1 = add(W0, [0.5, 1.0])
    torch.testing.assert_close(w1, torch.tensor(expected1, dtype=F64))
    # Round 1: cohort {3, 7}; q_3 = dW_3_prev = D0[0] = [1, 0], q_7 = 0 (new). With d1 = [[2, 1], [-1, 0.5]]:
    # row 3 = softmax([1*2 + 0*1, 1*(-1) + 0*0.5] / 2) = softmax([1, -0.5]); row 7 = [0.5, 0.5].
    d1 = [[2.0, 1.0], [-1.0, 0.5]]
    rows = [softmax([1.0, -0.5]), [0.5, 0.5]]
    col = [(rows[0][j] + rows[1][j]) / 2 for j in range(2)]  # (1/K) sum_i A_ij
    expected2 = add(expected1, *[[col[j] * x for x in d1[j]] for j in range(2)])
    w2 = run_round(cb, 1, w1, update(1, [3, 7], [add(expected1, d) for d in d1]), log)
    torch.testing.assert_close(w2, torch.tensor(expected2, dtype=F64), rtol=1e-12, atol=1e-12)
    # The figure shows the K x K matrix; the weights histogram its column means.
    torch.testing.assert_close(cb.last_attention, torch.tensor(rows, dtype=F64), rtol=1e-12, atol=1e-12)
    assert log.figures == [("server/attention_figure", 1), ("server/attention_figure", 2)]
    torch.testing.assert_close(log.histograms[-1][1].double(), torch.tensor(col, dtype=F64), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("attention", ["self", "global", "time"])
def test_degenerate_cohorts(attention):
    w0 = torch.tensor(W0, dtype=F64)
    # All-equal deltas: every score is equal, attention uniform, w^1 = w^0 + D.
    same = run_round(prepared(IGFLServer(attention=attention), FED), 0, w0, update(0, [0, 1, 2], [Y0[0]] * 3))
    torch.testing.assert_close(same, torch.tensor(Y0[0], dtype=F64))
    # One client: attention [[1]] / [1]: w^1 = y.
    cb = prepared(IGFLServer(attention=attention), FED)
    one = run_round(cb, 0, w0, update(0, [4], [Y0[1]]))
    torch.testing.assert_close(one, torch.tensor(Y0[1], dtype=F64))
    assert cb.last_attention.reshape(-1).tolist() == [1.0]
    # Huge deltas: a sharp but finite attention.
    big = run_round(prepared(IGFLServer(attention=attention), FED), 0, w0,
                    update(0, [0, 1], [[1e4, 0.0], [0.0, 2e4]]))
    assert torch.isfinite(big).all()


def test_server_alone_keeps_client_deltas_only_in_time_mode():
    for attention, kept in (("self", False), ("global", False), ("time", True)):
        cb = prepared(IGFLServer(attention=attention), FED)
        w1 = run_round(cb, 0, torch.tensor(W0, dtype=F64), update(0, [3, 5], Y0))
        assert bool(prev_deltas(cb)) is kept
        torch.testing.assert_close(cb.server_delta, w1 - torch.tensor(W0, dtype=F64))
    assert IGFL(attention="self").keeps_client_deltas


# ------------------------------------------------------------------------ IGFL-C through the engine
def _data(sizes=(7, 5, 6), features=4, classes=3) -> FederatedData:
    return small_federated_data(sizes, 1, features, classes)


def _reference_igfl_client(w, b, x, y, *, lr, batch, seed, round_idx, client, prev, server, cohort):
    """Algorithm 2 written out: D_I = -lr grad; D_G = (1/K)(D_I - prev/T) + server/T; w += D_I + D_G."""
    steps = math.ceil(len(y) / batch)  # one local epoch
    prev_w, prev_b = prev
    server_w, server_b = server
    order = reference_epoch_order(seed, round_idx, client, 0, len(y))
    for start in range(0, len(y), batch):
        idx = order[start : start + batch]
        xb, yb = x[idx], y[idx]
        probs = torch.softmax(xb @ w.T + b, dim=1)
        grad_logits = (probs - F.one_hot(yb, probs.shape[1]).float()) / len(yb)
        d_w, d_b = -lr * (grad_logits.T @ xb), -lr * grad_logits.sum(0)
        w = w + d_w + (d_w - prev_w / steps) / cohort + server_w / steps
        b = b + d_b + (d_b - prev_b / steps) / cohort + server_b / steps
    return torch.cat([w.reshape(-1), b])


@pytest.mark.parametrize("callback_class", [IGFLClient, IGFL])
def test_client_correction_matches_algorithm_2_by_hand(callback_class):
    torch.manual_seed(0)
    model = LogisticRegression(4, 3)
    data = _data()
    layout = FlatStateLayout(model.state_dict())  # linear.weight (3, 4) then linear.bias (3,)
    plan = LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=0.2), local_epochs=1, batch_size=3, seed=5, lr=0.2)
    engine = SequentialEngine(plan)
    engine.setup(model, data, ClientStateStore(3))
    cb = bound(callback_class(), layout)  # the hooks read the layout from the engine's context
    gen = torch.Generator().manual_seed(2)
    prev0 = torch.randn(layout.numel, generator=gen)
    server = torch.randn(layout.numel, generator=gen)
    set_prev_delta(cb, 0, prev0.clone())  # client 0 participated before; client 2 is new (zeros)
    cb.server_delta = server.clone()
    ids = torch.tensor([0, 2])
    update_ = engine.train_cohort(3, ids, torch.tensor([2, 1]), ClientHookSet([cb]))

    w0, b0 = model.linear.weight.detach().clone(), model.linear.bias.detach().clone()

    def split(v):
        return v[:12].view(3, 4), v[12:]

    expected = []
    for client, prev in ((0, prev0), (2, torch.zeros(layout.numel))):
        x, y = data.client_train(client)
        expected.append(_reference_igfl_client(w0, b0, x, y, lr=0.2, batch=3, seed=5, round_idx=3, client=client,
                                               prev=split(prev), server=split(server), cohort=2))
    torch.testing.assert_close(update_.weights, torch.stack(expected), rtol=1e-5, atol=1e-6)
    # tau_k = ceil([7, 6] / 3) = [3, 2]: T differs per client.
    assert update_.num_steps.tolist() == [3, 2]
    # Without the hooks (FedAvg) the clients end elsewhere.
    plain = engine.train_cohort(3, ids, torch.tensor([2, 1]), ClientHookSet([FedAvg()]))
    assert not torch.allclose(plain.weights, update_.weights)


def test_client_hooks_on_a_stacked_chunk_equal_one_client_at_a_time():
    """The hooks only use (C, ...) tensors: a chunk of C = 2 gives what two C = 1 calls give."""
    layout = FlatStateLayout(LogisticRegression(4, 3).state_dict())
    cb = bound(IGFLClient(), layout)
    gen = torch.Generator().manual_seed(3)
    set_prev_delta(cb, 4, torch.randn(layout.numel, generator=gen))
    cb.server_delta = torch.randn(layout.numel, generator=gen)
    global_params = {"linear.weight": torch.zeros(3, 4), "linear.bias": torch.zeros(3)}
    params = {n: torch.randn(2, *p.shape, generator=gen) for n, p in global_params.items()}
    delta = {n: torch.randn(2, *p.shape, generator=gen) for n, p in global_params.items()}

    def run(rows, ids, steps):
        ctx = LocalTrainingContext(round_idx=1, client_ids=torch.tensor(ids), cohort_size=5,
                                   num_steps=torch.tensor(steps), global_params=global_params, lr=0.1, layout=layout)
        cb.on_local_train_start(ctx)
        out = {n: v[rows].clone() for n, v in params.items()}
        cb.after_local_step(ctx, out, {n: v[rows] for n, v in delta.items()})
        return out

    chunk = run(slice(0, 2), [4, 6], [3, 2])
    first, second = run(slice(0, 1), [4], [3]), run(slice(1, 2), [6], [2])
    for name in chunk:
        torch.testing.assert_close(chunk[name], torch.cat([first[name], second[name]]), rtol=0, atol=0)
    # By hand, K = 5: client 4 (T = 3) gets (D_I - prev / 3) / 5 + dW_ps / 3; client 6 is new (prev = 0, T = 2).
    prev = layout.unflatten(prev_deltas(cb)[4])["linear.bias"]
    server = layout.unflatten(cb.server_delta)["linear.bias"]
    d_i = delta["linear.bias"]
    torch.testing.assert_close(chunk["linear.bias"][0], params["linear.bias"][0] + (d_i[0] - prev / 3) / 5 + server / 3)
    torch.testing.assert_close(chunk["linear.bias"][1], params["linear.bias"][1] + d_i[1] / 5 + server / 2)


@pytest.mark.skipif("vectorized" not in ENGINES, reason="the vectorized engine is not available yet")
def test_sequential_and_vectorized_engines_agree():
    torch.manual_seed(0)
    model = LogisticRegression(4, 3)
    data = _data()
    layout = FlatStateLayout(model.state_dict())
    plan = LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=0.2), local_epochs=2, batch_size=3, seed=5, lr=0.2)
    results = []
    for name in ("sequential", "vectorized"):
        engine = ENGINES[name](plan)
        engine.setup(model, data, ClientStateStore(3))
        cb = bound(IGFLClient(), layout)
        set_prev_delta(cb, 1, torch.linspace(-1, 1, layout.numel))
        cb.server_delta = torch.linspace(0.5, -0.5, layout.numel)
        results.append(engine.train_cohort(2, torch.tensor([0, 1, 2]), torch.ones(3, dtype=torch.long),
                                           ClientHookSet([cb])).weights)
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-6)


def test_igfl_client_aggregates_like_fedavg_and_records_state():
    cb = prepared(IGFLClient(), FED)
    w0 = torch.tensor(W0, dtype=F64)
    w1 = run_round(cb, 0, w0, update(0, [3, 5], Y0, samples=[10, 30]))
    expected = add([0.25 * a + 0.75 * b for a, b in zip(*Y0)])
    torch.testing.assert_close(w1, torch.tensor(expected, dtype=F64))
    torch.testing.assert_close(cb.server_delta, w1 - w0)  # dW_ps = w^1 - w^0
    torch.testing.assert_close(prev_deltas(cb)[3].double(), torch.tensor(D0[0], dtype=F64))
    torch.testing.assert_close(prev_deltas(cb)[5].double(), torch.tensor(D0[1], dtype=F64))


def test_igfl_shares_one_store_between_server_and_clients():
    layout = FlatStateLayout(LogisticRegression(1, 1).state_dict())  # d = 2
    federation = fake_federation(layout)
    cb = prepared(IGFL(attention="self"), federation)
    w0 = torch.tensor(W0)
    w1 = aggregate(cb, federation, 0, w0, update(0, [3, 5], Y0))
    ctx = LocalTrainingContext(round_idx=1, client_ids=torch.tensor([5, 9]), cohort_size=2,
                               num_steps=torch.tensor([1, 1]),
                               global_params={"linear.weight": torch.zeros(1, 1), "linear.bias": torch.zeros(1)},
                               lr=0.1, layout=layout)
    cb.on_local_train_start(ctx)
    # Cached per client: the step-independent part of D_G, -dW_k_prev / (K T) + dW_ps / T, with K = 2, T = 1.
    # Client 5's stored delta is D0[1] = [0, 2] (weight, bias); client 9 is new (zeros); dW_ps = w^1 - w^0,
    # the attention step (not FedAvg's).
    constant = ctx.cache["igfl/constant"]
    ps = (w1 - w0).tolist()
    assert constant["linear.weight"].reshape(-1).tolist() == pytest.approx([ps[0], ps[0]])
    assert constant["linear.bias"].reshape(-1).tolist() == pytest.approx([-2.0 / 2 + ps[1], ps[1]])


@pytest.mark.parametrize("callback_class", [IGFLClient, IGFLServer, IGFL])
def test_state_dict_round_trip_continues_identically(callback_class):
    kwargs = {} if callback_class is IGFLClient else {"attention": "time"}
    cb = prepared(callback_class(**kwargs), FED)
    w1 = run_round(cb, 0, torch.tensor(W0, dtype=F64), update(0, [3, 5], Y0))
    state = cb.state_dict()
    resumed = prepared(callback_class(**kwargs), FED)
    resumed.load_state_dict(state)
    cb.server_delta.add_(1.0)  # the saved state holds copies
    for client, value in prev_deltas(cb).items():
        set_prev_delta(cb, client, value + 1.0)
    cb.load_state_dict(state)
    y1 = [[3.0, 0.0], [0.0, 4.0], [1.0, 1.0]]
    a = run_round(cb, 1, w1, update(1, [3, 5, 8], y1))
    b = run_round(resumed, 1, w1, update(1, [3, 5, 8], y1))
    assert torch.equal(a, b)
    assert torch.equal(cb.server_delta, resumed.server_delta)
    assert sorted(prev_deltas(cb)) == sorted(prev_deltas(resumed))
    assert all(torch.equal(prev_deltas(cb)[k], prev_deltas(resumed)[k]) for k in prev_deltas(cb))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"attention": "cross"}, "attention must be one of self, global, time; got 'cross'"),
    ({"similarity": "l2"}, "similarity must be one of dot, scaled_dot, cosine; got 'l2'"),
    ({"temperature": 0.0}, "temperature must be a finite number > 0; got 0.0"),
    ({"temperature": float("nan")}, "temperature must be a finite number > 0; got nan"),
    ({"attention": "time", "time_reading": "rows"}, "time_reading must be one of cohort, matrix; got 'rows'"),
    ({"time_reading": "matrix"}, "time_reading: matrix needs attention: time; got attention: self"),
])
@pytest.mark.parametrize("callback_class", [IGFLServer, IGFL])
def test_bad_hyperparameters_fail_with_one_line(callback_class, kwargs, message):
    with pytest.raises(ConfigError) as err:
        callback_class(**kwargs)
    assert str(err.value) == message


def test_igfl_client_rejects_unknown_weighting():
    with pytest.raises(ConfigError, match="weighting must be one of samples, uniform; got 'x'"):
        IGFLClient(weighting="x")


# ---------------------------------------------------------------------------------------- CLI
def test_cli_resume_2_plus_2_equals_4_and_logs_attention(tiny, tmp_path):
    class_path = "lightning_fl.callbacks.igfl.IGFL"
    init_args = {"attention": "time", "similarity": "cosine", "figure_every_n_rounds": 2}
    extra = {"trainer.callbacks": with_checkpoint({"class_path": class_path, "init_args": init_args}),
             "trainer.check_val_every_n_epoch": 4}
    a, b = run_4_and_2_plus_2(tiny, tmp_path, **extra)  # asserts identical final weights
    key = class_path.rsplit(".", 1)[1]
    state_a, state_b = a["callbacks"][key], b["callbacks"][key]
    prev_a, prev_b = state_a["clients"]["prev_delta"], state_b["clients"]["prev_delta"]
    assert torch.equal(state_a["server"]["server_delta"], state_b["server"]["server_delta"])
    assert torch.equal(prev_a["ids"], prev_b["ids"]) and len(prev_a["ids"]) > 3
    assert torch.equal(prev_a["rows"], prev_b["rows"])
    logged = events(tmp_path)
    assert [e.step for e in logged.Images("server/attention_figure")] == [1, 3]
    assert [e.step for e in logged.Histograms("server/weights")] == [1, 2, 3, 4]


def test_igfl_client_changes_training_compared_with_fedavg(tiny, tmp_path):
    for cp in ("lightning_fl.callbacks.FedAvg", "lightning_fl.callbacks.igfl_client.IGFLClient"):
        # One round: dW_ps = dW_k_prev = 0, so IGFL-C's step is D_I (1 + 1/K), not FedAvg's D_I.
        config = tiny(**{"trainer.callbacks": with_checkpoint({"class_path": cp}), "trainer.max_epochs": 1})
        assert run_cli("fit", "--config", str(config)) == 0
    fedavg, igfl = load_last(tmp_path, 0)["state_dict"], load_last(tmp_path, 1)["state_dict"]
    assert not torch.allclose(fedavg["model.linear.weight"], igfl["model.linear.weight"])


@pytest.mark.parametrize(("class_path", "init_args", "message"), [
    ("lightning_fl.callbacks.igfl.IGFL", {"attention": "cross"}, "attention must be one of self, global, time; got 'cross'"),
    ("lightning_fl.callbacks.igfl_server.IGFLServer", {"temperature": -1.0}, "temperature must be a finite number > 0; got -1.0"),
])
def test_cli_bad_hyperparameters_exit_2_with_one_line(tiny, capsys, class_path, init_args, message):
    assert_cli_exits_2(tiny, capsys, {"class_path": class_path, "init_args": init_args}, message)




@pytest.mark.parametrize(("name", "expected"), [
    ("igfl", IGFL(attention="self", similarity="dot", temperature=1.0)),
    ("igfl_c", IGFLClient(weighting="samples")),
    ("igfl_s", IGFLServer(attention="time", similarity="dot", temperature=1.0)),
])
def test_shipped_config_instantiates(name, expected):
    _, aggregator = shipped_config(f"{name}_synthetic")
    assert type(aggregator) is type(expected)
    # The declared per-client state (``prev_delta``, formerly inside ``memory``) is not a hyperparameter.
    state = {"prev_delta", "_client_tables"}
    assert {k: v for k, v in vars(aggregator).items() if k not in state} == \
        {k: v for k, v in vars(expected).items() if k not in state}
