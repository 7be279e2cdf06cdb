"""A paper's claims and the verdict our runs give each: reproduced, in direction only, or not.

A claim compares one method with another on one metric ("FedFa's worst-20% accuracy is higher than
FedAvg's"). Every seed trains both methods on the same data, so the evidence is the per-seed
difference in the claim's direction, ``d_s = sign * (ours_s - baseline_s)`` (``sign = -1`` where lower
is better), summarised by its mean and 95% Student t interval over the seeds. The verdict:

* **reproduced**: the mean difference is positive, its 95% interval excludes 0, and where the paper
  gives both numbers the mean difference is at least half the paper's;
* **reproduced in direction only**: the mean difference is positive, but the interval includes 0
  (or there is one seed), or the difference is under half the paper's;
* **not reproduced**: the mean difference is 0 or negative.

See docs/experiments.md, "Reproducing the papers".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lightning_fl.experiments.stats import Stats, stats

__all__ = ["DIRECTION_ONLY", "NOT_REPRODUCED", "REPRODUCED", "Claim", "Verdict", "judge"]

REPRODUCED = "reproduced"
DIRECTION_ONLY = "reproduced in direction only"
NOT_REPRODUCED = "not reproduced"


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
        difference: Per-seed difference in the claim's direction, summarised over the seeds.
        verdict: One of :data:`REPRODUCED`, :data:`DIRECTION_ONLY`, :data:`NOT_REPRODUCED`.
        reason: Why, in a few words.
    """

    claim: Claim
    difference: Stats
    verdict: str
    reason: str


def judge(claim: Claim, ours: Sequence[float], baseline: Sequence[float]) -> Verdict:
    """The verdict on ``claim`` from seed-aligned values (``ours[i]`` and ``baseline[i]`` share a seed).

    The values must be finite: a run that never reached a target enters with its full length (rounds
    or time of the whole run), a lower bound of its true cost that favours it, so a claim it loses
    still stands.

    Example:
        >>> claim = Claim("s", "A", "B", "acc", True, "Table 1", paper_ours=80.0, paper_baseline=70.0)
        >>> judge(claim, [79.0, 81.0, 80.0], [70.0, 71.0, 69.0]).verdict  # gap 10 +- 1: like the paper's
        'reproduced'
        >>> judge(claim, [71.0, 73.0, 72.0], [70.0, 71.0, 69.0]).verdict  # gap 2: under half the paper's 10
        'reproduced in direction only'
    """
    if len(ours) != len(baseline) or not ours:
        raise ValueError(f"{claim.text}: {len(ours)} values against {len(baseline)}; need one per seed for both")
    values = [*ours, *baseline]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{claim.text}: non-finite values {values}")
    sign = 1.0 if claim.higher_is_better else -1.0
    summary = stats([sign * (a - b) for a, b in zip(ours, baseline, strict=True)])
    if summary.mean <= 0:
        return Verdict(claim, summary, NOT_REPRODUCED, "the mean difference has the opposite sign (or is 0)")
    if summary.n < 2:
        return Verdict(claim, summary, DIRECTION_ONLY, "one seed: no interval")
    if summary.ci_low <= 0:
        return Verdict(claim, summary, DIRECTION_ONLY, "the 95% interval of the difference includes 0")
    gap = claim.paper_gap
    if gap is not None and gap > 0 and summary.mean < 0.5 * gap:
        return Verdict(claim, summary, DIRECTION_ONLY, f"the difference is under half the paper's ({gap:.3g})")
    return Verdict(claim, summary, REPRODUCED, "the 95% interval of the difference is above 0")

