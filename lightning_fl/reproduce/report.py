"""The reproduction report, ``docs/reproduction/<paper>.md``: the paper's numbers beside ours, and verdicts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lightning_fl.experiments.stats import Stats, stats
from lightning_fl.reproduce.claims import Verdict
from lightning_fl.reproduce.paper import Paper, SettingResults

__all__ = ["render_report", "setting_table", "verdict_table"]


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


def verdict_table(paper: Paper, verdicts: Sequence[Verdict]) -> str:
    """One row per claim: the paper's gap, ours (mean [95% interval] over seeds) and the verdict."""
    lines = ["| Setting | Claim | Source | Paper's difference | Our difference [95% interval] | Verdict |",
             "| :--- | :--- | :--- | ---: | ---: | :--- |"]
    for v in verdicts:
        claim, d = v.claim, v.difference
        digits = paper.metrics[claim.metric].digits
        gap = "–" if claim.paper_gap is None else f"{claim.paper_gap:+.{digits}f}"
        interval = "" if math.isnan(d.ci) else f" [{d.ci_low:+.{digits}f}, {d.ci_high:+.{digits}f}]"
        text = (f"{claim.ours} {'higher' if claim.higher_is_better else 'lower'} than {claim.baseline}"
                f" ({paper.metrics[claim.metric].label})")
        if claim.baseline_metric:
            direction = "higher" if claim.higher_is_better else "lower"
            text = (f"{claim.ours} ({paper.metrics[claim.metric].label}) {direction} than {claim.baseline}"
                    f" ({paper.metrics[claim.against].label})")
        lines.append(f"| {claim.setting} | {text} | {claim.source} | {gap} | {d.mean:+.{digits}f}{interval} |"
                     f" **{v.verdict}**: {v.reason} |")
    return "\n".join(lines) + "\n"


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
    counts = {name: sum(v.verdict == name for v in verdicts)
              for name in ("reproduced", "reproduced in direction only", "not reproduced")}
    parts = [
        f"# Reproduction: {paper.title}\n",
        "Generated by `" + command + "` (do not edit by hand: rerun it). "
        f"Scale `{scale}`, seeds {', '.join(map(str, seeds))}: {minutes:.1f} minutes of wall time over every call of the"
        f" command (runs are kept, so a later call only reports; it includes any selection runs); the reported"
        f" runs' own times add up to {run_minutes:.1f} minutes (several run at a time).\n",
        f"{paper.experiment}\n",
        "**Verdicts:** " + ", ".join(f"{n} {name}" for name, n in counts.items()) + f" of {len(verdicts)} claims.\n",
        "## What differs from the paper\n",
        "\n".join(f"- {line}" for line in paper.scaled_down(scale)) + "\n",
    ]
    if paper.methods_note:
        parts.append(f"{paper.methods_note}\n")
    parts.append(_hyperparameters(sections, tuned, max(seeds) + 1) + "\n")
    parts.append("## Results\n")
    parts.append("Ours: mean ± sample standard deviation over the seeds, final evaluation on the clients' test"
                 f" splits unless the column says otherwise; paper: {paper.paper_values_status}.\n")
    for results, table in sections:
        parts.append(f"### {results.setting.name}\n\n{table}")
        if results.tuned:
            chosen = "; ".join(f"{method} {point}" for method, point in results.tuned.items())
            edges = "; ".join(f"{method}'s {', '.join(keys)}" for method, keys in results.tuned_at_edge.items())
            edge_note = f" At the edge of its grid (a wider grid may do better): {edges}." if edges else ""
            parts.append(f"Selected on the validation splits: {chosen} (`{results.setting.folder}/tuning.md` holds"
                         f" every setting's score).{edge_note}\n")
    parts.append("## Claims\n")
    parts.append("A claim is **reproduced** when the per-seed difference in its direction has a 95% Student t"
                 " interval above 0 and, where the paper prints both numbers, a mean at least half the paper's;"
                 " **in direction only** when the mean difference points the paper's way but the interval"
                 " includes 0 (or the gap is under half the paper's); **not reproduced** when it points the"
                 " other way (docs/experiments.md, \"Reproducing the papers\").\n")
    parts.append(verdict_table(paper, verdicts))
    if discussion:
        parts.append(f"\n## Discussion\n\n{discussion}\n")
    parts.append(f"\n## Files\n\n{files}\n")
    return "\n".join(parts)
