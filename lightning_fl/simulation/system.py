"""Simulated system heterogeneity: who is online, who reports, how much work each does, how long a round takes.

``model.system`` of a :class:`~lightning_fl.simulation.loop.FederatedLoop`, in the style of ``model.hierarchy``.
Every draw is a function of ``(seed, round, client)`` (:func:`~lightning_fl.state.seeding.client_uniforms`),
so a round's fates are the same in every engine, after a resume and for any number of processes.
The formulas are in docs/system.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError, check_choice, check_non_negative, check_positive, check_range
from lightning_fl.functional.system import (
    first_finishers,
    pick_fraction,
    steps_within,
    transfer_seconds,
    uniform_epochs,
)
from lightning_fl.simulation.sampling import ClientSampler
from lightning_fl.simulation.system_traces import AvailabilityTrace, read_speed_trace
from lightning_fl.state.seeding import client_normals, client_uniforms, derive_seed

STRAGGLER_POLICIES = ("drop", "partial")


@dataclass(frozen=True)
class ClientFates:
    """What happens to round ``t``'s clients before any of them trains.

    Attributes:
        round_idx: The round ``t``.
        num_available: Clients online this round (``N`` without an availability model).
        sampled: Sorted ids of the clients sampled from the online ones (``ceil(K (1 + o))`` with over-selection).
        client_ids: Sorted ids of the kept clients: they train and report (empty: an empty round).
        num_steps: ``(len(client_ids),)`` local steps each kept client takes (fewer than ``full_steps`` if partial).
        full_steps: ``(len(client_ids),)`` ``tau_k = E ceil(n_k / B)``, the steps without a deadline.
        dropped: Ids of sampled clients that failed to report (dropout).
        stragglers: Ids of sampled clients over the deadline or in the straggler fraction (kept with
            partial work under ``stragglers: partial``, dropped under ``drop``); dropouts excluded.
        over_selected: Ids of clients that finished after the first ``K`` (over-selection).
        round_seconds: Simulated duration: the slowest kept client's download + compute + upload.
    """

    round_idx: int
    num_available: int
    sampled: Tensor
    client_ids: Tensor
    num_steps: Tensor
    full_steps: Tensor
    dropped: Tensor
    stragglers: Tensor
    over_selected: Tensor
    round_seconds: float

    @property
    def empty(self) -> bool:
        return len(self.client_ids) == 0

    def metrics(self) -> dict[str, float]:
        """The ``clients/*`` scalars of the round."""
        partial = self.num_steps < self.full_steps
        return {"clients/available": float(self.num_available), "clients/sampled": float(len(self.sampled)),
                "clients/kept": float(len(self.client_ids)), "clients/dropped": float(len(self.dropped)),
                "clients/stragglers": float(len(self.stragglers)),
                "clients/over_selected": float(len(self.over_selected)),
                "clients/partial_steps": float(self.num_steps[partial].sum())}


class SystemHeterogeneity:
    """Unreliable, slow and heterogeneous clients on a simulated clock.

    Each round: the online clients are drawn (availability), ``ceil(K (1 + over_selection))`` of them
    are sampled, each fails to report with probability ``dropout``, each runs ``s_k`` local steps per
    simulated second, and with a ``deadline`` the clients whose ``download + tau_k / s_k + upload``
    exceeds it are stragglers (dropped, or kept with the steps that fit under ``stragglers:
    partial``). Alternatively ``straggler_fraction`` makes that share of the cohort stragglers, as in
    the FedProx paper's experiments (under ``partial`` each trains a uniform number of epochs in
    ``[1, E]``). The first ``K`` clients to finish are kept; the round lasts until the slowest of them.

    The defaults (everyone online, no dropout, no speed model) change nothing about training.

    Args:
        availability: Probability ``a`` that a client is online in a round (the same for all).
        availability_beta: ``[alpha, beta]``: each client's ``a_k`` is drawn once from Beta(alpha, beta).
        availability_trace: CSV ``round,client,available`` (rounds from 1, repeating; a missing row
            is offline); see :mod:`lightning_fl.simulation.system_traces`.
        dropout: Probability ``p_drop`` that a sampled client fails to report (its work is lost and
            its per-client state untouched).
        speed_mean: Mean local steps per simulated second; ``s_k`` is lognormal around it.
        speed_sigma: Standard deviation of ``log s_k`` (0: every client has ``speed_mean``).
        speed_trace: CSV ``client,steps_per_second`` instead of the lognormal model.
        deadline: Round deadline ``T_d`` in simulated seconds (needs a speed model).
        stragglers: ``drop`` (stragglers' work is lost, FedAvg in the FedProx paper) or ``partial``
            (they report the local steps that fit before the deadline, at least one).
        straggler_fraction: The FedProx paper's stragglers instead of a deadline: this share of the
            cohort (chosen at random each round) are stragglers.
        over_selection: ``o >= 0``: sample ``ceil(K (1 + o))`` clients and keep the first ``K`` to finish.
        bandwidth_mbps: Client link bandwidth for downloads and uploads of the model (``None``: instant).
        latency_ms: Client link latency per transfer.

    Raises:
        ConfigError: On a value out of range or contradicting options, before training starts.

    Example (YAML)::

        model:
          system:
            availability: 0.9
            dropout: 0.1
            speed_mean: 20          # local steps per simulated second
            speed_sigma: 1.0
            deadline: 5.0
            stragglers: partial
    """

    def __init__(self, availability: float = 1.0, availability_beta: list[float] | None = None,
                 availability_trace: str | None = None, dropout: float = 0.0, speed_mean: float | None = None,
                 speed_sigma: float = 0.0, speed_trace: str | None = None, deadline: float | None = None,
                 stragglers: str = "drop", straggler_fraction: float | None = None, over_selection: float = 0.0,
                 bandwidth_mbps: float | None = None, latency_ms: float = 0.0) -> None:
        check_range("system.availability", availability, 0.0, 1.0)
        check_range("system.dropout", dropout, 0.0, 1.0)
        check_choice("system.stragglers", stragglers, STRAGGLER_POLICIES)
        # Settings under which no client ever reports: the run would "finish" without training.
        if availability == 0:
            raise ConfigError("system.availability must be in (0.0, 1.0] (0.0: no client is ever online, so nothing"
                              " trains); got 0.0")
        if dropout == 1:
            raise ConfigError("system.dropout must be in [0.0, 1.0) (1.0: every sampled client drops out, so nothing"
                              " trains); got 1.0")
        if straggler_fraction == 1 and stragglers == "drop":
            raise ConfigError("system.straggler_fraction must be below 1.0 with stragglers: drop (every client would be"
                              " a dropped straggler, so nothing trains); got 1.0")
        check_non_negative("system.speed_sigma", speed_sigma)
        check_non_negative("system.over_selection", over_selection)
        check_non_negative("system.latency_ms", latency_ms)
        for name, value in (("speed_mean", speed_mean), ("deadline", deadline), ("bandwidth_mbps", bandwidth_mbps)):
            if value is not None:
                check_positive(f"system.{name}", value)
        if straggler_fraction is not None:
            check_range("system.straggler_fraction", straggler_fraction, 0.0, 1.0)
        if availability_beta is not None:
            if len(availability_beta) != 2:
                raise ConfigError(f"system.availability_beta must be [alpha, beta]; got {availability_beta!r}")
            for value in availability_beta:
                check_positive("system.availability_beta", value)
        given = [n for n, v in (("availability", availability != 1.0), ("availability_beta", availability_beta),
                                ("availability_trace", availability_trace)) if v]
        if len(given) > 1:
            raise ConfigError(f"system: set one of availability, availability_beta, availability_trace; got {', '.join(given)}")
        if speed_mean is not None and speed_trace is not None:
            raise ConfigError("system: set one of speed_mean, speed_trace; got both")
        if speed_sigma > 0 and speed_mean is None:
            raise ConfigError("system.speed_sigma needs system.speed_mean (the lognormal speed model)")
        if deadline is not None and speed_mean is None and speed_trace is None:
            raise ConfigError("system.deadline needs a speed model: system.speed_mean or system.speed_trace")
        if deadline is not None and straggler_fraction is not None:
            raise ConfigError("system: set one of deadline, straggler_fraction (two definitions of a straggler); got both")
        self.availability, self.availability_beta, self.availability_trace = availability, availability_beta, availability_trace
        self.dropout, self.stragglers, self.straggler_fraction = dropout, stragglers, straggler_fraction
        self.speed_mean, self.speed_sigma, self.speed_trace = speed_mean, speed_sigma, speed_trace
        self.deadline, self.over_selection = deadline, over_selection
        self.bandwidth_mbps, self.latency_ms = bandwidth_mbps, latency_ms
        self.elapsed_seconds = 0.0

    # ------------------------------------------------------------------ set-up
    def setup(self, num_clients: int, seed: int, local_epochs: int, batch_size: int, train_sizes: Tensor,
              model_bytes: int) -> None:
        """Bind the federation; draw per-client availabilities and speeds; read and check the traces."""
        self.num_clients, self.seed = num_clients, seed
        self.local_epochs, self.batch_size = local_epochs, batch_size
        self.train_sizes = train_sizes.cpu().long()
        clients = torch.arange(num_clients)
        self.trace = None if self.availability_trace is None else AvailabilityTrace(self.availability_trace, num_clients)
        self.online_probability: Tensor | float = self.availability
        if self.availability_beta is not None:  # a_k drawn once per client, from the seed alone
            rng = np.random.default_rng(derive_seed(seed, "availability-beta"))
            self.online_probability = torch.from_numpy(rng.beta(*self.availability_beta, size=num_clients))
        self.speeds: Tensor | None = None
        if self.speed_trace is not None:
            self.speeds = read_speed_trace(self.speed_trace, num_clients)
        elif self.speed_mean is not None:  # lognormal with mean speed_mean: E[exp(sigma z)] = exp(sigma^2 / 2)
            z = client_normals(clients, seed, "speed")
            self.speeds = self.speed_mean * torch.exp(self.speed_sigma * z - self.speed_sigma ** 2 / 2)
        self.transfer = 2 * transfer_seconds(model_bytes, self.bandwidth_mbps, self.latency_ms)

    # ------------------------------------------------------------------ one round
    def online(self, round_idx: int) -> Tensor | None:
        """Sorted ids of the clients online in round ``round_idx``; ``None``: every client."""
        if self.trace is not None:
            return self.trace.online(round_idx)
        if isinstance(self.online_probability, float) and self.online_probability >= 1.0:
            return None
        draws = client_uniforms(torch.arange(self.num_clients), self.seed, "available", round_idx)
        return (draws < self.online_probability).nonzero().flatten()

    def fates(self, round_idx: int, sampler: ClientSampler) -> ClientFates:
        """Sample round ``round_idx``'s clients and decide who reports, with how many local steps, and when."""
        t, seed = round_idx, self.seed
        online = self.online(t)
        k = sampler.clients_per_round
        count = k if self.over_selection == 0 else math.ceil(k * (1 + self.over_selection) - 1e-9)
        none = torch.zeros(0, dtype=torch.long)
        sampled = none if online is not None and len(online) == 0 else sampler.sample(t, online, count)
        per_epoch = torch.div(self.train_sizes[sampled] + self.batch_size - 1, self.batch_size, rounding_mode="floor")
        full = self.local_epochs * per_epoch
        dropped = client_uniforms(sampled, seed, "dropout", t) < self.dropout
        steps, straggler = full.clone(), torch.zeros(len(sampled), dtype=torch.bool)
        if self.straggler_fraction is not None:
            straggler = pick_fraction(client_uniforms(sampled, seed, "straggler", t), self.straggler_fraction)
            epochs = uniform_epochs(client_uniforms(sampled, seed, "straggler-epochs", t), self.local_epochs)
            steps = torch.where(straggler, epochs * per_epoch, full)
        elif self.deadline is not None:
            steps = steps_within(self.deadline - self.transfer, self.speeds[sampled], full)
            straggler = steps < full
        straggler &= ~dropped
        compute = (steps / self.speeds[sampled]) if self.speeds is not None else torch.zeros(len(sampled))
        finish = self.transfer + compute.double()
        reports = ~dropped & (~straggler if self.stragglers == "drop" else torch.ones_like(straggler))
        # Poisson sampling (model.dp) keeps every report: capping them at K would undo the sampling the accountant assumes.
        cap = len(sampled) if sampler.mode == "poisson" else k
        kept = first_finishers(finish, client_uniforms(sampled, seed, "finish-order", t), reports, cap)
        if kept.any():
            seconds = float(finish[kept].max())
        else:  # nobody to wait for: the server gives up at the deadline (or at once without one)
            seconds = float(self.deadline or 0.0)
        return ClientFates(
            round_idx=t, num_available=self.num_clients if online is None else len(online), sampled=sampled,
            client_ids=sampled[kept], num_steps=steps[kept], full_steps=full[kept], dropped=sampled[dropped],
            stragglers=sampled[straggler], over_selected=sampled[reports & ~kept], round_seconds=seconds)

    # ------------------------------------------------------------------ checkpoints
    def config(self) -> dict[str, Any]:
        """The options a checkpoint must have been written with to resume exactly."""
        return {k: getattr(self, k) for k in (
            "availability", "availability_beta", "availability_trace", "dropout", "speed_mean", "speed_sigma",
            "speed_trace", "deadline", "stragglers", "straggler_fraction", "over_selection", "bandwidth_mbps",
            "latency_ms")}

    def state_dict(self) -> dict[str, Any]:
        return {"config": self.config(), "elapsed_seconds": self.elapsed_seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the simulated clock; a checkpoint written under other options is an error."""
        mine = self.config()
        changed = [k for k in mine if state["config"].get(k) != mine[k]]
        if changed:
            diffs = ", ".join(f"{k}: checkpoint {state['config'].get(k)!r} vs config {mine[k]!r}" for k in changed)
            raise ConfigError(f"model.system differs from the checkpoint ({diffs})")
        self.elapsed_seconds = float(state["elapsed_seconds"])
