"""Privacy accounting for client-level DP with Google's ``dp-accounting`` (docs/algorithms.md, Client-level differential privacy).

Pure functions over Google's ``dp_accounting`` 0.6.0; nothing here is a hand-written accountant.

- Each central-DP round releases one Poisson-subsampled Gaussian mechanism,
  ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``; ``T`` rounds are ``SelfComposedDpEvent(e, T)``, and
  a run whose ``q`` or ``z`` changed is a ``ComposedDpEvent`` of its ledger's segments.
- Accountants: ``pld`` (default; ``PLDAccountant``, tighter) or ``rdp`` (``RdpAccountant``), both under
  ``NeighboringRelation.ADD_OR_REMOVE_ONE`` (add or remove one client's whole data).
- ``epsilon`` is always computed from a fresh accountant composed with the whole ledger: composing a
  PLD one round at a time is two orders of magnitude slower for the same number.
- Fixed-size sampling (``dp.sampling: fixed``) has one path in the package:
  ``SampledWithoutReplacementDpEvent(N, K, GaussianDpEvent(z/2))`` in an ``RdpAccountant`` under
  ``REPLACE_ONE`` (sensitivity ``2C`` under replace-one, hence ``z/2``). Its epsilon is not comparable
  with the add/remove one.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import dp_accounting
import numpy as np
from dp_accounting import mechanism_calibration, pld, rdp
from dp_accounting.pld import privacy_loss_distribution as pld_module
from dp_accounting.rdp import rdp_privacy_accountant

from lightning_fl.faults.validation import ConfigError

#: ``dp.accountant`` values.
ACCOUNTANTS = ("pld", "rdp")
#: One ledger segment: ``(q, z, rounds)``, ``rounds`` rounds at sampling rate ``q`` and noise multiplier ``z``.
Segment = tuple[float, float, int]
#: The largest noise multiplier calibration may return: beyond it the update is noise (an unreachable target).
MAX_NOISE_MULTIPLIER = 1e3
#: ``dp.sampling`` values: Poisson (what the add/remove accountants assume) or fixed-size without replacement.
SAMPLINGS = ("poisson", "fixed")


def _below_error(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


@contextmanager
def _quiet_rdp() -> Iterator[None]:
    # RdpAccountant's default orders include a few (1.1-1.5) whose series do not converge for some
    # (q, z); the package drops them from the minimum and logs a warning each time, every round here.
    # A filter, not setLevel: setLevel clears every logger's cache, a third of a per-round RDP epsilon.
    logger = logging.getLogger("absl")
    logger.addFilter(_below_error)
    try:
        yield
    finally:
        logger.removeFilter(_below_error)


def make_accountant(kind: str = "pld", neighboring: str = "add_or_remove_one",
                    orders: Sequence[float] | None = None) -> dp_accounting.PrivacyAccountant:
    """A fresh accountant: ``pld`` (``PLDAccountant``, discretisation 1e-4) or ``rdp`` (``RdpAccountant``).

    Args:
        kind: ``pld`` or ``rdp``.
        neighboring: ``add_or_remove_one`` or ``replace_one`` (``rdp`` only: the fixed-size path).
        orders: RDP orders (``None``: the package's defaults).
    """
    relation = dp_accounting.NeighboringRelation[neighboring.upper()]
    if kind == "rdp":
        return rdp.RdpAccountant(orders=list(orders) if orders is not None else None, neighboring_relation=relation)
    if kind != "pld":
        raise ConfigError(f"model.dp.accountant must be one of {', '.join(ACCOUNTANTS)}; got {kind!r}")
    return pld.PLDAccountant(neighboring_relation=relation)


def round_event(q: float, z: float) -> dp_accounting.DpEvent:
    """One round's release: ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``."""
    return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))


def ledger_event(ledger: Sequence[Segment]) -> dp_accounting.DpEvent:
    """The whole run: ``SelfComposedDpEvent`` of one segment, ``ComposedDpEvent`` of several."""
    events = [dp_accounting.SelfComposedDpEvent(round_event(q, z), count) for q, z, count in ledger if count > 0]
    if not events:
        return dp_accounting.NoOpDpEvent()
    return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)


def ledger_epsilon(ledger: Sequence[Segment], delta: float, accountant: str = "pld",
                   orders: Sequence[float] | None = None) -> float:
    """``epsilon`` at ``delta`` after every round of ``ledger``, from a fresh accountant.

    Example:
        >>> round(ledger_epsilon([(0.1, 1.0, 100)], 1e-3, "rdp"), 6)
        5.655053
    """
    check_delta(delta)
    if not any(count for _, _, count in ledger):
        return 0.0
    if any(z == 0 for _, z, count in ledger if count):
        return math.inf
    if accountant == "pld":
        return _pld_epsilon(tuple(ledger), delta)
    if accountant != "rdp":
        make_accountant(accountant)  # the one-line error naming the allowed accountants
    releases = [(round_event(q, z), count) for q, z, count in ledger if count > 0]
    return _rdp_epsilon(releases, delta, "add_or_remove_one", orders)


#: ``PLDAccountant``'s default discretisation (dp-accounting 0.6.0).
_PLD_INTERVAL = 1e-4


@functools.lru_cache(maxsize=8)
def _round_pld(q: float, z: float) -> pld_module.PrivacyLossDistribution:
    # Building one round's PLD is most of a fresh PLDAccountant's time (about 0.4 s); it depends on (q, z) only.
    return pld_module.from_gaussian_mechanism(
        standard_deviation=z, value_discretization_interval=_PLD_INTERVAL, sampling_prob=q,
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)


@functools.lru_cache(maxsize=32)
def _release_rdp(event: dp_accounting.DpEvent, neighboring: str, orders: tuple[float, ...] | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    # An RdpAccountant composes ``count`` releases as ``count *`` one release's RDP vector, so that vector
    # (tens of milliseconds to compute) is all a (q, z) needs; epsilon after any count is then microseconds.
    with _quiet_rdp():
        acc = make_accountant("rdp", neighboring, orders)
        acc.compose(event)
        return acc.orders, acc.rdp


def _rdp_epsilon(releases: Sequence[tuple[dp_accounting.DpEvent, int]], delta: float, neighboring: str,
                 orders: Sequence[float] | None = None) -> float:
    """What a fresh ``RdpAccountant`` composed with ``count`` of each release gives, bitwise: the same
    ``+= count * rdp`` in the same order and the package's own ``compute_epsilon``, each release's RDP
    vector computed once per run instead of once per call."""
    key = tuple(orders) if orders is not None else None
    total, order_values = None, None
    for event, count in releases:
        order_values, rdp_one = _release_rdp(event, neighboring, key)
        total = np.zeros_like(order_values, dtype=np.float64) if total is None else total
        total += count * rdp_one
    if total is None:
        return 0.0
    with _quiet_rdp():
        return float(rdp_privacy_accountant.compute_epsilon(order_values, total, delta)[0])


def _pld_epsilon(ledger: tuple[Segment, ...], delta: float) -> float:
    """What ``PLDAccountant().compose(ledger_event(ledger)).get_epsilon(delta)`` computes, the same calls in the
    same order, with each round's PLD built once per ``(q, z)`` instead of once per call."""
    total = pld_module.identity(value_discretization_interval=_PLD_INTERVAL)
    for q, z, count in ledger:
        if count > 0 and q > 0:
            total = total.compose(_round_pld(q, z).self_compose(count))
    return float(total.get_epsilon_for_delta(delta))


def epsilon(q: float, z: float, rounds: int, delta: float, accountant: str = "pld",
            orders: Sequence[float] | None = None) -> float:
    """``epsilon`` after ``rounds`` rounds of ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` at ``delta``."""
    return ledger_epsilon([(q, z, rounds)], delta, accountant, orders)


def fixed_size_epsilon(num_clients: int, cohort: int, z: float, rounds: int, delta: float) -> float:
    """``epsilon`` for fixed-size sampling: ``K`` of ``N`` without replacement, replace-one RDP, multiplier ``z/2``.

    Example:
        >>> round(fixed_size_epsilon(1000, 100, 1.0, 100, 1e-3), 2)
        79.33
    """
    check_delta(delta)
    if rounds == 0:
        return 0.0
    if z == 0:
        return math.inf
    event = dp_accounting.SampledWithoutReplacementDpEvent(num_clients, cohort, dp_accounting.GaussianDpEvent(z / 2))
    return _rdp_epsilon([(event, rounds)], delta, "replace_one")


def local_epsilon(z: float, releases: int, delta: float) -> float:
    """Local DP: ``epsilon`` of one client after ``releases`` noised updates, ``GaussianDpEvent(z/2)`` each, replace-one RDP.

    No sampling amplification is claimed: each release is the client's own clipped update plus noise.
    """
    check_delta(delta)
    if releases == 0:
        return 0.0
    if z == 0:
        return math.inf
    return _rdp_epsilon([(dp_accounting.GaussianDpEvent(z / 2), releases)], delta, "replace_one")


def calibrate_noise(target_epsilon: float, delta: float, rounds: int, q: float, accountant: str = "pld",
                    event: Callable[[float], dp_accounting.DpEvent] | None = None,
                    accountant_factory: Callable[[], dp_accounting.PrivacyAccountant] | None = None,
                    lower: float = 0.0) -> float:
    """The smallest noise multiplier ``z`` whose ``rounds`` rounds at rate ``q`` stay within ``(target_epsilon, delta)``.

    ``mechanism_calibration.calibrate_dp_mechanism`` (Brent's method) over
    ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), rounds)``.

    Args:
        event: Another ``z -> DpEvent`` (the fixed-size path), with ``accountant_factory``.
        lower: The smallest ``z`` the search tries (the fixed-size RDP path divides by ``z``).

    Raises:
        ConfigError: If no ``z`` up to :data:`MAX_NOISE_MULTIPLIER` reaches the target (``model.dp.target_epsilon``).
    """
    check_epsilon("model.dp.target_epsilon", target_epsilon)
    check_delta(delta)
    make = accountant_factory or (lambda: make_accountant(accountant))
    build = event or (lambda z: dp_accounting.SelfComposedDpEvent(round_event(q, z), rounds))
    try:
        with _quiet_rdp():
            z = float(mechanism_calibration.calibrate_dp_mechanism(
                make, build, target_epsilon, delta, mechanism_calibration.LowerEndpointAndGuess(lower, max(1.0, 2 * lower))))
    except mechanism_calibration.NoBracketIntervalFoundError:
        z = math.inf
    if not z <= MAX_NOISE_MULTIPLIER:
        raise ConfigError(f"model.dp.target_epsilon {target_epsilon} at delta {delta:g} is not reachable over {rounds}"
                          f" rounds at sampling rate {q:g} with a noise multiplier up to {MAX_NOISE_MULTIPLIER:g}")
    return z


def calibrate_fixed_size_noise(num_clients: int, cohort: int, target_epsilon: float, delta: float,
                               rounds: int) -> float:
    """``z`` for fixed-size sampling: ``SampledWithoutReplacementDpEvent(N, K, GaussianDpEvent(z/2))``, replace-one RDP.

    Raises:
        ConfigError: As :func:`calibrate_noise`.
    """
    def event(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
            num_clients, cohort, dp_accounting.GaussianDpEvent(z / 2)), rounds)

    return calibrate_noise(target_epsilon, delta, rounds, cohort / num_clients, "rdp", event,
                           lambda: make_accountant("rdp", "replace_one"), lower=0.01)


def update_noise_multiplier(z: float, sigma_b: float) -> float:
    """``z_Δ = (z^-2 - (2 sigma_b)^-2)^(-1/2)``: the update's multiplier when the clipped count takes ``2 sigma_b``.

    With adaptive clipping (Andrew et al. 2021) the noised count (sensitivity 1/2, std ``sigma_b``) and
    the update (multiplier ``z_Δ``) compose to ``GaussianDpEvent(z)``.

    Raises:
        ConfigError: If ``z >= 2 sigma_b`` (no update noise would be left).

    Example:
        >>> round(update_noise_multiplier(1.0, 5.0), 6)
        1.005038
    """
    if not z < 2 * sigma_b:
        raise ConfigError(f"model.dp.adaptive.count_noise {sigma_b:g} is too small for noise multiplier {z:g}: adaptive"
                          " clipping needs z < 2 sigma_b (raise count_noise or lower the noise)")
    return (z ** -2 - (2 * sigma_b) ** -2) ** -0.5 if z > 0 else 0.0


def check_epsilon(field: str, value: float) -> None:
    """``epsilon > 0`` (a one-line :class:`ConfigError` naming ``field``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{field} must be a number > 0; got {value!r}")


def check_delta(delta: float, field: str = "model.dp.delta") -> None:
    """``0 < delta < 1`` (a one-line :class:`ConfigError` naming ``field``)."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise ConfigError(f"{field} must be in (0, 1); got {delta!r}")


__all__ = ["ACCOUNTANTS", "MAX_NOISE_MULTIPLIER", "SAMPLINGS", "Segment", "calibrate_fixed_size_noise", "calibrate_noise", "check_delta", "check_epsilon", "epsilon",
           "fixed_size_epsilon", "ledger_epsilon", "local_epsilon", "make_accountant", "round_event", "update_noise_multiplier"]
