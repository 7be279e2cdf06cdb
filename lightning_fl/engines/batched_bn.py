"""BatchNorm over a folded cohort batch: each client's batch normalised with its own statistics.

docs/algorithms.md, Local training: both engines train BatchNorm as ``nn.BatchNorm*d`` does per client.

A BatchNorm layer is the one common layer whose output mixes the samples of a batch, so the cohort
formulation cannot run it on the folded batch ``(C * B, ...)`` as it is: every client ``c`` must see
the statistics of its own rows ``c*B:(c+1)*B`` only, and only of its *real* rows. A client whose
last batch is smaller than ``B`` has padding rows there (loss weight 0, see
:mod:`lightning_fl.engines.schedule`); they would shift the mean and variance. So in train mode
:class:`FoldedBatchNorm` computes, per client and channel, masked moments over the real rows
(and the spatial positions of ``BatchNorm2d``/``3d``)::

    mean_c = sum_b m_cb x_cb / n_c          var_c = sum_b m_cb (x_cb - mean_c)^2 / n_c   (biased)
    y_cb = (x_cb - mean_c) / sqrt(var_c + eps) * gamma_c + beta_c

and updates client ``c``'s running statistics exactly as ``nn.BatchNorm*d`` does for that batch:
``r <- (1 - f) r + f s`` with ``s`` the mean and the *unbiased* variance ``var_c n_c / (n_c - 1)``,
``f`` the module's momentum (or ``1 / num_batches_tracked`` when it is ``None``). In eval mode each
client's rows are normalised with its own running statistics. Padding rows still get an output
(from their client's statistics); their loss weight is 0, so they send no gradient.

The running statistics are bound like parameters (``{name: (C, F)}``, views of the engine's rows)
and updated in place, so the clients that finished training (rows past the bound prefix) are never
touched. ``num_batches_tracked`` is one integer per layer: every client of a pass starts from
``w^t``'s count and takes one step per local step, so while it trains it has the same count as every
other client still training.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from typing_extensions import override

from lightning_fl.engines.batched import CohortForward, FoldedLayer

#: BatchNorm types with a batched formulation (exact types: SyncBatchNorm and lazy modules differ).
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def running_statistics(model: nn.Module) -> tuple[list[str], list[str]]:
    """``(float_names, counter_names)``: running mean/var and ``num_batches_tracked`` state names.

    Only ``_BatchNorm`` modules that track running statistics are listed.
    """
    floats, counters = [], []
    for prefix, module in model.named_modules():
        if isinstance(module, _BatchNorm) and module.track_running_stats:
            dot = f"{prefix}." if prefix else ""
            floats += [dot + "running_mean", dot + "running_var"]
            counters.append(dot + "num_batches_tracked")
    return floats, counters


def smallest_batch(sizes: list[int], num_steps: list[int], batch_size: int) -> int:
    """The fewest real samples in any batch of these clients (``n_k - (ceil(n_k/B) - 1) B`` or ``B``).

    A client that stops before the last batch of its first epoch (partial work) only takes full ones.
    """
    smallest = batch_size
    for size, steps in zip(sizes, num_steps):
        per_epoch = -(-size // batch_size)
        if steps >= per_epoch:
            smallest = min(smallest, size - (per_epoch - 1) * batch_size)
    return smallest


class FoldedBatchNorm(FoldedLayer):
    """``BatchNorm1d/2d/3d`` with per-client (masked) batch and running statistics (module docstring).

    Reads the owner's ``sample_mask`` (``(C * B,)``, 1 for real rows; ``None``: every row is real) and
    ``smallest_batch`` (to raise where ``nn.BatchNorm`` would on a batch of one value per channel).
    """

    def __init__(self, src: _BatchNorm, prefix: str, owner: CohortForward) -> None:
        super().__init__(src, prefix, owner)
        self.eps, self.momentum = src.eps, src.momentum
        self.tracked = 0 if src.num_batches_tracked is None else int(src.num_batches_tracked)

    @override
    def forward(self, x: Tensor) -> Tensor:
        running_mean, running_var = self.param("running_mean"), self.param("running_var")
        weight, bias = self.param("weight"), self.param("bias")
        n = running_mean.shape[0]
        # Moments in fp32 whatever autocast made of the input (nn.BatchNorm keeps fp32 statistics too).
        xs = x.reshape(n, -1, *x.shape[1:]).float()
        shape = (n, 1, xs.shape[2]) + (1,) * (xs.dim() - 3)  # broadcasts (C, channels) over (C, B, channels, ...)
        if self.training:
            centred, var = self._batch_moments(xs, running_mean, running_var)
        else:
            centred, var = xs - running_mean.view(shape), running_var.view(shape)
        y = centred * torch.rsqrt(var + self.eps)
        if weight is not None:
            y = y * weight.view(shape)
        if bias is not None:
            y = y + bias.view(shape)
        return y.reshape(x.shape).to(x.dtype)

    def _batch_moments(self, xs: Tensor, running_mean: Tensor, running_var: Tensor) -> tuple[Tensor, Tensor]:
        """``(x - mean, biased var)`` of each client's real rows; updates its running statistics."""
        n, rows = xs.shape[:2]
        dims = (1, *range(3, xs.dim()))  # batch and spatial positions; channels and clients stay
        spatial = math.prod(xs.shape[3:])
        smallest, mask = self._owner.smallest_batch, self._owner.sample_mask
        fewest = rows if mask is None or smallest is None else smallest
        if fewest * spatial == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{[1, *xs.shape[2:]]} ({self.prefix[:-1]})")
        if mask is None:
            count: Tensor | float = float(rows * spatial)
            mean = xs.mean(dims, keepdim=True)
            centred = xs - mean
            var = centred.square().mean(dims, keepdim=True)
        else:
            real = mask.view(n, rows, *(1,) * (xs.dim() - 2)).to(xs.dtype)
            count = real.sum(1, keepdim=True) * spatial  # (C, 1, 1, ...): n_c values per channel
            mean = (xs * real).sum(dims, keepdim=True) / count
            centred = xs - mean
            var = (centred.square() * real).sum(dims, keepdim=True) / count
        with torch.no_grad():
            self.tracked += 1
            factor = 1.0 / self.tracked if self.momentum is None else self.momentum
            unbiased = var * (count / (count - 1))
            running_mean.mul_(1 - factor).add_(mean.view(n, -1), alpha=factor)
            running_var.mul_(1 - factor).add_(unbiased.view(n, -1), alpha=factor)
        return centred, var
