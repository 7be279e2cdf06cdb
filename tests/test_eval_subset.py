"""``model.eval.client_subset``: each evaluation scores ``m`` clients drawn by ``(seed, round)`` (docs/personalization.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lightning_fl.faults.validation import ConfigError
from lightning_fl.functional.fairness import fairness_metrics
from lightning_fl.models import LogisticRegression
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.protocol_evaluation import ProtocolEvaluation
from lightning_fl.state.data import FederatedData, offsets_from_sizes
from lightning_fl.state.seeding import derive_seed
from tests.conftest import run_cli


def reference_subset(seed: int, round_number: int, n: int, m: int) -> list[int]:
    """Floyd's algorithm written out here: for j = n - m .. n - 1, t = floor(u (j + 1)), keep t or else j."""
    g = torch.Generator().manual_seed(derive_seed(seed, "eval_subset", round_number))
    chosen: set[int] = set()
    for u, j in zip(torch.rand(m, generator=g, dtype=torch.float64).tolist(), range(n - m, n)):
        t = int(u * (j + 1))
        chosen.add(j if t in chosen else t)
    return sorted(chosen)


# Client k has 4 test samples, all x = 1, which the model below classifies as class 1; the first (k mod 5)
# are labelled 1, the rest 0: accuracies 0, 1/4, 2/4, 3/4, 1, 0, 1/4, ...
N, PER = 10, 4
CORRECT = [k % 5 for k in range(N)]


def _federation() -> FederatedData:
    x = torch.ones(N * PER, 1)
    y = torch.ones(N * PER, dtype=torch.long)
    for k, right in enumerate(CORRECT):
        y[k * PER + right:(k + 1) * PER] = 0  # the samples past the first `right` are misclassified
    offsets = offsets_from_sizes([PER] * N)
    return FederatedData(x_train=x, y_train=y, train_offsets=offsets, x_test=x, y_test=y, test_offsets=offsets,
                         num_classes=2)


def _evaluation(m: int | None, seed: int = 7, clients: str | None = None) -> ProtocolEvaluation:
    model = LogisticRegression(in_features=1, num_classes=2)
    with torch.no_grad():
        model.linear.weight.copy_(torch.tensor([[-1.0], [1.0]]))
        model.linear.bias.zero_()
    # Only the global model is scored: no engine or aggregator is read; clients 0-4 have taken part.
    store = SimpleNamespace(participation=(torch.arange(N) < 5).long())
    return ProtocolEvaluation(EvalProtocol(client_subset=m, clients=clients), model=model, data=_federation(),
                              layout=None, engine=None, store=store, aggregator=None,
                              unseen=torch.zeros(0, dtype=torch.long), batch_size=16, seed=seed)


def test_the_subset_is_the_reference_draw_and_depends_on_seed_and_round_only():
    evaluation = _evaluation(4)
    for t in (0, 5, 10):
        assert evaluation.subset(t).nonzero().flatten().tolist() == reference_subset(7, t, N, 4)
    assert _evaluation(None).subset(3).all()  # no subset: every client
    draws = {tuple(evaluation.subset(t).nonzero().flatten().tolist()) for t in range(20)}
    assert len(draws) > 10  # drawn anew each evaluation round


def test_statistics_are_over_the_subset_by_hand():
    evaluation = _evaluation(4)
    ids = reference_subset(7, 5, N, 4)
    (main,), scalars = evaluation.evaluate("test", 5, None)
    assert scalars == {}
    expected_total = [PER if k in ids else 0 for k in range(N)]
    expected_correct = [CORRECT[k] if k in ids else 0 for k in range(N)]
    assert main.total.tolist() == expected_total and main.correct.tolist() == expected_correct
    stats = fairness_metrics(main.correct, main.total)
    accuracies = sorted(CORRECT[k] / PER for k in ids)
    assert stats["acc_mean"] == pytest.approx(sum(accuracies) / 4)
    assert stats["acc_worst20"] == pytest.approx(accuracies[0])  # ceil(0.2 * 4) = 1 client
    assert stats["acc_best20"] == pytest.approx(accuracies[-1])
    assert stats["acc_pooled"] == pytest.approx(sum(CORRECT[k] for k in ids) / (4 * PER))


def test_the_client_set_is_taken_within_the_subset():
    (main,), _ = _evaluation(6, clients="participated").evaluate("test", 2, None)
    expected = [k for k in reference_subset(7, 2, N, 6) if k < 5]
    assert main.total.nonzero().flatten().tolist() == expected
    assert main.correct[expected].tolist() == [CORRECT[k] for k in expected]


def test_every_client_without_a_subset():
    evaluation = _evaluation(None)
    assert evaluation.is_default and not _evaluation(4).is_default
    (main,), _ = evaluation.evaluate("test", 0, None)
    assert main.correct.tolist() == CORRECT and main.total.tolist() == [PER] * N


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_a_bad_subset_is_one_line_naming_the_field(value):
    with pytest.raises(ConfigError, match=r"^model\.eval\.client_subset must be an integer >= 1") as err:
        EvalProtocol(client_subset=value)
    assert "\n" not in str(err.value)


def test_a_subset_larger_than_the_federation_is_refused_before_training():
    with pytest.raises(ConfigError, match=r"^model\.eval\.client_subset must be at most 5 \(the number of clients"):
        EvalProtocol(client_subset=6).check(5, method_name="FedAvg", method_has_personal_model=False)
    EvalProtocol(client_subset=5).check(5, method_name="FedAvg", method_has_personal_model=False)
    with pytest.raises(ConfigError, match=r"^model\.eval\.client_subset cannot be combined with unseen_fraction"):
        EvalProtocol(client_subset=3, unseen_fraction=0.2)


def test_declared_in_the_eval_line_and_the_hparams():
    protocol = EvalProtocol(client_subset=1000)
    assert "client_subset=1000 (drawn anew each evaluation, keyed by seed and round)" in protocol.describe()
    assert "client_subset" not in EvalProtocol().describe()
    assert protocol.hparams()["eval/client_subset"] == 1000 and EvalProtocol().hparams()["eval/client_subset"] == 0
    back = EvalProtocol.from_hparams(protocol.hparams())  # a finished run is reported by its logged protocol
    assert back.client_subset == 1000 and back.describe() == protocol.describe()
    older = {k: v for k, v in EvalProtocol().hparams().items() if k != "eval/client_subset"}
    assert EvalProtocol.from_hparams(older).client_subset is None  # runs logged before the option


def test_a_run_prints_the_subset_and_refuses_one_too_large(tiny, capsys, caplog):
    config = tiny(**{"model.eval": {"client_subset": 3}, "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config), "--trainer.enable_progress_bar", "false") == 0
    assert "client_subset=3 (drawn anew each evaluation" in caplog.text  # the eval: line above the table
    caplog.clear()
    config = tiny(**{"model.eval": {"client_subset": 7}, "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config)) != 0
    printed = capsys.readouterr()
    assert "model.eval.client_subset must be at most 6 (the number of clients" in printed.out + printed.err + caplog.text
    assert "Epoch 0" not in printed.out + printed.err  # refused before training


def test_a_subset_client_scores_what_a_full_evaluation_gives_it():
    # Random inputs and weights: the subset's samples are gathered into other batches, the per-client
    # numbers are the same (loss to float rounding).
    torch.manual_seed(0)
    full, part, x = _evaluation(None), _evaluation(5), torch.randn(N * PER, 1)
    for evaluation in (full, part):
        evaluation.data.x_test = x
        with torch.no_grad():
            evaluation.model.linear.weight.copy_(torch.tensor([[0.3], [-0.7]]))
            evaluation.model.linear.bias.copy_(torch.tensor([0.1, 0.2]))
    evaluation_all, _ = full.evaluate("test", 4, None)
    evaluation_part, _ = part.evaluate("test", 4, None)
    ids = reference_subset(7, 4, N, 5)
    assert torch.equal(evaluation_part[0].correct[ids], evaluation_all[0].correct[ids])
    torch.testing.assert_close(evaluation_part[0].loss_sum[ids], evaluation_all[0].loss_sum[ids])
    others = [k for k in range(N) if k not in ids]
    assert evaluation_part[0].total[others].eq(0).all() and evaluation_part[0].loss_sum[others].eq(0).all()
