"""The aggregation pipeline: transforms -> pre-aggregator -> combining rule -> server optimizer.

docs/architecture.md, Aggregation pipeline. An aggregation callback (``FedAvg``, ``FedFa``, ``DWFed``,
...) says how to weigh the cohort: a :class:`Combination` ``(u, p, s)``. The pipeline runs the
configured stages on the stacked rows ``u_k`` and returns ``w_agg = w^t + s R(U', p')``; the
callback's server optimizer then makes ``w^{t+1}``. With no stage configured (the identity pipeline)
it returns the algorithm's own aggregate, computed exactly as before the pipeline existed, so every
existing configuration keeps its weights bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lightning_fl.aggregation.attacks import Attack
from lightning_fl.aggregation.pre_aggregators import PreAggregator
from lightning_fl.aggregation.rules import CombiningRule, Mean, Median
from lightning_fl.aggregation.server_optimizers import ServerOptimizer
from lightning_fl.aggregation.stage import PipelineStage, StageContext
from lightning_fl.aggregation.transforms import AggregateTransform, UpdateTransform
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError
from lightning_fl.faults.warn_once import WarnOnce
from lightning_fl.functional.attacks import attack_masks
from lightning_fl.functional.robust import RULES, effective_f, meets_requirement
from lightning_fl.state.init_args import RecordsInitArgs, describe


@dataclass
class Combination:
    """An algorithm's ``(u, p, s)`` for one round (docs/algorithms.md, Aggregation pipeline).

    Attributes:
        p: ``(K,)`` weights on the simplex, in cohort order.
        scale: ``s >= 0`` (q-FFL's ``L sum F^q / sum h``, FedNova's ``tau_eff``; 1 for the others).
        rows: The algorithm's map of the raw rows ``Δ_k = y_k - w^t`` (FedNova: ``Δ_k / a_k``); ``None``: identity.
        exact: The algorithm's own ``w^t + s sum p_k u_k`` computed as before the pipeline (bitwise the
            shipped results); ``None``: ``update.weighted_sum(p)``.
        own_weights: A DP-safe algorithm's ``(K,)`` weights ``a_k in [0, 1]``, each from client ``k``'s own data
            and public values, never normalised over the cohort; ``model.dp``'s fixed-denominator sum reads
            them (docs/algorithms.md, Client-level differential privacy). ``None``: not DP-safe.
    """

    p: Tensor
    scale: float | Tensor = 1.0
    rows: Callable[[Tensor], Tensor] | None = None
    exact: Callable[[], Tensor] | None = None
    own_weights: Tensor | None = None


class AggregationPipeline(RecordsInitArgs):
    """The stages between the cohort's updates and the server optimizer, configured as ``model.aggregation``.

    Args:
        transforms: Client-update transforms, applied to each row in this order (e.g. ``NormClip``).
        pre_aggregator: At most one map over the whole stack (``NearestNeighbourMixing``, ``Bucketing``).
        rule: The combining rule (default ``Mean``: the algorithm's weighted mean).
        server_optimizer: Replaces a plain server step (e.g. ``ServerAdam`` on DWFed's weights); an
            algorithm with its own server optimizer (FedAvgM, FedAdam, FedFa, ...) refuses a second one.
        f: The tolerance ``f`` robust rules assume (not the unknown Byzantine count).
        f_fraction: ``f = ceil(f_fraction K)`` when ``f`` is not given (``K``: ``model.clients_per_round``).

    Raises:
        ConfigError: If ``f < 0`` or ``f_fraction`` is outside ``[0, 0.5)``.

    Example (YAML)::

        model:
          aggregation:
            transforms:
              - {class_path: lightning_fl.aggregation.NormClip, init_args: {max_norm: 1.0}}
            rule: {class_path: lightning_fl.aggregation.TrimmedMean, init_args: {beta: 0.1}}
            server_optimizer: {class_path: lightning_fl.aggregation.ServerAdam, init_args: {lr: 0.01}}
    """

    def __init__(self, transforms: list[UpdateTransform] | None = None, pre_aggregator: PreAggregator | None = None,
                 rule: CombiningRule | None = None, server_optimizer: ServerOptimizer | None = None,
                 f: int | None = None, f_fraction: float = 0.1) -> None:
        if f is not None and (isinstance(f, bool) or not isinstance(f, int) or f < 0):
            raise ConfigError(f"model.aggregation.f must be an integer >= 0; got {f!r}")
        if not 0.0 <= f_fraction < 0.5:
            raise ConfigError(f"model.aggregation.f_fraction must be in [0, 0.5); got {f_fraction!r}")
        self.transforms = list(transforms or [])
        self.pre_aggregator = pre_aggregator
        self.rule = rule if rule is not None else Mean()
        self.server_optimizer = server_optimizer
        self.f_given, self.f_fraction = f, float(f_fraction)
        self.f = 0 if f is None else f
        self.attack: Attack | None = None  # model.attack, handed over by the round runner
        self.aggregate_transforms: list[AggregateTransform] = []  # stage 3 (the DP noise), installed by model.dp
        self.warn_once = WarnOnce()  # (key, message): each kind of warning once per run

    def __eq__(self, other: object) -> bool:
        # The same configuration (stages and their arguments), whatever state the stages have reached.
        return type(other) is type(self) and describe(other) == describe(self)

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ set-up
    @property
    def is_identity(self) -> bool:
        """No transform, no pre-aggregator, the mean, no row attack: the algorithm's own aggregate, bitwise."""
        attacked = self.attack is not None and self.attack.replaces_rows
        return (not self.transforms and self.pre_aggregator is None and type(self.rule) is Mean and not attacked
                and not self.aggregate_transforms)

    @property
    def needs_every_row(self) -> bool:
        """Whether some stage needs every client's row (so ``model.exchange: reduce`` cannot be used)."""
        return not self.is_identity

    def stages(self) -> dict[str, PipelineStage]:
        """The configured stages by config field (``transforms.0``, ``pre_aggregator``, ``rule``)."""
        named: dict[str, PipelineStage] = {f"transforms.{i}": t for i, t in enumerate(self.transforms)}
        if self.pre_aggregator is not None:
            named["pre_aggregator"] = self.pre_aggregator
        named["rule"] = self.rule
        named.update({f"aggregate_transforms.{i}": t for i, t in enumerate(self.aggregate_transforms)})
        return named

    def setup(self, cohort_size: int, cohort: str = "model.clients_per_round", field: str = "model.aggregation") -> None:
        """Fix ``f`` for the nominal cohort ``K`` and check every stage's requirement (one-line errors).

        Args:
            cohort_size: ``K``.
            cohort: What ``K`` is, for the message.
            field: The config field of this pipeline, for the message.
        """
        if self.f_given is None:
            self.f = math.ceil(self.f_fraction * cohort_size)
        source = f"{field}.f" if self.f_given is not None else f"{field}.f = ceil(f_fraction {self.f_fraction} x K)"
        for name, stage in (("pre_aggregator", self.pre_aggregator), ("rule", self.rule)):
            requirement = getattr(stage, "requirement", None)
            if requirement is None:
                continue
            f = self.f
            if requirement == "trimmed_mean":
                f = stage.trim_count(cohort_size, self.f)
            if not meets_requirement(requirement, cohort_size, f):
                what = "b" if requirement == "trimmed_mean" else "f"
                raise ConfigError(f"{field}.{name} {stage.name} needs {RULES[requirement].replace('f', what)};"
                                  f" got K = {cohort_size} ({cohort}) and {what} = {f}"
                                  f" ({source if what == 'f' else 'its b, beta or f'})")

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {name: stage.state_dict() for name, stage in self.stages().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, stage in self.stages().items():
            if name in state:
                stage.load_state_dict(state[name])

    # ------------------------------------------------------------------ one round
    def combine(self, global_w: Tensor, update: CohortUpdate, combination: Combination, ctx: StageContext,
                algorithm: str) -> Tensor:
        """``w_agg = w^t + s R(U', p')`` for ``update``; the algorithm's own aggregate when the pipeline is the identity."""
        byzantine = None
        if self.attack is not None:
            byzantine, _ = attack_masks(update.client_ids, self.attack.byzantine)
            ctx.log.log_scalars({"attack/f_t": float(byzantine.sum()),
                                 "attack/byzantine_weight": float(combination.p[byzantine.to(combination.p.device)].sum())})
        if self.is_identity:
            return combination.exact() if combination.exact is not None else update.weighted_sum(combination.p)
        U = update.weights - global_w
        ctx.own_weights = combination.own_weights
        if combination.rows is not None:
            U = combination.rows(U)
        honest_mean = None
        if byzantine is not None:
            byzantine = byzantine.to(U.device)
            honest_mean = U[~byzantine].mean(dim=0) if bool((~byzantine).any()) else None
            U = self._attacked(U, byzantine, ctx)
        for stage in self.transforms:
            U = stage.transform(U, ctx)
        p = combination.p.to(U)
        if self.pre_aggregator is not None:
            f = effective_f(self.pre_aggregator.requirement, U.shape[0], self.f) if self.pre_aggregator.requirement \
                else self.f
            U, p = self.pre_aggregator.mix(U, p, 0 if f is None else f, ctx)
            byzantine = byzantine if byzantine is None or U.shape[0] == len(byzantine) else None  # rows are buckets
        aggregate = self._apply_rule(U, p, ctx, algorithm, byzantine)
        if honest_mean is not None:
            ctx.log.log_scalars({"robust/dist_to_honest_mean": float(torch.linalg.vector_norm(aggregate - honest_mean))})
        for stage in self.aggregate_transforms:
            aggregate = stage.apply(aggregate, ctx)
        return global_w + combination.scale * aggregate

    def combine_empty(self, global_w: Tensor, ctx: StageContext) -> Tensor:
        """``w_agg`` of a round with no member: every stage on an empty stack (under DP: ``w^t`` plus the noise)."""
        U = global_w.new_zeros(0, global_w.numel())
        for stage in self.transforms:
            U = stage.transform(U, ctx)
        aggregate, _ = self.rule.combine(U, global_w.new_zeros(0), self.f, ctx)
        for stage in self.aggregate_transforms:
            aggregate = stage.apply(aggregate, ctx)
        return global_w + aggregate

    def _attacked(self, U: Tensor, byzantine: Tensor, ctx: StageContext) -> Tensor:
        """``U`` with the Byzantine members' rows replaced by what the attack sends (their own when it cannot)."""
        if not bool(byzantine.any()) or not self.attack.replaces_rows:
            return U
        rows = self.attack.attack_rows(U, byzantine, ctx)
        ctx.log.log_scalars({"attack/fallback": float(rows is None)})
        if rows is None:
            self.warn_once("attack_fallback", f"round {ctx.round_idx + 1}: {self.attack.name} lacks the rows it needs;"
                                              " its clients send their honest updates (attack/fallback; warned once)")
            return U
        U = U.clone()
        U[byzantine] = rows.to(U)
        return U

    def _apply_rule(self, U: Tensor, p: Tensor, ctx: StageContext, algorithm: str, byzantine: Tensor | None) -> Tensor:
        rule, f, k = self.rule, self.f, U.shape[0]
        if rule.requirement is not None and rule.requirement != "trimmed_mean":
            f_t = effective_f(rule.requirement, k, f)
            if f_t is None:  # not even f = 0 fits this cohort: the coordinate median (docs/algorithms.md)
                self.warn_once("fallback", f"round {ctx.round_idx + 1}: {rule.name} cannot run on {k} rows; using the"
                                           " coordinate median (warned once)")
                rule, f_t = Median(), 0
            elif f_t != f:
                self.warn_once("f_effective", f"round {ctx.round_idx + 1}: {rule.name} uses f = {f_t} in a cohort of"
                                              f" {k} (configured f = {f}; warned once)")
            f = f_t
            ctx.log.log_scalars({"robust/f_effective": float(f)})
        if not rule.reads_weights and not bool(torch.allclose(p, torch.full_like(p, 1.0 / k))):
            self.warn_once("ignores_p", f"{rule.name} ignores {algorithm}'s client weights (it treats every update"
                                        " alike; warned once)")
        aggregate, picked = rule.combine(U, p, f, ctx)
        if picked is not None:
            ctx.log.log_scalars({"robust/selected": float(len(picked))})
            if byzantine is not None:
                ctx.log.log_scalars({"robust/byzantine_selected": float(byzantine[picked.to(byzantine.device)].sum())})
        return aggregate


__all__ = ["AggregationPipeline", "Combination"]
