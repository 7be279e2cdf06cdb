"""The reproduction report in a reviewer's order: checklist, headline count, results, then the claims."""

from __future__ import annotations

import pytest

from lightning_fl.reproduce.claims import Claim, judge_all
from lightning_fl.reproduce.paper import Metric, Paper, SettingResults
from lightning_fl.reproduce.report import render_report, verdict_counts, verdict_table
from lightning_fl.reproduce.settings import Setting

ACC = Metric("Average (%)", lambda r, m, s: 0.0)
SETTING = Setting("Run", {"Ours": "a.yaml", "Base": "b.yaml", "Other": "c.yaml"})
# Claims of a paper: one primary and two others in the setting that runs, one in a setting this scale does
# not run, and one comparison the paper does not make.
PRIMARY = Claim("Run", "Ours", "Base", "acc", True, "Table 1", 80.0, 70.0, primary=True)
SECOND = Claim("Run", "Ours", "Other", "acc", True, "Table 1")
IDENTICAL = Claim("Run", "Other", "Base", "acc", True, "Table 1", untestable="Other's weights equal Base's here")
ELSEWHERE = Claim("Big", "Ours", "Base", "acc", True, "Table 2", primary=True)
EXTRA = Claim("Run", "Other", "Ours", "acc", True, "not in the paper", in_paper=False)
PAPER = Paper(
    key="toy", title="Toy (2024)", experiment="A toy experiment.", settings=lambda scale: [SETTING],
    metrics={"acc": ACC}, claims=[PRIMARY, SECOND, IDENTICAL, ELSEWHERE, EXTRA],
    scaled_down=lambda scale: [f"{scale}: 10 rounds instead of 100."],
    not_run=lambda scale: ["Table 2's Big setting (hours per run)."],
)


def _verdicts():
    # Differences per seed: Ours - Base 9, 10, 11 (reproduced); Ours - Other -1, 0, 1 (inconclusive);
    # Other - Ours 1, 0, -1 (inconclusive, apart).
    ours, base, other = [79.0, 80.0, 81.0], [70.0, 70.0, 70.0], [80.0, 80.0, 80.0]
    return judge_all([(PRIMARY, ours, base), (SECOND, ours, other), (IDENTICAL, other, base), (EXTRA, other, ours)])


def _report(verdicts, results: SettingResults) -> str:
    return render_report(PAPER, "small", [0, 1, 2], [(results, "| table of Run |\n")], verdicts, "make reproduce",
                         1.0, "files")


def test_headline_counts_every_claim_of_the_paper_and_none_of_the_others() -> None:
    counts = verdict_counts(PAPER, _verdicts())
    # PRIMARY reproduced, SECOND inconclusive, IDENTICAL not testable, ELSEWHERE not run; EXTRA not counted.
    assert counts == {"reproduced": 1, "direction only": 0, "inconclusive": 1, "contradicted": 0,
                      "not testable under this reading": 1, "not run at this scale": 1}


def test_the_report_reads_in_a_reviewers_order() -> None:
    results = SettingResults(SETTING, [0, 1, 2], [], [], tuning_budget={"Base": "20 trials on seeds 100, 101"})
    report = _report(_verdicts(), results)
    order = ["## Reviewer's checklist", "**Settings that differ from the paper**", "small: 10 rounds instead of 100.",
             "**Tuning budget per method**", "**Seeds:** 0, 1, 2 (3 seeds)", "**Not run here:**",
             "Table 2's Big setting (hours per run).",
             "- 1 of the paper's claims: their settings or methods do not run at scale `small`", "**Verdict rule:**",
             "**Verdicts on the paper's 4 claims:** 1 reproduced, 0 direction only, 1 inconclusive, 0 contradicted,"
             " 1 not testable under this reading, 1 not run at this scale. 1 comparison the paper does not make:"
             " listed apart, not counted.",
             "## Results", "| table of Run |", "## Claims", "### Primary claims", "### The paper's other claims",
             "### Claims not run at this scale", "### Comparisons the paper does not make"]
    positions = [report.index(text) for text in order]
    assert positions == sorted(positions)
    assert "- Run: Ours: not tuned; Base: 20 trials on seeds 100, 101; Other: not tuned." in report
    primary = report[report.index("### Primary claims"):report.index("### The paper's other claims")]
    other = report[report.index("### The paper's other claims"):report.index("### Claims not run at this scale")]
    apart = report[report.index("### Comparisons the paper does not make"):]
    assert "Ours higher than Base" in primary and "Ours higher than Other" not in primary
    assert "Ours higher than Other" in other and "Other higher than Base" in other and "Other higher than Ours" not in other
    assert "Other higher than Ours" in apart and "Ours higher than Base" not in apart
    assert "Big: Ours higher than Base (Average (%))." in report


def test_a_verdict_row_shows_the_papers_gap_ours_the_p_value_the_holm_level_and_the_reason() -> None:
    [primary] = [v for v in _verdicts() if v.claim is PRIMARY]
    row = verdict_table(PAPER, [primary]).splitlines()[2]
    # Ours: 10 -+ t_{0.975,2} / sqrt(3) = 10 -+ 2.4842; the family of the paper's testable "better" claims is
    # PRIMARY and SECOND (IDENTICAL is not testable, EXTRA is a family of its own), and PRIMARY ranks first
    # (p = 1 - t / sqrt(t^2 + 2) with t = 10 sqrt 3: 0.0033), so its Holm level is 1 - 0.05 / 2.
    t = 10 * 3 ** 0.5
    p = 1 - t / (t * t + 2) ** 0.5
    assert p == pytest.approx(0.0033, abs=1e-4)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:7] == ["Run", "Ours higher than Base (Average (%))", "Table 1", "+10.00", "+10.00 [+7.52, +12.48]",
                         f"{p:.4f}", "97.50%"]
    assert cells[7].startswith("**reproduced**: above 0 at Holm's level (rank 1 of 2")
    assert "the paper's +10 lies within" in cells[7]


def test_equivalence_claims_name_their_margin() -> None:
    close = Claim("Run", "Ours", "Base", "acc", True, "Table 1", form="comparable", margin=0.5)
    [verdict] = judge_all([(close, [70.1, 69.9, 70.0], [70.0, 70.0, 70.0])])
    row = verdict_table(PAPER, [verdict]).splitlines()[2]
    assert "Ours comparable to Base (Average (%), margin ±0.5)" in row and "**reproduced**" in row
    assert "| – | – |" in row  # no p-value, no Holm level: judged against the margin


def test_a_setting_without_a_primary_claim_is_named() -> None:
    verdicts = [v for v in _verdicts() if v.claim is not PRIMARY]
    report = _report(verdicts, SettingResults(SETTING, [0, 1, 2], [], []))
    assert "No primary claim declared for Run." in report
    assert "No primary claim declared" not in _report(_verdicts(), SettingResults(SETTING, [0, 1, 2], [], []))
