"""Byzantine clients and the rows they send (docs/algorithms.md, Attacks (Byzantine clients)).

Plain functions over tensors; the pipeline that calls them decides where an attack runs. Notation:
``N`` clients in total, a cohort ``S_t`` of ``K_t`` members in round ``t``, ``B`` the Byzantine
clients, ``B_t = S_t ∩ B`` with ``f_t = |B_t|``, and the honest members ``H_t = S_t \\ B_t``.

- :func:`byzantine_clients`: ``B``, the first ``floor(fraction N)`` entries of a permutation of the
  clients keyed ``(seed, "byzantine")``, fixed for the run.
- :func:`attack_masks`: ``B_t`` and ``H_t`` as boolean masks in cohort order.
- :func:`flip_labels`: ``label_flip`` trains on ``y -> C - 1 - y``; the row is not transformed.
- :func:`sign_flip`: ``u_k = -Δ_k``.
- :func:`scale`: model replacement, ``u_k = gamma Δ_k`` (the caller's default is ``gamma = K / eta_s``).
- :func:`gaussian_rows`: ``u_k ~ N(mu, sigma^2 I)``, keyed ``(seed, t, k, "attack")`` per client.
- :func:`alie`: "a little is enough", ``mu - z sigma`` over the honest rows (with :func:`alie_z`).
- :func:`ipm`: inner-product manipulation, ``-eps mean_{H_t} Δ``.

Readings documented here:

- ``floor(fraction N)`` is taken with a tolerance of ``1e-9``, so that ``0.29 * 100`` (which is
  ``28.999999999999996`` in binary) gives 29 Byzantine clients, as the decimal fraction says.
- The omniscient attacks (:func:`alie`, :func:`ipm`) return one ``(P,)`` vector that every Byzantine
  member sends. When the rows they need are missing (fewer than two for ALIE, none for IPM) they
  return ``None``: the caller then sends the member's honest update and logs it.
- Random draws never touch global RNG state: a client's Gaussian row is a pure function of
  ``(seed, t, k)``, the same in every engine, for any cohort and any number of processes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError
from lightning_fl.state.seeding import generator_for

__all__ = [
    "ALIE_Z_OPTIONS",
    "alie",
    "alie_z",
    "attack_masks",
    "byzantine_clients",
    "flip_labels",
    "gaussian_rows",
    "ipm",
    "scale",
    "sign_flip",
]

#: The named readings of ALIE's ``z`` (``None`` is the default reading, a number is used as given).
ALIE_Z_OPTIONS = ("honest",)

#: Slack for ``floor(fraction N)``: fractions written in decimal must not lose a client to binary rounding.
_FLOOR_SLACK = 1e-9


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def byzantine_clients(num_clients: int, fraction: float, seed: int, *, field: str = "fraction") -> Tensor:
    """The Byzantine clients ``B`` of a run (docs/algorithms.md, Attacks (Byzantine clients)).

    ``B`` is the head, ``floor(fraction N)`` clients, of a permutation of ``0..N-1`` drawn from a
    generator keyed ``(seed, "byzantine")``. It depends on nothing else (not on the call order, the
    global RNG or the process), so every rank and a resumed run find the same set; and a larger
    fraction with the same seed gives a superset.

    Args:
        num_clients: ``N``, the number of clients in the federation (an integer >= 1).
        fraction: The Byzantine fraction, in ``[0, 0.5)``.
        seed: The run's seed.
        field: The configuration field to name in errors (e.g. ``"attack.fraction"``).

    Returns:
        The Byzantine client ids, sorted ascending, as a ``(floor(fraction N),)`` int64 CPU tensor.

    Raises:
        ConfigError: If ``fraction`` is not a number in ``[0, 0.5)`` or ``num_clients`` is not an
            integer >= 1.

    Example:
        >>> b = byzantine_clients(10, 0.3, seed=0)
        >>> len(b), bool((b == byzantine_clients(10, 0.3, seed=0)).all())
        (3, True)
    """
    if not _is_number(fraction) or not 0 <= fraction < 0.5:
        raise ConfigError(f"{field} must be a number in [0, 0.5); got {fraction!r}")
    if not isinstance(num_clients, int) or isinstance(num_clients, bool) or num_clients < 1:
        raise ConfigError(f"num_clients must be an integer >= 1; got {num_clients!r}")
    count = math.floor(fraction * num_clients + _FLOOR_SLACK)
    order = torch.randperm(num_clients, generator=generator_for(seed, "byzantine"))
    return torch.sort(order[:count]).values


def attack_masks(cohort_ids: Tensor, byzantine: Tensor) -> tuple[Tensor, Tensor]:
    """``B_t`` and ``H_t`` as boolean masks over the cohort, in cohort order.

    Args:
        cohort_ids: ``(K_t,)`` client ids of the cohort, in cohort order.
        byzantine: The Byzantine client ids ``B`` (any order), e.g. from :func:`byzantine_clients`.

    Returns:
        ``(byzantine_mask, honest_mask)``: two ``(K_t,)`` bool tensors on ``cohort_ids``' device,
        complements of each other; ``f_t = int(byzantine_mask.sum())``.

    Example:
        >>> attack_masks(torch.tensor([7, 2, 5]), torch.tensor([5, 7]))
        (tensor([ True, False,  True]), tensor([False,  True, False]))
    """
    byz = torch.isin(cohort_ids, byzantine.to(cohort_ids.device))
    return byz, ~byz


def flip_labels(y: Tensor, num_classes: int) -> Tensor:
    """``label_flip``: the labels a Byzantine client trains on, ``C - 1 - y``.

    Args:
        y: Integer class labels in ``[0, C)``, any shape.
        num_classes: ``C`` (an integer >= 1).

    Returns:
        The flipped labels, same shape, dtype and device as ``y``.

    Raises:
        ConfigError: If ``num_classes`` is not an integer >= 1.

    Example:
        >>> flip_labels(torch.tensor([0, 3, 9]), 10)
        tensor([9, 6, 0])
    """
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
        raise ConfigError(f"num_classes must be an integer >= 1; got {num_classes!r}")
    return (num_classes - 1) - y


def sign_flip(delta: Tensor) -> Tensor:
    """``sign_flip``: ``u_k = -Δ_k`` (the member's own update, negated; not ByzFL's ``-mean_{H_t}``).

    Example:
        >>> sign_flip(torch.tensor([1.0, -2.0]))
        tensor([-1.,  2.])
    """
    return -delta


def scale(delta: Tensor, gamma: float) -> Tensor:
    """``scale`` (model replacement, Bagdasaryan et al. 2020): ``u_k = gamma Δ_k``.

    With ``gamma = K / eta_s`` (the caller's default) the member's update replaces the global model's
    step under plain averaging.

    Args:
        delta: The member's honest update ``Δ_k``.
        gamma: The boost factor (a finite number).

    Raises:
        ConfigError: If ``gamma`` is not a finite number.

    Example:
        >>> scale(torch.tensor([1.0, -2.0]), 10.0)
        tensor([ 10., -20.])
    """
    if not _is_number(gamma) or not math.isfinite(gamma):
        raise ConfigError(f"gamma must be a finite number; got {gamma!r}")
    return gamma * delta


def gaussian_rows(
    client_ids: Tensor,
    num_params: int,
    mu: float = 0.0,
    sigma: float = 1.0,
    seed: int = 0,
    t: int = 0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """``gaussian``: ``u_k ~ N(mu, sigma^2 I)`` for each listed client, keyed ``(seed, t, k, "attack")``.

    Each row comes from its own CPU generator seeded from ``(seed, t, k, "attack")`` with ``k`` the
    client id (not its cohort position), so client ``k``'s row does not depend on which clients are
    drawn with it, on their order, or on the process; it is drawn in float64 and cast, so ``dtype``
    does not change the stream.

    Args:
        client_ids: ``(n,)`` integer client ids.
        num_params: ``P``, the length of each row (an integer >= 0).
        mu: The mean (a finite number, default 0).
        sigma: The standard deviation (a finite number >= 0, default 1).
        seed: The run's seed.
        t: The round (0-based).
        dtype: The rows' dtype (default float32, the server dtype).
        device: The rows' device (default CPU).

    Returns:
        ``(n, P)`` rows in client order.

    Raises:
        ConfigError: If ``mu``, ``sigma`` or ``num_params`` are out of range.

    Example:
        >>> rows = gaussian_rows(torch.tensor([4, 1]), 3, seed=0, t=2)
        >>> bool((rows[1] == gaussian_rows(torch.tensor([1]), 3, seed=0, t=2)[0]).all())
        True
    """
    if not _is_number(mu) or not math.isfinite(mu):
        raise ConfigError(f"mu must be a finite number; got {mu!r}")
    if not _is_number(sigma) or not math.isfinite(sigma) or sigma < 0:
        raise ConfigError(f"sigma must be a finite number >= 0; got {sigma!r}")
    if not isinstance(num_params, int) or isinstance(num_params, bool) or num_params < 0:
        raise ConfigError(f"num_params must be an integer >= 0; got {num_params!r}")
    ids = [int(k) for k in client_ids.reshape(-1).tolist()]
    rows = torch.empty(len(ids), num_params, dtype=torch.float64)
    for i, k in enumerate(ids):  # one generator per client: the row depends on (seed, t, k) only
        rows[i] = torch.randn(num_params, generator=generator_for(seed, t, k, "attack"), dtype=torch.float64)
    return (mu + sigma * rows).to(dtype=dtype, device=device)


def alie_z(num_members: int, num_byzantine: int, z: None | str | float = None) -> float:
    """ALIE's ``z`` for a cohort of ``K_t`` members with ``f_t`` Byzantine ones, in float64.

    - ``None`` (default, Baruch et al. 2019): ``s_t = max(1, floor(K_t/2 + 1) - f_t)`` and
      ``z = Phi^{-1}((K_t - s_t) / K_t)``.
    - ``"honest"`` (the authors' ``alittle.py``): ``z = Phi^{-1}((K_t - f_t - s_t) / (K_t - f_t))``.
    - a number: used as ``z`` (ByzFL's ``tau`` is ``-z``).

    Args:
        num_members: ``K_t`` (an integer >= 1).
        num_byzantine: ``f_t`` (an integer in ``[0, K_t]``).
        z: The reading, as above.

    Returns:
        ``z`` as a Python float.

    Raises:
        ConfigError: If ``z`` is an unknown option, a non-finite number, or ``K_t``/``f_t`` are out of range.
        ValueError: If the quantile is 0 or 1 (``z`` infinite): too few honest members for ALIE.

    Example:
        >>> round(alie_z(5, 2), 6)  # s_t = max(1, 3 - 2) = 1, z = Phi^-1(4/5)
        0.841621
    """
    if not isinstance(num_members, int) or isinstance(num_members, bool) or num_members < 1:
        raise ConfigError(f"K_t must be an integer >= 1; got {num_members!r}")
    if not isinstance(num_byzantine, int) or isinstance(num_byzantine, bool) or not 0 <= num_byzantine <= num_members:
        raise ConfigError(f"f_t must be an integer in [0, K_t={num_members}]; got {num_byzantine!r}")
    if _is_number(z):
        if not math.isfinite(z):
            raise ConfigError(f"alie_z must be a finite number, honest or null; got {z!r}")
        return float(z)
    if z is not None and z not in ALIE_Z_OPTIONS:
        raise ConfigError(f"alie_z must be one of null, {', '.join(ALIE_Z_OPTIONS)} or a number; got {z!r}")
    k, f = num_members, num_byzantine
    s = max(1, (k // 2 + 1) - f)  # floor(K/2 + 1) == K // 2 + 1 for an integer K
    num, den = (k - s, k) if z is None else (k - f - s, k - f)
    if den <= 0 or not 0 < num < den:
        raise ValueError(f"ALIE's z is infinite for K_t={k}, f_t={f} (alie_z={z!r}): too few honest members")
    # fp64 so that z is the same on every device and rank (the rows themselves stay in their dtype).
    return float(torch.special.ndtri(torch.tensor(num / den, dtype=torch.float64)))


def alie(honest: Tensor, num_members: int, num_byzantine: int, z: None | str | float = None) -> Tensor | None:
    """``alie`` (Baruch et al. 2019): the vector ``mu - z sigma`` every Byzantine member sends.

    ``mu`` and ``sigma`` are the coordinate mean and unbiased standard deviation (``ddof = 1``) over
    the honest rows; ``z`` is :func:`alie_z` of ``(K_t, f_t, z)``.

    Args:
        honest: ``(h, P)`` the honest rows the attackers know (``H_t``'s updates, or ``B_t``'s own
            honest updates under ``knowledge: own``).
        num_members: ``K_t``, the cohort size.
        num_byzantine: ``f_t``, the Byzantine members in the cohort.
        z: ``None`` (default), ``"honest"`` or a number (see :func:`alie_z`).

    Returns:
        The ``(P,)`` vector in ``honest``'s dtype and device, or ``None`` when ``h < 2`` (the standard
        deviation is undefined: the caller sends the honest update and logs it).

    Example:
        >>> alie(torch.tensor([[1.0, 2.0], [3.0, 8.0], [5.0, 5.0]]), 5, 2, z=1.0)  # mu [3, 5], sigma [2, 3]
        tensor([1., 2.])
    """
    if honest.ndim != 2:
        raise ValueError(f"honest must be a (h, P) stack; got shape {tuple(honest.shape)}")
    z_value = alie_z(num_members, num_byzantine, z)  # validate the options even when rows are missing
    if honest.shape[0] < 2:
        return None
    mu = honest.mean(dim=0)
    sigma = honest.std(dim=0, correction=1)
    return mu - z_value * sigma


def ipm(honest: Tensor, eps: float = 2.0) -> Tensor | None:
    """``ipm`` (inner-product manipulation, Xie et al. 2020): ``-eps mean_{H_t} Δ``.

    Args:
        honest: ``(h, P)`` the honest rows the attackers know.
        eps: The strength (a finite number; default 2.0, ByzFL's; ``eps = 1`` is ByzFL's ``SignFlipping``).

    Returns:
        The ``(P,)`` vector every Byzantine member sends, or ``None`` when ``h == 0`` (the caller sends
        the honest update and logs it).

    Example:
        >>> ipm(torch.tensor([[1.0, 2.0], [3.0, -4.0]]))
        tensor([-4.,  2.])
    """
    if not _is_number(eps) or not math.isfinite(eps):
        raise ConfigError(f"eps must be a finite number; got {eps!r}")
    if honest.ndim != 2:
        raise ValueError(f"honest must be a (h, P) stack; got shape {tuple(honest.shape)}")
    if honest.shape[0] == 0:
        return None
    return -eps * honest.mean(dim=0)
