"""FedFa / FedFa-mo callbacks (SPEC section 3) against hand-computed numbers, resume and the CLI."""

from __future__ import annotations

import math

import pytest
import torch
from lightning_fl.callbacks.fedfa import FedFa
from lightning_fl.callbacks.fedfa_mo import FedFaMo

from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError
from tests.callbacks.helpers import (
    RecordingLogger,
    aggregate,
    assert_cli_exits_2,
    events,
    fake_federation,
    prepared,
    run_4_and_2_plus_2,
    shipped_config,
    vector_layout,
    with_checkpoint,
)

F64 = torch.float64
FED = fake_federation(vector_layout(2), momentum=0.9)


def fedfa(cls=None, **kwargs):
    """A FedFa (or ``cls``) bound to the two-entry federation ``FED``."""
    return prepared((cls or FedFa)(**kwargs), FED)


def update(round_idx, ids, weights, acc, participation, samples=None, running=None, measured=True) -> CohortUpdate:
    """``acc`` is the trained accuracy (``trained_acc``, absent unless ``measured``); ``running`` the running one."""
    k = len(ids)
    return CohortUpdate(
        round_idx=round_idx, client_ids=torch.tensor(ids), weights=torch.tensor(weights, dtype=F64), int_state={},
        num_samples=torch.tensor(samples if samples is not None else [10] * k),
        num_steps=torch.ones(k, dtype=torch.long),
        train_acc=torch.tensor(running, dtype=F64) if running is not None else torch.full((k,), 0.9, dtype=F64),
        trained_acc=torch.tensor(acc, dtype=F64) if measured else None,
        train_loss=torch.zeros(k, dtype=F64), participation=torch.tensor(participation),
        label_hist=torch.zeros(k, 2, dtype=torch.long),
    )


def norm(xs):
    return [x / sum(xs) for x in xs]


def fedfa_weights_by_hand(acc, freq, alpha, beta):
    a = norm(acc)
    f = norm(freq)
    iacc = norm([-math.log2(x) for x in a])
    i_f = norm([-math.log2(1 - x) for x in f])
    return [alpha * x + beta * y for x, y in zip(iacc, i_f)]


def axpy(weights, vectors):
    return [sum(w * v[i] for w, v in zip(weights, vectors)) for i in range(len(vectors[0]))]


# Round 0: w^0 = [1, -1]; cohort {0, 1}: y = [[2, 0], [0, 2]], train_acc [0.5, 0.25], f = [1, 3].
#   a = [0.5, 0.25] / 0.75 = [2/3, 1/3]; Iacc = [-log2(2/3), -log2(1/3)] = [0.58496, 1.58496]
#   -> / 2.16993 = [0.26958, 0.73042]
#   f' = [1/4, 3/4]; If = [-log2(3/4), -log2(1/4)] = [0.41504, 2] -> / 2.41504 = [0.17186, 0.82814]
#   weight = 0.5 Iacc + 0.5 If = [0.22072, 0.77928]
W0 = [1.0, -1.0]
R0 = dict(ids=[0, 1], weights=[[2.0, 0.0], [0.0, 2.0]], acc=[0.5, 0.25], participation=[1, 3])
# Round 1: cohort {0, 2} (client 2 seen for the first time): acc [0.5, 0.5], f = [2, 1].
#   a = [1/2, 1/2] -> Iacc = [1, 1] -> [1/2, 1/2]; f' = [2/3, 1/3]; If = [log2 3, log2(3/2)] normalised.
R1 = dict(ids=[0, 2], weights=[[1.0, 1.0], [-1.0, 3.0]], acc=[0.5, 0.5], participation=[2, 1])


def test_hand_numbers_of_the_example():
    w = fedfa_weights_by_hand([0.5, 0.25], [1, 3], 0.5, 0.5)
    assert w == pytest.approx([0.220716, 0.779284], abs=1e-6)


@pytest.mark.parametrize("form", ["heavy_ball", "ema", "arxiv"])
@pytest.mark.parametrize("period", [1, 2])
def test_two_rounds_by_hand(form, period):
    gamma, eta = 0.5, 0.8
    cb = fedfa(alpha=0.5, beta=0.5, server_momentum=gamma, server_lr=eta, period=period, momentum_form=form)
    log = RecordingLogger()

    def momentum_update(m, g):
        return [gamma * mi + (gi if form == "heavy_ball" else (1 - gamma) * gi) for mi, gi in zip(m, g)]

    w, m = W0, [0.0, 0.0]
    for t, r in enumerate((R0, R1)):
        agg = axpy(fedfa_weights_by_hand(r["acc"], r["participation"], 0.5, 0.5), r["weights"])
        g = [wi - ai for wi, ai in zip(w, agg)]  # pseudo-gradient w^t - w_agg
        m = momentum_update(m, g)
        base = agg if form == "arxiv" else w  # arXiv eqs. 6-7 apply the momentum at the aggregate
        expected = [bi - eta * mi for bi, mi in zip(base, m)] if (t + 1) % period == 0 else agg
        got = aggregate(cb, FED, t, torch.tensor(w, dtype=F64), update(t, **r), log)
        torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(cb.momentum, torch.tensor(m, dtype=F64), rtol=1e-12, atol=1e-12)
        assert log.scalars[-1] == ({"server/momentum_norm": pytest.approx(math.hypot(*m), rel=1e-6)}, t + 1)
        w = expected


def test_train_acc_reading_picks_the_trained_or_the_running_accuracy():
    r = {**R0, "acc": [0.5, 0.25]}
    trained = fedfa(server_momentum=0.0)
    running = fedfa(server_momentum=0.0, train_acc="running")
    assert trained.requires_trained_accuracy and not running.requires_trained_accuracy
    assert not fedfa(FedFaMo).requires_trained_accuracy  # FedAvg weights: no accuracy, no extra pass
    got = aggregate(trained, FED, 0, torch.tensor(W0, dtype=F64), update(0, **r, running=[0.25, 0.5]))
    want = axpy(fedfa_weights_by_hand([0.5, 0.25], R0["participation"], 0.5, 0.5), R0["weights"])
    torch.testing.assert_close(got, torch.tensor(want, dtype=F64), rtol=1e-14, atol=1e-14)
    got = aggregate(running, FED, 0, torch.tensor(W0, dtype=F64), update(0, **r, running=[0.25, 0.5], measured=False))
    want = axpy(fedfa_weights_by_hand([0.25, 0.5], R0["participation"], 0.5, 0.5), R0["weights"])
    torch.testing.assert_close(got, torch.tensor(want, dtype=F64), rtol=1e-14, atol=1e-14)
    with pytest.raises(RuntimeError, match="needs CohortUpdate.trained_acc"):
        aggregate(fedfa(), FED, 0, torch.tensor(W0, dtype=F64), update(0, **R0, measured=False))


def test_per_period_records_the_period_start_even_after_an_empty_round():
    # b = 3, heavy_ball, gamma_s = 0.5. Round 0 is empty (no aggregation), so w^1 = w^0 = W0 and the period's
    # first aggregation (t = 1) records W0 as w^{t+1-b}. t = 1: plain aggregate; t = 2: g = W0 - w_agg, m = g,
    # w^3 = w^2 - m. t = 3 opens the next period: its start is w^3.
    cb = fedfa(server_momentum=0.5, period=3, period_mode="per_period")
    w1 = aggregate(cb, FED, 1, torch.tensor(W0, dtype=F64), update(1, **R0))
    agg1 = axpy(fedfa_weights_by_hand(R0["acc"], R0["participation"], 0.5, 0.5), R0["weights"])
    torch.testing.assert_close(w1, torch.tensor(agg1, dtype=F64), rtol=1e-14, atol=1e-14)
    assert torch.equal(cb.period_start, torch.tensor(W0, dtype=F64)) and torch.equal(cb.momentum, torch.zeros(2, dtype=F64))
    w2 = aggregate(cb, FED, 2, w1, update(2, **R1))
    agg2 = axpy(fedfa_weights_by_hand(R1["acc"], R1["participation"], 0.5, 0.5), R1["weights"])
    m = [s - a for s, a in zip(W0, agg2)]
    torch.testing.assert_close(cb.momentum, torch.tensor(m, dtype=F64), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w2, torch.tensor([w - mi for w, mi in zip(agg1, m)], dtype=F64), rtol=1e-12, atol=1e-12)
    aggregate(cb, FED, 3, w2, update(3, **R0))
    assert torch.equal(cb.period_start, w2) and cb.period_start_round == 3


def test_no_momentum_is_exactly_weighted_average():
    cb = fedfa(alpha=0.3, beta=0.7, server_momentum=0.0)
    got = aggregate(cb, FED, 0, torch.tensor(W0, dtype=F64), update(0, **R0))
    expected = axpy(fedfa_weights_by_hand(R0["acc"], R0["participation"], 0.3, 0.7), R0["weights"])
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-14, atol=1e-14)


def test_logs_weights_histogram_and_figure_with_round_numbers():
    cb = fedfa(figure_every_n_rounds=2)
    log = RecordingLogger()
    for t in range(3):
        aggregate(cb, FED, t, torch.tensor(W0, dtype=F64), update(t, **R0), log)
    assert [(tag, step) for tag, _, step in log.histograms] == [("server/weights", 1), ("server/weights", 2),
                                                                 ("server/weights", 3)]
    torch.testing.assert_close(log.histograms[0][1].double(),
                               torch.tensor(fedfa_weights_by_hand([0.5, 0.25], [1, 3], 0.5, 0.5), dtype=F64),
                               rtol=1e-6, atol=1e-7)
    assert log.figures == [("server/weights_figure", 1), ("server/weights_figure", 3)]


def test_one_client_cohort_gets_weight_one_without_warning(recwarn):
    # Iacc = -log2(1) = 0 and If = -log2(1 - 1 + c): a sum of one weight; weight 1 is the only answer.
    cb = fedfa(server_momentum=0.5)
    w0 = torch.tensor(W0, dtype=F64)
    got = aggregate(cb, FED, 0, w0, update(0, [4], [[3.0, 5.0]], [0.7], [2]))
    # First round: m = g = w0 - y, so w^1 = w0 - m = y.
    torch.testing.assert_close(got, torch.tensor([3.0, 5.0], dtype=F64))
    assert not [w for w in recwarn if "summed to 0" in str(w.message)]


def test_zero_accuracies_fall_back_to_uniform_accuracy_information():
    # alpha = 1: only the accuracy term. All accuracies 0 -> a = uniform (SPEC 1 fallback) -> Iacc uniform.
    cb = fedfa(alpha=1.0, beta=0.0, server_momentum=0.0)
    with pytest.warns(UserWarning, match="summed to 0"):
        got = aggregate(cb, FED, 0, torch.tensor(W0, dtype=F64), update(0, **{**R0, "acc": [0.0, 0.0]}))
    torch.testing.assert_close(got, torch.tensor([1.0, 1.0], dtype=F64))  # (y_0 + y_1) / 2
    # One accuracy 0: a = [0, 1] -> Iacc = [-log2(1e-10), 0] -> all the weight on the zero-accuracy client.
    got = aggregate(cb, FED, 1, torch.tensor(W0, dtype=F64), update(1, **{**R0, "acc": [0.0, 0.4]}))
    torch.testing.assert_close(got, torch.tensor([2.0, 0.0], dtype=F64))


def test_frequency_term_favours_frequent_participants():
    cb = fedfa(alpha=0.0, beta=1.0, server_momentum=0.0)
    log = RecordingLogger()
    aggregate(cb, FED, 0, torch.tensor(W0, dtype=F64), update(0, **{**R0, "participation": [1, 5]}), log)
    weights = log.histograms[-1][1]
    assert weights[1] > weights[0]


def test_state_dict_round_trip_continues_identically():
    cb = fedfa(server_momentum=0.9, period=2)
    w1 = aggregate(cb, FED, 0, torch.tensor(W0, dtype=F64), update(0, **R0))
    state = cb.state_dict()
    resumed = fedfa(server_momentum=0.9, period=2)
    resumed.load_state_dict(state)
    cb.momentum.add_(1.0)  # the saved state is a copy
    cb.load_state_dict(state)
    a = aggregate(cb, FED, 1, w1, update(1, **R1))
    b = aggregate(resumed, FED, 1, w1, update(1, **R1))
    assert torch.equal(a, b) and torch.equal(cb.momentum, resumed.momentum)
    # A fresh callback (momentum zero) would have taken a different step.
    fresh = aggregate(fedfa(server_momentum=0.9, period=2), FED, 1, w1, update(1, **R1))
    assert not torch.allclose(a, fresh)


def test_fedfa_mo_uses_sample_weights_with_double_momentum():
    cb = fedfa(FedFaMo, server_momentum=0.5)
    w = W0
    m = [0.0, 0.0]
    for t, (r, n) in enumerate(((R0, [30, 10]), (R1, [5, 15]))):
        agg = axpy(norm(n), r["weights"])
        m = [0.5 * mi + wi - ai for mi, wi, ai in zip(m, w, agg)]
        expected = [wi - mi for wi, mi in zip(w, m)]
        got = aggregate(cb, FED, t, torch.tensor(w, dtype=F64), update(t, **r, samples=n))
        torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)
        w = expected
    assert not hasattr(cb, "alpha")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"alpha": 0.7, "beta": 0.7}, "alpha + beta must equal 1; got alpha=0.7, beta=0.7"),
    ({"alpha": -0.5, "beta": 1.5}, "alpha must be a finite number >= 0; got -0.5"),
    ({"server_momentum": -0.1}, "server_momentum must be between 0.0 and 1.0; got -0.1"),
    ({"server_momentum": 1.5}, "server_momentum must be between 0.0 and 1.0; got 1.5"),
    ({"period": 0}, "period must be an integer >= 1; got 0"),
    ({"server_lr": 0.0}, "server_lr must be a finite number > 0; got 0.0"),
    ({"momentum_form": "nesterov"}, "momentum_form must be one of heavy_ball, ema, arxiv; got 'nesterov'"),
    ({"period_mode": "per_round"}, "period_mode must be one of every_round, per_period; got 'per_round'"),
    ({"train_acc": "final"}, "train_acc must be one of trained, running; got 'final'"),
    ({"figure_every_n_rounds": -1}, "figure_every_n_rounds must be an integer >= 0; got -1"),
])
def test_bad_hyperparameters_fail_with_one_line(kwargs, message):
    with pytest.raises(ConfigError) as err:
        FedFa(**kwargs)
    assert str(err.value) == message


def test_fedfa_mo_rejects_unknown_weighting():
    with pytest.raises(ConfigError, match="weighting must be one of samples, uniform; got 'size'"):
        FedFaMo(weighting="size")


# ---------------------------------------------------------------------------------------- CLI
MOMENTUM_SGD = {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.05, "momentum": 0.5}}


def test_cli_resume_2_plus_2_equals_4_and_logs_tensorboard(tiny, tmp_path):
    class_path = "lightning_fl.callbacks.fedfa.FedFa"
    entry = {"class_path": class_path, "init_args": {"server_momentum": 0.7, "figure_every_n_rounds": 2}}
    extra = {"trainer.callbacks": with_checkpoint(entry), "model.optimizer": MOMENTUM_SGD,
             "trainer.check_val_every_n_epoch": 4}
    a, b = run_4_and_2_plus_2(tiny, tmp_path, **extra)  # asserts identical final weights
    key = class_path.rsplit(".", 1)[1]
    assert torch.equal(a["callbacks"][key]["server"]["momentum"], b["callbacks"][key]["server"]["momentum"])
    assert torch.equal(a["federated"]["clients"]["participation"], b["federated"]["clients"]["participation"])

    logged = events(tmp_path)
    assert [e.step for e in logged.Scalars("server/momentum_norm")] == [1, 2, 3, 4]
    assert all(e.value > 0 for e in logged.Scalars("server/momentum_norm"))
    assert [e.step for e in logged.Histograms("server/weights")] == [1, 2, 3, 4]
    assert [e.step for e in logged.Images("server/weights_figure")] == [1, 3]


@pytest.mark.parametrize(("init_args", "message"), [
    ({"alpha": 0.5, "beta": 0.6}, "alpha + beta must equal 1; got alpha=0.5, beta=0.6"),
    ({"server_momentum": -0.5}, "server_momentum must be between 0.0 and 1.0; got -0.5"),
    ({"period": 0}, "period must be an integer >= 1; got 0"),
    ({"momentum_form": "adam"}, "momentum_form must be one of heavy_ball, ema, arxiv; got 'adam'"),
    ({"train_acc": "final"}, "train_acc must be one of trained, running; got 'final'"),
])
def test_cli_bad_hyperparameters_exit_2_with_one_line(tiny, capsys, init_args, message):
    assert_cli_exits_2(tiny, capsys, {"class_path": "lightning_fl.callbacks.fedfa.FedFa", "init_args": init_args}, message)




@pytest.mark.parametrize(("name", "expected"), [
    ("fedfa", FedFa(alpha=0.5, beta=0.5, server_momentum=0.5, server_lr=1.0, period=1, momentum_form="heavy_ball")),
    ("fedfa_mo", FedFaMo(server_momentum=0.5)),
])
def test_shipped_config_instantiates(name, expected):
    cli, aggregator = shipped_config(f"{name}_synthetic")
    assert type(aggregator) is type(expected) and vars(aggregator) == vars(expected)
    assert cli.model.client_momentum == 0.5  # FedFa's client momentum comes from the optimizer config
