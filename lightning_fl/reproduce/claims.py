"""A paper's claims and the verdicts our runs give them, judged all at once with Holm's correction.

A claim compares one method with another on one metric ("FedFa's worst-20% accuracy is higher than
FedAvg's"). Every seed trains both methods on the same data, so the evidence is the per-seed
difference in the claim's direction, ``d_s = sign * (ours_s - baseline_s)`` (``sign = -1`` where lower
is better), with its mean, its two-sided 95% Student t interval ``[lo, hi]`` and the two-sided p-value
of the one-sample t test of ``d = 0``. The verdicts (:func:`judge_all`):

* **reproduced**: ``lo > 0`` at Holm's level (below); where the paper gives both numbers, the reason
  says whether the paper's difference lies within ``[lo, hi]`` or how far off it is;
* **direction only**: the mean difference is positive, but the claim is not reproduced;
* **inconclusive**: the interval contains 0 and the mean is ``<= 0``;
* **contradicted**: ``hi < 0``, a significant reversal;
* **not testable under this reading**: the two runs are identical by construction (``Claim.untestable``
  states why). Two methods that merely score the same on every seed (both at 100% best-20, say) are
  judged like any other difference of 0: a "comparable" claim is reproduced (``[0, 0]`` lies inside the
  margin), a "better" one inconclusive.

Holm's correction runs over one family: the paper's ``"better"`` claims with an interval (the claims of
``in_paper=False`` form a family of their own). Ranked by p-value, the claim ranked ``i`` of ``m`` is
checked with its interval at level ``1 - 0.05 / (m - i + 1)``; the procedure stops at the first claim
whose interval contains 0, and that claim and every one after it get the unadjusted rules above (at
best "direction only"). A claim whose Holm interval lies below 0 is a rejection too (contradicted), so
the procedure goes on past it. ``"comparable"`` and ``"slightly_better"`` claims are equivalence claims:
**reproduced** when ``[lo, hi]`` lies inside ``[-margin, margin]`` (for "slightly better": ``lo >
-margin``), **contradicted** when it lies outside. One seed gives no interval and no p-value: a claim
is then "direction only" when its difference is positive and "inconclusive" otherwise.

See docs/experiments.md, "Reproducing the papers".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lightning_fl.experiments.stats import Stats, stats, t_pvalue, t_quantile
from lightning_fl.faults.validation import ConfigError, check_choice

__all__ = ["ALPHA", "CONTRADICTED", "DIRECTION_ONLY", "FORMS", "INCONCLUSIVE", "LABELS", "NOT_RUN", "NOT_TESTABLE",
           "REPRODUCED", "Claim", "Verdict", "judge", "judge_all"]

REPRODUCED = "reproduced"
DIRECTION_ONLY = "direction only"
INCONCLUSIVE = "inconclusive"
CONTRADICTED = "contradicted"
NOT_TESTABLE = "not testable under this reading"
#: Not a verdict on data: a claim of the paper whose setting or methods this scale does not run.
NOT_RUN = "not run at this scale"
#: Every label of the headline count, in the report's order.
LABELS = (REPRODUCED, DIRECTION_ONLY, INCONCLUSIVE, CONTRADICTED, NOT_TESTABLE, NOT_RUN)
FORMS = ("better", "comparable", "slightly_better")
#: Family-wise error rate of Holm's procedure (two-sided 95% intervals for a family of one).
ALPHA = 0.05


@dataclass(frozen=True)
class Claim:
    """One comparison a paper makes.

    Attributes:
        setting: The experiment it belongs to (a key of the paper's settings, e.g. ``"Synthetic(1,1)"``).
        ours: The method the paper proposes (a method name of the setting).
        baseline: The method it is compared with.
        metric: What is compared (a key of the values handed to :func:`judge`).
        higher_is_better: ``False`` for variances, rounds and times.
        source: Where the paper states it (``"Table 2"``).
        paper_ours: The paper's number for ``ours``, in the units shown (``None``: not reported).
        paper_baseline: The paper's number for ``baseline``.
        baseline_metric: The metric read for ``baseline`` when it differs from ``metric`` (pFedMe's
            personalized model against its own global model: one method, two metrics); ``None``: ``metric``.
        primary: The setting's primary claim (one per setting; listed first in the report).
        in_paper: ``False`` for a comparison the paper does not make (reported apart, never counted in the
            headline nor in the multiplicity correction of the paper's claims).
        form: ``"better"`` (the paper says one is better), ``"comparable"`` (close, no direction) or
            ``"slightly_better"`` (better by at most about ``margin``); the last two are judged against
            the equivalence margin.
        margin: The equivalence margin ``delta`` of ``comparable``/``slightly_better`` claims, in the
            metric's units (default 1 accuracy point).
        untestable: Non-empty where the two runs are identical by construction under this reading (the
            reason, shown in the report): the claim is then "not testable under this reading".

    Raises:
        ConfigError: If ``form`` is not one of :data:`FORMS` or ``margin`` is not a number > 0.
    """

    setting: str
    ours: str
    baseline: str
    metric: str
    higher_is_better: bool
    source: str
    paper_ours: float | None = None
    paper_baseline: float | None = None
    baseline_metric: str | None = None
    primary: bool = False
    in_paper: bool = True
    form: str = "better"
    margin: float = 1.0
    untestable: str = ""

    def __post_init__(self) -> None:
        # A paper module is imported before anything trains: a misspelt form fails there, in one line.
        check_choice(f"Claim.form of {self.text}", self.form, FORMS)
        if not (isinstance(self.margin, (int, float)) and math.isfinite(self.margin) and self.margin > 0):
            raise ConfigError(f"Claim.margin of {self.text} must be a finite number > 0; got {self.margin!r}")

    @property
    def against(self) -> str:
        """The metric read for the baseline."""
        return self.baseline_metric or self.metric

    @property
    def text(self) -> str:
        """The claim in words, e.g. ``FedFa acc_worst20 > FedAvg`` (``pFedMe pm > pFedMe gm``)."""
        other = f" {self.baseline_metric}" if self.baseline_metric else ""
        return f"{self.ours} {self.metric} {'>' if self.higher_is_better else '<'} {self.baseline}{other}"

    @property
    def paper_gap(self) -> float | None:
        """The paper's difference in the claim's direction (``None`` where a number is missing)."""
        if self.paper_ours is None or self.paper_baseline is None:
            return None
        return (self.paper_ours - self.paper_baseline) * (1 if self.higher_is_better else -1)


@dataclass(frozen=True)
class Verdict:
    """The verdict on a :class:`Claim`.

    Attributes:
        claim: The claim.
        difference: Per-seed difference in the claim's direction, summarised over the seeds (its
            ``ci_low``/``ci_high`` are the 95% interval ``[lo, hi]``).
        verdict: One of :data:`LABELS` but :data:`NOT_RUN`.
        reason: Why, in a few words (and, where the paper states a size, how it compares with ours).
        p_value: Two-sided p-value of the t test of ``d = 0`` (``None``: no test, e.g. one seed, an
            equivalence claim or an untestable one).
        holm_level: Confidence level of the interval the claim was checked with in Holm's procedure,
            ``1 - 0.05 / (m - i + 1)`` (``None``: not checked, being outside the family or after the stop).
        holm_interval: That interval (``None`` with ``holm_level``).
    """

    claim: Claim
    difference: Stats
    verdict: str
    reason: str
    p_value: float | None = None
    holm_level: float | None = None
    holm_interval: tuple[float, float] | None = None


def judge(claim: Claim, ours: Sequence[float], baseline: Sequence[float]) -> Verdict:
    """The verdict on one claim judged alone (a family of one: Holm's level is 95%).

    Example:
        >>> claim = Claim("s", "A", "B", "acc", True, "Table 1", paper_ours=80.0, paper_baseline=70.0)
        >>> judge(claim, [79.0, 81.0, 80.0], [70.0, 71.0, 69.0]).verdict  # gap 10 +- 1: above 0
        'reproduced'
        >>> judge(claim, [71.0, 69.0, 72.0], [70.0, 71.0, 69.0]).verdict  # gaps 1, -2, 3: the interval holds 0
        'direction only'
    """
    return judge_all([(claim, ours, baseline)])[0]


def judge_all(claims: Sequence[tuple[Claim, Sequence[float], Sequence[float]]]) -> list[Verdict]:
    """The verdicts on all of a paper's claims at once, in the order given.

    Args:
        claims: ``(claim, ours, baseline)`` with seed-aligned values (``ours[i]`` and ``baseline[i]`` share
            a seed). The values must be finite: a run that never reached a target enters with its full
            length (rounds or time of the whole run), a lower bound of its true cost that favours it, so
            a claim it loses still stands.

    Returns:
        One :class:`Verdict` per claim; the in-paper ``"better"`` claims with an interval form one Holm
        family, the ``in_paper=False`` ones another.

    Raises:
        ValueError: If a claim's values do not pair up or are not finite.
    """
    differences = [_differences(claim, ours, baseline) for claim, ours, baseline in claims]
    verdicts: list[Verdict | None] = [None] * len(claims)
    families: dict[bool, list[int]] = {True: [], False: []}
    for index, ((claim, _, _), d) in enumerate(zip(claims, differences, strict=True)):
        summary = stats(d)
        if claim.untestable:
            verdicts[index] = Verdict(claim, summary, NOT_TESTABLE, claim.untestable)
        elif summary.n < 2:
            positive = summary.mean > 0 and claim.form != "comparable"
            verdicts[index] = Verdict(claim, summary, DIRECTION_ONLY if positive else INCONCLUSIVE,
                                      "one seed: no interval")
        elif claim.form != "better":
            verdicts[index] = _equivalence(claim, summary)
        else:
            families[claim.in_paper].append(index)
    for members in families.values():
        for index, verdict in _holm([(claims[i][0], differences[i]) for i in members]).items():
            verdicts[members[index]] = verdict
    return [v for v in verdicts if v is not None]


def _differences(claim: Claim, ours: Sequence[float], baseline: Sequence[float]) -> list[float]:
    if len(ours) != len(baseline) or not ours:
        raise ValueError(f"{claim.text}: {len(ours)} values against {len(baseline)}; need one per seed for both")
    values = [*ours, *baseline]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{claim.text}: non-finite values {values}")
    sign = 1.0 if claim.higher_is_better else -1.0
    return [sign * (a - b) for a, b in zip(ours, baseline, strict=True)]


def _interval(summary: Stats, level: float) -> tuple[float, float]:
    """The two-sided Student t interval of the mean at confidence ``level``."""
    half = t_quantile(1 - (1 - level) / 2, summary.n - 1) * summary.std / math.sqrt(summary.n)
    return summary.mean - half, summary.mean + half


def _holm(family: Sequence[tuple[Claim, Sequence[float]]]) -> dict[int, Verdict]:
    """Holm's step-down procedure over ``family``: ``{position in family: verdict}``."""
    p_values = [t_pvalue(d) for _, d in family]
    order = sorted(range(len(family)), key=lambda k: (p_values[k], k))  # ties keep the paper's order
    m, stopped, out = len(family), False, {}
    for rank, k in enumerate(order, start=1):
        claim, summary = family[k][0], stats(family[k][1])
        if stopped:
            out[k] = _unadjusted(claim, summary, p_values[k], "Holm's procedure stopped at a claim ranked before it")
            continue
        level = 1 - ALPHA / (m - rank + 1)
        lo, hi = _interval(summary, level)
        where = f"rank {rank} of {m}, interval at {100 * level:.2f}%"
        if lo > 0:
            out[k] = Verdict(claim, summary, REPRODUCED, f"above 0 at Holm's level ({where}){_size(claim, summary)}",
                             p_values[k], level, (lo, hi))
        elif hi < 0:
            out[k] = Verdict(claim, summary, CONTRADICTED, f"below 0 at Holm's level ({where}){_size(claim, summary)}",
                             p_values[k], level, (lo, hi))
        else:
            stopped = True  # Holm stops at the first claim it cannot reject: no later claim is reproduced
            verdict = _unadjusted(claim, summary, p_values[k], f"its interval holds 0 at Holm's level ({where})")
            out[k] = Verdict(claim, summary, verdict.verdict, verdict.reason, p_values[k], level, (lo, hi))
    return out


def _unadjusted(claim: Claim, summary: Stats, p_value: float, why: str) -> Verdict:
    """A ``"better"`` claim Holm's procedure does not reproduce, by its 95% interval and sign."""
    if summary.ci_high < 0:
        label, unadjusted = CONTRADICTED, "the 95% interval lies below 0"
    elif summary.mean > 0:
        label = DIRECTION_ONLY
        unadjusted = "the 95% interval lies above 0" if summary.ci_low > 0 else "the 95% interval holds 0"
        unadjusted += ", the mean is positive"
    elif summary.mean == 0 and summary.std == 0:
        label, unadjusted = INCONCLUSIVE, "every per-seed difference is 0 (the two score the same on every seed)"
    else:
        label, unadjusted = INCONCLUSIVE, "the 95% interval holds 0 and the mean is <= 0"
    return Verdict(claim, summary, label, f"{why}; {unadjusted}{_size(claim, summary)}", p_value)


def _equivalence(claim: Claim, summary: Stats) -> Verdict:
    """A ``"comparable"``/``"slightly_better"`` claim: its 95% interval against ``[-margin, margin]``."""
    delta, lo, hi = claim.margin, summary.ci_low, summary.ci_high
    size = _size(claim, summary)
    if claim.form == "comparable":
        if -delta <= lo and hi <= delta:
            return Verdict(claim, summary, REPRODUCED, f"the 95% interval lies within ±{delta:g}{size}")
        if hi < -delta or lo > delta:
            return Verdict(claim, summary, CONTRADICTED, f"the 95% interval lies outside ±{delta:g}{size}")
        return Verdict(claim, summary, INCONCLUSIVE, f"the 95% interval crosses ±{delta:g}{size}")
    if lo > -delta:
        return Verdict(claim, summary, REPRODUCED, f"the 95% interval lies above -{delta:g}{size}")
    if hi < -delta:
        return Verdict(claim, summary, CONTRADICTED, f"the 95% interval lies below -{delta:g}{size}")
    label = DIRECTION_ONLY if summary.mean > 0 else INCONCLUSIVE
    return Verdict(claim, summary, label, f"the 95% interval reaches below -{delta:g}{size}")


def _size(claim: Claim, summary: Stats) -> str:
    """Where the paper's difference lies against our 95% interval ("" where the paper gives no size)."""
    gap = claim.paper_gap
    if gap is None or math.isnan(summary.ci):
        return ""
    lo, hi = summary.ci_low, summary.ci_high
    if lo <= gap <= hi:
        return f"; the paper's {gap:+.3g} lies within [{lo:+.3g}, {hi:+.3g}]"
    off, side = (gap - hi, "above") if gap > hi else (lo - gap, "below")
    return f"; the paper's {gap:+.3g} lies {off:.3g} {side} [{lo:+.3g}, {hi:+.3g}]"
