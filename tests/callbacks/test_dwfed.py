"""DWFed callback (SPEC section 5) against hand-computed numbers, logging and the CLI."""

from __future__ import annotations

import pytest
import torch
from lightning_fl.callbacks.dwfed import DWFed

from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.federation import Federation
from tests.callbacks.helpers import (
    RecordingLogger,
    aggregate,
    assert_cli_exits_2,
    events,
    fake_federation,
    namespace_update,
    prepared,
    shipped_config,
    vector_layout,
)
from tests.conftest import run_cli

F64 = torch.float64

# Three clients, two classes: label counts [[3, 1], [0, 4], [2, 2]] (totals 4, 4, 4).
#   P = [5, 7] / 12
#   p_0 = [3/4, 1/4]: D_0 = |9/12 - 5/12| + |3/12 - 7/12| = 8/12 = 2/3
#   p_1 = [0, 1]:     D_1 = 5/12 + 5/12 = 5/6
#   p_2 = [1/2, 1/2]: D_2 = 1/12 + 1/12 = 1/6
HIST = torch.tensor([[3, 1], [0, 4], [2, 2]])
EMD = {0: 2 / 3, 1: 5 / 6, 2: 1 / 6}


def _federation(client_lr: float = 0.1, hist: torch.Tensor = HIST) -> Federation:
    return fake_federation(vector_layout(2), lr=client_lr, num_clients=len(hist), label_hist=hist)


def _aggregate(cb: DWFed, round_idx: int, global_w: torch.Tensor, update_, federation: Federation | None = None,
               log: RecordingLogger | None = None) -> torch.Tensor:
    federation = _federation() if federation is None else federation
    return aggregate(prepared(cb, federation), federation, round_idx, global_w, update_, log)


update = namespace_update


def ish(d, k, eta=1.0):
    return max(0.0, (1 - eta * d / k) / (1 + d))


Y = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]


def test_weights_by_hand_and_logged():
    # Cohort {0, 2}, K = 2: ISH_0 = (1 - (2/3)/2) / (5/3) = 0.4; ISH_2 = (1 - (1/6)/2) / (7/6) = 11/14.
    ish0, ish2 = 0.4, 11 / 14
    assert ish(EMD[0], 2) == pytest.approx(ish0) and ish(EMD[2], 2) == pytest.approx(ish2)
    alpha = [ish0 / (ish0 + ish2), ish2 / (ish0 + ish2)]  # [0.33735, 0.66265]
    log = RecordingLogger()
    got = _aggregate(DWFed(), 4, torch.zeros(2, dtype=F64), update([0, 2], [Y[0], Y[2]]), log=log)
    expected = [alpha[0] * Y[0][i] + alpha[1] * Y[2][i] for i in range(2)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)
    tags = {tag: (values, step) for tag, values, step in log.histograms}
    torch.testing.assert_close(tags["server/weights"][0].double(), torch.tensor(alpha, dtype=F64), rtol=1e-6, atol=0)
    torch.testing.assert_close(tags["server/emd"][0].double(), torch.tensor([2 / 3, 1 / 6], dtype=F64), rtol=1e-6,
                               atol=0)
    assert tags["server/weights"][1] == tags["server/emd"][1] == 5  # round index 4 -> round number 5
    assert log.figures == [("server/weights_figure", 5)]


def test_population_covers_all_clients_not_only_the_cohort():
    # The same cohort against a population with an extra client 3 of label 0 only: P = [9, 7] / 16.
    hist = torch.cat([HIST, torch.tensor([[4, 0]])])
    p = [9 / 16, 7 / 16]
    d0 = abs(3 / 4 - p[0]) + abs(1 / 4 - p[1])  # 3/8
    d2 = abs(1 / 2 - p[0]) + abs(1 / 2 - p[1])  # 1/8
    a = [ish(d0, 2), ish(d2, 2)]
    alpha = [a[0] / sum(a), a[1] / sum(a)]
    got = _aggregate(DWFed(), 0, torch.zeros(2, dtype=F64), update([0, 2], [Y[0], Y[2]]), _federation(hist=hist))
    torch.testing.assert_close(got, torch.tensor([alpha[0] + 2 * alpha[1], 2 * alpha[1]], dtype=F64))


# Unequal client sizes (8, 3 and 2 samples), so the population P (all label counts summed, then
# normalised) differs from the mean of the clients' distributions ([7/12, 5/12]):
#   P = [6 + 0 + 2, 2 + 3 + 0] / 13 = [8/13, 5/13]
#   p_0 = [3/4, 1/4]: D_0 = |39/52 - 32/52| + |13/52 - 20/52| = 14/52 = 7/26
#   p_1 = [0, 1]:     D_1 = 8/13 + 8/13 = 16/13
#   p_2 = [1, 0]:     D_2 = 5/13 + 5/13 = 10/13
# Cohort {0, 1, 2}, K = 3, eta_ish = 1: ISH_k = (1 - D_k / 3) / (1 + D_k)
#   ISH_0 = (71/78) / (33/26) = 71/99;  ISH_1 = (23/39) / (29/13) = 23/87;  ISH_2 = (29/39) / (23/13) = 29/69
UNEQUAL = torch.tensor([[6, 2], [0, 3], [2, 0]])
UNEQUAL_ISH = [71 / 99, 23 / 87, 29 / 69]


@pytest.mark.parametrize("by_samples", [False, True])
def test_unequal_client_sizes_by_hand(by_samples):
    # weight_by_samples multiplies ISH_k by n_k = [8, 3, 2] before normalising.
    raw = [ish * n for ish, n in zip(UNEQUAL_ISH, (8, 3, 2))] if by_samples else UNEQUAL_ISH
    alpha = [r / sum(raw) for r in raw]
    log = RecordingLogger()
    got = _aggregate(DWFed(weight_by_samples=by_samples), 0, torch.zeros(2, dtype=F64),
                     update([0, 1, 2], Y, samples=[8, 3, 2]), _federation(hist=UNEQUAL), log=log)
    expected = [sum(alpha[k] * Y[k][i] for k in range(3)) for i in range(2)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)
    tags = {tag: values for tag, values, _ in log.histograms}
    torch.testing.assert_close(tags["server/emd"].double(), torch.tensor([7 / 26, 16 / 13, 10 / 13], dtype=F64),
                               rtol=1e-6, atol=0)


def test_eta_client_lr_and_weight_by_samples():
    # eta = client lr = 0.5, K = 3; ISH_k = (1 - 0.5 D_k / 3) / (1 + D_k), times n_k = [10, 20, 30].
    raw = [ish(EMD[k], 3, eta=0.5) * n for k, n in zip(range(3), (10, 20, 30))]
    alpha = [r / sum(raw) for r in raw]
    cb = DWFed(eta_ish="client_lr", weight_by_samples=True)
    got = _aggregate(cb, 0, torch.zeros(2, dtype=F64), update([0, 1, 2], Y, samples=[10, 20, 30]),
                     _federation(client_lr=0.5))
    expected = [sum(alpha[k] * Y[k][i] for k in range(3)) for i in range(2)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)


def test_clamped_and_degenerate_weights():
    # eta = 3, cohort {1, 2}, K = 2: ISH_1 = (1 - 3 (5/6) / 2) / (11/6) < 0 -> clamped to 0;
    # ISH_2 = (1 - 3 (1/6) / 2) / (7/6) > 0: all weight on client 2.
    got = _aggregate(DWFed(eta_ish=3.0), 0, torch.zeros(2, dtype=F64), update([1, 2], [Y[1], Y[2]]))
    torch.testing.assert_close(got, torch.tensor(Y[2], dtype=F64))
    # eta = 5, cohort {0, 1}: 1 - 5 (2/3) / 2 < 0 and 1 - 5 (5/6) / 2 < 0: every ISH clamped to 0 ->
    # uniform weights and a warning (SPEC section 1).
    with pytest.warns(UserWarning, match="summed to 0"):
        got = _aggregate(DWFed(eta_ish=5.0), 0, torch.zeros(2, dtype=F64), update([0, 1], [Y[0], Y[1]]))
    torch.testing.assert_close(got, torch.tensor([0.5, 0.5], dtype=F64))


def test_one_client_cohort_gets_weight_one(recwarn):
    got = _aggregate(DWFed(eta_ish=10.0), 0, torch.zeros(2, dtype=F64), update([1], [Y[1]]))
    torch.testing.assert_close(got, torch.tensor(Y[1], dtype=F64))
    assert not [w for w in recwarn if "summed to 0" in str(w.message)]


def test_stateless_and_figure_cadence():
    cb = DWFed(figure_every_n_rounds=0)
    assert cb.state_dict() == {"server": {}, "clients": {}}
    log = RecordingLogger()
    _aggregate(cb, 0, torch.zeros(2, dtype=F64), update([0, 2], [Y[0], Y[2]]), log=log)
    assert log.figures == [] and len(log.histograms) == 2


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"eta_ish": -1.0}, "eta_ish must be a number >= 0 or 'client_lr'; got -1.0"),
    ({"eta_ish": "lr"}, "eta_ish must be a number >= 0 or 'client_lr'; got 'lr'"),
    ({"eta_ish": float("inf")}, "eta_ish must be a number >= 0 or 'client_lr'; got inf"),
    ({"figure_every_n_rounds": 1.5}, "figure_every_n_rounds must be an integer >= 0; got 1.5"),
])
def test_bad_hyperparameters_fail_with_one_line(kwargs, message):
    with pytest.raises(ConfigError) as err:
        DWFed(**kwargs)
    assert str(err.value) == message


def test_cli_run_logs_weights_and_emd(tiny, tmp_path):
    callbacks = [{"class_path": "lightning_fl.callbacks.dwfed.DWFed", "init_args": {"figure_every_n_rounds": 2}}]
    config = tiny(**{"trainer.callbacks": callbacks, "trainer.max_epochs": 3, "trainer.check_val_every_n_epoch": 3})
    assert run_cli("fit", "--config", str(config)) == 0
    logged = events(tmp_path)
    assert [e.step for e in logged.Histograms("server/weights")] == [1, 2, 3]
    assert [e.step for e in logged.Histograms("server/emd")] == [1, 2, 3]
    assert [e.step for e in logged.Images("server/weights_figure")] == [1, 3]


@pytest.mark.parametrize(("eta_ish", "message"), [
    (-0.5, "eta_ish must be a number >= 0 or 'client_lr'; got -0.5"),
    ("learning_rate", "eta_ish must be a number >= 0 or 'client_lr'; got 'learning_rate'"),
])
def test_cli_bad_hyperparameters_exit_2_with_one_line(tiny, capsys, eta_ish, message):
    assert_cli_exits_2(tiny, capsys, {"class_path": "lightning_fl.callbacks.dwfed.DWFed", "init_args": {"eta_ish": eta_ish}}, message)


def test_shipped_config_instantiates():
    _, aggregator = shipped_config("dwfed_synthetic")
    assert type(aggregator) is DWFed and aggregator.eta_ish == 1.0 and aggregator.weight_by_samples is False


# ---------------------------------------------------------------- distance: wasserstein
# Three classes, counts [[2, 1, 1], [0, 0, 4], [2, 2, 0]]: P = [4, 3, 5] / 12, F_P = [4/12, 7/12].
#   D_0 = |6/12 - 4/12| + |9/12 - 7/12| = 1/3;  D_1 = 4/12 + 7/12 = 11/12;  D_2 = 2/12 + 5/12 = 7/12
# K = 3: ISH_0 = (8/9) / (4/3) = 2/3;  ISH_1 = (25/36) / (23/12) = 25/69;  ISH_2 = (29/36) / (19/12) = 29/57
# (L1 instead: D = [4/12, 14/12, 10/12] = [1/3, 7/6, 5/6], other weights.)
HIST3 = torch.tensor([[2, 1, 1], [0, 0, 4], [2, 2, 0]])


def test_wasserstein_weights_by_hand_and_logged():
    raw = [2 / 3, 25 / 69, 29 / 57]
    alpha = [r / sum(raw) for r in raw]
    log = RecordingLogger()
    got = _aggregate(DWFed(distance="wasserstein"), 0, torch.zeros(2, dtype=F64), update([0, 1, 2], Y),
                     _federation(hist=HIST3), log=log)
    expected = [sum(alpha[k] * Y[k][i] for k in range(3)) for i in range(2)]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=F64), rtol=1e-12, atol=1e-12)
    tags = {tag: values for tag, values, _ in log.histograms}
    torch.testing.assert_close(tags["server/emd"].double(), torch.tensor([1 / 3, 11 / 12, 7 / 12], dtype=F64),
                               rtol=1e-6, atol=0)
    l1 = [ish(d, 3) for d in (1 / 3, 7 / 6, 5 / 6)]
    got_l1 = _aggregate(DWFed(), 0, torch.zeros(2, dtype=F64), update([0, 1, 2], Y), _federation(hist=HIST3))
    expected_l1 = [sum(l1[k] / sum(l1) * Y[k][i] for k in range(3)) for i in range(2)]
    torch.testing.assert_close(got_l1, torch.tensor(expected_l1, dtype=F64), rtol=1e-12, atol=1e-12)


def test_l1_default_is_bitwise_the_explicit_option():
    for hist in (HIST, UNEQUAL, HIST3):
        runs = [_aggregate(cb, 0, torch.zeros(2, dtype=F64), update([0, 1, 2], Y), _federation(hist=hist))
                for cb in (DWFed(), DWFed(distance="l1"))]
        assert torch.equal(*runs)


def test_distance_is_a_recorded_hyperparameter_not_state():
    from lightning_fl.simulation.resume_check import changed_fields
    from lightning_fl.state.init_args import describe

    default, wasserstein = DWFed(), DWFed(distance="wasserstein")
    assert default.init_args["distance"] == "l1" and wasserstein.init_args["distance"] == "wasserstein"
    assert wasserstein.state_dict() == {"server": {}, "clients": {}}
    # A resume under the other reading is named by the run's configuration check.
    saved = {"callbacks.DWFed": describe(default.init_args)}
    assert changed_fields(saved, {"callbacks.DWFed": describe(wasserstein.init_args)}) == [
        "callbacks.DWFed.distance: checkpoint 'l1' vs config 'wasserstein'"]
    # A checkpoint written before the option existed ran the L1 reading: it resumes under the default and
    # is named under the other reading.
    from lightning_fl.simulation.resume_check import implied_defaults

    older = {"callbacks.DWFed": {k: v for k, v in describe(default.init_args).items() if k != "distance"}}
    assert changed_fields(older, {"callbacks.DWFed": describe(default.init_args)}, implied_defaults([default])) == []
    assert changed_fields(older, {"callbacks.DWFed": describe(wasserstein.init_args)}, implied_defaults([wasserstein])) == [
        "callbacks.DWFed.distance: checkpoint 'l1' vs config 'wasserstein'"]
    assert changed_fields(older, {"callbacks.DWFed": describe(default.init_args)}) == [
        "callbacks.DWFed.distance: checkpoint 'absent' vs config 'l1'"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"distance": "emd"}, "distance must be one of l1, wasserstein; got 'emd'"),
    ({"distance": "wasserstein", "dp_safe": True},
     "dp_safe: DWFed's DP-safe weights use distance l1 (against the public uniform P); got distance 'wasserstein'"),
])
def test_bad_distance_fails_with_one_line(kwargs, message):
    with pytest.raises(ConfigError) as err:
        DWFed(**kwargs)
    assert str(err.value) == message


def test_cli_bad_distance_exits_2_with_one_line(tiny, capsys):
    assert_cli_exits_2(tiny, capsys, {"class_path": "lightning_fl.callbacks.DWFed", "init_args": {"distance": "W1"}},
                       "distance must be one of l1, wasserstein; got 'W1'")
