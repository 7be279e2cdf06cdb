"""Tests for the robust combining rules and pre-aggregators (SPEC section 11.2, 11.4).

Each rule is checked on a small case worked out by hand (the arithmetic is in the comments) and
against a naive reference with explicit Python loops over rows, coordinates and pairs, on random
stacks of a few sizes (even and odd K) and on small-integer stacks full of ties, where fp32 is exact
and the tie rule (lower cohort index) decides.

``byzfl`` does not import in this environment (not installed; it needs torchvision, which does not
import with our CPU torch), so there is no comparison against it (docs/algorithms.md says so).
"""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fl.faults.validation import ConfigError
from lightning_fl.functional.robust import (
    bucketing,
    centered_clipping,
    check_requirement,
    coordinate_median,
    effective_f,
    geometric_median,
    meets_requirement,
    trimmed_mean,
)
from lightning_fl.functional.robust_distance import (
    bulyan,
    krum,
    krum_scores,
    multi_krum,
    nearest_neighbour_mixing,
    pairwise_sq_distances,
)

# K = 5, P = 2, used by the coordinate rules.
COORD = torch.tensor([[1.0, 5.0], [3.0, 1.0], [2.0, 4.0], [9.0, 2.0], [0.0, 30.0]])
# Dyadic weights, so every F_i is exact.
DYADIC = torch.tensor([1 / 8, 1 / 8, 1 / 4, 1 / 2, 0.0])
# K = 5, P = 2, used by the distance rules: a=(0,0), b=(1,0), c=(0,2), d=(1,1), e=(10,10).
# Squared distances: ab 1, ac 4, ad 2, ae 200, bc 5, bd 1, be 181, cd 2, ce 164, de 162.
POINTS = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [10.0, 10.0]])
SIZES = [(5, 3), (6, 1), (7, 4), (8, 3), (11, 2), (12, 5)]


def _stacks():
    """Random normal stacks and small-integer stacks (many ties), each with dyadic simplex weights."""
    g = torch.Generator().manual_seed(20)
    for k, d in SIZES:
        for ties in (False, True):
            if ties:
                U = torch.randint(-2, 3, (k, d), generator=g).float()
            else:
                U = torch.randn(k, d, generator=g)
            # A random composition of 64 into K parts: weights i/64, F_i exact, F_i = 1/2 happens.
            cuts = torch.sort(torch.randint(0, 65, (k - 1,), generator=g)).values.tolist()
            parts = [b - a for a, b in zip([0] + cuts, cuts + [64])]
            yield U, torch.tensor([w / 64 for w in parts])


STACKS = list(_stacks())
IDS = [f"K{U.shape[0]}P{U.shape[1]}{'ties' if i % 2 else ''}" for i, (U, _) in enumerate(STACKS)]


def _column(U, c):
    return [float(U[i, c]) for i in range(U.shape[0])]


def _sorted_pairs(values, p):
    # Python's sort is stable: equal values keep cohort order.
    order = sorted(range(len(values)), key=lambda i: values[i])
    return [values[i] for i in order], [float(p[i]) for i in order]


def _sq(U, i, j):
    return sum((float(U[i, c]) - float(U[j, c])) ** 2 for c in range(U.shape[1]))


def _naive_krum_scores(U, f, rows=None, neighbours=None):
    rows = list(range(U.shape[0])) if rows is None else rows
    count = len(rows) - f - 2 if neighbours is None else neighbours
    return {i: sum(sorted(_sq(U, i, j) for j in rows if j != i)[:count]) for i in rows}


def _argmin_lowest(scores):
    best = None
    for i in sorted(scores):
        if best is None or scores[i] < scores[best]:
            best = i
    return best


# --- median -----------------------------------------------------------------------------------------


def test_median_by_hand():
    # Sorted columns: 0,1,2,3,9 -> 2 and 1,2,4,5,30 -> 4.
    assert torch.equal(coordinate_median(COORD), torch.tensor([2.0, 4.0]))
    # Even K (first four rows): 1,2,3,9 -> 2.5 (not the lower 2 of torch.median); 1,2,4,5 -> 3.
    assert torch.equal(coordinate_median(COORD[:4]), torch.tensor([2.5, 3.0]))


def test_weighted_median_by_hand():
    # Column 0 sorted with weights: 0 (0), 1 (1/8), 2 (1/4), 3 (1/8), 9 (1/2); F = 0, 1/8, 3/8, 1/2:
    # F = 1/2 exactly at 3 -> (3 + 9) / 2 = 6. Column 1: 1 (1/8), 2 (1/2): F = 1/8, 5/8 -> 2.
    assert torch.equal(coordinate_median(COORD, DYADIC, weighted=True), torch.tensor([6.0, 2.0]))


@pytest.mark.parametrize(("U", "p"), STACKS, ids=IDS)
def test_median_against_loops_and_quantile(U, p):
    k = U.shape[0]
    expected, expected_w = [], []
    for c in range(U.shape[1]):
        v, w = _sorted_pairs(_column(U, c), p)
        expected.append(v[k // 2] if k % 2 else (v[k // 2 - 1] + v[k // 2]) / 2)
        cum = 0.0
        for i in range(k):
            cum += w[i]
            if cum >= 0.5:
                expected_w.append((v[i] + v[min(i + 1, k - 1)]) / 2 if cum == 0.5 else v[i])
                break
    assert torch.allclose(coordinate_median(U), torch.tensor(expected), rtol=1e-6, atol=1e-7)
    # The same bits as torch.quantile (ByzFL's Median).
    assert torch.equal(coordinate_median(U), torch.quantile(U, 0.5, dim=0))
    assert torch.allclose(coordinate_median(U, p, weighted=True), torch.tensor(expected_w), rtol=1e-6, atol=1e-7)


# --- trimmed mean -----------------------------------------------------------------------------------


def test_trimmed_mean_by_hand():
    # b = 1: mean(1, 2, 3) = 2 and mean(2, 4, 5) = 11/3.
    assert torch.allclose(trimmed_mean(COORD, 1), torch.tensor([2.0, 11 / 3]), rtol=1e-7, atol=0)
    # b = 0 is the mean; b = 2 is the median for K = 5.
    assert torch.allclose(trimmed_mean(COORD, 0), COORD.mean(0))
    assert torch.equal(trimmed_mean(COORD, 2), coordinate_median(COORD))


def test_weighted_trimmed_mean_by_hand():
    # beta = 1/4, k_i = max(0, min(F_i, 3/4) - max(F_{i-1}, 1/4)).
    # Column 0: v = 0,1,2,3,9, F = 0,1/8,3/8,1/2,1 -> k = 0,0,1/8,1/8,1/4; (2/8 + 3/8 + 9/4) / (1/2) = 23/4.
    # Column 1: v = 1,2,4,5,30, F = 1/8,5/8,7/8,1,1 -> k = 0,3/8,1/8,0,0; (6/8 + 4/8) / (1/2) = 5/2.
    got = trimmed_mean(COORD, 1, DYADIC, weighted=True, beta=0.25)
    assert torch.equal(got, torch.tensor([23 / 4, 5 / 2]))


def test_trimmed_mean_needs_2b_below_k():
    with pytest.raises(ValueError, match="2b < K"):
        trimmed_mean(COORD, 3)
    with pytest.raises(ValueError, match="beta"):
        trimmed_mean(COORD, 1, DYADIC, weighted=True, beta=0.5)


@pytest.mark.parametrize(("U", "p"), STACKS, ids=IDS)
@pytest.mark.parametrize("b", [0, 1, 2])
def test_trimmed_mean_against_loops(U, p, b):
    k = U.shape[0]
    beta = b / k + 0.03
    expected, expected_w = [], []
    for c in range(U.shape[1]):
        v, w = _sorted_pairs(_column(U, c), p)
        kept = v[b : k - b]
        expected.append(sum(kept) / len(kept))
        total, before = 0.0, 0.0
        for i in range(k):
            after = before + w[i]
            total += max(0.0, min(after, 1 - beta) - max(before, beta)) * v[i]
            before = after
        expected_w.append(total / (1 - 2 * beta))
    assert torch.allclose(trimmed_mean(U, b), torch.tensor(expected), rtol=1e-5, atol=1e-6)
    got = trimmed_mean(U, b, p, weighted=True, beta=beta)
    assert torch.allclose(got, torch.tensor(expected_w), rtol=1e-5, atol=1e-6)
    # beta = b/K with uniform weights is the unweighted rule.
    uniform = torch.full((k,), 1 / k, dtype=torch.float64)
    assert torch.allclose(trimmed_mean(U, b, uniform, weighted=True), trimmed_mean(U, b), rtol=1e-5, atol=1e-6)


# --- Krum, Multi-Krum, Bulyan -----------------------------------------------------------------------


def test_krum_by_hand_and_byzfl_neighbours():
    # f = 1, K - f - 2 = 2 neighbours: a 1+2 = 3, b 1+1 = 2, c 2+4 = 6, d 1+2 = 3, e 162+164 = 326.
    assert torch.equal(krum_scores(POINTS, 1), torch.tensor([3.0, 2.0, 6.0, 3.0, 326.0]))
    agg, selected = krum(POINTS, 1)
    assert torch.equal(agg, POINTS[1]) and selected.tolist() == [1]
    # ByzFL: mean of K - f - 1 = 3: a 7/3, b 7/3, c 11/3, d 5/3 -> d wins instead of b.
    agg, selected = krum(POINTS, 1, neighbours="byzfl")
    assert torch.equal(agg, POINTS[3]) and selected.tolist() == [3]


def test_multi_krum_by_hand():
    # m = K - f = 4 lowest scores: b, then a and d (tie at 3), then c: rows 0..3.
    agg, selected = multi_krum(POINTS, 1)
    assert selected.tolist() == [0, 1, 2, 3] and torch.equal(agg, torch.tensor([0.5, 0.75]))
    # Weighted by p (Flower): (0.2 + 0.2, 0.3 * 2 + 0.2) / 0.8 = (0.5, 1.0).
    p = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2])
    agg, _ = multi_krum(POINTS, 1, p=p)
    assert torch.allclose(agg, torch.tensor([0.5, 1.0]), rtol=1e-6, atol=0)
    assert torch.equal(multi_krum(POINTS, 1, p=p, weighted=False)[0], torch.tensor([0.5, 0.75]))
    # m = 2: b, then the a/d tie goes to the lower index a.
    agg, selected = multi_krum(POINTS, 1, m=2)
    assert selected.tolist() == [0, 1] and torch.equal(agg, torch.tensor([0.5, 0.0]))
    with pytest.raises(ValueError, match="m <= K - f"):
        multi_krum(POINTS, 1, m=5)


def test_bulyan_by_hand():
    # K = 7, f = 1: theta = 5 picks, beta = 3. Values 0, 1, 2, 4, 7, 100, -50.
    # Pick 1 (4 neighbours): r2 scores 4+1+4+25 = 34 (r3 38, r1 47). Pick 2 (3): r3 16+9+9... -> r3 34.
    # Pick 3 (2): r1 1+36 = 37. Pick 4 (1): r0 and r4 tie at 49 -> r0. Pick 5 (clamped to 1): r4 and
    # r6 tie at 3249 -> r4. Picks 0, 1, 2, 4, 7; median 2; |v - 2| = 2, 1, 0, 2, 5: the 3 closest are
    # 2, 1 and (tie at 2) the lower index 0 -> mean 1.
    U = torch.tensor([[0.0], [1.0], [2.0], [4.0], [7.0], [100.0], [-50.0]])
    agg, selected = bulyan(U, 1)
    assert selected.tolist() == [0, 1, 2, 3, 4] and torch.equal(agg, torch.tensor([1.0]))


@pytest.mark.parametrize(("U", "p"), STACKS, ids=IDS)
def test_distance_rules_against_loops(U, p):
    k = U.shape[0]
    for f in range(0, (k - 3) // 2 + 1):
        scores = _naive_krum_scores(U, f)
        best = _argmin_lowest(scores)
        agg, selected = krum(U, f)
        assert selected.tolist() == [best] and torch.equal(agg, U[best])
        m = k - f - 1
        chosen = sorted(sorted(scores, key=lambda i: (scores[i], i))[:m])
        mass = sum(float(p[i]) for i in chosen)
        expected = [sum(float(p[i]) * float(U[i, c]) for i in chosen) / mass for c in range(U.shape[1])]
        agg, selected = multi_krum(U, f, m=m, p=p)
        assert selected.tolist() == chosen
        assert torch.allclose(agg, torch.tensor(expected), rtol=1e-5, atol=1e-6)
        byz = _naive_krum_scores(U, f, neighbours=k - f - 1)
        assert krum(U, f, neighbours="byzfl")[1].tolist() == [_argmin_lowest(byz)]
    for f in range(0, (k - 3) // 4 + 1):
        remaining, picks = list(range(k)), []
        while len(picks) < k - 2 * f:
            pick = _argmin_lowest(_naive_krum_scores(U, f, remaining, max(1, len(remaining) - f - 2)))
            picks.append(pick)
            remaining.remove(pick)
        picks.sort()
        beta = k - 4 * f
        expected = []
        for c in range(U.shape[1]):
            values = [float(U[i, c]) for i in picks]
            med = sorted(values)[len(values) // 2] if len(values) % 2 else sum(sorted(values)[len(values) // 2 - 1 :][:2]) / 2
            closest = sorted(range(len(values)), key=lambda j: abs(values[j] - med))[:beta]
            expected.append(sum(values[j] for j in closest) / beta)
        agg, selected = bulyan(U, f)
        assert selected.tolist() == picks
        assert torch.allclose(agg, torch.tensor(expected), rtol=1e-5, atol=1e-6)


# --- nearest-neighbour mixing and bucketing ---------------------------------------------------------


def test_nnm_by_hand():
    # f = 1: each row averages itself and its 3 nearest. a, b, c, d all pick {a, b, c, d} -> (0.5, 0.75);
    # e picks d, c, b -> ((10 + 1 + 0 + 1) / 4, (10 + 1 + 2 + 0) / 4) = (3, 3.25).
    expected = torch.tensor([[0.5, 0.75]] * 4 + [[3.0, 3.25]])
    assert torch.equal(nearest_neighbour_mixing(POINTS, 1), expected)
    # f = 2: d takes itself, b (1), then a and c tie at 2 -> a: ((1 + 1 + 0) / 3, (1 + 0 + 0) / 3).
    assert torch.allclose(nearest_neighbour_mixing(POINTS, 2)[3], torch.tensor([2 / 3, 1 / 3]), rtol=1e-6, atol=0)


def test_bucketing_by_hand():
    # s = 2 over the permutation 4, 0 | 2, 1 | 3 with p = 0.1, 0.2, 0.3, 0.2, 0.2:
    # (0.2 (10, 10) + 0.1 (0, 0)) / 0.3 = (20/3, 20/3); (0.3 (0, 2) + 0.2 (1, 0)) / 0.5 = (0.4, 1.2); (1, 1).
    p = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2])
    rows, weights = bucketing(POINTS, p, 2, torch.tensor([4, 0, 2, 1, 3]))
    assert torch.allclose(rows, torch.tensor([[20 / 3, 20 / 3], [0.4, 1.2], [1.0, 1.0]]), rtol=1e-6, atol=1e-7)
    assert torch.allclose(weights, torch.tensor([0.3, 0.5, 0.2]), rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="permutation"):
        bucketing(POINTS, p, 2, torch.tensor([0, 0, 1, 2, 3]))


@pytest.mark.parametrize(("U", "p"), STACKS, ids=IDS)
def test_pre_aggregators_against_loops(U, p):
    k, d = U.shape
    for f in range(k // 2):
        expected = []
        for i in range(k):
            others = sorted((j for j in range(k) if j != i), key=lambda j: (_sq(U, i, j), j))
            chosen = [i] + others[: k - f - 1]
            expected.append([sum(float(U[j, c]) for j in chosen) / (k - f) for c in range(d)])
        assert torch.allclose(nearest_neighbour_mixing(U, f), torch.tensor(expected), rtol=1e-5, atol=1e-6)
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(k))
    for s in (1, 2, 3):
        rows, weights = bucketing(U, p, s, perm)
        assert rows.shape == (math.ceil(k / s), d)
        for b in range(math.ceil(k / s)):
            members = perm[b * s : (b + 1) * s].tolist()
            mass = sum(float(p[i]) for i in members)
            if mass > 0:
                expected = [sum(float(p[i]) * float(U[i, c]) for i in members) / mass for c in range(d)]
            else:
                expected = [sum(float(U[i, c]) for i in members) / len(members) for c in range(d)]
            assert math.isclose(float(weights[b]), mass, rel_tol=1e-6, abs_tol=1e-7)
            assert torch.allclose(rows[b], torch.tensor(expected), rtol=1e-5, atol=1e-6)


# --- geometric median and centered clipping ---------------------------------------------------------


def test_geometric_median_by_hand_and_init():
    # Points (0,0), (0,0), (3,4), uniform p: z0 = (1, 4/3); distances 5/3, 5/3, 10/3 -> beta = 1/5, 1/5,
    # 1/10; z1 = (1/10)(3, 4) / (1/2) = (0.6, 0.8).
    U = torch.tensor([[0.0, 0.0], [0.0, 0.0], [3.0, 4.0]])
    p = torch.full((3,), 1 / 3)
    assert torch.allclose(geometric_median(U, p, iterations=1), torch.tensor([0.6, 0.8]), rtol=1e-6, atol=0)
    # G(z0) = 20/9, G(z1) = (1 + 1 + 4)/3 = 2: |20/9 - 2| < ftol * 2 for ftol = 1 stops after one step.
    assert torch.allclose(geometric_median(U, p, ftol=1.0), torch.tensor([0.6, 0.8]), rtol=1e-6, atol=0)
    assert not torch.allclose(geometric_median(U, p, ftol=0.0), torch.tensor([0.6, 0.8]), rtol=1e-3, atol=0)
    # ByzFL's reading: z0 = 0, nu = 0.1 -> beta = 10/3, 10/3, 1/15: z1 = (3, 4) / 101.
    got = geometric_median(U, p, nu=0.1, iterations=1, ftol=0.0, init="zero")
    assert torch.allclose(got, torch.tensor([3 / 101, 4 / 101]), rtol=1e-6, atol=0)


def test_centered_clipping_by_hand():
    # v0 = 0, tau = 1: norms 5 and 1 -> factors 0.2, 1: 0.5 (0.6, 0.8) + 0.5 (0, 1) = (0.3, 0.9).
    U = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    got = centered_clipping(U, torch.tensor([0.5, 0.5]), torch.zeros(2), tau=1.0)
    assert torch.allclose(got, torch.tensor([0.3, 0.9]), rtol=1e-6, atol=0)
    # A row at v itself (norm 0) takes factor 1 and contributes nothing; no NaN.
    got = centered_clipping(torch.tensor([[1.0, 1.0], [0.0, 0.0]]), torch.tensor([0.5, 0.5]), torch.ones(2), tau=10.0)
    assert torch.equal(got, torch.tensor([0.5, 0.5]))


@pytest.mark.parametrize(("U", "p"), STACKS, ids=IDS)
def test_weiszfeld_and_clipping_against_loops(U, p):
    k, d = U.shape
    rows = [[float(U[i, c]) for c in range(d)] for i in range(k)]
    w = [float(x) for x in p]

    def dist(z, i):
        return math.sqrt(sum((z[c] - rows[i][c]) ** 2 for c in range(d)))

    for init, nu, iterations, ftol in (("mean", 1e-5, 4, 1e-6), ("zero", 0.1, 3, 0.0), ("mean", 1e-5, 50, 1e-6)):
        z = [sum(w[i] * rows[i][c] for i in range(k)) for c in range(d)] if init == "mean" else [0.0] * d
        objective = sum(w[i] * dist(z, i) for i in range(k))
        for _ in range(iterations):
            beta = [w[i] / max(nu, dist(z, i)) for i in range(k)]
            z = [sum(beta[i] * rows[i][c] for i in range(k)) / sum(beta) for c in range(d)]
            previous, objective = objective, sum(w[i] * dist(z, i) for i in range(k))
            if abs(previous - objective) < ftol * objective:
                break
        got = geometric_median(U, p, nu=nu, iterations=iterations, ftol=ftol, init=init)
        assert torch.allclose(got, torch.tensor(z, dtype=torch.float32), rtol=1e-4, atol=1e-5)
    v0 = [0.1 * c for c in range(d)]
    for tau, iterations in ((0.5, 1), (2.0, 3)):
        v = list(v0)
        for _ in range(iterations):
            step = [0.0] * d
            for i in range(k):
                norm = dist(v, i)
                factor = 1.0 if norm == 0 else min(1.0, tau / norm)
                for c in range(d):
                    step[c] += w[i] * factor * (rows[i][c] - v[c])
            v = [v[c] + step[c] for c in range(d)]
        got = centered_clipping(U, p, torch.tensor(v0), tau=tau, iterations=iterations)
        assert torch.allclose(got, torch.tensor(v, dtype=torch.float32), rtol=1e-5, atol=1e-6)


# --- requirements, distances -----------------------------------------------------------------------


def test_requirements_and_effective_f():
    assert meets_requirement("krum", 5, 1) and not meets_requirement("krum", 4, 1)  # K > 2f + 2
    assert meets_requirement("bulyan", 7, 1) and not meets_requirement("bulyan", 6, 1)  # K >= 4f + 3
    assert meets_requirement("trimmed_mean", 5, 2) and not meets_requirement("trimmed_mean", 4, 2)  # 2b < K
    assert meets_requirement("median", 1, 10) and meets_requirement("geometric_median", 2, 1)
    with pytest.raises(ConfigError, match="^krum needs K > 2f \\+ 2; got K = 4, f = 1$"):
        check_requirement("krum", 4, 1)
    with pytest.raises(ConfigError, match="rule must be one of"):
        meets_requirement("mean_of_means", 5, 1)
    assert effective_f("krum", 10, 2) == 2  # the nominal f when it fits
    assert effective_f("krum", 6, 3) == 1  # 6 > 2f + 2 -> f <= 1
    assert effective_f("multi_krum", 3, 1) == 0
    assert effective_f("krum", 2, 1) is None  # even f = 0 needs K >= 3: fall back to the median
    assert effective_f("bulyan", 10, 3) == 1  # 10 >= 4f + 3 -> f <= 1
    assert effective_f("bulyan", 2, 0) is None
    # Trimmed mean: b_t = ceil(K_t / 2) - 1 once 2b >= K_t.
    assert [effective_f("trimmed_mean", k, 5) for k in (4, 5, 6, 11)] == [1, 2, 2, 5]
    assert effective_f("median", 3, 2) == 2
    with pytest.raises(ConfigError):
        krum(POINTS, 2)
    with pytest.raises(ConfigError):
        bulyan(POINTS, 1)


def test_distances_exact_and_gram():
    d = pairwise_sq_distances(POINTS)
    assert torch.equal(d, d.T) and torch.equal(d.diagonal(), torch.zeros(5))
    # torch.cdist returns the norm, so the square carries one rounding of the square root.
    assert math.isclose(float(d[0, 4]), 200, rel_tol=1e-6) and math.isclose(float(d[2, 3]), 2, rel_tol=1e-6)
    assert torch.allclose(pairwise_sq_distances(POINTS, "gram"), d)
    # Far from the origin the Gram form cancels: the exact form keeps 1e-2^2 * 2 = 2e-4.
    U = torch.tensor([[1000.0, 1000.0], [1000.01, 1000.01]])
    truth = 2 * (float(U[1, 0]) - float(U[0, 0])) ** 2
    assert math.isclose(float(pairwise_sq_distances(U)[0, 1]), truth, rel_tol=1e-5)
    assert not math.isclose(float(pairwise_sq_distances(U, "gram")[0, 1]), truth, rel_tol=1e-2)
    with pytest.raises(ConfigError, match="distance must be one of"):
        pairwise_sq_distances(POINTS, "cosine")
