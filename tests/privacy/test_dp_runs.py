"""Client-level DP in runs: FedAvg at sigma 0, empty rounds, epsilon per round, exact resume, budgets, refusals."""

from __future__ import annotations

import dp_accounting
import pytest
import torch
from dp_accounting import pld

from lightning_fl.privacy.accounting import epsilon
from tests.callbacks.helpers import CHECKPOINT, events, load_last, run_4_and_2_plus_2
from tests.conftest import run_cli


def _fedavg(**init_args) -> list[dict]:
    return [{"class_path": "lightning_fl.callbacks.FedAvg", "init_args": init_args}, CHECKPOINT]


def _direct_pld(q: float, z: float, rounds: int, delta: float) -> float:
    accountant = pld.PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), rounds))
    return accountant.get_epsilon(delta)


def test_sigma_zero_and_no_clipping_trains_fedavg_bitwise(tiny, tmp_path):
    callbacks = _fedavg(weighting="uniform")
    private = tiny(**{"trainer.callbacks": callbacks,
                      "model.dp": {"noise_multiplier": 0.0, "clip_norm": float("inf"), "sampling": "fixed"}})
    plain = tiny(**{"trainer.callbacks": callbacks, "model.aggregation": {
        "transforms": [{"class_path": "lightning_fl.aggregation.NormClip", "init_args": {"max_norm": 1e30}}]}})
    for config in (private, plain):
        assert run_cli("fit", "--config", str(config)) == 0
    a, b = load_last(tmp_path, 0)["state_dict"], load_last(tmp_path, 1)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_poisson_rounds_log_epsilon_resume_exactly_and_count_empty_rounds(tiny, tmp_path):
    # q = 0.2 over 6 clients: rounds with no client happen (round/clients 0) and still count.
    dp = {"noise_multiplier": 1.5, "clip_norm": 0.5, "sampling_rate": 0.2, "delta": 1e-3,
          "adaptive": {"target_quantile": 0.5, "learning_rate": 0.2, "count_noise": 2.0}}
    full, half = run_4_and_2_plus_2(tiny, tmp_path, **{"trainer.callbacks": _fedavg(), "model.dp": dp})
    for key in ("ledger", "clip_norm"):
        stage = "aggregate_transforms.0" if key == "ledger" else "transforms.0"
        assert torch.equal(torch.as_tensor(full["callbacks"]["FedAvg"]["pipeline"][stage]["server"][key]),
                           torch.as_tensor(half["callbacks"]["FedAvg"]["pipeline"][stage]["server"][key]))
    scalars = events(tmp_path)
    clients = [e.value for e in scalars.Scalars("round/clients")]
    assert 0.0 in clients and len(clients) == 4
    logged = [e.value for e in scalars.Scalars("dp/epsilon")]
    # Adaptive clipping: the accounted multiplier is z itself; the update gets (z^-2 - (2 sigma_b)^-2)^-1/2.
    expected = [_direct_pld(0.2, 1.5, t, 1e-3) for t in (1, 2, 3, 4)]
    assert logged == pytest.approx(expected, rel=1e-6)
    resumed = [e.value for e in events(tmp_path, 1).Scalars("dp/epsilon")]
    assert resumed[-1] == pytest.approx(expected[-1], rel=1e-6)


def test_availability_and_dropout_compose_with_poisson_sampling(tiny, tmp_path):
    # Keyed availability and dropout thin the Poisson cohort (the accountant's q stays an upper bound);
    # every report is kept, so a cohort may exceed K = 3.
    dp = {"noise_multiplier": 1.0, "clip_norm": 1.0, "sampling_rate": 0.9, "delta": 1e-3}
    config = tiny(**{"trainer.callbacks": _fedavg(), "model.dp": dp,
                     "model.system": {"availability": 0.8, "dropout": 0.1}})
    assert run_cli("fit", "--config", str(config)) == 0
    scalars = events(tmp_path)
    assert max(e.value for e in scalars.Scalars("round/clients")) > 3
    assert [e.value for e in scalars.Scalars("dp/epsilon")] == pytest.approx(
        [_direct_pld(0.9, 1.0, t, 1e-3) for t in (1, 2, 3, 4)], rel=1e-6)
    # The settings that stay the same are logged once, at round 1 (RoundLogger.log_settings).
    for tag, value in (("dp/delta", 1e-3), ("dp/noise_multiplier", 1.0), ("dp/clip_norm", 1.0)):
        assert [(e.step, e.value) for e in scalars.Scalars(tag)] == [(1, pytest.approx(value))], tag


def test_on_budget_stop_ends_the_run_before_the_round_that_would_exceed_it(tiny, tmp_path, caplog):
    q, z, delta = 0.5, 1.0, 1e-3
    budget = (epsilon(q, z, 2, delta) + epsilon(q, z, 3, delta)) / 2  # rounds 1-2 fit, round 3 does not
    dp = {"noise_multiplier": z, "clip_norm": 1.0, "sampling_rate": q, "delta": delta, "epsilon_budget": budget}
    with pytest.warns(Warning, match=r"^model.dp: stopping before round 3: it would spend epsilon"):
        assert run_cli("fit", "--config", str(tiny(**{"trainer.callbacks": _fedavg(), "model.dp": dp}))) == 0
    logged = events(tmp_path).Scalars("dp/epsilon")
    assert [e.step for e in logged] == [1, 2]
    assert f"Client-level DP: epsilon {logged[-1].value:.4g} at delta 0.001" in caplog.text


@pytest.mark.parametrize(("overrides", "message"), [
    ({"model.dp": {"target_epsilon": 0.0}}, "model.dp.target_epsilon must be a number > 0; got 0.0"),
    ({"model.dp": {"noise_multiplier": 1.0, "delta": 1.5}}, "model.dp.delta must be in (0, 1); got 1.5"),
    ({"model.dp": {"noise_multiplier": 1.0, "delta": 0.5}}, "model.dp.delta must be below 1/N"),
    ({"model.dp": {"noise_multiplier": -1.0}}, "model.dp.noise_multiplier must be a finite number >= 0; got -1.0"),
    ({"model.dp": {"noise_multiplier": 1.0, "target_epsilon": 1.0}},
     "model.dp: give exactly one of noise_multiplier and target_epsilon"),
    ({"model.dp": {"noise_multiplier": 1.0, "adaptive": {"quantile": 0.5}}},
     "error: model.dp.adaptive.quantile is not an option of model.dp.adaptive; its options are: target_quantile,"
     " learning_rate, count_noise"),
    ({"model.dp": {"noise_multiplier": "one"}}, "error: model.dp.noise_multiplier: Expected a <class 'float'>"),
    ({"model.dp": {"noise_multiplier": 1.0}, "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedFa"}]},
     "model.dp: FedFa does not compose with client-level DP: its weights are normalised over the cohort"),
    ({"model.dp": {"noise_multiplier": 1.0}, "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Scaffold"}]},
     "model.dp: Scaffold does not compose with client-level DP: c_k+ - c_k is a second per-client release"),
    ({"model.dp": {"noise_multiplier": 1.0},
      "model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.Median"}}},
     "model.aggregation.rule: Median moves by more than one clipped update"),
    ({"model.dp": {"noise_multiplier": 1.0}, "model.sampling": "by_samples"}, "model.sampling: by_samples makes"),
    ({"model.dp": {"noise_multiplier": 1.0}, "model.system": {"over_selection": 0.5}},
     "model.dp: model.system.over_selection makes who reports depend on the clients' work"),
    ({"model.dp": {"noise_multiplier": 1.0}, "model.system": {"speed_mean": 1.0, "deadline": 5.0}},
     "model.dp: model.system.deadline makes who reports depend"),
    ({"model.dp": {"noise_multiplier": 1.0}, "model.hierarchy": {"num_institutions": 2}},
     "model.dp: the three-layer hierarchy"),
])
def test_what_dp_cannot_cover_stops_before_training_in_one_line(tiny, capsys, overrides, message):
    assert run_cli("fit", "--config", str(tiny(**overrides))) == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_target_no_noise_multiplier_reaches_is_refused(tiny, capsys):
    # 10 000 planned rounds at q = K/N = 1/2 cannot stay within epsilon 1e-3 with z <= 1000.
    dp = {"target_epsilon": 1e-3, "delta": 1e-3, "accountant": "rdp"}
    assert run_cli("fit", "--config", str(tiny(**{"model.dp": dp, "trainer.max_epochs": 10000}))) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: model.dp.target_epsilon 0.001 at delta 0.001 is not reachable over 10000 rounds at sampling rate 0.5"
        " with a noise multiplier up to 1000")


def test_local_dp_runs_with_a_robust_rule_and_logs_the_most_released_clients_epsilon(tiny, tmp_path, caplog):
    dp = {"noise_multiplier": 4.0, "clip_norm": 1.0, "local": True, "delta": 1e-3}
    config = tiny(**{"trainer.callbacks": _fedavg(weighting="uniform"), "model.dp": dp,
                     "model.aggregation": {"rule": {"class_path": "lightning_fl.aggregation.Median"}}})
    assert run_cli("fit", "--config", str(config)) == 0
    logged = [e.value for e in events(tmp_path).Scalars("dp/local_epsilon_max")]
    assert len(logged) == 4 and logged == sorted(logged) and logged[0] > 0
    assert f"Local DP: the most released client's epsilon {logged[-1]:.4g} at delta 0.001" in caplog.text


def test_the_dp_safe_variants_train_under_central_dp(tiny, tmp_path):
    dp = {"noise_multiplier": 1.0, "clip_norm": 1.0, "delta": 1e-3}
    callbacks = [{"class_path": "lightning_fl.callbacks.DWFed", "init_args": {"dp_safe": True}},
                 {"class_path": "lightning_fl.callbacks.FedFa", "init_args": {"dp_safe": True}},
                 {"class_path": "lightning_fl.callbacks.QFFL", "init_args": {"dp_safe": True, "f_max": 3.0}},
                 {"class_path": "lightning_fl.callbacks.IGFLClient", "init_args": {"dp_safe": True}},
                 {"class_path": "lightning_fl.callbacks.FedNova", "init_args": {"dp_safe": True, "tau_eff": 4.0}}]
    for callback in callbacks:
        config = tiny(**{"trainer.callbacks": [callback, CHECKPOINT], "model.dp": dp, "trainer.max_epochs": 2})
        assert run_cli("fit", "--config", str(config)) == 0
    assert all(len(events(tmp_path, v).Scalars("dp/epsilon")) == 2 for v in range(5))
