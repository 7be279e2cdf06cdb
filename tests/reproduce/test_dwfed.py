"""DWFed's reproduction metrics (accuracy reduction, round of convergence, model divergence), by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning_fl.datamodules.partitions import PerClientDirichlet, Shards
from torch.utils.tensorboard import SummaryWriter

from lightning_fl.experiments.runs import Run
from lightning_fl.functional.dwfed import cohort_emd, ish_weights
from lightning_fl.reproduce.dwfed import (
    METRICS,
    PAPER,
    REFERENCE,
    convergence_round,
    last_scalar,
)
from lightning_fl.reproduce.paper import SettingResults
from lightning_fl.reproduce.settings import Setting


def _rows(method: str, seed: int, curve: dict[int, float]) -> list[tuple]:
    # A val row with another value at every round: the metrics must read the test split only.
    run = f"{method}/seed_{seed}"
    return [row for r, acc in curve.items()
            for row in ((run, method, seed, r, "test", "acc_pooled", acc), (run, method, seed, r, "val", "acc_pooled", 0.0))]


def _results(tmp_path=None) -> SettingResults:
    rows = [*_rows(REFERENCE, 0, {10: 0.5, 20: 0.86}), *_rows(REFERENCE, 1, {10: 0.5, 20: 0.80}),
            *_rows("FedAvg-1class", 0, {10: 0.2, 20: 0.7, 30: 0.6, 40: 0.72, 50: 0.75}),
            *_rows("FedAvg-1class", 1, {10: 0.6, 20: 0.7})]
    root = tmp_path or Path("unused")
    runs = [Run(m, s, root / m / f"seed_{s}", ()) for m in (REFERENCE, "FedAvg-1class") for s in (0, 1)]
    return SettingResults(Setting("s", {REFERENCE: "", "FedAvg-1class": ""}), [0, 1], rows, runs)


def test_accuracy_reduction_is_the_iid_reference_minus_the_run_per_seed() -> None:
    results = _results()
    reduction = METRICS["reduction"].value
    assert reduction(results, "FedAvg-1class", 0) == pytest.approx(86.0 - 75.0)  # final accuracies, in points
    assert reduction(results, "FedAvg-1class", 1) == pytest.approx(80.0 - 70.0)  # seed 1's own reference
    with pytest.raises(KeyError):  # the reference has none: its cell stays empty in the report
        reduction(results, REFERENCE, 0)


def test_round_of_convergence_from_a_runs_test_curve() -> None:
    # Seed 0: final 0.75, so the threshold is 0.95 * 0.75 = 0.7125; 0.72 at 40 and 0.75 at 50 are above it,
    # 0.6 at 30 is below: converged from round 40.
    assert METRICS["convergence"].value(_results(), "FedAvg-1class", 0) == 40.0
    # Seed 1: final 0.7, threshold 0.665; 0.6 at 10 is below: round 20.
    assert METRICS["convergence"].value(_results(), "FedAvg-1class", 1) == 20.0


@pytest.mark.parametrize(("accuracies", "expected"), [
    ([0.1, 0.5, 0.9, 0.95, 1.0], 4),  # threshold 0.95: 0.95 at round 4 is on it, 0.9 is below
    ([0.9, 0.9, 0.5], 1),  # a final dip lowers the bar (0.475) under every evaluation
    ([0.0, 0.0], 1),  # nothing learnt: 0 >= 0.95 * 0
])
def test_convergence_round_by_hand(accuracies: list[float], expected: int) -> None:
    assert convergence_round(list(range(1, len(accuracies) + 1)), accuracies) == expected


def test_convergence_round_without_evaluations_does_not_apply() -> None:
    with pytest.raises(KeyError):
        convergence_round([], [])


def test_final_model_divergence_is_the_last_logged_value(tmp_path) -> None:
    log_dir = tmp_path / REFERENCE / "seed_0"
    with SummaryWriter(str(log_dir)) as writer:
        for step, value in ((1, 0.5), (2, 0.25), (3, 0.125)):
            writer.add_scalar("server/model_divergence", value, step)
    assert METRICS["divergence"].value(_results(tmp_path), REFERENCE, 0) == 0.125
    with pytest.raises(KeyError):
        last_scalar(log_dir, "server/emd")


@pytest.mark.parametrize(("classes", "emd"), [(1, 0.9 + 9 * 0.1), (2, 2 * 0.4 + 8 * 0.1)])
def test_the_papers_partitions_give_dwfed_fedavgs_weights(classes: int, emd: float) -> None:
    # Balanced classes (60 images each, as Fashion-MNIST) dealt as the paper does to 100 equal clients: every
    # client's label distribution is 1 class, or 2 halves, against a uniform population, so D_k is the same for
    # all and the ISH weights are FedAvg's n_k / n = 1/K (the report's explanation of identical runs).
    labels = torch.arange(600) % 10
    clients = Shards(classes_per_client=classes)(labels, 100, torch.Generator().manual_seed(0))
    histograms = torch.stack([torch.bincount(labels[c], minlength=10) for c in clients])
    cohort = torch.arange(20)
    d = cohort_emd(histograms, cohort)
    assert torch.allclose(d, torch.full((20,), emd, dtype=torch.float64))
    weights, degenerate = ish_weights(d, cohort_size=20)
    sizes = histograms.sum(dim=1)[cohort].double()
    assert not degenerate and torch.allclose(weights, sizes / sizes.sum(), rtol=1e-12, atol=0)


def test_the_added_dirichlet_partition_gives_dwfed_weights_of_its_own() -> None:
    # The extra setting (not in the paper): equal sizes, Dir(0.1) class mixes. A client's D_k is
    # sum_c |q_kc - 0.1| (the population is uniform), computed here from its counts by hand; the weights
    # must then differ from FedAvg's 1/K, and a client nearer the population must weigh more.
    labels = torch.arange(6000) % 10
    clients = PerClientDirichlet(rho=1.0, size=None)(labels, 100, torch.Generator().manual_seed(0))
    assert {len(c) for c in clients} == {60}
    histograms = torch.stack([torch.bincount(labels[c], minlength=10) for c in clients])
    cohort = torch.arange(20)
    by_hand = torch.tensor([sum(abs(int(n) / 60 - 0.1) for n in histograms[k]) for k in range(20)], dtype=torch.float64)
    d = cohort_emd(histograms, cohort)
    assert torch.allclose(d, by_hand, rtol=1e-12, atol=1e-12)
    assert d.max() - d.min() > 0.2  # the devices' EMDs differ
    weights, degenerate = ish_weights(d, cohort_size=20)
    assert not degenerate and (weights - 1 / 20).abs().max() > 1e-3
    assert weights[d.argmin()] > weights[d.argmax()]


def test_every_claim_names_a_setting_metric_and_methods_of_each_scale() -> None:
    for scale in ("small", "paper"):
        settings = {s.name: s for s in PAPER.settings(scale)}
        for claim in PAPER.claims:
            assert {claim.ours, claim.baseline} <= set(settings[claim.setting].methods)
            assert claim.metric in PAPER.metrics
