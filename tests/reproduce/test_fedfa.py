"""FedFa's claim set: every comparison of Tables 2 and 3, checked against numbers read off the paper by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lightning_fl.experiments.tuning import TUNE_METRICS
from lightning_fl.reproduce.fedfa import PAPER

SETTINGS = ("Synthetic-IID", "Synthetic(0,0)", "Synthetic(0.5,0.5)", "Synthetic(1,1)")
OTHERS = ("FedAvg", "FedProx", "q-FFL", "FedFa-mo")
COLUMNS = ("average", "worst20", "best20", "variance")

#: Read off the paper (Information Sciences 2022) for this test, row by row as printed: Table 2 (FedAvg, FedProx,
#: q-Fair, FedFa) and Table 3 (FedFa-mo); columns Average, Worst 20%, Best 20%, Variance.
TABLES = """
Synthetic-IID FedAvg 89.11 78.17 100.00 68.04
Synthetic-IID FedProx 71.92 55.46 86.09 129.09
Synthetic-IID q-FFL 83.22 60.70 99.21 204.49
Synthetic-IID FedFa 85.70 71.46 100.00 98.74
Synthetic-IID FedFa-mo 80.11 60.90 96.05 151.76
Synthetic(0,0) FedAvg 54.67 6.81 98.18 1112.46
Synthetic(0,0) FedProx 75.02 37.21 100.00 611.10
Synthetic(0,0) q-FFL 73.79 28.29 100.00 809.76
Synthetic(0,0) FedFa 78.25 43.41 100.00 530.27
Synthetic(0,0) FedFa-mo 78.06 24.21 100.00 971.18
Synthetic(0.5,0.5) FedAvg 40.24 0.00 98.18 1448.46
Synthetic(0.5,0.5) FedProx 67.84 33.60 100.00 618.00
Synthetic(0.5,0.5) q-FFL 71.67 30.99 100.00 732.20
Synthetic(0.5,0.5) FedFa 73.30 41.27 100.00 464.81
Synthetic(0.5,0.5) FedFa-mo 73.06 31.12 100.00 740.16
Synthetic(1,1) FedAvg 54.78 1.38 96.85 1069.37
Synthetic(1,1) FedProx 64.75 9.72 100.00 1088.87
Synthetic(1,1) q-FFL 72.78 25.24 100.00 887.05
Synthetic(1,1) FedFa 76.88 37.03 100.00 603.69
Synthetic(1,1) FedFa-mo 76.44 27.48 100.00 818.90
"""
READ = {(row.split()[0], row.split()[1], column): float(number)
        for row in TABLES.strip().splitlines() for column, number in zip(COLUMNS, row.split()[2:], strict=True)}


def test_paper_values_match_the_printed_tables() -> None:
    # 4 settings x 5 methods x 4 columns, Best 20% included.
    assert len(PAPER.paper_values) == 80
    for key, value in READ.items():
        assert PAPER.paper_values[key] == pytest.approx(value), key


def test_every_comparison_of_fedfa_is_a_claim_with_the_papers_numbers() -> None:
    # 4 settings x 4 other methods x 4 columns; every one is a comparison the tables print.
    assert len(PAPER.claims) == 64 and all(c.in_paper for c in PAPER.claims)
    pairs = sorted((c.setting, ({c.ours, c.baseline} - {"FedFa"}).pop(), c.metric) for c in PAPER.claims)
    assert pairs == sorted((s, m, k) for s in SETTINGS for m in OTHERS for k in COLUMNS)
    for c in PAPER.claims:
        assert "FedFa" in (c.ours, c.baseline)
        assert c.paper_ours == PAPER.paper_values[(c.setting, c.ours, c.metric)]
        assert c.paper_baseline == PAPER.paper_values[(c.setting, c.baseline, c.metric)]
        assert c.higher_is_better == (c.metric != "variance")
        assert c.source == ("Table 3" if "FedFa-mo" in (c.ours, c.baseline) else "Table 2")


def test_claims_follow_the_printed_direction() -> None:
    # Reference: FedFa is behind only against FedAvg on Synthetic-IID (average 85.70 < 89.11, worst 20%
    # 71.46 < 78.17, variance 98.74 > 68.04); there the claim is the paper's "FedAvg better".
    behind = {c.metric for c in PAPER.claims if c.ours != "FedFa"}
    assert behind == {"average", "worst20", "variance"}
    assert all(c.ours == "FedAvg" and c.setting == "Synthetic-IID" for c in PAPER.claims if c.ours != "FedFa")
    for c in PAPER.claims:
        sign = 1 if c.higher_is_better else -1
        assert sign * (c.paper_ours - c.paper_baseline) >= 0, c.text


def test_forms_follow_the_papers_words_and_ties() -> None:
    forms = {(c.setting, ({c.ours, c.baseline} - {"FedFa"}).pop(), c.metric): c.form for c in PAPER.claims}
    # Equal printed numbers (the Best 20% 100.00s): IID FedAvg, and FedProx, q-FFL, FedFa-mo on the non-IID
    # federations; "the average accuracy of both is close" (FedFa-mo, non-IID, gaps 0.19, 0.24, 0.44).
    comparable = {("Synthetic-IID", "FedAvg", "best20")}
    comparable |= {(s, m, "best20") for s in SETTINGS[1:] for m in ("FedProx", "q-FFL", "FedFa-mo")}
    comparable |= {(s, "FedFa-mo", "average") for s in SETTINGS[1:]}
    assert {k for k, f in forms.items() if f == "comparable"} == comparable
    # "In the IID synthetic dataset, our method is slightly inferior to FedAvg".
    assert {k for k, f in forms.items() if f == "slightly_better"} == {("Synthetic-IID", "FedAvg", "average")}
    assert sum(f == "better" for f in forms.values()) == 64 - 13 - 1


def test_one_primary_claim_per_setting_fedfas_worst_20_against_the_strongest_baseline_it_beats() -> None:
    primary = {c.setting: (c.ours, c.baseline, c.metric) for c in PAPER.claims if c.primary}
    assert sum(c.primary for c in PAPER.claims) == 4
    # Worst 20% of FedFa / the Table 2 baselines it beats: IID 71.46 / FedProx 55.46, q-FFL 60.70 (FedAvg's
    # 78.17 is ahead); (0,0) 43.41 / FedProx 37.21; (0.5,0.5) 41.27 / FedProx 33.60; (1,1) 37.03 / q-FFL 25.24.
    assert primary == {"Synthetic-IID": ("FedFa", "q-FFL", "worst20"), "Synthetic(0,0)": ("FedFa", "FedProx", "worst20"),
                       "Synthetic(0.5,0.5)": ("FedFa", "FedProx", "worst20"),
                       "Synthetic(1,1)": ("FedFa", "q-FFL", "worst20")}


@pytest.mark.parametrize("scale", ["smoke", "small", "paper"])
def test_objectives_q_ffl_on_its_worst_20_the_others_on_the_average(scale: str) -> None:
    for setting in PAPER.settings(scale):
        assert set(setting.objectives) == set(setting.methods)
        for method, objective in setting.objectives.items():
            assert objective in TUNE_METRICS
            assert objective == ("val/acc_worst20" if method == "q-FFL" else "val/acc_mean"), method


def test_not_run_lists_the_real_datasets_and_the_smoke_cut() -> None:
    assert any("Femnist and Sent140" in line for line in PAPER.not_run("small"))
    [smoke] = PAPER.settings("smoke")
    judged = [c for c in PAPER.claims if c.setting == smoke.name and {c.ours, c.baseline} <= set(smoke.methods)]
    assert len(judged) == 4  # FedFa against FedAvg on Synthetic(1,1), four columns
    assert "so 4 of the claims are judged" in PAPER.not_run("smoke")[0]


def _verdict(setting: str, ours: str, baseline: str, metric: str, verdict: str) -> SimpleNamespace:
    [claim] = [c for c in PAPER.claims if (c.setting, c.ours, c.baseline, c.metric) == (setting, ours, baseline, metric)]
    return SimpleNamespace(claim=claim, verdict=verdict)


def test_discussion_is_written_from_the_measured_values() -> None:
    verdicts = [_verdict("Synthetic-IID", "FedFa", "q-FFL", "average", "inconclusive"),
                _verdict("Synthetic-IID", "FedFa", "FedProx", "best20", "direction only"),
                _verdict("Synthetic(1,1)", "FedFa", "FedAvg", "average", "direction only"),
                _verdict("Synthetic(1,1)", "FedFa", "q-FFL", "worst20", "reproduced")]
    values = {("Synthetic-IID", "FedAvg", "average"): [80.0, 78.0], ("Synthetic-IID", "FedFa", "average"): [66.0, 65.0],
              ("Synthetic-IID", "FedFa", "best20"): [100.0, 100.0], ("Synthetic-IID", "FedProx", "best20"): [99.0, 100.0],
              ("Synthetic(1,1)", "FedAvg", "average"): [50.0, 60.0]}
    text = PAPER.discussion(verdicts, values, {"Synthetic-IID": {"FedAvg": "client_lr=0.1"}})
    # FedAvg's seed spread on Synthetic(1,1): sample std of 50 and 60 = 7.07.
    assert "±7.1 points on Synthetic(1,1)" in text
    # IID means: FedAvg (80 + 78) / 2 = 79.0, FedFa (66 + 65) / 2 = 65.5.
    assert "FedAvg is ahead of FedFa (79.0% against 65.5%)" in text and "(FedAvg: client_lr=0.1)" in text
    # FedProx's best 20% averages 99.5 and FedFa's 100: at the ceiling.
    assert f"Best 20%: in {verdicts[1].claim.text} (Synthetic-IID) both methods' best clients" in text
    assert PAPER.discussion([verdicts[-1]], values, {}) == ""  # nothing short of reproduced: nothing to explain
