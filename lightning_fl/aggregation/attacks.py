"""Simulated Byzantine clients: who they are and what they send (docs/algorithms.md, Attacks (Byzantine clients)).

``model.attack`` configures one attack. Its Byzantine clients ``B`` are a fraction of all clients,
fixed from the seed; they train honestly (on flipped labels for ``LabelFlip`` or ``flip_labels``) and
the attack replaces the row each sends, stage (b) of the aggregation pipeline: after the algorithm's
map of the rows, before the configured transforms. Omniscient attacks (ALIE, IPM) read this round's
honest rows. Every draw is keyed by ``(seed, ...)``, so every process and every resume agree.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from lightning_fl.aggregation.stage import PipelineStage, StageContext
from lightning_fl.faults.validation import ConfigError, check_choice, check_non_negative, check_positive
from lightning_fl.functional.attacks import ALIE_Z_OPTIONS, alie, alie_z, byzantine_clients, flip_labels, \
    gaussian_rows, ipm, scale, sign_flip
from lightning_fl.state.data import FederatedData

#: Where omniscient attackers take their statistics: the honest members' rows, or their own honest updates.
KNOWLEDGE = ("honest", "own")
#: Who is Byzantine: clients, or (with ``model.hierarchy``) whole institutions.
LEVELS = ("client", "institution")


class Attack(PipelineStage):
    """Base of the attacks: the Byzantine set and the rows its cohort members send.

    Args:
        fraction: Byzantine share of all ``N`` clients, in ``[0, 0.5)``: ``B`` is ``floor(fraction N)``
            clients, the head of a permutation keyed ``(seed, "byzantine")``.
        flip_labels: The Byzantine clients also train on ``y -> C - 1 - y``.
        knowledge: ``honest`` (statistics over the honest members ``H_t``) or ``own`` (over ``B_t``'s own
            honest updates); read by ALIE and IPM.
        level: ``client`` or ``institution`` (with ``model.hierarchy``: ``fraction`` of the institutions are
            Byzantine, every client of theirs trains as one of theirs, and the attack replaces the
            institution models the server combines).

    Attributes:
        byzantine: The Byzantine members of the server's cohort (client ids, or institution ids) after
            :meth:`setup`.
        attacker_clients: The clients whose data and metrics are the attackers' (``byzantine``'s clients).
    """

    #: Whether the rows sent need every client's row (all but label flipping).
    replaces_rows: bool = True

    def __init__(self, fraction: float, flip_labels: bool = False, knowledge: str = "honest",
                 level: str = "client") -> None:
        byzantine_clients(1, fraction, 0, field="model.attack.init_args.fraction")  # checks the range
        check_choice("model.attack.init_args.knowledge", knowledge, KNOWLEDGE)
        check_choice("model.attack.init_args.level", level, LEVELS)
        self.fraction, self.flips_labels, self.knowledge, self.level = float(fraction), bool(flip_labels), knowledge, level
        self.byzantine = self.attacker_clients = torch.zeros(0, dtype=torch.long)

    def setup(self, num_clients: int, seed: int, institutions: list[Tensor] | None = None) -> None:
        """Draw ``B`` for a federation of ``num_clients`` (and ``institutions``, their client ids) and ``seed``."""
        field = "model.attack.init_args.fraction"
        if self.level == "institution":
            if institutions is None:
                raise ConfigError("model.attack.init_args.level: institution needs model.hierarchy; use level: client")
            self.byzantine = byzantine_clients(len(institutions), self.fraction, seed, field=field)
            members = [institutions[m] for m in self.byzantine.tolist()]
            self.attacker_clients = torch.sort(torch.cat(members)).values if members else self.byzantine.clone()
        else:
            if institutions is not None:
                raise ConfigError("model.attack.init_args.level: client attacks inside a model.hierarchy are not"
                                  " supported yet; use level: institution")
            self.byzantine = self.attacker_clients = byzantine_clients(num_clients, self.fraction, seed, field=field)

    def honest_clients(self, num_clients: int) -> Tensor:
        """``(N,)`` bool: the clients outside ``B`` (whose metrics are the headline)."""
        honest = torch.ones(num_clients, dtype=torch.bool)
        honest[self.attacker_clients] = False
        return honest

    def poison(self, data: FederatedData) -> FederatedData:
        """``data`` with the Byzantine clients' training labels flipped when the attack flips labels."""
        if not self.flips_labels or not len(self.attacker_clients):
            return data
        owner = torch.repeat_interleave(torch.arange(data.num_clients), data.train_offsets.diff().cpu())
        byzantine_sample = torch.isin(owner, self.attacker_clients).to(data.y_train.device)
        y = torch.where(byzantine_sample, flip_labels(data.y_train, data.num_classes), data.y_train)
        return dataclasses.replace(data, y_train=y)

    def attack_rows(self, U: Tensor, byzantine: Tensor, ctx: StageContext) -> Tensor | None:
        """The rows the Byzantine members (``byzantine``, ``(K_t,)`` bool) send, ``(f_t, P)``, or ``None``
        when the rows they need are missing (they then send their honest update)."""
        raise NotImplementedError

    def known_rows(self, U: Tensor, byzantine: Tensor) -> Tensor:
        """The honest rows the attackers' statistics use (``knowledge``)."""
        return U[byzantine] if self.knowledge == "own" else U[~byzantine]


class LabelFlip(Attack):
    """``label_flip``: the Byzantine clients train on ``y -> C - 1 - y`` and send what they trained.

    Args:
        fraction: Byzantine share of all clients, in ``[0, 0.5)``.
    """

    replaces_rows = False

    def __init__(self, fraction: float, level: str = "client") -> None:
        super().__init__(fraction, flip_labels=True, level=level)

    def attack_rows(self, U: Tensor, byzantine: Tensor, ctx: StageContext) -> Tensor | None:
        return U[byzantine]


class SignFlip(Attack):
    """``sign_flip``: ``u_k = -Δ_k``."""

    def attack_rows(self, U: Tensor, byzantine: Tensor, ctx: StageContext) -> Tensor | None:
        return sign_flip(U[byzantine])


class Scale(Attack):
    """``scale`` (model replacement, Bagdasaryan et al. 2020): ``u_k = gamma Δ_k``; with ``flip_labels`` a
    poisoned replacement.

    Args:
        gamma: The factor (default: the nominal cohort size ``K``, i.e. ``K / eta_s`` with ``eta_s = 1``).
    """

    def __init__(self, fraction: float, gamma: float | None = None, flip_labels: bool = False,
                 level: str = "client") -> None:
        super().__init__(fraction, flip_labels, level=level)
        if gamma is not None:
            check_positive("model.attack.init_args.gamma", gamma)
        self.gamma = gamma
        self.cohort_size = 1

    def attack_rows(self, U: Tensor, byzantine: Tensor, ctx: StageContext) -> Tensor | None:
        return scale(U[byzantine], self.gamma if self.gamma is not None else float(self.cohort_size))


class Gaussian(Attack):
    """``gaussian``: ``u_k ~ N(mu, sigma^2 I)``, keyed ``(seed, t, k, "attack")``.

    Args:
        mu: The mean of every coordinate.
        sigma: The standard deviation (``>= 0``).
    """

    def __init__(self, fraction: float, mu: float = 0.0, sigma: float = 1.0, flip_labels: bool = False,
                 level: str = "client") -> None:
        super().__init__(fraction, flip_labels, level=level)
        check_non_negative("model.attack.init_args.sigma", sigma)
        self.mu, self.sigma = float(mu), float(sigma)

    def attack_rows(self, U: Tensor, byzantine: Tensor, ctx: StageContext) -> Tensor | None:
        ids = ctx.client_ids[byzantine.to(ctx.client_ids.device)]
        return gaussian_rows(ids, U.shape[1], self.mu, self.sigma, ctx.seed, ctx.round_idx, dtype=U.dtype,
                             device=U.device)


class ALIE(Attack):
    """``alie`` (A Little Is Enough, Baruch et al. 2019): every Byzantine member sends ``mu - z sigma``.

    Args:
        alie_z: ``null`` (Baruch et al.'s ``z`` from ``K_t`` and ``f_t``), ``honest`` (the authors' code) or a
            number used as ``z``.
        knowledge: ``honest`` or ``own`` (see :class:`Attack`).
    """

    def __init__(self, fraction: float, alie_z: None | str | float = None, knowledge: str = "honest",
                 flip_labels: bool = False, level: str = "client") -> None:
        super().__init__(fraction, flip_labels, knowledge, level)
        if isinstance(alie_z, str) and alie_z not in ALIE_Z_OPTIONS:
            raise ConfigError(f"model.attack.init_args.alie_z must be null, {', '.join(ALIE_Z_OPTIONS)} or a number;"
                              f" got {alie_z!r}")
        self.z = alie_z

    def attack_rows(self, U: Tensor, byzantine: Tensor, ctx: StageContext) -> Tensor | None:
        k, f = U.shape[0], int(byzantine.sum())
        try:
            alie_z(k, f, self.z)
        except ValueError:  # too few honest members for a finite z
            return None
        vector = alie(self.known_rows(U, byzantine), k, f, self.z)
        return None if vector is None else vector.expand(f, -1)


class IPM(Attack):
    """``ipm`` (inner-product manipulation, Xie et al. 2020): every Byzantine member sends ``-eps mean_{H_t} Δ``.

    Args:
        eps: The strength (default 2.0; ``eps = 1`` is ByzFL's ``SignFlipping``).
        knowledge: ``honest`` or ``own`` (see :class:`Attack`).
    """

    def __init__(self, fraction: float, eps: float = 2.0, knowledge: str = "honest",
                 flip_labels: bool = False, level: str = "client") -> None:
        super().__init__(fraction, flip_labels, knowledge, level)
        self.eps = float(eps)

    def attack_rows(self, U: Tensor, byzantine: Tensor, ctx: StageContext) -> Tensor | None:
        vector = ipm(self.known_rows(U, byzantine), self.eps)
        return None if vector is None else vector.expand(int(byzantine.sum()), -1)


__all__ = ["ALIE", "IPM", "KNOWLEDGE", "LEVELS", "Attack", "Gaussian", "LabelFlip", "Scale", "SignFlip"]
