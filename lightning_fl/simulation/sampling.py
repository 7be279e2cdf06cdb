"""Cohort sampling (docs/algorithms.md, Sampling): which clients train in round ``t``.

Uniform sampling without replacement takes the first ``K`` of a permutation of the ``N`` ids while
``N <= LARGE_FEDERATION`` (what every run has drawn so far, kept bitwise), and above it draws the ``K``
ids with Robert Floyd's algorithm (:func:`sample_without_replacement`, :func:`floyd_subset`): ``O(K)`` time and memory, no
``N``-sized permutation, so a round of a million-client federation costs what its cohort costs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.state.seeding import client_uniforms, generator_for

SAMPLING_MODES = ("uniform", "by_samples", "all")
#: Above this many candidates, uniform cohorts come from :func:`sample_without_replacement` (``O(K)``),
#: not from an ``N``-sized permutation; at or below it the permutation's draws are kept bitwise.
LARGE_FEDERATION = 100_000


def floyd_subset(n: int, uniforms: list[float]) -> list[int]:
    """Floyd's algorithm on given uniforms: ``len(uniforms)`` distinct ids of ``range(n)``, ascending.

    Robert Floyd's algorithm (Bentley & Floyd, "A sample of brilliance", CACM 1987): with
    ``k = len(uniforms)``, for ``j = n - k, ..., n - 1`` take ``t = floor(u_j (j + 1))``, uniform in
    ``[0, j]``, and keep ``t``, or ``j`` when ``t`` is already kept. Every ``k``-subset comes out with
    probability ``1 / C(n, k)`` (by induction on ``j``), and nothing of size ``n`` is built.

    Example:
        >>> floyd_subset(5, [0.9, 0.5, 0.1])  # t = 2; t = 2 taken, so 3; t = 0
        [0, 2, 3]
    """
    k = len(uniforms)
    if not 0 <= k <= n:
        raise ValueError(f"cannot draw {k} distinct ids from {n}")
    chosen: set[int] = set()
    for u, j in zip(uniforms, range(n - k, n)):
        t = min(int(u * (j + 1)), j)  # min: guards the float product against rounding up to j + 1
        chosen.add(j if t in chosen else t)
    return sorted(chosen)


def sample_without_replacement(n: int, k: int, generator: torch.Generator) -> Tensor:
    """``k`` distinct ids drawn uniformly from ``range(n)``, in ``O(k)`` time and memory (:func:`floyd_subset`).

    The ``k`` uniforms are one float64 draw of ``generator``, so the rounding bias of
    ``floor(u (j + 1))`` is below ``n / 2**53``.

    Args:
        n: The population size ``N``.
        k: How many to draw, ``0 <= k <= n``.
        generator: Source of randomness (e.g. keyed by ``(seed, round)``).

    Returns:
        ``(k,)`` int64 ids, ascending.

    Raises:
        ValueError: If ``k`` is outside ``[0, n]``.

    Example:
        >>> ids = sample_without_replacement(10**9, 3, torch.Generator().manual_seed(0))
        >>> len(ids), len(set(ids.tolist())), bool((ids >= 0).all() and (ids < 10**9).all())
        (3, 3, True)
    """
    if not 0 <= k <= n:
        raise ValueError(f"cannot draw {k} distinct ids from {n}")
    uniforms = torch.rand(k, generator=generator, dtype=torch.float64).tolist()
    return torch.tensor(floyd_subset(n, uniforms), dtype=torch.long)


class ClientSampler:
    """Draws the cohort ``S_t`` of ``K`` clients for each round.

    The draw for round ``t`` depends only on ``(seed, t)``, so a resumed run samples the same cohorts
    as an uninterrupted one. Cohorts are returned sorted by client id.

    Args:
        num_clients: ``N``, the number of clients.
        clients_per_round: ``K``; ``1 <= K <= N``.
        mode: ``uniform`` (without replacement; ``O(K)`` above ``LARGE_FEDERATION`` candidates), ``by_samples`` (without replacement, probability
            proportional to ``n_k``) or ``all`` (every client, every round).
        seed: Run seed.
        num_samples: ``n_k`` for every client; required for ``by_samples``.

    Raises:
        ConfigError: If ``mode`` is unknown or ``K`` is outside ``[1, N]``.

    Example:
        >>> ClientSampler(5, 2, "uniform", seed=0).sample(0).tolist()
        [1, 3]
    """

    def __init__(
        self, num_clients: int, clients_per_round: int, mode: str, seed: int, num_samples: Tensor | None = None
    ) -> None:
        check_choice("sampling", mode, SAMPLING_MODES)
        check_positive("clients_per_round", clients_per_round, integer=True)
        if clients_per_round > num_clients and mode != "all":  # `all` ignores it: every client, every round
            raise ConfigError(
                f"clients_per_round must be between 1 and {num_clients} (the number of clients); got {clients_per_round}"
            )
        self.num_clients = num_clients
        self.clients_per_round = num_clients if mode == "all" else clients_per_round
        self.mode = mode
        self.seed = seed
        self.num_samples = None if num_samples is None else num_samples.double().cpu()
        self.rate: float | None = None  # the inclusion probability q under Poisson sampling
        self.allowed: Tensor | None = None  # sorted ids that may train (model.eval.unseen_fraction holds the rest out)

    def hold_out(self, client_ids: Tensor) -> None:
        """Never sample ``client_ids`` (the unseen clients of ``model.eval``); cohorts come from the rest."""
        keep = torch.ones(self.num_clients, dtype=torch.bool)
        keep[client_ids.long()] = False
        self.allowed = keep.nonzero().flatten()
        if self.mode != "all" and self.clients_per_round > len(self.allowed):
            raise ConfigError(f"clients_per_round must be at most {len(self.allowed)} (the clients left after"
                              f" model.eval.unseen_fraction holds {len(client_ids)} out); got {self.clients_per_round}")

    def use_poisson(self, rate: float) -> None:
        """Sample each client independently with probability ``rate`` from now on (``model.dp.sampling: poisson``).

        Client ``k`` is in ``S_t`` when its uniform keyed ``(seed, "poisson", t, k)`` is below ``rate``: the
        cohort size varies and may be 0, as the Poisson-subsampled Gaussian accountants assume
        (docs/algorithms.md, Client-level differential privacy).
        """
        self.mode, self.rate = "poisson", float(rate)

    def sample(self, round_idx: int, candidates: Tensor | None = None, count: int | None = None) -> Tensor:
        """The sorted client ids of round ``round_idx`` (a CPU ``long`` tensor).

        Args:
            round_idx: The round ``t``.
            candidates: Sorted ids of the clients that can be sampled (the online ones under a
                ``model.system`` availability model); ``None``: every client.
            count: How many to sample (``K``, or more with over-selection); all candidates when
                there are no more than ``count`` of them. ``None``: ``K``.
        """
        n, k = self.num_clients, self.clients_per_round if count is None else count
        if self.allowed is not None:
            candidates = self.allowed if candidates is None else candidates[torch.isin(candidates, self.allowed)]
        if self.mode == "poisson":
            ids = torch.arange(n) if candidates is None else candidates
            return ids[client_uniforms(ids, self.seed, "poisson", round_idx) < self.rate].sort().values
        pool = n if candidates is None else len(candidates)
        if k >= pool:
            return torch.arange(n) if candidates is None else candidates.clone()
        gen = generator_for(self.seed, "cohort", round_idx)
        if self.mode == "by_samples":
            weights = self.num_samples if candidates is None else self.num_samples[candidates]
            chosen = torch.multinomial(weights, k, replacement=False, generator=gen)
        elif pool > LARGE_FEDERATION:
            chosen = sample_without_replacement(pool, k, gen)
        else:
            chosen = torch.randperm(pool, generator=gen)[:k]
        return (chosen if candidates is None else candidates[chosen]).sort().values

    def state_dict(self) -> dict[str, Any]:
        state = {"num_clients": self.num_clients, "clients_per_round": self.clients_per_round, "mode": self.mode,
                 "seed": self.seed}
        return state if self.rate is None else {**state, "rate": self.rate}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that a checkpoint was written by a run with the same sampling configuration."""
        mine = self.state_dict()
        changed = [key for key in mine if state.get(key) != mine[key]]
        if changed:
            diffs = ", ".join(f"{key}: checkpoint {state.get(key)!r} vs config {mine[key]!r}" for key in changed)
            raise ConfigError(f"sampling configuration differs from the checkpoint ({diffs})")
