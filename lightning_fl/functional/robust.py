"""Robust combining rules over the stacked client updates (docs/algorithms.md, Robust aggregation rules).

Every function takes ``U``, the ``(K, P)`` fp32 stack of client update rows in cohort order, and
(where the rule uses one) ``p``, a ``(K,)`` weight vector on the simplex, and returns the ``(P,)``
aggregate. This module holds the coordinate-wise rules (median, trimmed mean), the geometric median
(smoothed Weiszfeld), centered clipping, bucketing and the tolerance helpers; the distance-based
rules (Krum, Multi-Krum, Bulyan, nearest-neighbour mixing) are in
:mod:`lightning_fl.functional.robust_distance`.

Readings documented here:

- Sorts are stable, so equal values keep cohort order and ties go to the lower cohort index.
- The unweighted median of an even count averages the two middle values exactly as
  ``torch.quantile(q=0.5)`` does (``torch.lerp``), never the lower one of ``torch.median``; it sorts
  instead of calling ``torch.quantile``, which refuses inputs above 16M elements.
- The weighted rules accumulate ``F_i`` in float64, so dyadic weights (``1/4``) hit ``F_i = 1/2``
  exactly; fp32 uniform weights such as ``1/10`` need not, which is why uniform weights use the
  unweighted rule.
- fp32 stacks on the CPU take the chunked NumPy path of
  :mod:`lightning_fl.functional.robust_columns` (25-30x faster; same values); other devices and
  dtypes sort with ``torch.sort`` here.
- These are pure functions: they do not warn, log or read configuration; the caller checks the
  requirements (:func:`check_requirement`) and picks ``f`` (:func:`effective_f`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError, check_choice
from lightning_fl.functional import robust_columns

__all__ = [
    "RULES",
    "bucketing",
    "centered_clipping",
    "check_requirement",
    "coordinate_median",
    "effective_f",
    "geometric_median",
    "meets_requirement",
    "trimmed_mean",
]

#: Rule names and the requirement on the cohort size ``K`` and tolerance ``f`` each one states.
RULES = {
    "median": "none",
    "trimmed_mean": "2f < K",
    "krum": "K > 2f + 2",
    "multi_krum": "K > 2f + 2",
    "bulyan": "K >= 4f + 3",
    "geometric_median": "none",
    "centered_clipping": "none",
    "nnm": "f < K",
    "bucketing": "none",
}


def meets_requirement(rule: str, cohort_size: int, f: int) -> bool:
    """Whether ``rule`` tolerates ``f`` of ``cohort_size`` rows (docs/algorithms.md, Robust aggregation rules).

    Args:
        rule: One of :data:`RULES` (``trimmed_mean`` reads ``f`` as the trim count ``b``).
        cohort_size: ``K``.
        f: The tolerance (``>= 0``).

    Returns:
        ``True`` when the requirement of :data:`RULES` holds.

    Raises:
        ConfigError: If ``rule`` is unknown.

    Example:
        >>> meets_requirement("krum", 5, 1), meets_requirement("krum", 4, 1)
        (True, False)
    """
    check_choice("rule", rule, RULES)
    if f < 0:
        return False
    if rule == "trimmed_mean":
        return 2 * f < cohort_size
    if rule in ("krum", "multi_krum"):
        return cohort_size > 2 * f + 2
    if rule == "bulyan":
        return cohort_size >= 4 * f + 3
    if rule == "nnm":
        return f < cohort_size
    return cohort_size >= 1


def check_requirement(rule: str, cohort_size: int, f: int) -> None:
    """Raise a one-line :class:`ConfigError` unless ``rule`` tolerates ``f`` of ``cohort_size`` rows.

    Args:
        rule: One of :data:`RULES`.
        cohort_size: ``K``.
        f: The tolerance.

    Raises:
        ConfigError: If the requirement fails (the message names the rule, ``K`` and ``f``).

    Example:
        >>> check_requirement("bulyan", 6, 1)
        Traceback (most recent call last):
        ...
        lightning_fl.faults.validation.ConfigError: bulyan needs K >= 4f + 3; got K = 6, f = 1
    """
    if not meets_requirement(rule, cohort_size, f):
        raise ConfigError(f"{rule} needs {RULES[rule]}; got K = {cohort_size}, f = {f}")


def effective_f(rule: str, cohort_size: int, f: int) -> int | None:
    """The largest ``f' <= f`` that ``rule`` tolerates in a cohort of ``cohort_size`` (``robust/f_effective``).

    For trimmed mean this is ``b_t = ceil(K_t/2) - 1`` when ``2b >= K_t``.

    Args:
        rule: One of :data:`RULES`.
        cohort_size: ``K_t``, possibly smaller than the nominal ``K``.
        f: The configured tolerance (``>= 0``).

    Returns:
        ``f'``, or ``None`` when not even ``f' = 0`` meets the requirement (the caller falls back to
        the coordinate median).

    Example:
        >>> effective_f("krum", 5, 3), effective_f("bulyan", 7, 3), effective_f("krum", 2, 0)
        (1, 1, None)
    """
    for candidate in range(f, -1, -1):
        if meets_requirement(rule, cohort_size, candidate):
            return candidate
    return None


def _check_stack(U: Tensor, p: Tensor | None = None) -> None:
    if U.dim() != 2 or U.shape[0] == 0:
        raise ValueError(f"U must be a non-empty (K, P) stack; got shape {tuple(U.shape)}")
    if p is not None and p.shape != U.shape[:1]:
        raise ValueError(f"p must have shape ({U.shape[0]},) to match U; got {tuple(p.shape)}")


def _sorted_with_mass(U: Tensor, p: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per coordinate: the sorted values, ``F_i`` and ``F_{i-1}`` (float64, ``F_0 = 0``)."""
    values, order = torch.sort(U, dim=0, stable=True)
    mass = p.to(device=U.device, dtype=torch.float64)[order]
    cum = torch.cumsum(mass, dim=0)
    return values, cum, cum - mass


def coordinate_median(U: Tensor, p: Tensor | None = None, weighted: bool = False) -> Tensor:
    """Coordinate-wise median (docs/algorithms.md, Robust aggregation rules).

    Unweighted: the middle value, or for even ``K`` the mean of the two middle values (as
    ``torch.quantile(q=0.5)``). Weighted: per coordinate the smallest ``v_(i)`` with ``F_i >= 1/2``,
    and ``(v_(i) + v_(i+1)) / 2`` when ``F_i = 1/2`` exactly.

    Args:
        U: ``(K, P)`` update rows.
        p: ``(K,)`` weights on the simplex; only read when ``weighted``.
        weighted: Use the weighted median.

    Returns:
        ``(P,)`` median.

    Raises:
        ValueError: On bad shapes, or ``weighted`` without ``p``.

    Example:
        >>> coordinate_median(torch.tensor([[0.0], [1.0], [3.0], [10.0]]))
        tensor([2.])
        >>> coordinate_median(torch.tensor([[0.0], [1.0], [3.0]]), torch.tensor([0.25, 0.25, 0.5]), weighted=True)
        tensor([2.])
    """
    _check_stack(U, p)
    k = U.shape[0]
    on_cpu = U.device.type == "cpu" and U.dtype == torch.float32
    if not weighted:
        if on_cpu:
            return robust_columns.median(U)
        values = torch.sort(U, dim=0, stable=True).values
        if k % 2:
            return values[k // 2].clone()
        # torch.lerp at weight 0.5 is what torch.quantile computes: the same bits as ByzFL's Median.
        return torch.lerp(values[k // 2 - 1], values[k // 2], 0.5)
    if p is None:
        raise ValueError("weighted median needs p")
    if on_cpu:
        return robust_columns.weighted_median(U, p)
    values, cum, _ = _sorted_with_mass(U, p)
    # F_i is non-decreasing, so the count of F_i < 1/2 is the first index with F_i >= 1/2.
    first = (cum < 0.5).sum(dim=0, keepdim=True).clamp_max(k - 1)
    lower = values.gather(0, first)
    upper = values.gather(0, (first + 1).clamp_max(k - 1))
    exact_half = cum.gather(0, first) == 0.5
    return torch.where(exact_half, (lower + upper) / 2, lower).squeeze(0)


def trimmed_mean(
    U: Tensor,
    b: int,
    p: Tensor | None = None,
    weighted: bool = False,
    beta: float | None = None,
) -> Tensor:
    """Coordinate-wise trimmed mean (docs/algorithms.md, Robust aggregation rules).

    Unweighted: drop the ``b`` smallest and ``b`` largest values per coordinate and average the rest.
    Weighted: with trim mass ``beta`` per tail, ``k_(i) = max(0, min(F_i, 1 - beta) - max(F_{i-1},
    beta))`` and the result is ``sum k_(i) v_(i) / (1 - 2 beta)``.

    Args:
        U: ``(K, P)`` update rows.
        b: Values dropped per side (unweighted); ``2b < K``.
        p: ``(K,)`` weights on the simplex; only read when ``weighted``.
        weighted: Use the weighted trimmed mean.
        beta: Trim mass per tail for the weighted rule, ``0 <= beta < 1/2``; ``None`` means ``b / K``
            (which gives the unweighted rule for uniform ``p``).

    Returns:
        ``(P,)`` trimmed mean.

    Raises:
        ValueError: If ``2b >= K`` (the caller uses :func:`effective_f` in a small cohort), ``beta`` is
            outside ``[0, 1/2)``, or on bad shapes.

    Example:
        >>> trimmed_mean(torch.tensor([[0.0], [1.0], [2.0], [9.0]]), b=1)
        tensor([1.5000])
    """
    _check_stack(U, p)
    k = U.shape[0]
    on_cpu = U.device.type == "cpu" and U.dtype == torch.float32
    if not weighted:
        if b < 0 or 2 * b >= k:
            raise ValueError(f"trimmed mean needs 0 <= b and 2b < K; got b = {b}, K = {k}")
        if on_cpu:
            return robust_columns.trimmed_mean(U, b)
        values = torch.sort(U, dim=0, stable=True).values
        return values[b : k - b].mean(dim=0)
    if p is None:
        raise ValueError("weighted trimmed mean needs p")
    mass = b / k if beta is None else beta
    if not 0.0 <= mass < 0.5:
        raise ValueError(f"trim mass beta must be in [0, 0.5); got {mass!r}")
    if on_cpu:
        return robust_columns.weighted_trimmed_mean(U, p, mass)
    values, cum, prev = _sorted_with_mass(U, p)
    kept = (torch.minimum(cum, torch.tensor(1.0 - mass, dtype=torch.float64, device=U.device))
            - prev.clamp_min(mass)).clamp_min(0.0)
    total = (kept * values.to(torch.float64)).sum(dim=0) / (1.0 - 2.0 * mass)
    return total.to(U.dtype)


def _objective(z: Tensor, U: Tensor, p: Tensor) -> tuple[Tensor, Tensor]:
    """``(||z - u_k||)_k`` by exact differences, and ``G(z) = sum_k p_k ||z - u_k||``."""
    dist = torch.cdist(z.unsqueeze(0), U, compute_mode="donot_use_mm_for_euclid_dist").squeeze(0)
    return dist, torch.dot(p, dist)


def geometric_median(
    U: Tensor,
    p: Tensor,
    nu: float = 1e-5,
    iterations: int = 4,
    ftol: float = 1e-6,
    init: str = "mean",
) -> Tensor:
    """Geometric median by smoothed Weiszfeld (RFA; docs/algorithms.md, Robust aggregation rules).

    ``z_0 = sum p_k u_k`` (``init="mean"``) or ``0`` (``init="zero"``, ByzFL);
    ``z_{l+1} = sum beta_k u_k / sum beta_k`` with ``beta_k = p_k / max(nu, ||z_l - u_k||)``; stop
    after ``iterations`` steps or when ``|G(z_l) - G(z_{l+1})| < ftol G(z_{l+1})``.

    Args:
        U: ``(K, P)`` update rows.
        p: ``(K,)`` weights on the simplex (uniform for ByzFL's reading).
        nu: Smoothing ``nu > 0``.
        iterations: At most this many Weiszfeld steps ``T >= 0``.
        ftol: Relative tolerance on ``G``; ``0`` never stops early (ByzFL).
        init: ``"mean"`` (RFA) or ``"zero"`` (ByzFL).

    Returns:
        ``(P,)`` the last iterate.

    Raises:
        ConfigError: If ``init`` is unknown.
        ValueError: If ``nu <= 0``, ``iterations < 0`` or on bad shapes.

    Example:
        >>> U = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> geometric_median(U, torch.full((3,), 1 / 3), iterations=0)
        tensor([0.3333, 0.3333])
    """
    _check_stack(U, p)
    check_choice("init", init, ("mean", "zero"))
    if not nu > 0 or iterations < 0:
        raise ValueError(f"geometric median needs nu > 0 and iterations >= 0; got nu = {nu}, iterations = {iterations}")
    p = p.to(device=U.device, dtype=U.dtype)
    z = torch.tensordot(p, U, dims=1) if init == "mean" else torch.zeros_like(U[0])
    dist, objective = _objective(z, U, p)
    for _ in range(iterations):
        beta = p / dist.clamp_min(nu)
        z = torch.tensordot(beta / beta.sum(), U, dims=1)
        previous = objective
        dist, objective = _objective(z, U, p)
        # One host sync per step: RFA's stopping test decides the Python loop.
        if abs(float(previous) - float(objective)) < ftol * float(objective):
            break
    return z


def centered_clipping(U: Tensor, p: Tensor, v0: Tensor, tau: float, iterations: int = 1) -> Tensor:
    """Centered clipping around the previous output (docs/algorithms.md, Robust aggregation rules).

    ``v_{l+1} = v_l + sum_k p_k min(1, tau / ||u_k - v_l||) (u_k - v_l)``, factor 1 when the norm is 0.

    Args:
        U: ``(K, P)`` update rows.
        p: ``(K,)`` weights on the simplex (uniform for ByzFL and epfml).
        v0: ``(P,)`` start point: the rule's previous output, zeros at ``t = 0``.
        tau: Clipping radius ``tau > 0``.
        iterations: ``L >= 1``.

    Returns:
        ``(P,)`` ``v_L``: the aggregate and the rule's new state.

    Raises:
        ValueError: If ``tau <= 0``, ``iterations < 1`` or on bad shapes.

    Example:
        >>> U = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
        >>> centered_clipping(U, torch.tensor([0.5, 0.5]), torch.zeros(2), tau=1.0)
        tensor([0.3000, 0.9000])
    """
    _check_stack(U, p)
    if v0.shape != U.shape[1:]:
        raise ValueError(f"v0 must have shape ({U.shape[1]},); got {tuple(v0.shape)}")
    if not (math.isfinite(tau) and tau > 0) or iterations < 1:
        raise ValueError(f"centered clipping needs tau > 0 and iterations >= 1; got tau = {tau}, iterations = {iterations}")
    p = p.to(device=U.device, dtype=U.dtype)
    v = v0.to(device=U.device, dtype=U.dtype)
    for _ in range(iterations):
        diff = U - v
        norm = torch.linalg.vector_norm(diff, dim=1)
        # tau / 0 is inf, whose min with 1 is the factor 1 the rule asks for at norm 0.
        factor = torch.clamp(tau / norm, max=1.0)
        v = v + torch.tensordot(p * factor, diff, dims=1)
    return v


def bucketing(U: Tensor, p: Tensor | None, s: int, permutation: Tensor) -> tuple[Tensor, Tensor]:
    """Bucketing pre-aggregator (docs/algorithms.md, Robust aggregation rules).

    Rows are taken in ``permutation`` order, ``ceil(K / s)`` buckets of ``s`` consecutive rows (the
    last may be smaller); a bucket's row is ``sum p_i u_i / sum p_i`` and its weight ``sum p_i``.

    Args:
        U: ``(K, P)`` update rows.
        p: ``(K,)`` weights on the simplex, or ``None`` for uniform.
        s: Bucket size ``s >= 1``.
        permutation: ``(K,)`` a permutation of ``0..K-1``, drawn by the caller keyed
            ``(seed, t, "bucketing")``.

    Returns:
        ``(rows, weights)``: ``(ceil(K/s), P)`` bucket rows and ``(ceil(K/s),)`` bucket weights. A
        bucket of weight 0 gets the plain mean of its rows.

    Raises:
        ValueError: If ``s < 1``, ``permutation`` is not a permutation of ``0..K-1`` or on bad shapes.

    Example:
        >>> U = torch.tensor([[0.0], [1.0], [2.0]])
        >>> bucketing(U, None, 2, torch.tensor([2, 0, 1]))
        (tensor([[1.],
                [1.]]), tensor([0.6667, 0.3333]))
    """
    _check_stack(U, p)
    k = U.shape[0]
    perm = permutation.to(device=U.device, dtype=torch.long)
    if s < 1:
        raise ValueError(f"bucket size s must be >= 1; got {s}")
    if perm.shape != (k,) or not torch.equal(torch.sort(perm).values, torch.arange(k, device=U.device)):
        raise ValueError(f"permutation must be a permutation of 0..{k - 1}")
    weights = torch.full((k,), 1.0 / k, dtype=U.dtype, device=U.device) if p is None else p.to(U)
    buckets = -(-k // s)
    # Row j of the permuted order lands in bucket j // s; the (B, K) mixing matrix holds p there.
    member = torch.zeros(buckets, k, dtype=U.dtype, device=U.device)
    slot = torch.arange(k, device=U.device) // s
    member[slot, perm] = 1.0
    mass = member * weights
    totals = mass.sum(dim=1)
    # A zero-mass bucket still needs a finite row: its plain mean.
    mix = torch.where(totals.unsqueeze(1) > 0, mass / totals.clamp_min(torch.finfo(U.dtype).tiny).unsqueeze(1),
                      member / member.sum(dim=1, keepdim=True))
    return mix @ U, totals
