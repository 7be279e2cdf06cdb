"""Bytes sent per link level and round, and the elapsed time a real deployment would need."""

from __future__ import annotations

from typing_extensions import override

from lightning_fl.faults.validation import check_non_negative, check_positive
from lightning_fl.functional.system import transfer_seconds
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import FederatedCallback
from lightning_fl.simulation.federation import Federation
from lightning_fl.simulation.round_result import RoundResult, RoundTraffic


def estimate_round_seconds(traffic: RoundTraffic, client_link: tuple[float, float],
                           institution_link: tuple[float, float] | None) -> float:
    """Critical path of one round: clients in parallel, each local round download -> train -> upload.

    Flat loop: ``compute + t_client``. Hierarchy: for each institution the sum over its local rounds
    of ``compute + t_client``, plus ``t_institution`` to and from the server; the slowest institution
    decides. ``t_level`` is the download plus the upload time of one transfer at that level: each is
    one message (one latency) of its bytes (:meth:`RoundTraffic.transfer_bytes`, e.g. twice the model
    for SCAFFOLD).

    Args:
        traffic: The round's transfers and measured compute (per institution, per local round).
        client_link: ``(bandwidth_mbps, latency_ms)`` of the client link.
        institution_link: The institution-server link (hierarchy only).
    """
    t_client = sum(transfer_seconds(size, *client_link) for size in traffic.transfer_bytes("client"))
    extra = 0.0
    if "institution" in traffic.transfers and institution_link:
        extra = sum(transfer_seconds(size, *institution_link) for size in traffic.transfer_bytes("institution"))
    return max(sum(c + t_client for c in rounds) + extra for rounds in traffic.compute_seconds)


class CommunicationCost(FederatedCallback):
    """Communication accounting (docs/algorithms.md, Communication accounting), for Tempo's time-to-target comparison (its Table 1).

    Every round logs, per link level (``client``: client<->server in the flat loop or
    client<->institution in the hierarchy; ``institution``: institution<->server), the bytes sent up and
    down (number of transfers x the model-sized vectors in each, as the aggregation callback declares
    them (``vectors_down``/``vectors_up``: 1 each, SCAFFOLD 2 with its control variates) x the model's
    fp32 size, from the actual parameter tensors) and the cumulative totals ``comm/total_bytes``. With bandwidths given, it also estimates the elapsed time of
    a real deployment, ``net/round_seconds`` and ``net/elapsed_seconds``: measured compute of the slowest
    client plus transfer times (see :func:`estimate_round_seconds`). The totals are checkpointed.
    ``model.system`` keeps a simulated clock beside it (``sim/*``): the same transfer times
    (:func:`~lightning_fl.functional.system.transfer_seconds`) with simulated client speeds instead of
    the compute measured where the simulation runs.

    Args:
        client_bandwidth_mbps: Client link bandwidth in Mbit/s; ``None`` disables the time estimate.
        client_latency_ms: Client link latency.
        institution_bandwidth_mbps: Institution-server bandwidth (hierarchy mode).
        institution_latency_ms: Institution-server latency.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.CommunicationCost
          init_args: {client_bandwidth_mbps: 10, client_latency_ms: 50, institution_bandwidth_mbps: 1000}
    """

    logged_scalars = ("comm/*_bytes", "net/round_seconds", "net/elapsed_seconds")

    def __init__(self, client_bandwidth_mbps: float | None = None, client_latency_ms: float = 0.0,
                 institution_bandwidth_mbps: float | None = None, institution_latency_ms: float = 0.0) -> None:
        for name, value in (("client_bandwidth_mbps", client_bandwidth_mbps),
                            ("institution_bandwidth_mbps", institution_bandwidth_mbps)):
            if value is not None:
                check_positive(name, value)
        check_non_negative("client_latency_ms", client_latency_ms)
        check_non_negative("institution_latency_ms", institution_latency_ms)
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
            seconds = estimate_round_seconds(traffic, self.client_link, institution_link)
            self.elapsed_seconds += seconds
            metrics["net/round_seconds"] = seconds
            metrics["net/elapsed_seconds"] = self.elapsed_seconds
        log.log_scalars(metrics)
