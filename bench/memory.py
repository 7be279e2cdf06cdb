"""Peak memory of one benchmark variant: resident set on Linux, allocator peak on CUDA."""

from __future__ import annotations

import re
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")


def _status_kib(field: str) -> int | None:
    try:
        match = re.search(rf"{field}:\s+(\d+) kB", _STATUS.read_text())
    except OSError:
        return None
    return int(match.group(1)) if match else None


class PeakMemory:
    """Peak memory while a block runs, in MiB above the level at its start.

    On Linux the process's peak RSS (``VmHWM``) is reset through ``/proc/self/clear_refs`` before the
    block, so each variant's peak is its own even though all variants share one process; on CUDA
    the allocator's peak is reset the same way. ``None`` where neither is available.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak_mib: float | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._start = torch.cuda.memory_allocated()
        else:
            try:
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                pass
            self._start = (_status_kib("VmRSS") or 0) * 1024
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak_mib = (torch.cuda.max_memory_allocated() - self._start) / 2**20
        else:
            peak = _status_kib("VmHWM")
            self.peak_mib = None if peak is None else max(peak * 1024 - self._start, 0) / 2**20
