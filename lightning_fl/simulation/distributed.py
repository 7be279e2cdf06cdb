"""A round's cohort sharded over torch.distributed processes, results gathered in cohort order.

With world size ``W`` (Lightning's ``ddp`` strategy, ``torchrun``, SLURM), every rank samples the same
cohort, trains only its share (:meth:`CohortSharding.assign`: largest ``tau_k`` first onto the
least-loaded rank) and the shares are all-gathered back into cohort order
(:meth:`CohortSharding.gather`), so every rank holds the identical :class:`CohortUpdate` and, after
the same aggregation, the identical ``w^{t+1}`` and server state. Client
randomness is a function of ``(seed, round, client)``, never of the rank, so with the sequential
engine the global model is bitwise the one of a single process.

Collectives per exchange: one ``all_gather`` of the clients' weights and one ``all_gather_object``
of their statistics (and of kept optimizer states when those are kept). Local training itself never
communicates. Every exchange is preceded by a barrier with a timeout, so a rank that died or hangs
stops the others within ``timeout`` with a message naming it instead of a hang.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from lightning_fl.engines.cohort import CohortUpdate


class RankFailure(RuntimeError):
    """A rank did not reach a collective in time (it died or hangs); the message names it."""


class CohortSharding:
    """Which cohort positions each rank trains, and the exchange that reassembles the cohort.

    Args:
        world_size: ``W``; 1 means no sharding (every call is local).
        rank: This process's global rank.
        timeout_s: How long a rank waits for the others at an exchange before it stops.
    """

    def __init__(self, world_size: int = 1, rank: int = 0, timeout_s: float = 300.0) -> None:
        self.world_size, self.rank, self.timeout_s = world_size, rank, timeout_s
        self.collectives = 0  # collectives issued so far (tests count them per round)
        self.bytes_exchanged = 0  # bytes of client weights all-gathered so far
        self.wait_seconds = 0.0  # at barriers: waiting for the slowest rank (load imbalance, failures)
        self.exchange_seconds = 0.0  # in the gathers themselves: moving the results
        self.active = world_size > 1
        self._barrier_group: Any = None

    def assign(self, num_steps: Tensor) -> list[list[int]]:
        """Cohort positions per rank, balanced by local work ``tau_k`` (each list ascending).

        Largest ``tau_k`` first (ties: cohort order), each onto the rank with the least work so far
        (ties: the lowest rank): the same answer on every rank, from ``num_steps`` alone.
        """
        steps = [max(int(s), 1) for s in num_steps.tolist()]
        loads = [0] * self.world_size
        shards: list[list[int]] = [[] for _ in range(self.world_size)]
        for position in sorted(range(len(steps)), key=lambda p: (-steps[p], p)):
            rank = min(range(self.world_size), key=lambda r: (loads[r], r))
            shards[rank].append(position)
            loads[rank] += steps[position]
        return [sorted(shard) for shard in shards]

    # ------------------------------------------------------------------ collectives
    def _barrier(self, what: str) -> None:
        """Wait for every rank, at most ``timeout_s``; name the ranks that did not come."""
        if self._barrier_group is None:
            # monitored_barrier needs gloo; a side group keeps nccl's own group untouched.
            self._barrier_group = (dist.group.WORLD if dist.get_backend() == "gloo"
                                   else dist.new_group(backend="gloo"))
        started = time.perf_counter()
        try:
            dist.monitored_barrier(self._barrier_group, timeout=datetime.timedelta(seconds=self.timeout_s),
                                   wait_all_ranks=True)
        except RuntimeError as err:
            raise RankFailure(f"{what}: {self._describe(err)}") from None
        self.collectives += 1
        self.wait_seconds += time.perf_counter() - started

    def _all_gather_object(self, value: Any, what: str) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        try:
            dist.all_gather_object(out, value)
        except RuntimeError as err:
            raise RankFailure(f"{what}: {self._describe(err)}") from None
        self.collectives += 1
        return out

    def _all_gather_rows(self, rows: Tensor, shards: list[list[int]], what: str) -> Tensor:
        """``(K, d)``: every rank's rows placed at its cohort positions.

        One buffer of ``W x longest share`` rows is gathered into (shares padded to the longest), then
        copied once into cohort order: two cohort-sized copies at the peak, not one per step.
        """
        # gloo gathers CPU tensors only; nccl gathers on the device.
        device = rows.device if dist.get_backend() == "nccl" else torch.device("cpu")
        longest = max(len(s) for s in shards)
        padded = torch.zeros(longest, *rows.shape[1:], dtype=rows.dtype, device=device)
        padded[: len(rows)] = rows.to(device)
        buffer = torch.empty(self.world_size * longest, *rows.shape[1:], dtype=rows.dtype, device=device)
        parts = list(buffer.chunk(self.world_size))
        try:
            dist.all_gather(parts, padded)
        except RuntimeError as err:
            raise RankFailure(f"{what}: {self._describe(err)}") from None
        del padded
        self.collectives += 1
        self.bytes_exchanged += buffer.numel() * buffer.element_size()
        out = torch.empty(sum(len(s) for s in shards), *rows.shape[1:], dtype=rows.dtype, device=rows.device)
        for part, shard in zip(parts, shards):
            if shard:
                out[torch.tensor(shard, device=rows.device)] = part[: len(shard)].to(rows.device)
        return out

    def gather_dict(self, local: dict[Any, Any], what: str) -> dict[Any, Any]:
        """The union of every rank's ``local`` dict (keys are disjoint), tensors on the CPU."""
        self._barrier(what)
        started = time.perf_counter()
        merged: dict[Any, Any] = {}
        for part in self._all_gather_object(_to_cpu(local), what):
            merged.update(part)
        self.exchange_seconds += time.perf_counter() - started
        return merged

    # ------------------------------------------------------------------ the exchange
    def gather(self, local: CohortUpdate, shards: list[list[int]], client_ids: Tensor,
               kept_states: Callable[[list[int]], dict[int, Any]] | None = None,
               keep_state: Callable[[int, Any], None] | None = None, what: str = "exchange",
               reduce: bool = False) -> CohortUpdate:
        """The whole cohort's update from every rank's share, in cohort order.

        Args:
            local: This rank's update, rows in the order of ``shards[rank]``.
            shards: :meth:`assign`'s answer.
            client_ids: ``(K,)`` the cohort.
            kept_states: Reads this rank's kept optimizer states of the given clients (``None``: not kept).
            keep_state: Stores another rank's client's optimizer state here.
            what: Names the exchange in error messages (e.g. ``round 3``).
            reduce: Keep every client's weights on its rank; the update's ``weighted_sum`` all-reduces
                partial sums instead (``model.exchange: reduce``).
        """
        self._barrier(what)
        started = time.perf_counter()
        weights = None if reduce else self._all_gather_rows(local.weights, shards, what)
        finite = torch.stack([torch.isfinite(row).all() for row in local.weights]) if len(local.weights) else \
            torch.zeros(0, dtype=torch.bool)
        stats = {"finite": finite, "num_samples": local.num_samples, "num_steps": local.num_steps, "train_acc": local.train_acc,
                 "train_loss": local.train_loss, "participation": local.participation, "label_hist": local.label_hist,
                 "loss_before": local.loss_before, "trained_acc": local.trained_acc, "extra": local.extra,
                 "int_state": local.int_state}
        if kept_states is not None:
            stats["kept"] = kept_states(client_ids[shards[self.rank]].tolist())
        every = self._all_gather_object({k: _to_cpu(v) for k, v in stats.items()}, what)
        positions = torch.tensor([p for shard in shards for p in shard], dtype=torch.long)
        order = torch.argsort(positions)  # gathered rows (rank by rank) -> cohort order

        def merged(key: str) -> Tensor | None:
            parts = [s[key] for s in every if s[key] is not None and len(s[key])]
            return torch.cat(parts)[order] if parts else None

        owner_of_first = next(r for r, shard in enumerate(shards) if shard and shard[0] == 0)
        device = local.weights.device
        extra_keys = sorted({key for s in every for key in s["extra"]})
        self.exchange_seconds += time.perf_counter() - started
        for r, state in enumerate(every):
            for client, saved in (state.get("kept") or {}).items() if r != self.rank and keep_state else ():
                keep_state(client, saved)
        return CohortUpdate(
            round_idx=local.round_idx, client_ids=client_ids, weights=weights,
            reduce_rows=self._reducer(local.weights, shards[self.rank], what) if reduce else None,
            finite=merged("finite") if reduce else None,
            int_state={k: v.to(device) for k, v in every[owner_of_first]["int_state"].items()},
            num_samples=merged("num_samples"), num_steps=merged("num_steps"), train_acc=merged("train_acc"),
            train_loss=merged("train_loss"), participation=merged("participation"), label_hist=merged("label_hist"),
            loss_before=merged("loss_before"), trained_acc=merged("trained_acc"),
            extra={key: torch.cat([s["extra"][key] for s in every if key in s["extra"]])[order].to(device)
                   for key in extra_keys},
        )


    def _describe(self, err: RuntimeError) -> str:
        """One line naming the rank that failed: gloo names those that missed a monitored barrier; a
        closed connection names no one, which with two processes can only be the other rank."""
        text = " ".join(str(err).split())
        if "failed to pass monitoredBarrier" in text:
            ranks = text.split("Ranks ", 1)[1] if "Ranks " in text else text.split("Rank ", 1)[-1]
            ranks = [r.strip() for r in ranks.split(" failed", 1)[0].split(",") if r.strip()]
            who = f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(ranks)}"
            return (f"{who} did not reach the exchange within {self.timeout_s:g} s (model.collective_timeout);"
                    " it died or hangs, so this rank stops too")
        if any(s in text for s in ("Connection closed", "Connection reset", "Broken pipe")):
            who = f"rank {1 - self.rank}" if self.world_size == 2 else f"a rank other than {self.rank}"
            return f"{who} closed its connection (it died); this rank stops too"
        return f"a collective failed ({text[:200]}); this rank stops too"

    def _reducer(self, rows: Tensor, mine: list[int], what: str) -> Callable[[Tensor], Tensor]:
        """``coefficients (K,) -> sum_k c_k y_k``: this rank's clients summed here, then one all-reduce."""

        def weighted_sum(coefficients: Tensor) -> Tensor:
            mine_c = coefficients[torch.tensor(mine, dtype=torch.long)].to(rows) if mine else None
            use = None if mine_c is None else (mine_c != 0).nonzero().flatten()
            if use is None or len(use) == 0:
                partial = torch.zeros(rows.shape[1:], dtype=rows.dtype, device=rows.device)
            elif len(use) == len(mine_c):
                partial = torch.tensordot(mine_c, rows, dims=1)
            else:  # rows left out (a diverged client's NaN times 0 is still NaN)
                partial = torch.tensordot(mine_c[use], rows[use], dims=1)
            device = rows.device if dist.get_backend() == "nccl" else torch.device("cpu")
            total = partial.to(device)
            try:
                dist.all_reduce(total)
            except RuntimeError as err:
                raise RankFailure(f"{what}: {self._describe(err)}") from None
            self.collectives += 1
            self.bytes_exchanged += total.numel() * total.element_size() * self.world_size
            return total.to(rows.device)

        return weighted_sum


def _to_cpu(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_to_cpu(v) for v in value)
    return value
