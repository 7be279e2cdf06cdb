"""The reproduction report, ``docs/reproduction/<paper>.md``.

In a reviewer's order: the checklist (what differs from the paper, the tuning budgets, the seeds, what
was not run, the verdict rule), the headline count over every claim of the paper, the paper's numbers
beside ours per setting, then the verdicts: the primary claims, the paper's other claims, and apart
(never counted) the comparisons the paper does not make.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lightning_fl.experiments.stats import Stats, stats
from lightning_fl.reproduce.claims import LABELS, NOT_RUN, Claim, Verdict
from lightning_fl.reproduce.paper import Paper, SettingResults

__all__ = ["VERDICT_RULE", "checklist", "render_report", "setting_table", "verdict_counts", "verdict_table"]


def _ours(s: Stats, digits: int) -> str:
    spread = f" ± {s.std:.{digits}f}" if s.n > 1 else ""
    return f"{s.mean:.{digits}f}{spread}"


def setting_table(paper: Paper, results: SettingResults, values: Mapping[tuple[str, str], Sequence[float]]) -> str:
    """One row per method: each metric as "paper | ours (mean ± sample std over seeds)"."""
    setting = results.setting
    keys = [k for k in paper.metrics if any((m, k) in values for m in setting.reported)]
    header = "| Method | " + " | ".join(f"{paper.metrics[k].label}: paper \\| ours" for k in keys) + " |"
    lines = [header, "| :--- |" + " ---: |" * len(keys)]
    for method in setting.reported:
        cells = []
        for key in keys:
            metric = paper.metrics[key]
            printed = paper.paper_values.get((setting.name, method, key))
            ours = values.get((method, key))
            left = "–" if printed is None else f"{printed:.{metric.digits}f}"
            right = "–" if not ours else _ours(stats(ours), metric.digits)
            cells.append(f"{left} \\| {right}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    notes = [f"\n{name}: per seed and column, the best of {', '.join(members)} (not a run of its own)."
             for name, members in setting.best_of.items()]
    return "\n".join(lines) + "\n" + "\n".join(notes) + ("\n" if notes else "")


def _claim_text(paper: Paper, claim: Claim) -> str:
    """The claim in the report's words, e.g. "FedFa higher than FedAvg (Worst 20% (%))"."""
    label, against = paper.metrics[claim.metric].label, paper.metrics[claim.against].label
    relation = {"better": "higher" if claim.higher_is_better else "lower",
                "comparable": "comparable to",
                "slightly_better": "slightly " + ("higher" if claim.higher_is_better else "lower")}[claim.form]
    relation += "" if claim.form == "comparable" else " than"
    margin = "" if claim.form == "better" else f", margin ±{claim.margin:g}"
    if claim.baseline_metric:
        return f"{claim.ours} ({label}) {relation} {claim.baseline} ({against}){margin}"
    return f"{claim.ours} {relation} {claim.baseline} ({label}{margin})"


def _p_value(p: float | None) -> str:
    if p is None:
        return "–"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def verdict_table(paper: Paper, verdicts: Sequence[Verdict]) -> str:
    """One row per claim: the paper's difference, ours (mean [95% interval]), p-value, Holm level, verdict."""
    lines = ["| Setting | Claim | Source | Paper's difference | Our difference [95% interval] | p | Holm level |"
             " Verdict |",
             "| :--- | :--- | :--- | ---: | ---: | ---: | ---: | :--- |"]
    for v in verdicts:
        claim, d = v.claim, v.difference
        digits = paper.metrics[claim.metric].digits
        gap = "–" if claim.paper_gap is None else f"{claim.paper_gap:+.{digits}f}"
        interval = "" if math.isnan(d.ci) else f" [{d.ci_low:+.{digits}f}, {d.ci_high:+.{digits}f}]"
        level = "–" if v.holm_level is None else f"{100 * v.holm_level:.2f}%"
        lines.append(f"| {claim.setting} | {_claim_text(paper, claim)} | {claim.source} | {gap} |"
                     f" {d.mean:+.{digits}f}{interval} | {_p_value(v.p_value)} | {level} | **{v.verdict}**: {v.reason} |")
    return "\n".join(lines) + "\n"


def verdict_counts(paper: Paper, verdicts: Sequence[Verdict]) -> dict[str, int]:
    """``{label: number of the paper's claims}`` over every label of :data:`LABELS`.

    Every in-paper claim of ``paper`` counts once: by its verdict, or as "not run at this scale" where
    no verdict judges it (its setting or methods do not run); comparisons the paper does not make never count.
    """
    counts = dict.fromkeys(LABELS, 0)
    judged = [v for v in verdicts if v.claim.in_paper]
    for v in judged:
        counts[v.verdict] += 1
    counts[NOT_RUN] += len(_not_run(paper, verdicts))
    return counts


def _comparisons(n: int) -> str:
    return f"{n} comparison{'' if n == 1 else 's'}"


def _not_run(paper: Paper, verdicts: Sequence[Verdict]) -> list[Claim]:
    judged = {v.claim for v in verdicts}
    return [c for c in paper.claims if c.in_paper and c not in judged]


def checklist(paper: Paper, scale: str, seeds: Sequence[int], sections: Sequence[tuple[SettingResults, str]],
              hyperparameters: str, claims_not_run: int = 0) -> str:
    """The reviewer's checklist: what differs, the tuning budgets, the seeds, what was not run, the verdict rule.

    ``claims_not_run``: how many of the paper's claims this scale does not run (listed under the claims).
    """
    differs = "\n".join(f"- {line}" for line in paper.scaled_down(scale)) or "- Nothing: the paper's setting as printed."
    budgets = []
    for results, _ in sections:
        per_method = "; ".join(f"{method}: {_budget(results, method)}" for method in results.setting.methods)
        budgets.append(f"- {results.setting.name}: {per_method}.")
    lines = list(paper.not_run(scale))
    if claims_not_run:
        lines.append(f"{claims_not_run} of the paper's claims: their settings or methods do not run at scale `{scale}`"
                     " (listed under the claims, counted as \"not run at this scale\").")
    not_run = "\n".join(f"- {line}" for line in lines) or "- None declared."
    methods_note = f"\n\n{paper.methods_note}" if paper.methods_note else ""
    return "\n".join([
        "## Reviewer's checklist\n",
        f"**Settings that differ from the paper** (scale `{scale}`):\n\n{differs}{methods_note}\n",
        "**Tuning budget per method** (a fair comparison gives every method the same):\n\n" + "\n".join(budgets) + "\n",
        f"{hyperparameters}\n",
        f"**Seeds:** {', '.join(map(str, seeds))} ({len(seeds)} seed{'s' if len(seeds) != 1 else ''}), the same for every"
        " method: each seed trains every method on the same data, so each claim is judged on per-seed differences;"
        " hyperparameter selection never uses these seeds.\n",
        f"**Not run here:**\n\n{not_run}\n",
        f"**Verdict rule:** {VERDICT_RULE}\n",
    ])


def _budget(results: SettingResults, method: str) -> str:
    if method in results.tuning_budget:
        return results.tuning_budget[method]
    if method in results.tuned:  # selected on the validation splits, by a search that did not state its budget
        return f"selected on the validation splits ({results.tuned[method]})"
    return "not tuned"


#: The verdict rule in one paragraph (the report's and docs/experiments.md's words).
VERDICT_RULE = (
    "a claim compares two methods on one metric in the paper's direction; the evidence is the per-seed difference"
    " `d_s` in that direction (same seed, same data), with its two-sided 95% Student t interval `[lo, hi]` and the"
    " two-sided p-value of the t test of `d = 0`. **Reproduced**: `lo > 0` at Holm's level: the paper's claims are"
    " ranked by p-value and the claim ranked `i` of `m` is checked with its interval at `1 - 0.05 / (m - i + 1)`,"
    " stopping at the first claim whose interval holds 0 (the claims the paper does not make form a family of their"
    " own); where the paper prints a size, the reason says whether it lies within `[lo, hi]` or how far off it is."
    " **Direction only**: mean `d > 0` but not reproduced. **Inconclusive**: the interval holds 0 and the mean is"
    " `<= 0`. **Contradicted**: `hi < 0`, a significant reversal. Claims of the form \"comparable\" or \"slightly"
    " better\" are judged against their margin `delta`: reproduced when `[lo, hi]` lies within `[-delta, delta]` (above"
    " `-delta` for \"slightly better\"), contradicted when it lies outside. **Not testable under this reading**: the"
    " two runs are identical by construction (the reason is given), or every per-seed difference is 0. With one"
    " seed there is no interval: direction only when the difference is positive, else inconclusive."
)


def _hyperparameters(sections: Sequence[tuple[SettingResults, str]], tune: bool, _seed: int | None = None) -> str:
    """Where the methods' hyperparameters come from: tuned with one budget, or the configs as they are.

    Args:
        sections: Each setting's results (``tuned``, ``tuning_budget``).
        tune: Whether this reproduction tuned.
        _seed: Unused (the tuning seeds are in each budget).
    """
    if not tune:
        return ("Hyperparameters: the configs' as listed above (the paper's settings as printed), nothing tuned"
                " (`TUNE=0`, or the default at the paper's scale; `TUNE=1` tunes every method with the same budget on"
                " the validation splits first, docs/experiments.md, \"Fair baselines\").")
    if not any(results.tuned for results, _ in sections):
        return ("Hyperparameters: nothing tuned: no method here can be (the settings keep no validation splits, or"
                " list no methods to tune; see above), so every method runs at the configs' values.")
    # tuning_budget reads "<trials> x <seeds> on <objective>": the budget is shared, the objective per method.
    budgets = sorted({b.partition(" on ")[0] for results, _ in sections for b in results.tuning_budget.values()})
    objectives: dict[str, set[str]] = {}
    for results, _ in sections:
        for method, budget in results.tuning_budget.items():
            objectives.setdefault(budget.partition(" on ")[2], set()).add(method)
    on = ", ".join(f"{metric} ({', '.join(sorted(methods))})" for metric, methods in sorted(objectives.items()))
    untuned = sorted({f"{m} ({results.setting.name})" for results, _ in sections if results.tuned
                      for m in results.setting.methods if m not in results.tuned})
    kept = (f" Not tuned (the setting lists only some methods, or the method keeps no validation splits; they run at"
            f" the config's values): {', '.join(untuned)}."
            if untuned else " Every method was tuned, the paper's own included.")
    return ("Hyperparameters: every tuned method got the same budget on the validation splits, never on test"
            f" (docs/experiments.md, \"Fair baselines\"): {'; '.join(budgets)} per method, on tuning seeds no"
            f" reported run uses, each selected on its objective: {on} (Optuna TPE, a median pruner over rounds, a"
            " space widened when its best trial sits at its edge). The selections are listed under each setting's"
            f" table; its `tuning.md` holds every trial's validation score.{kept} `TUNE=0`: every method at the"
            " configs' values.")


def render_report(paper: Paper, scale: str, seeds: Sequence[int], sections: Sequence[tuple[SettingResults, str]],
                  verdicts: Sequence[Verdict], command: str, minutes: float, files: str, run_minutes: float = 0.0,
                  tuned: bool = False, discussion: str = "") -> str:
    """The whole markdown report (``minutes``: every call's wall time; ``run_minutes``: the runs' own, summed)."""
    counts = verdict_counts(paper, verdicts)
    apart = [v for v in verdicts if not v.claim.in_paper]
    headline = (f"**Verdicts on the paper's {sum(counts.values())} claims:** "
                + ", ".join(f"{n} {label}" for label, n in counts.items()) + "."
                + (f" {_comparisons(len(apart))} the paper does not make: listed apart, not counted." if apart
                   else "") + "\n")
    parts = [
        f"# Reproduction: {paper.title}\n",
        "Generated by `" + command + "` (do not edit by hand: rerun it). "
        f"Scale `{scale}`, seeds {', '.join(map(str, seeds))}: {minutes:.1f} minutes of wall time over every call of the"
        f" command (runs are kept, so a later call only reports; it includes any selection runs); the reported"
        f" runs' own times add up to {run_minutes:.1f} minutes (several run at a time).\n",
        f"{paper.experiment}\n",
        checklist(paper, scale, seeds, sections, _hyperparameters(sections, tuned, max(seeds) + 1), counts[NOT_RUN]),
        headline,
        "## Results\n",
        "Ours: mean ± sample standard deviation over the seeds, final evaluation on the clients' test"
        f" splits unless the column says otherwise; paper: {paper.paper_values_status}.\n",
    ]
    for results, table in sections:
        parts.append(f"### {results.setting.name}\n\n{table}")
        if results.tuned:
            chosen = "; ".join(f"{method} {point}" for method, point in results.tuned.items())
            edges = "; ".join(f"{method}'s {', '.join(keys)}" for method, keys in results.tuned_at_edge.items())
            edge_note = (f" Still at the edge of its search space after the widenings the budget allows (a wider"
                         f" space may do better): {edges}." if edges else "")
            failed = "; ".join(f"{method} {share}" for method, share in results.tuning_failed.items())
            failed_note = (f" Trials that failed (diverged: they score nothing and use up the method's budget, so"
                           f" it selects among fewer points): {failed}." if failed else "")
            parts.append(f"Selected on the validation splits: {chosen} (`{results.setting.folder}/tuning.md` holds"
                         f" every setting's score).{edge_note}{failed_note}\n")
    parts.append("## Claims\n")
    parts.append("Each row: the paper's difference and ours in the claim's direction (positive: as the paper says),"
                 " ours with its 95% interval over the seeds, the two-sided p-value, the level of the interval Holm's"
                 " procedure checked it with, and the verdict with its reason (the rule is in the checklist).\n")
    primary = [v for v in verdicts if v.claim.in_paper and v.claim.primary]
    other = [v for v in verdicts if v.claim.in_paper and not v.claim.primary]
    # A setting without a primary claim is a gap a reviewer should see, not a silently shorter table.
    unmarked = [r.setting.name for r, _ in sections if r.setting.name not in {v.claim.setting for v in primary}]
    if primary or unmarked:
        parts.append("### Primary claims (one per setting)\n\n" + (verdict_table(paper, primary) if primary else "")
                     + (f"\nNo primary claim declared for {', '.join(unmarked)}.\n" if unmarked else ""))
    if other:
        parts.append(f"### The paper's other claims\n\n{verdict_table(paper, other)}")
    missing = _not_run(paper, verdicts)
    if missing:
        parts.append("### Claims not run at this scale\n\nCounted above as \"not run at this scale\": "
                     + "; ".join(f"{c.setting}: {_claim_text(paper, c)}" for c in missing) + ".\n")
    if apart:
        parts.append("### Comparisons the paper does not make\n\nNot counted in the verdicts above; judged with"
                     f" Holm's correction among themselves.\n\n{verdict_table(paper, apart)}")
    if discussion:
        parts.append(f"\n## Discussion\n\n{discussion}\n")
    parts.append(f"\n## Files\n\n{files}\n")
    return "\n".join(parts)
