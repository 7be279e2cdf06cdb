"""``model.dp``: client-level differential privacy for a run (docs/algorithms.md, Client-level differential privacy).

:class:`DifferentialPrivacy` reads the user's settings, resolves the noise multiplier (given, or
calibrated from a target ``(epsilon, delta)`` over the planned rounds), refuses what does not compose
(:mod:`lightning_fl.privacy.composition`), installs the stages of :mod:`lightning_fl.privacy.stages`
in the run's aggregation pipeline, and reports ``dp/epsilon`` from the ledger those stages keep in
checkpoints. :func:`dp_config_error` is the one-line message for a mistyped ``model.dp``.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from typing import Any

from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor

from lightning_fl.aggregation.pipeline import AggregationPipeline
from lightning_fl.faults.validation import ConfigError, check_choice, check_non_negative, check_positive
from lightning_fl.privacy.accounting import (
    ACCOUNTANTS,
    SAMPLINGS,
    calibrate_fixed_size_noise,
    calibrate_noise,
    check_delta,
    check_epsilon,
    fixed_size_epsilon,
    ledger_epsilon,
    local_epsilon,
    update_noise_multiplier,
)
from lightning_fl.privacy.composition import check_composition
from lightning_fl.privacy.mechanism import ESTIMATORS, dp_weights
from lightning_fl.privacy.stages import AdaptiveClipping, DPClip, DPNoise, DPSum, LocalDPNoise
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.state.init_args import RecordsInitArgs

#: ``model.dp.on_budget`` values: stop before a round would exceed the budget, or only report epsilon.
ON_BUDGET = ("stop", "continue")


class DifferentialPrivacy(RecordsInitArgs):
    """Client-level DP: central DP-FedAvg (McMahan et al. 2018), adaptive clipping, or local DP.

    Give ``noise_multiplier`` or ``target_epsilon``. The guarantee is client-level ``(epsilon, delta)``
    under adding or removing one client's whole data, for the released global models
    (docs/algorithms.md, What the guarantee covers).

    Args:
        noise_multiplier: ``z >= 0``: the noise std is ``z`` times the sensitivity (local DP: ``z_L``).
        target_epsilon: ``epsilon > 0``: ``z`` is calibrated so the planned rounds (``trainer.max_epochs``)
            spend at most this.
        delta: ``0 < delta < 1/N`` (default ``N^-1.1``).
        clip_norm: ``C > 0`` (``C_0`` with ``adaptive``; ``.inf``: no clipping).
        sampling: ``poisson`` (each client with probability ``q``, the cohort may be empty) or ``fixed``
            (``K`` of ``N``; replace-one accounting, not comparable with add/remove epsilon).
        sampling_rate: ``q`` (default ``K/N``).
        accountant: ``pld`` (default) or ``rdp``.
        estimator: ``f_f`` (``/ qW``, default) or ``f_c`` (``/ max(qW_min, sum a)``, noise ``2zC/(qW_min)``).
        min_weight: ``W_min`` of ``f_c`` (default ``W``).
        weight_cap: ``n_cap``: ``a_k = min(n_k / n_cap, 1)``; ``None`` (default): ``a_k = 1``.
        on_budget: ``stop`` (end the run, with one line, before a round would exceed ``epsilon_budget``) or
            ``continue``.
        epsilon_budget: The budget ``on_budget`` guards (default ``target_epsilon``).
        adaptive: Adaptive clipping (``{target_quantile, learning_rate, count_noise}``), or ``None``.
        local: Local DP: each client clips and noises its own update; any rule may follow.
        public_sizes: Local DP with ``weighting: samples``: the ``n_k`` are public.

    Raises:
        ConfigError: On a bad value, or a setting DP cannot cover, before training.

    Example (YAML)::

        model:
          dp: {target_epsilon: 2.0, clip_norm: 0.5, sampling: poisson, accountant: pld}
    """

    def __init__(self, noise_multiplier: float | None = None, target_epsilon: float | None = None,
                 delta: float | None = None, clip_norm: float = 1.0, sampling: str = "poisson",
                 sampling_rate: float | None = None, accountant: str = "pld", estimator: str = "f_f",
                 min_weight: float | None = None, weight_cap: float | None = None, on_budget: str = "stop",
                 epsilon_budget: float | None = None, adaptive: AdaptiveClipping | None = None, local: bool = False,
                 public_sizes: bool = False) -> None:
        if (noise_multiplier is None) == (target_epsilon is None):
            raise ConfigError("model.dp: give exactly one of noise_multiplier and target_epsilon")
        if noise_multiplier is not None:
            check_non_negative("model.dp.noise_multiplier", noise_multiplier)
        if target_epsilon is not None:
            check_epsilon("model.dp.target_epsilon", target_epsilon)
        if epsilon_budget is not None:
            check_epsilon("model.dp.epsilon_budget", epsilon_budget)
        if delta is not None:
            check_delta(delta)
        if not (isinstance(clip_norm, (int, float)) and clip_norm > 0):
            raise ConfigError(f"model.dp.clip_norm must be a number > 0 (.inf: no clipping); got {clip_norm!r}")
        if math.isinf(clip_norm) and (noise_multiplier != 0 or adaptive is not None):
            raise ConfigError("model.dp.clip_norm: .inf (no clipping) bounds no sensitivity; it needs noise_multiplier: 0")
        check_choice("model.dp.sampling", sampling, SAMPLINGS)
        check_choice("model.dp.accountant", accountant, ACCOUNTANTS)
        check_choice("model.dp.estimator", estimator, ESTIMATORS)
        check_choice("model.dp.on_budget", on_budget, ON_BUDGET)
        if sampling_rate is not None and not (isinstance(sampling_rate, (int, float)) and 0 < sampling_rate <= 1):
            raise ConfigError(f"model.dp.sampling_rate must be in (0, 1]; got {sampling_rate!r}")
        for name, value in (("min_weight", min_weight), ("weight_cap", weight_cap)):
            if value is not None:
                check_positive(f"model.dp.{name}", value)
        if adaptive is not None:
            if not 0 <= adaptive.target_quantile <= 1:
                raise ConfigError(f"model.dp.adaptive.target_quantile must be in [0, 1]; got {adaptive.target_quantile}")
            check_non_negative("model.dp.adaptive.learning_rate", adaptive.learning_rate)
            if adaptive.count_noise is not None:
                check_positive("model.dp.adaptive.count_noise", adaptive.count_noise)
        if local and (target_epsilon is not None or adaptive is not None or sampling != "poisson"
                      and sampling_rate is not None):
            raise ConfigError("model.dp.local takes noise_multiplier (z_L) and clip_norm; target_epsilon, adaptive and"
                              " sampling_rate are central-DP settings")
        self.noise_multiplier, self.target_epsilon, self.delta_given = noise_multiplier, target_epsilon, delta
        self.delta = delta  # resolved by setup (default N^-1.1)
        self.clip_norm, self.sampling, self.sampling_rate = float(clip_norm), sampling, sampling_rate
        self.accountant, self.estimator, self.min_weight, self.weight_cap = accountant, estimator, min_weight, weight_cap
        self.on_budget, self.epsilon_budget = on_budget, epsilon_budget if epsilon_budget is not None else target_epsilon
        self.adaptive, self.local, self.public_sizes = adaptive, bool(local), bool(public_sizes)
        self.noise: DPNoise | None = None
        self.local_noise: LocalDPNoise | None = None
        self._epsilons: dict[tuple, float] = {}
        self._configured: tuple | None = None  # the pipeline as configured, before the DP stages went in

    # ------------------------------------------------------------------ set-up
    def setup(self, num_clients: int, cohort: int, train_sizes: Tensor, rounds: int) -> None:
        """Resolve ``q``, ``delta``, ``W`` and ``z`` for ``N = num_clients``, ``K = cohort`` and the planned ``rounds``."""
        n = num_clients
        if self.target_epsilon is not None and not (isinstance(rounds, int) and rounds >= 1):
            raise ConfigError(f"model.dp.target_epsilon is calibrated over the planned rounds: set trainer.max_epochs"
                              f" (got {rounds!r})")
        self.num_clients, self.cohort, self.rounds = n, cohort, rounds
        self.q = self.sampling_rate if self.sampling == "poisson" and self.sampling_rate is not None else cohort / n
        self.delta = self.delta_given if self.delta_given is not None else n ** -1.1
        if not self.delta < 1 / n:
            raise ConfigError(f"model.dp.delta must be below 1/N = {1 / n:g} (N = {n} clients); got {self.delta:g}")
        self.weights = dp_weights(train_sizes.cpu(), self.weight_cap)
        self.total_weight = float(self.weights.sum())
        z = self.noise_multiplier if self.noise_multiplier is not None else self._calibrate()
        self.z = float(z)
        self.count_noise, self.z_update = 0.0, self.z
        if self.adaptive is not None:
            m = self.q * n
            self.count_noise = self.adaptive.count_noise if self.adaptive.count_noise is not None else m / 20
            self.z_update = update_noise_multiplier(self.z, self.count_noise)
            if self.z > 0 and self.z_update / self.z >= 2:
                rank_zero_warn(f"model.dp.adaptive: the clipped count takes most of the noise budget (update multiplier"
                               f" {self.z_update:.3g} vs z = {self.z:.3g}); raise count_noise")
        if self.epsilon_budget is not None and self.on_budget == "stop" and not self.local:
            first = self._epsilon_of_rounds(1)
            if first > self.epsilon_budget:
                raise ConfigError(f"model.dp.epsilon_budget {self.epsilon_budget:g} is spent by the first round alone"
                                  f" (epsilon {first:.4g}); raise it or the noise")

    def _calibrate(self) -> float:
        if self.sampling == "fixed":
            return calibrate_fixed_size_noise(self.num_clients, self.cohort, self.target_epsilon, self.delta,
                                              self.rounds)
        return calibrate_noise(self.target_epsilon, self.delta, self.rounds, self.q, self.accountant)

    def install(self, pipeline: AggregationPipeline, algorithm: str, algorithm_args: dict[str, Any],
                callbacks: list[str], *, hierarchy: bool, system: list[str] | tuple[str, ...] = (), sampling: str,
                own_weights: bool = False) -> None:
        """Check the composition and put the DP stages into ``pipeline`` (the clip last among the row transforms).

        ``own_weights``: the algorithm supplies DP-safe ``a_k in [0, 1]`` every round (``dp_safe: true``); the
        fixed denominator is then ``qN``, the largest ``qW`` they can reach.
        """
        if algorithm_args.get("dp_safe") and algorithm in ("DWFed", "IGFLClient") \
                and abs(self.q * self.num_clients - self.cohort) > 1e-9:
            raise ConfigError(f"model.dp.sampling_rate: DP-safe {algorithm} takes K := model.clients_per_round as the"
                              " expected cohort qN; leave sampling_rate unset (q = K/N)")
        if self._configured is not None and self._configured[0] is pipeline:  # a second set-up (fit, then test)
            _, rule, transforms, aggregate = self._configured
            pipeline.rule, pipeline.transforms, pipeline.aggregate_transforms = rule, list(transforms), list(aggregate)
        self._configured = (pipeline, pipeline.rule, list(pipeline.transforms), list(pipeline.aggregate_transforms))
        self.noise = self.local_noise = None
        self._epsilons.clear()
        check_composition(algorithm, algorithm_args, callbacks, pipeline, local=self.local,
                          public_sizes=self.public_sizes, hierarchy=hierarchy, system=system, sampling=sampling)
        if not self.local and not own_weights and algorithm_args.get("weighting") == "samples":
            rank_zero_warn(f"model.dp: {algorithm}'s weighting: samples is replaced by the DP weights a_k ="
                           f" {'1' if self.weight_cap is None else 'min(n_k / weight_cap, 1)'} over a fixed denominator"
                           " (set model.dp.weight_cap to weigh by capped sizes)")
        if self.local:
            self.local_noise = LocalDPNoise(self.clip_norm, self.z, self.num_clients)
            pipeline.transforms.append(self.local_noise)
            return
        clip = DPClip(self.clip_norm, self.adaptive, self.count_noise, self.q * self.num_clients)
        total = float(self.num_clients) if own_weights else self.total_weight
        if self.sampling == "fixed":
            denominator, factor = float(self.cohort), 1.0
        elif self.estimator == "f_c":
            denominator = self.q * (self.min_weight if self.min_weight is not None else total)
            factor = 2.0
        else:
            denominator, factor = self.q * total, 1.0
        pipeline.transforms.append(clip)
        pipeline.rule = DPSum(None if own_weights else self.weights, denominator,
                              self.estimator if self.sampling == "poisson" else "f_f")
        self.noise = DPNoise(clip, self.z_update, denominator, factor, (self.q, self.z))
        pipeline.aggregate_transforms.append(self.noise)

    # ------------------------------------------------------------------ accounting
    def _epsilon_of_rounds(self, extra: int) -> float:
        segments = tuple(self.noise.segments(extra)) if self.noise is not None else ((self.q, self.z, extra),)
        if segments not in self._epsilons:  # each value is asked twice: as the next round's, then as the last
            if self.sampling == "fixed":
                count = sum(n for _, _, n in segments)
                self._epsilons[segments] = fixed_size_epsilon(self.num_clients, self.cohort, self.z, count, self.delta)
            else:
                self._epsilons[segments] = ledger_epsilon(list(segments), self.delta, self.accountant)
        return self._epsilons[segments]

    def epsilon(self) -> float:
        """``epsilon`` at ``delta`` after the rounds released so far (central DP)."""
        return self._epsilon_of_rounds(0)

    def log_round(self, log: RoundLogger) -> None:
        """Log ``dp/epsilon`` (central) or ``dp/local_epsilon_max`` (local) after a round.

        To the loggers only (``monitor=False``): the run's stop on a spent budget is ``on_budget``'s, and the
        final table's line comes from :meth:`report`, so no ``LightningModule.log`` call is spent on them.
        """
        if self.local_noise is not None:
            log.log_scalars({"dp/local_epsilon_max": self._local_epsilon_max()}, monitor=False)
            log.log_settings({"dp/delta": self.delta}, monitor=False)
        elif self.noise is not None:
            log.log_scalars({"dp/epsilon": self.epsilon()}, monitor=False)
            log.log_settings({"dp/delta": self.delta, "dp/noise_multiplier": self.z}, monitor=False)

    def _local_epsilon_max(self) -> float:
        most = int(self.local_noise.participations.max()) if self.num_clients else 0
        return local_epsilon(self.z, most, self.delta)

    def report(self) -> str | None:
        """The line under the final table: the privacy the released models cost so far, or ``None`` without DP."""
        where = " (docs/algorithms.md, Client-level differential privacy)."
        if self.local_noise is not None:
            return f"Local DP: the most released client's epsilon {self._local_epsilon_max():.4g} at delta {self.delta:.3g}{where}"
        if self.noise is not None:
            return f"Client-level DP: epsilon {self.epsilon():.4g} at delta {self.delta:.3g}{where}"
        return None

    def budget_message(self, round_idx: int) -> str | None:
        """The one line that stops the run before round ``round_idx`` would exceed the budget, else ``None``."""
        if self.on_budget != "stop" or self.epsilon_budget is None or self.noise is None:
            return None
        after = self._epsilon_of_rounds(1)
        if after <= self.epsilon_budget:
            return None
        return (f"model.dp: stopping before round {round_idx + 1}: it would spend epsilon {after:.4g} > budget"
                f" {self.epsilon_budget:g} (delta {self.delta:g}); the released model is that of round {round_idx}")


# Phrases of jsonargparse 4.53 (pinned in requirements.lock); tests/privacy/test_dp_runs.py covers them.
_PARSER_KEY = re.compile(r'Parser key "([^"]+)":')
_UNKNOWN_OPTION = re.compile(r"Option '([^']+)' is not accepted")
_OPTIONS = {
    "model.dp": [p for p in inspect.signature(DifferentialPrivacy).parameters if p != "self"],
    "model.dp.adaptive": [f.name for f in dataclasses.fields(AdaptiveClipping)],
}


def dp_config_error(report: str) -> str | None:
    """The one-line message for jsonargparse's parse-error ``report`` about ``model.dp``, else ``None``.

    jsonargparse checks ``model.dp``'s option names and types while parsing, before any of our code runs,
    and reports a mistake as a multi-line account of every type it tried; the CLI raises this line instead.

    Example:
        >>> dp_config_error('Parser key "model.dp":\\n  - Problem with given class_path '
        ...                 "'lightning_fl.privacy.DifferentialPrivacy':\\n        Option 'z' is not accepted")
        ... # doctest: +ELLIPSIS
        'model.dp.z is not an option of model.dp; its options are: noise_multiplier, target_epsilon, ...'
    """
    keys = _PARSER_KEY.findall(report)
    if not keys or keys[0] != "model.dp":
        return None
    field = ".".join(keys)
    if option := _UNKNOWN_OPTION.search(report):
        options = ", ".join(_OPTIONS.get(field, []))
        return f"{field}.{option.group(1)} is not an option of {field}; its options are: {options}"
    reasons = [line.strip(" -") for line in report.splitlines()
               if line.strip() and not line.strip().startswith(("Parser key", "Does not validate", "Subtypes",
                                                                  "Errors:", "Given value", "- Expected a <class 'NoneType'>",
                                                                  "- Problem with given class_path"))]
    return f"{field}: {reasons[0] if reasons else 'invalid value'}"


__all__ = ["ON_BUDGET", "AdaptiveClipping", "DifferentialPrivacy", "dp_config_error"]
