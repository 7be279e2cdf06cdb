"""Bytes sent per link level and round, and the elapsed time a real deployment would need."""

from __future__ import annotations

from collections.abc import Sequence

from typing_extensions import override

from lightning_fl.faults.validation import ConfigError, check_non_negative, check_positive
from lightning_fl.functional.system import transfer_seconds
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.federation import Federation
from lightning_fl.simulation.round_result import RoundResult, RoundTraffic


def step_compute_seconds(steps: Sequence[int], seconds_per_step: float) -> list[float]:
    """Modelled compute of one round per institution: its counted local steps x a declared cost per step.

    Institutions (the flat loop: one entry) train in parallel and, within one, the clients of a local
    round too, so an entry of ``steps`` is the institution's critical path: over its local rounds, the
    sum of each round's slowest client's steps. Deterministic, unlike the compute measured on a
    machine that other work shares.

    Example:
        >>> step_compute_seconds([216, 324], 0.003)  # tau_i = 4 rounds x 6 (9) epochs x 9 steps, 3 ms each
        [0.648, 0.972]
    """
    return [int(s) * seconds_per_step for s in steps]


def estimate_round_seconds(traffic: RoundTraffic, client_link: tuple[float, float],
                           institution_link: tuple[float, float] | None,
                           compute: Sequence[float] | None = None) -> float:
    """Critical path of one round: clients in parallel, each local round download -> train -> upload.

    Flat loop: ``compute + t_client``. Hierarchy: for each institution its compute plus ``t_client``
    per local round, plus ``t_institution`` to and from the server; the slowest institution decides.
    ``t_level`` is the download plus the upload time of one transfer at that level: each is one message
    (one latency) of its bytes (:meth:`RoundTraffic.transfer_bytes`, e.g. twice the model for SCAFFOLD).

    Args:
        traffic: The round's transfers and measured compute (per institution, per local round).
        client_link: ``(bandwidth_mbps, latency_ms)`` of the client link.
        institution_link: The institution-server link (hierarchy only).
        compute: Per institution, the compute of the whole round in seconds (e.g.
            :func:`step_compute_seconds`) instead of the measured ``traffic.compute_seconds``.

    Example:
        >>> traffic = RoundTraffic(250_000, {"client": 8, "institution": 2}, [[0.5, 0.5], [0.2, 0.2]])
        >>> estimate_round_seconds(traffic, (100.0, 0.0), (10.0, 0.0))  # 1.0 + 2 x 0.04 + 0.4
        1.48
        >>> estimate_round_seconds(traffic, (100.0, 0.0), (10.0, 0.0), compute=[0.5, 2.0])  # the second
        2.48
    """
    t_client = sum(transfer_seconds(size, *client_link) for size in traffic.transfer_bytes("client"))
    extra = 0.0
    if "institution" in traffic.transfers and institution_link:
        extra = sum(transfer_seconds(size, *institution_link) for size in traffic.transfer_bytes("institution"))
    if compute is None:
        compute = [sum(rounds) for rounds in traffic.compute_seconds]
    if len(compute) != len(traffic.compute_seconds):
        raise ValueError(f"compute: {len(compute)} institutions, the round had {len(traffic.compute_seconds)}")
    return max(c + len(rounds) * t_client + extra for c, rounds in zip(compute, traffic.compute_seconds, strict=True))


class CommunicationCost(FederatedCallback):
    """Communication accounting (docs/algorithms.md, Communication accounting), for Tempo's time-to-target comparison (its Table 1).

    Every round logs, per link level (``client``: client<->server in the flat loop or
    client<->institution in the hierarchy; ``institution``: institution<->server), the bytes sent up and
    down (number of transfers x the model-sized vectors in each, as the aggregation callback declares
    them (``vectors_down``/``vectors_up``: 1 each, SCAFFOLD 2 with its control variates) x the model's
    fp32 size, from the actual parameter tensors) and the cumulative totals ``comm/total_bytes``. With bandwidths given, it also estimates the elapsed time of
    a real deployment, ``net/round_seconds`` and ``net/elapsed_seconds``: compute of the slowest
    client plus transfer times (see :func:`estimate_round_seconds`). The compute is the training time
    measured in this process, or with ``seconds_per_step`` set the local steps counted x that declared
    cost (:func:`step_compute_seconds`: deterministic, the same on any machine and under any load;
    institutions in parallel, so the slowest institution's steps decide). The totals are checkpointed.
    ``model.system`` keeps a simulated clock beside it (``sim/*``): the same transfer times
    (:func:`~lightning_fl.functional.system.transfer_seconds`) with simulated client speeds instead of
    the compute measured where the simulation runs.

    Args:
        client_bandwidth_mbps: Client link bandwidth in Mbit/s; ``None`` disables the time estimate.
        client_latency_ms: Client link latency.
        institution_bandwidth_mbps: Institution-server bandwidth (hierarchy mode).
        institution_latency_ms: Institution-server latency.
        seconds_per_step: Declared compute cost of one local step (one minibatch) in seconds, used
            instead of the measured compute; ``None`` (default): measured. Needs ``client_bandwidth_mbps``.

    Raises:
        ConfigError: If a bandwidth or ``seconds_per_step`` is not positive, a latency is negative, or
            ``seconds_per_step`` is set without ``client_bandwidth_mbps``.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.CommunicationCost
          init_args: {client_bandwidth_mbps: 10, client_latency_ms: 50, institution_bandwidth_mbps: 1000,
                      seconds_per_step: 0.003}
    """

    logged_scalars = ("comm/*_bytes", "net/round_seconds", "net/elapsed_seconds")

    def __init__(self, client_bandwidth_mbps: float | None = None, client_latency_ms: float = 0.0,
                 institution_bandwidth_mbps: float | None = None, institution_latency_ms: float = 0.0,
                 seconds_per_step: float | None = None) -> None:
        for name, value in (("client_bandwidth_mbps", client_bandwidth_mbps),
                            ("institution_bandwidth_mbps", institution_bandwidth_mbps),
                            ("seconds_per_step", seconds_per_step)):
            if value is not None:
                check_positive(name, value)
        check_non_negative("client_latency_ms", client_latency_ms)
        check_non_negative("institution_latency_ms", institution_latency_ms)
        if seconds_per_step is not None and client_bandwidth_mbps is None:
            raise ConfigError(f"seconds_per_step: {seconds_per_step} models the compute of the time estimate,"
                              " which needs client_bandwidth_mbps (a positive number); got None")
        self.seconds_per_step = seconds_per_step
        self.client_link = None if client_bandwidth_mbps is None else (client_bandwidth_mbps, client_latency_ms)
        self.institution_link = (None if institution_bandwidth_mbps is None
                                 else (institution_bandwidth_mbps, institution_latency_ms))
        self.add_server_state("total_bytes", {})  # link level -> bytes sent both ways so far
        self.add_server_state("elapsed_seconds", 0.0)

    @override
    def on_round_end(self, round_idx: int, result: RoundResult, federation: Federation,
                     log: RoundLogger) -> None:
        traffic = result.traffic
        metrics: dict[str, float] = {}
        for level, transfers in traffic.transfers.items():
            down, up = (transfers * size for size in traffic.transfer_bytes(level))
            self.total_bytes[level] = self.total_bytes.get(level, 0) + down + up
            metrics[f"comm/{level}_up_bytes"] = float(up)
            metrics[f"comm/{level}_down_bytes"] = float(down)
            metrics[f"comm/{level}_total_bytes"] = float(self.total_bytes[level])
        metrics["comm/total_bytes"] = float(sum(self.total_bytes.values()))
        if self.client_link is not None:
            institution_link = self.institution_link or self.client_link
            compute = None
            if self.seconds_per_step is not None:
                # Flat loop: one critical path, the slowest client; hierarchy: one per institution, whose
                # num_steps already sums its local rounds' slowest clients.
                steps = result.update.num_steps.tolist()
                compute = step_compute_seconds(steps if "institution" in traffic.transfers else [max(steps, default=0)],
                                               self.seconds_per_step)
            seconds = estimate_round_seconds(traffic, self.client_link, institution_link, compute)
            self.elapsed_seconds += seconds
            metrics["net/round_seconds"] = seconds
            metrics["net/elapsed_seconds"] = self.elapsed_seconds
        log.log_scalars(metrics)
