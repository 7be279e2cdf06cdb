"""Central and local DP as aggregation-pipeline stages (docs/algorithms.md, Client-level differential privacy).

``model.dp`` installs them (:class:`~lightning_fl.privacy.config.DifferentialPrivacy`); a user never
lists them in ``model.aggregation``, so noise cannot be added without its accounting.

- :class:`DPClip`, the last row transform: ``ū_k = u_k min(1, C_t / ||u_k||)``, flat L2 over the whole
  update (floating buffers included), with adaptive clipping's noised count and its ``C_t`` (state).
- :class:`DPSum`, the combining rule: the fixed-denominator estimator over ``a_k`` (the algorithm's ``p``
  is not used: cohort-normalised weights would break the sensitivity bound).
- :class:`DPNoise`, the aggregate transform: ``N(0, (z C_t / D)^2 I)`` once per round, keyed
  ``(seed, t, "dp_noise")``, and the ledger ``(q, z, count)`` (state) the accountant reads.
- :class:`LocalDPNoise`, local DP's row transform: each client clips and noises its own row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_fl.aggregation.rules import CombiningRule
from lightning_fl.aggregation.stage import StageContext
from lightning_fl.aggregation.transforms import AggregateTransform, UpdateTransform, clip_rows
from lightning_fl.privacy.mechanism import (
    fixed_denominator_sum,
    keyed_gaussian,
    next_clip_norm,
    noised_unclipped_fraction,
)
from lightning_fl.state.seeding import derive_seed


@dataclass(frozen=True)
class AdaptiveClipping:
    """Adaptive clipping (Andrew et al. 2021): ``C_t`` tracks the ``target_quantile`` of the update norms.

    Attributes:
        target_quantile: ``gamma``, the share of updates that should fit unclipped (default 0.5).
        learning_rate: ``eta_C`` of the geometric update ``C_{t+1} = C_t exp(-eta_C (b̄ - gamma))`` (0.2).
        count_noise: ``sigma_b``, the std of the clipped-count noise (``None``: ``m/20``, ``m = qN``).
    """

    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_noise: float | None = None


class DPClip(UpdateTransform):
    """Clip each update to L2 norm ``C_t`` (state ``clip_norm``); adapt ``C_t`` when ``adaptive`` is set.

    With adaptive clipping each member's bit ``b_k = 1[||u_k|| <= C_t]`` (before clipping) is summed with
    noise keyed ``(seed, t, "dp_count")``; only the noised ``b̄`` is logged (``dp/unclipped_fraction``).

    Args:
        clip_norm: ``C_0 > 0`` (``inf``: no clipping, for the FedAvg check).
        adaptive: Adaptive clipping's parameters, or ``None`` (a fixed ``C``).
        count_noise: ``sigma_b`` resolved (adaptive only).
        expected_cohort: ``m = qN`` (adaptive only).
    """

    def __init__(self, clip_norm: float, adaptive: AdaptiveClipping | None = None, count_noise: float = 0.0,
                 expected_cohort: float = 1.0) -> None:
        self.adaptive, self.count_noise, self.expected_cohort = adaptive, float(count_noise), float(expected_cohort)
        self.add_server_state("clip_norm", float(clip_norm))
        self.round_clip_norm = float(clip_norm)  # C_t of the round in progress (the noise scales with it)

    def transform(self, U: Tensor, ctx: StageContext) -> Tensor:
        self.round_clip_norm = clip_norm = float(self.clip_norm)
        if self.adaptive is None:
            ctx.log.log_settings({"dp/clip_norm": clip_norm}, monitor=False)
        else:
            ctx.log.log_scalars({"dp/clip_norm": clip_norm}, monitor=False)
            unclipped = torch.linalg.vector_norm(U, dim=1) <= clip_norm
            fraction = noised_unclipped_fraction(unclipped.cpu(), self.count_noise, self.expected_cohort,
                                                 ctx.seed, ctx.round_idx, "dp_count")
            ctx.log.log_scalars({"dp/unclipped_fraction": fraction}, monitor=False)
            self.clip_norm = next_clip_norm(clip_norm, fraction, self.adaptive.target_quantile,
                                            self.adaptive.learning_rate)
        return U if math.isinf(clip_norm) else clip_rows(U, clip_norm)


class DPSum(CombiningRule):
    """The fixed-denominator sum ``sum_S a_k ū_k / D`` (``f_f``: ``D = qW``; ``f_c``: ``max(qW_min, sum_S a_k)``).

    Args:
        weights: ``(N,)`` ``a_k in [0, 1]`` of every client (its own size and public values only); ``None``:
            the algorithm's own DP-safe weights of each round (``StageContext.own_weights``).
        denominator: ``qW`` (``f_f``), ``qW_min`` (``f_c``), ``qN`` with the algorithm's weights, or ``K``
            under fixed-size sampling.
        estimator: ``f_f`` or ``f_c``.
    """

    reads_weights = True  # it replaces the algorithm's p with a_k: no "ignores p" warning
    needs_every_row = True

    def __init__(self, weights: Tensor | None, denominator: float, estimator: str = "f_f") -> None:
        self.weights = None if weights is None else weights.double().cpu()
        self.denominator, self.estimator = float(denominator), estimator

    def combine(self, U: Tensor, p: Tensor, f: int, ctx: StageContext) -> tuple[Tensor, Tensor | None]:
        if self.weights is None:  # a DP-safe algorithm (FedFa, q-FFL with dp_safe: true) weighs its cohort itself
            a = ctx.own_weights if U.shape[0] else torch.zeros(0, dtype=torch.float64)
            if a is None:
                raise RuntimeError("model.dp expected the algorithm's DP-safe weights (Combination.own_weights)")
        else:
            a = self.weights[ctx.client_ids.cpu()] if U.shape[0] else self.weights[:0]
        return fixed_denominator_sum(U, a, self.denominator, self.estimator), None


class DPNoise(AggregateTransform):
    """Add ``N(0, (z_Δ s C_t / D)^2 I)`` to the aggregate, once per round, and record the round in the ledger.

    ``s`` is 1 for ``f_f`` and 2 for ``f_c`` (its sensitivity ``2C/(qW_min)``). The draw is keyed
    ``(seed, t, "dp_noise")`` in fp32, after the gather, so any number of processes adds the same vector.

    Args:
        clip: The run's :class:`DPClip` (its ``C_t`` of this round).
        noise_multiplier: ``z_Δ``, the update's multiplier (``z`` without adaptive clipping).
        denominator: ``D`` of :class:`DPSum`.
        sensitivity_factor: ``s``.
        accounted: ``(q, z)`` recorded per round (``z``: the composed multiplier the accountant reads).
    """

    def __init__(self, clip: DPClip, noise_multiplier: float, denominator: float, sensitivity_factor: float,
                 accounted: tuple[float, float]) -> None:
        self.clip, self.noise_multiplier, self.denominator = clip, float(noise_multiplier), float(denominator)
        self.sensitivity_factor, self.accounted = float(sensitivity_factor), accounted
        self.add_server_state("ledger", torch.zeros(0, 3, dtype=torch.float64))

    def apply(self, aggregate: Tensor, ctx: StageContext) -> Tensor:
        self.record()
        if self.noise_multiplier == 0.0:  # sigma = 0 (C may be inf): no draw, the aggregate stays bitwise FedAvg's
            return aggregate
        std = self.noise_multiplier * self.sensitivity_factor * self.clip.round_clip_norm / self.denominator
        return aggregate + keyed_gaussian(aggregate.numel(), std, ctx.seed, ctx.round_idx, "dp_noise",
                                          device=aggregate.device)

    def record(self) -> None:
        """Count one more round at ``(q, z)``: a new ledger segment when either changed."""
        q, z = self.accounted
        ledger = self.ledger
        if len(ledger) and float(ledger[-1, 0]) == q and float(ledger[-1, 1]) == z:
            ledger = ledger.clone()
            ledger[-1, 2] += 1
        else:
            ledger = torch.cat([ledger, torch.tensor([[q, z, 1.0]], dtype=torch.float64)])
        self.ledger = ledger

    def segments(self, extra: int = 0) -> list[tuple[float, float, int]]:
        """The ledger as ``(q, z, count)`` segments, with ``extra`` more rounds at the current ``(q, z)``."""
        segments = [(float(q), float(z), int(n)) for q, z, n in self.ledger.tolist()]
        if extra and segments and segments[-1][:2] == self.accounted:  # the ledger this round will leave
            segments[-1] = (*self.accounted, segments[-1][2] + extra)
        elif extra:
            segments.append((*self.accounted, extra))
        return segments


class LocalDPNoise(UpdateTransform):
    """Local DP: each client sends ``ū_k + N(0, z_L^2 C^2 I)``, its noise keyed ``(seed, t, k, "ldp")``.

    Every later stage (any rule) is post-processing. State: ``participations``, each client's count of
    noised releases, which its own ledger reads (``dp/local_epsilon_max``).

    Args:
        clip_norm: ``C``.
        noise_multiplier: ``z_L``.
        num_clients: ``N``.
    """

    def __init__(self, clip_norm: float, noise_multiplier: float, num_clients: int) -> None:
        self.clip_norm, self.noise_multiplier = float(clip_norm), float(noise_multiplier)
        self.add_server_state("participations", torch.zeros(num_clients, dtype=torch.long))

    def transform(self, U: Tensor, ctx: StageContext) -> Tensor:
        clipped = clip_rows(U, self.clip_norm)
        std = self.noise_multiplier * self.clip_norm
        ids = ctx.client_ids.cpu()
        counts = self.participations.clone()
        counts[ids] += 1
        self.participations = counts
        if std == 0.0 or U.shape[0] == 0:
            return clipped
        noise = torch.stack([torch.randn(U.shape[1], dtype=torch.float32, generator=torch.Generator().manual_seed(
            derive_seed(ctx.seed, ctx.round_idx, int(k), "ldp"))) for k in ids.tolist()])
        return clipped + (noise * std).to(clipped)


__all__ = ["AdaptiveClipping", "DPClip", "DPNoise", "DPSum", "LocalDPNoise"]
