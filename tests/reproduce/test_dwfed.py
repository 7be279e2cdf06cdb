"""DWFed's reproduction metrics (accuracy reduction, round of convergence, model divergence), by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

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


def test_every_claim_names_a_setting_metric_and_methods_of_the_paper_scale() -> None:
    settings = {s.name: s for s in PAPER.settings("paper")}
    for claim in PAPER.claims:
        assert {claim.ours, claim.baseline} <= set(settings[claim.setting].methods)
        assert claim.metric in PAPER.metrics
    # Below the paper's scale a setting that does not run is named among the things not run.
    for scale in ("small", "smoke"):
        ran = {s.name for s in PAPER.settings(scale)}
        not_run = " ".join(PAPER.not_run(scale))
        assert all(name in not_run for name in set(settings) - ran)


@pytest.mark.parametrize("scale", ["smoke", "small", "paper"])
def test_one_primary_claim_per_setting_and_it_can_differ(scale: str) -> None:
    for setting in PAPER.settings(scale):
        primary = [c for c in PAPER.claims if c.setting == setting.name and c.primary
                   and {c.ours, c.baseline} <= set(setting.methods)]
        assert len(primary) == 1, setting.name
        assert primary[0].ours.endswith("-W1") and not primary[0].untestable and primary[0].in_paper


# Table 2 as printed in the paper (FedAvg, DWFed): accuracy reduction (%) and round of convergence.
TABLE_2 = {
    "MNIST": {"1class": ((6.16, 4.48), (74, 50)), "2class": ((2.40, 0.60), (12, 8))},
    "Fashion-MNIST": {"1class": ((15.00, 10.21), (800, 620)), "2class": ((3.80, 1.20), (770, 560))},
    "CIFAR-10": {"1class": ((29.39, 21.53), (910, 750)), "2class": ((5.54, 1.39), (800, 520))},
}


def test_every_table_2_entry_is_a_claim_under_both_readings_with_the_papers_numbers() -> None:
    claims = {(c.setting, c.ours, c.baseline, c.metric): c for c in PAPER.claims}
    for data, rows in TABLE_2.items():
        setting = f"{data}, C = 0.2"
        for partition, ((fedavg_red, dwfed_red), (fedavg_conv, dwfed_conv)) in rows.items():
            for reading in ("L1", "W1"):
                ours, baseline = f"DWFed-{partition}-{reading}", f"FedAvg-{partition}"
                for metric, paper in (("reduction", (fedavg_red, dwfed_red)), ("convergence", (fedavg_conv, dwfed_conv))):
                    claim = claims[(setting, ours, baseline, metric)]
                    assert (claim.paper_baseline, claim.paper_ours) == paper and claim.in_paper
                    assert claim.higher_is_better is False and claim.source == "Table 2"
                    # Beside our rows in the results table too, for both readings.
                    assert PAPER.paper_values[(setting, ours, metric)] == paper[1]
                    assert PAPER.paper_values[(setting, baseline, metric)] == paper[0]
                    # Identical runs by construction only under L1 on class-balanced data (MNIST's classes differ).
                    assert bool(claim.untestable) == (reading == "L1" and data != "MNIST")
    assert sum(c.source == "Table 2" for c in PAPER.claims) == 3 * 2 * 2 * 2


def test_claims_the_paper_does_not_make_are_apart() -> None:
    extra = [c for c in PAPER.claims if not c.in_paper]
    assert extra and all("Dir(0.1)" in c.ours and c.paper_ours is None and not c.primary for c in extra)
    assert all("Dir(0.1)" not in c.ours for c in PAPER.claims if c.in_paper)


def test_the_readings_train_the_dwfed_callback_with_their_distance() -> None:
    [setting] = PAPER.settings("smoke")
    assert "callbacks.DWFed" not in setting.changes["FedAvg-2class"]
    for method, distance in (("DWFed-2class-L1", "l1"), ("DWFed-2class-W1", "wasserstein")):
        callback = setting.changes[method]["callbacks.DWFed"]
        assert callback["class_path"] == "lightning_fl.callbacks.DWFed"
        assert callback["init_args"]["distance"] == distance and callback["init_args"]["eta_ish"] == 1.0
        assert setting.changes[method]["data.init_args.partition"] == setting.changes["FedAvg-2class"][
            "data.init_args.partition"]


def test_discussion_is_written_from_the_measured_values() -> None:
    setting = "Fashion-MNIST, C = 0.2"
    values = {(setting, "FedAvg-2class", "accuracy"): [80.0, 82.0], (setting, "DWFed-2class-L1", "accuracy"): [80.0, 82.0],
              (setting, "DWFed-2class-W1", "accuracy"): [81.0, 84.0],  # +1 and +2: 1.50 above on average
              (setting, "FedAvg-1class", "accuracy"): [60.0, 61.0], (setting, "DWFed-1class-L1", "accuracy"): [60.0, 61.5],
              (setting, "FedAvg-2class", "reduction"): [5.0, 4.0], (setting, "DWFed-2class-W1", "reduction"): [4.0, 2.0]}
    claim = next(c for c in PAPER.claims if c.primary and c.setting == setting)
    verdicts = [SimpleNamespace(claim=claim, verdict="direction only")]
    text = PAPER.discussion(verdicts, values, {})
    assert f"{setting}, 2class: under L1 the final test accuracy equals FedAvg's in every seed (identical runs);" \
           " under W1 it is 1.50 points above FedAvg's on average over the seeds." in text
    assert f"{setting}, 1class: under L1 it differs from FedAvg's by up to 0.50 points." in text
    assert "give 1 direction only (of 1)" in text
    # Table 2's gap 3.80 - 1.20 = 2.60; ours: mean FedAvg 4.5 - mean DWFed-W1 3.0 = 1.50.
    assert "Table 2's reduction gap is 2.60 points (FedAvg minus DWFed); ours is 1.50." in text
    assert "not on this scale's data" in text  # 1-class L1 differs from FedAvg above
    del values[(setting, "DWFed-1class-L1", "accuracy")]
    assert "the measured accuracies are identical in every seed." in PAPER.discussion(verdicts, values, {})
