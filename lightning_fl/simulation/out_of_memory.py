"""Out of memory, explained: what filled memory, the knobs that shrink it, and the checkpoint left.

A federated run holds more than a centralized one: the cohort's trained weights (``K x d`` values),
the vectorized engine's working set (up to ``max_parallel_clients`` models with gradients and
optimizer state) and every declared per-client state (SCAFFOLD's ``c_k``, IGFL's deltas, FedDyn's
``g_k``, kept optimizer states: one row per client seen, growing as new clients train). When one of
them exceeds the memory there is, torch raises a ``torch.OutOfMemoryError`` (CUDA), a
``RuntimeError`` from its CPU allocator (``DefaultCPUAllocator: can't allocate memory``) or Python a
``MemoryError``. :func:`explain_out_of_memory` turns any of them into an :class:`OutOfMemory` whose
message is one line (the cause and the knobs) plus one line of numbers, which the CLI prints as
``error: ...``; a caller of ``trainer.fit`` can do the same.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch

from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from lightning_fl.faults.validation import exception_chain
from lightning_fl.state.client_rows import MemoryRows
from lightning_fl.state.declared_state import DeclaredState

if TYPE_CHECKING:
    import pytorch_lightning as pl

    from lightning_fl.simulation.loop import FederatedLoop

_CPU_ALLOCATOR = "DefaultCPUAllocator: can't allocate memory"
#: ``torch.OutOfMemoryError`` since torch 2.5; the older name stays as an alias.
_TORCH_OOM = torch.cuda.OutOfMemoryError
_REQUEST = re.compile(r"[Tt]ried to allocate ([\d.]+ ?[KMGT]?i?B|\d+ bytes)")
KNOBS = ("lower model.max_parallel_clients or model.clients_per_round, set model.client_state: disk or"
         " model.engine: sequential, or use a smaller model or trainer.precision: bf16-mixed")


class OutOfMemory(RuntimeError):
    """A run ran out of (CPU or GPU) memory; the message says why and what to change, in at most two lines."""


def memory_failure(err: BaseException | None) -> BaseException | None:
    """The first allocation failure in ``err``'s cause/context chain, or ``None`` if there is none."""
    return next((cause for cause in exception_chain(err) if isinstance(cause, (_TORCH_OOM, MemoryError)) or (
        isinstance(cause, RuntimeError) and (_CPU_ALLOCATOR in str(cause) or "out of memory" in str(cause)))), None)


def explain_out_of_memory(err: BaseException, loop: FederatedLoop | None = None,
                          trainer: pl.Trainer | None = None) -> OutOfMemory:
    """An :class:`OutOfMemory` for the allocation failure ``err`` of a run of ``loop`` under ``trainer``.

    The numbers come from what the loop already holds (parameter count, cohort size, rows of each
    in-memory client state), so building the message allocates next to nothing. Either argument may
    be ``None`` (memory ran out before it existed); the message then says less.
    """
    first = (f"out of memory {_where(loop, trainer)}({_what(err)}): the cohort (clients per round x model"
             f" size) or the per-client state did not fit; {KNOBS}; {_checkpoint(trainer)}")
    try:
        numbers = _numbers(loop, trainer)
    except Exception:  # best effort while memory is short: never hide the failure being reported
        numbers = None
    return OutOfMemory(first if numbers is None else f"{first}\n{numbers}")


def _what(err: BaseException) -> str:
    request = _REQUEST.search(str(err))
    amount = _bytes(int(request.group(1).split()[0])) if request and request.group(1).endswith(" bytes") else (
        request.group(1) if request else None)
    if isinstance(err, _TORCH_OOM) or "CUDA" in str(err):
        kind = "GPU allocation failed"
    elif isinstance(err, MemoryError):
        kind = "Python MemoryError"
    else:
        kind = "CPU allocation failed"
    return kind if amount is None else f"{kind} for {amount}"


def _where(loop: FederatedLoop | None, trainer: pl.Trainer | None) -> str:
    if trainer is None or loop is None or not hasattr(loop, "rounds"):  # `rounds` is the last thing setup builds
        return "while setting up the run "
    return f"in round {trainer.current_epoch + 1} "  # rounds count from 1 in messages


def _checkpoint(trainer: pl.Trainer | None) -> str:
    io = None if trainer is None else trainer.strategy.checkpoint_io
    if not isinstance(io, AtomicCheckpointIO) or io.last_saved is None:
        return "no checkpoint was written in this run"
    rounds = io.last_saved_rounds
    done = "" if rounds is None else f" ({rounds} round{'' if rounds == 1 else 's'} done)"
    return f"the last checkpoint, {io.last_saved}{done}, is intact (resume with --ckpt_path)"


def _numbers(loop: FederatedLoop | None, trainer: pl.Trainer | None) -> str | None:
    if loop is None:
        return None
    d = sum(p.numel() for p in loop.model.parameters())
    parts = [f"model: {d:,} parameters ({_bytes(4 * d)} in fp32)"]
    data = getattr(loop, "data", None)
    if data is not None:
        cohort = data.num_clients if loop.hierarchy is not None else min(loop.clients_per_round, data.num_clients)
        parts.append(f"cohort: {cohort} of {data.num_clients:,} clients ({_bytes(4 * d * cohort)} of trained"
                     " weights per round)")
    engine = getattr(loop, "engine", None)
    engine_name = type(engine).__name__.removesuffix("Engine").lower() if engine is not None else loop.engine_name
    parts.append(f"engine: {engine_name}, max_parallel_clients: {loop.max_parallel_clients or 'all'}")
    state, rows = 0, 0
    for callback in [] if trainer is None else trainer.callbacks:
        if isinstance(callback, DeclaredState):
            for table in callback.client_tables.values():
                if isinstance(table.rows, MemoryRows) and table.shape is not None:
                    per_row = int(torch.Size(table.shape).numel()) * table.dtype.itemsize
                    state, rows = state + per_row * len(table), rows + len(table)
    parts.append(f"per-client state in memory: {_bytes(state)} ({rows:,} rows;"
                 f" model.client_state: {loop.client_state})")
    return "; ".join(parts)


def _bytes(count: int) -> str:
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{count} B"


__all__ = ["KNOBS", "OutOfMemory", "explain_out_of_memory", "memory_failure"]
