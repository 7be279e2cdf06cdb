"""Availability and speed traces: measured client behaviour, read from CSV files.

Two formats, each with a header line:

- availability: ``round,client,available``, one row per (round, client) observed; ``round`` counts
  from 1 like the TensorBoard steps, ``available`` is 0 or 1. A client with no row for a round is
  offline in it. The trace repeats: with ``R`` the largest round listed, round ``r`` of the run uses
  the trace's round ``(r - 1) mod R + 1``.
- speed: ``client,steps_per_second``, one row per client of the federation.

Every mistake (a missing column, an unknown client, a round below 1, a duplicate row, a value that
is not a number) is a one-line ``ConfigError`` naming the field, the file and the line.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError


def _rows(field: str, path: str, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """The CSV's data rows with their line numbers, after checking the header names ``columns``."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{field}: no such file {path!r}")
    try:
        with file.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle, skipinitialspace=True)
            header = [name.strip() for name in reader.fieldnames or []]
            missing = [c for c in columns if c not in header]
            if missing:
                raise ConfigError(f"{field}: {path} must have the header columns {', '.join(columns)}; got"
                                  f" {', '.join(header) or 'an empty file'}")
            rows = [(reader.line_num, {k.strip(): (v or "").strip() for k, v in row.items() if k}) for row in reader]
    except (UnicodeDecodeError, csv.Error) as err:
        raise ConfigError(f"{field}: {path} is not a CSV text file with the header {','.join(columns)}"
                          f" ({err})") from None
    if not rows:
        raise ConfigError(f"{field}: {path} has a header but no rows")
    return rows


def _integer(field: str, path: str, line: int, column: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{field}: {path} line {line}: {column} must be an integer; got {text!r}") from None


def _client(field: str, path: str, line: int, text: str, num_clients: int) -> int:
    client = _integer(field, path, line, "client", text)
    if not 0 <= client < num_clients:
        raise ConfigError(f"{field}: {path} line {line}: client must be between 0 and {num_clients - 1}"
                          f" (the federation's clients); got {client}")
    return client


class AvailabilityTrace:
    """Which clients are online in each round, from an availability CSV (see the module docstring).

    Args:
        path: The CSV file.
        num_clients: ``N``; rows naming other clients are an error.
        field: The configuration field, for error messages.
    """

    def __init__(self, path: str, num_clients: int, field: str = "system.availability_trace") -> None:
        online: dict[int, set[int]] = {}
        seen: set[tuple[int, int]] = set()
        for line, row in _rows(field, path, ("round", "client", "available")):
            round_number = _integer(field, path, line, "round", row["round"])
            if round_number < 1:
                raise ConfigError(f"{field}: {path} line {line}: round must be >= 1 (rounds count from 1); got"
                                  f" {round_number}")
            client = _client(field, path, line, row["client"], num_clients)
            if row["available"] not in ("0", "1"):
                raise ConfigError(f"{field}: {path} line {line}: available must be 0 or 1; got {row['available']!r}")
            if (round_number, client) in seen:
                raise ConfigError(f"{field}: {path} line {line}: round {round_number}, client {client} is listed twice")
            seen.add((round_number, client))
            clients = online.setdefault(round_number, set())
            if row["available"] == "1":
                clients.add(client)
        if not any(online.values()):
            raise ConfigError(f"{field}: {path} lists no client as available in any round (every available is 0), so"
                              " nothing would train; mark the online clients with available 1")
        self.period = max(online)
        self.num_clients = num_clients
        self._online = {r: torch.tensor(sorted(c), dtype=torch.long) for r, c in online.items()}

    def online(self, round_idx: int) -> Tensor:
        """Sorted ids of the clients online in round ``round_idx`` (0-based; the trace counts from 1)."""
        trace_round = round_idx % self.period + 1
        return self._online.get(trace_round, torch.zeros(0, dtype=torch.long)).clone()


def read_speed_trace(path: str, num_clients: int, field: str = "system.speed_trace") -> Tensor:
    """``(N,)`` float64 local steps per simulated second of every client, from a speed CSV."""
    speeds = torch.full((num_clients,), math.nan, dtype=torch.float64)
    for line, row in _rows(field, path, ("client", "steps_per_second")):
        client = _client(field, path, line, row["client"], num_clients)
        try:
            value = float(row["steps_per_second"])
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{field}: {path} line {line}: steps_per_second must be a finite number > 0; got"
                              f" {row['steps_per_second']!r}")
        if not math.isnan(float(speeds[client])):
            raise ConfigError(f"{field}: {path} line {line}: client {client} is listed twice")
        speeds[client] = value
    missing = torch.isnan(speeds).nonzero().flatten()
    if len(missing):
        shown = ", ".join(map(str, missing[:5].tolist())) + (", ..." if len(missing) > 5 else "")
        raise ConfigError(f"{field}: {path} has no steps_per_second for clients {shown} ({len(missing)} of"
                          f" {num_clients}); list every client")
    return speeds
