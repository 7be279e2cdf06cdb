"""Which algorithms and stages compose with client-level DP, and one-line refusals for the rest.

docs/algorithms.md, Client-level differential privacy (Which algorithms compose). Central DP releases
``sum_S a_k clip_C(u_k)`` over a fixed denominator, with ``a_k in [0, 1]`` from client ``k``'s own data
and public values. Weights normalised over the cohort, or built from other clients' statistics, break
that bound (adding one client changes every weight), so those algorithms stop before training with the
reason; so do stages whose output moves by more than one clipped row, and settings that make
participation depend on the data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from lightning_fl.aggregation.pipeline import AggregationPipeline
from lightning_fl.aggregation.rules import Mean
from lightning_fl.faults.validation import ConfigError

#: Aggregation callbacks that compose with DP: the FedAvg family (its weights become the DP ``a_k``),
#: and server optimizers, which are post-processing of the released aggregate.
ALLOWED = ("FedAvg", "FedProx", "FedAvgM", "FedAdam", "FedYogi", "FedAdagrad", "FedFaMo")

#: Algorithms with a DP-safe variant (``dp_safe: true``): bounded per-client weights over a fixed denominator.
DP_SAFE = ("FedFa", "QFFL", "DWFed", "IGFLClient", "FedNova")

#: Why the others are refused (``None``: no reason more specific than "not analysed").
REFUSED = {
    "FedFa": "its weights are normalised over the cohort's accuracies and participation counts (set dp_safe: true)",
    "QFFL": "its weights F_k^q are normalised over the cohort and F_k^q is unbounded (set dp_safe: true)",
    "FedAdp": "its weights come from the cohort-mean gradient angle, normalised over the cohort",
    "IGFL": "IGFL-S weighs each client by a softmax over the cohort",
    "IGFLServer": "IGFL-S weighs each client by a softmax over the cohort",
    "IGFLClient": "IGFL-C divides by the realised cohort size, which couples the clients (set dp_safe: true for K := qN)",
    "DWFed": "its population distribution P is built from every client's label histogram (set dp_safe: true for the"
             " public uniform P)",
    "Scaffold": "c_k+ - c_k is a second per-client release that is not accounted",
    "FedNova": "its tau_eff = sum_k p_k a_k comes from the cohort (set dp_safe: true with a constant tau_eff)",
    "FedDyn": "its server state h sums unclipped client updates",
    "Tempo": "the hierarchy releases several models per global iteration",
}


def refusal(algorithm: str) -> str:
    """Why ``algorithm`` cannot run under ``model.dp`` (one line)."""
    reason = REFUSED.get(algorithm, "it has not been analysed for DP")
    return (f"model.dp: {algorithm} does not compose with client-level DP: {reason}; use one of"
            f" {', '.join(ALLOWED)}")


def check_composition(algorithm: str, algorithm_args: dict, callbacks: Iterable[str], pipeline: AggregationPipeline,
                      *, local: bool, public_sizes: bool, hierarchy: bool, system: Sequence[str], sampling: str) -> None:
    """Refuse, before training and in one line naming the field, what DP cannot cover.

    Args:
        algorithm: The aggregation callback's class name.
        algorithm_args: Its arguments (``weighting`` under local DP).
        callbacks: Every federated callback's class name (client-side algorithms such as IGFL-C).
        pipeline: ``model.aggregation`` (robust rules and pre-aggregators are refused under central DP).
        local: ``model.dp.local``.
        public_sizes: ``model.dp.public_sizes`` (local DP with sample-count weights).
        hierarchy: Whether ``model.hierarchy`` is set.
        system: The ``model.system`` settings that make who reports depend on the data (a deadline,
            straggler fractions, over-selection); availability and dropout are keyed draws and compose.
        sampling: ``model.sampling``.

    Raises:
        ConfigError: On the first setting that does not compose.
    """
    if hierarchy:
        raise ConfigError("model.dp: the three-layer hierarchy releases several models per global iteration, which is"
                          " not accounted; remove model.hierarchy or model.dp")
    if system:
        raise ConfigError(f"model.dp: {system[0]} makes who reports depend on the clients' work, hence on their data;"
                          " remove it (availability and dropout compose with DP)")
    if sampling == "by_samples":
        raise ConfigError("model.sampling: by_samples makes inclusion depend on the data under model.dp; use uniform"
                          " (model.dp.sampling decides the cohort)")
    dp_safe = bool(algorithm_args.get("dp_safe")) and algorithm in DP_SAFE
    if dp_safe and local:
        raise ConfigError(f"model.dp.local: {algorithm}'s DP-safe form is for central DP (its weights or correction read"
                          " statistics that local DP does not noise); use FedAvg weights, or central DP")
    for name in (algorithm, *callbacks):
        if name in REFUSED and not (dp_safe and name == algorithm):
            raise ConfigError(refusal(name))
    if algorithm not in ALLOWED and not dp_safe:
        raise ConfigError(refusal(algorithm))
    if local:
        if algorithm_args.get("weighting", "uniform") == "samples" and not public_sizes:
            raise ConfigError(f"model.dp.local: {algorithm} weighting: samples reads the private n_k; set weighting:"
                              " uniform, or model.dp.public_sizes: true if the sizes are public")
        return
    if pipeline.pre_aggregator is not None:
        raise ConfigError(f"model.aggregation.pre_aggregator: {pipeline.pre_aggregator.name} reuses a row in several"
                          " outputs, so the sensitivity is not C/qW under central DP; remove it, or use model.dp.local")
    if type(pipeline.rule) is not Mean:
        raise ConfigError(f"model.aggregation.rule: {pipeline.rule.name} moves by more than one clipped update when a"
                          " client is added, so central DP's sensitivity bound fails; remove it, or use model.dp.local")


__all__ = ["ALLOWED", "DP_SAFE", "REFUSED", "check_composition", "refusal"]
