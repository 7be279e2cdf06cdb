"""Combining rules ``R(U, p)``: the weighted mean and the coordinate/geometric robust rules.

docs/algorithms.md, Robust aggregation rules. Each rule is a thin class over a pure function of
:mod:`lightning_fl.functional.robust`; the distance-based rules (Krum, Multi-Krum, Bulyan) are in
:mod:`lightning_fl.aggregation.distance_rules`. A rule gets the ``(K_t, P)`` stack of update rows in
cohort order, the weights ``p`` on the simplex and the tolerance ``f`` the pipeline chose for this
cohort, and returns the ``(P,)`` aggregate and, for rules that pick rows, the picked cohort indices.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.aggregation.stage import PipelineStage, StageContext
from lightning_fl.faults.validation import ConfigError, check_choice, check_non_negative, check_positive
from lightning_fl.functional.robust import centered_clipping, coordinate_median, geometric_median, trimmed_mean
from lightning_fl.functional.weights import weighted_average

#: ``rfa_init`` values of :class:`GeometricMedian`: RFA's weighted mean, or ByzFL's zero vector.
RFA_INITS = ("mean", "zero")


class CombiningRule(PipelineStage):
    """Base of the combining rules.

    Attributes:
        requirement: The key of :data:`lightning_fl.functional.robust.RULES` naming what the rule needs of
            ``K`` and ``f`` (``None``: any cohort of at least one row).
        reads_weights: Whether the rule uses ``p`` (a rule that ignores a non-uniform ``p`` warns once).
        picks_rows: Whether :meth:`combine` returns the picked rows (``robust/byzantine_selected``).
        needs_every_row: Whether the rule needs every client's row (always, except the mean: no rule runs
            on partial sums, docs/algorithms.md, Robust aggregation rules).
    """

    requirement: str | None = None
    reads_weights: bool = False
    picks_rows: bool = False
    needs_every_row: bool = True

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        """``(R(U, p), picked)``: the ``(P,)`` aggregate and the picked cohort indices (or ``None``)."""
        raise NotImplementedError


class Mean(CombiningRule):
    """The weighted mean ``sum_k p_k u_k``: every algorithm's own rule, and the default.

    Example (YAML)::

        model:
          aggregation:
            rule: {class_path: lightning_fl.aggregation.Mean}
    """

    reads_weights = True
    needs_every_row = False

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        return weighted_average(U, p), None


class Median(CombiningRule):
    """Coordinate-wise median (Yin et al. 2018); ``weighted: true`` uses ``p`` (docs/algorithms.md).

    Args:
        weighted: The weighted median (the smallest value whose cumulative weight reaches 1/2).
    """

    requirement = "median"

    def __init__(self, weighted: bool = False) -> None:
        self.weighted = bool(weighted)
        self.reads_weights = self.weighted

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        return coordinate_median(U, p, self.weighted), None


class TrimmedMean(CombiningRule):
    """Coordinate-wise trimmed mean (Yin et al. 2018): drop ``b`` values per side, average the rest.

    ``b`` is the given count, else ``floor(beta K_t)``, else the pipeline's tolerance ``f``. In a cohort
    too small for it (``2b >= K_t``) ``b_t = ceil(K_t/2) - 1``, with one warning; at the nominal cohort
    size that is a configuration error (docs/algorithms.md, Robust aggregation rules).

    Args:
        b: Values dropped per side (``>= 0``).
        beta: Fraction dropped per side, ``0 <= beta < 1/2`` (with ``weighted``: the trim mass per tail).
        weighted: The weighted trimmed mean over ``p``.

    Raises:
        ConfigError: If both ``b`` and ``beta`` are given, ``b < 0`` or ``beta`` is outside ``[0, 1/2)``.
    """

    requirement = "trimmed_mean"

    def __init__(self, b: int | None = None, beta: float | None = None, weighted: bool = False) -> None:
        if b is not None and beta is not None:
            raise ConfigError("model.aggregation.rule.init_args: give b or beta, not both")
        if b is not None:
            check_non_negative("model.aggregation.rule.init_args.b", b)
        if beta is not None and not 0.0 <= beta < 0.5:
            raise ConfigError(f"model.aggregation.rule.init_args.beta must be in [0, 0.5); got {beta}")
        self.b, self.beta, self.weighted = b, beta, bool(weighted)
        self.reads_weights = self.weighted

    def trim_count(self, cohort_size: int, f: int) -> int:
        """``b`` for a cohort of ``cohort_size`` when the pipeline's tolerance is ``f``."""
        if self.b is not None:
            return int(self.b)
        if self.beta is not None:
            return int(self.beta * cohort_size)
        return f

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        k = U.shape[0]
        b = self.trim_count(k, f)
        if 2 * b >= k:
            b = -(-k // 2) - 1
            ctx.warn_once("trim", f"round {ctx.round_idx + 1}: TrimmedMean trims b = {b} per side in a cohort of"
                                  f" {k} (2b < K_t; warned once)")
        beta = self.beta if self.weighted and self.beta is not None else None
        return trimmed_mean(U, b, p, self.weighted, beta), None


class GeometricMedian(CombiningRule):
    """Geometric median by smoothed Weiszfeld (RFA, Pillutla et al. 2022), weighted by ``p``.

    Args:
        nu: Smoothing ``nu > 0`` (RFA 1e-5; ByzFL 0.1).
        iterations: At most ``T`` Weiszfeld steps (RFA 4; ByzFL 3).
        ftol: Stop when ``G`` changes by less than this fraction (0: never early, ByzFL).
        rfa_init: ``mean`` (RFA: ``z_0 = sum p_k u_k``) or ``zero`` (ByzFL).
    """

    requirement = "geometric_median"
    reads_weights = True

    def __init__(self, nu: float = 1e-5, iterations: int = 4, ftol: float = 1e-6, rfa_init: str = "mean") -> None:
        check_positive("model.aggregation.rule.init_args.nu", nu)
        check_non_negative("model.aggregation.rule.init_args.iterations", iterations)
        check_non_negative("model.aggregation.rule.init_args.ftol", ftol)
        check_choice("model.aggregation.rule.init_args.rfa_init", rfa_init, RFA_INITS)
        self.nu, self.iterations, self.ftol, self.rfa_init = float(nu), int(iterations), float(ftol), rfa_init

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        return geometric_median(U, p, self.nu, self.iterations, self.ftol, self.rfa_init), None


class CenteredClipping(CombiningRule):
    """Centered clipping (Karimireddy et al. 2021) around its previous output, weighted by ``p``.

    State: ``center``, the last output ``v`` (zeros before the first round), checkpointed.

    Args:
        tau: Clipping radius ``tau > 0`` (required).
        iterations: ``L >= 1`` clipping steps per round.
    """

    requirement = "centered_clipping"
    reads_weights = True

    def __init__(self, tau: float, iterations: int = 1) -> None:
        check_positive("model.aggregation.rule.init_args.tau", tau)
        check_positive("model.aggregation.rule.init_args.iterations", iterations, integer=True)
        self.tau, self.iterations = float(tau), int(iterations)
        self.add_server_state("center")

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        v0 = torch.zeros_like(U[0]) if self.center is None else self.center.to(U)
        self.center = centered_clipping(U, p, v0, self.tau, self.iterations)
        return self.center.clone(), None


__all__ = ["RFA_INITS", "CenteredClipping", "CombiningRule", "GeometricMedian", "Mean", "Median", "TrimmedMean"]
