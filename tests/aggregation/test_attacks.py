"""Attacks in the pipeline and in runs: rows by hand, label flipping, honest-only metrics, one-line errors."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.aggregation import AggregationPipeline, Krum, TrimmedMean
from lightning_fl.aggregation.attacks import ALIE, IPM, Gaussian, LabelFlip, Scale, SignFlip
from lightning_fl.callbacks import FairnessMetrics
from lightning_fl.callbacks import FedAvg
from lightning_fl.engines.evaluation import ClientEvaluation
from lightning_fl.state.data import FederatedData, offsets_from_sizes
from tests.callbacks.helpers import CHECKPOINT, RecordingLogger, aggregate, events, fake_federation, make_update, \
    prepared, run_4_and_2_plus_2
from tests.conftest import run_cli

ROWS = [[1.0], [3.0], [5.0], [2.0]]  # client 3 is the Byzantine one below


def _run(attack, rule=None, rows=ROWS, byzantine=(3,)):
    fed = fake_federation(num_clients=len(rows))
    cb = prepared(FedAvg(weighting="uniform"), fed)
    pipeline = AggregationPipeline(rule=rule, f=1)
    pipeline.setup(len(rows))
    attack.byzantine = torch.tensor(byzantine)
    pipeline.attack = attack
    cb.use_pipeline(pipeline)
    log = RecordingLogger()
    new_w = aggregate(cb, fed, 0, torch.zeros(1), make_update(0, list(range(len(rows))), rows), log)
    return new_w, {k: v for metrics, _ in log.scalars for k, v in metrics.items()}


@pytest.mark.parametrize(("attack", "sent"), [
    (SignFlip(0.25), -2.0),
    (Scale(0.25, gamma=3.0), 6.0),
    (IPM(0.25), -6.0),          # -2 x the honest mean 3
    (ALIE(0.25, alie_z=1.0), 1.0),   # mean 3 - 1 x std 2 of the honest rows 1, 3, 5
    (IPM(0.25, eps=1.0, knowledge="own"), -2.0),  # its own honest update 2
])
def test_each_attack_replaces_the_byzantine_row_by_hand(attack, sent):
    new_w, scalars = _run(attack)
    torch.testing.assert_close(new_w, torch.tensor([(1.0 + 3.0 + 5.0 + sent) / 4]))
    assert scalars["attack/f_t"] == 1.0 and scalars["attack/byzantine_weight"] == 0.25
    # ||R(U) - mean of the honest rows (3)||
    assert scalars["robust/dist_to_honest_mean"] == pytest.approx(abs((9.0 + sent) / 4 - 3.0))


def test_alie_defaults_to_baruch_z_and_scale_to_the_cohort_size():
    # K = 4, f = 1: s = max(1, 3 - 1) = 2, z = Phi^-1(2/4) = 0: ALIE sends the honest mean 3.
    new_w, _ = _run(ALIE(0.25))
    torch.testing.assert_close(new_w, torch.tensor([3.0]))
    scale = Scale(0.25)
    scale.cohort_size = 4  # the round runner sets the nominal K: gamma = K / eta_s
    new_w, _ = _run(scale)
    torch.testing.assert_close(new_w, torch.tensor([(9.0 + 8.0) / 4]))


def test_gaussian_rows_depend_on_the_client_not_its_cohort_position():
    a, _ = _run(Gaussian(0.25, mu=0.0, sigma=1.0), rows=ROWS)
    b, _ = _run(Gaussian(0.25, mu=0.0, sigma=1.0), rows=ROWS)
    assert torch.equal(a, b)
    byzantine_row = 4 * a - 9.0
    assert float(byzantine_row.abs()) < 6  # a standard normal draw, not the honest 2


def test_an_attack_without_the_rows_it_needs_sends_the_honest_update():
    # Every member Byzantine: no honest rows for ALIE's statistics.
    new_w, scalars = _run(ALIE(0.25), rows=[[1.0], [3.0]], byzantine=(0, 1))
    torch.testing.assert_close(new_w, torch.tensor([2.0]))
    assert scalars["attack/fallback"] == 1.0


def test_krum_reports_how_many_byzantine_rows_it_kept():
    rows = [[0.0], [1.0], [2.0], [3.0], [1.1]]
    _, scalars = _run(SignFlip(0.2), rule=Krum(), rows=rows, byzantine=(1,))  # row 1 becomes -1: not kept
    assert scalars["robust/byzantine_selected"] == 0.0
    _, scalars = _run(SignFlip(0.2), rule=Krum(), rows=[[0.0], [1.0], [2.0], [3.0], [-1.1]], byzantine=(4,))
    assert scalars["robust/byzantine_selected"] == 1.0  # -(-1.1) = 1.1 sits among the honest rows


def test_label_flippers_train_on_flipped_labels_and_nobody_else():
    data = FederatedData(x_train=torch.zeros(5, 2), y_train=torch.tensor([0, 1, 2, 3, 9]),
                         train_offsets=offsets_from_sizes([2, 3]), x_test=torch.zeros(2, 2),
                         y_test=torch.tensor([0, 1]), test_offsets=offsets_from_sizes([1, 1]), num_classes=10)
    attack = LabelFlip(0.5 - 1e-9)
    attack.byzantine = attack.attacker_clients = torch.tensor([1])
    poisoned = attack.poison(data)
    assert poisoned.y_train.tolist() == [0, 1, 7, 6, 0]
    assert poisoned.y_test.tolist() == [0, 1]  # evaluation keeps the true labels
    assert attack.honest_clients(2).tolist() == [True, False]


def test_the_headline_metrics_cover_the_honest_clients_and_all_covers_everyone():
    cb, log = FairnessMetrics(), RecordingLogger()
    evaluation = ClientEvaluation("test", 4, correct=torch.tensor([3.0, 1.0, 0.0]), total=torch.tensor([4.0, 2.0, 5.0]),
                                  loss_sum=torch.tensor([1.0, 1.0, 8.0]), counted=torch.tensor([True, True, False]))
    cb.on_clients_evaluated(3, evaluation, fake_federation(num_clients=3), log)
    scalars = {k: v for metrics, _ in log.scalars for k, v in metrics.items()}
    assert scalars["test/acc_mean"] == pytest.approx((0.75 + 0.5) / 2)
    assert scalars["test/all/acc_mean"] == pytest.approx((0.75 + 0.5 + 0.0) / 3)
    assert evaluation.pooled_loss == pytest.approx(2.0 / 6.0)


ALIE_RUN = {"model.attack": {"class_path": "lightning_fl.aggregation.attacks.ALIE", "init_args": {"fraction": 0.34}},
            "model.aggregation": {"transforms": [{"class_path": "lightning_fl.aggregation.NormClip",
                                                  "init_args": {"max_norm": 1.0}}],
                                  "rule": {"class_path": "lightning_fl.aggregation.TrimmedMean"},
                                  "server_optimizer": {"class_path": "lightning_fl.aggregation.ServerAdam"}},
            "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedFa",
                                   "init_args": {"server_momentum": 0.0}}, CHECKPOINT],
            "model.clients_per_round": 5}


def test_fedfa_clipping_trimmed_mean_and_fedadam_under_alie_resume_exactly(tiny, tmp_path):
    run_4_and_2_plus_2(tiny, tmp_path, **ALIE_RUN)
    scalars = events(tmp_path)
    assert [e.value for e in scalars.Scalars("attack/f_t")] != [0.0] * 4
    assert [e.step for e in scalars.Scalars("test/all/acc_mean")] == [2, 4]


def test_whole_institutions_turn_byzantine_with_a_hierarchy(tiny, tmp_path):
    hierarchy = {"num_institutions": 3, "local_rounds": 1}
    attack = {"class_path": "lightning_fl.aggregation.attacks.SignFlip",
              "init_args": {"fraction": 0.34, "level": "institution"}}
    run_4_and_2_plus_2(tiny, tmp_path, **{"model.hierarchy": hierarchy, "model.attack": attack,
                                          "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedAvg"},
                                                                CHECKPOINT]})
    scalars = events(tmp_path)
    # floor(0.34 x 3) = 1 institution of 3, in the server's cohort every round.
    assert [e.value for e in scalars.Scalars("attack/f_t")] == [1.0] * 4
    honest, everyone = scalars.Scalars("test/acc_mean")[-1].value, scalars.Scalars("test/all/acc_mean")[-1].value
    assert honest != everyone


def test_institution_attacks_need_a_hierarchy_and_client_attacks_refuse_one(tiny, capsys):
    institution = {"class_path": "lightning_fl.aggregation.attacks.SignFlip",
                   "init_args": {"fraction": 0.3, "level": "institution"}}
    assert run_cli("fit", "--config", str(tiny(**{"model.attack": institution}))) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: model.attack.init_args.level: institution needs model.hierarchy; use level: client")
    client = {"class_path": "lightning_fl.aggregation.attacks.SignFlip", "init_args": {"fraction": 0.3}}
    assert run_cli("fit", "--config", str(tiny(**{"model.attack": client,
                                                  "model.hierarchy": {"num_institutions": 2}}))) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: model.attack.init_args.level: client attacks inside a model.hierarchy are not supported yet; use"
        " level: institution")


@pytest.mark.parametrize(("overrides", "message"), [
    ({"model.attack": {"class_path": "lightning_fl.aggregation.attacks.SignFlip", "init_args": {"fraction": 0.5}}},
     "error: model.attack.init_args.fraction must be a number in [0, 0.5); got 0.5"),
    ({"model.attack": {"class_path": "lightning_fl.aggregation.attacks.ALIE",
                       "init_args": {"fraction": 0.2, "alie_z": "mean"}}},
     "error: model.attack.init_args.alie_z must be null, honest or a number; got 'mean'"),
    ({"model.attack": {"class_path": "lightning_fl.aggregation.attacks.SignFlip", "init_args": {"fraction": 0.2}},
      "model.exchange": "reduce"},
     "error: model.exchange: reduce exchanges partial sums, but model.aggregation or model.attack needs every client's"
     " update (a transform, pre-aggregator, robust rule or row attack); use exchange: gather"),
])
def test_bad_attacks_stop_before_training_in_one_line(tiny, capsys, overrides, message):
    assert run_cli("fit", "--config", str(tiny(**overrides))) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == message
