"""Cohort forward passes: one model evaluated with ``C`` different parameter sets at once.

Every formulation maps inputs ``(C * B, ...)`` (client ``c``'s batch in rows ``c*B:(c+1)*B``) and
stacked parameters ``{name: (C, *shape)}`` to outputs ``(C * B, ...)``, differentiable with respect
to the stacked parameters. Two of them live here:

* :class:`FoldedForward` runs a copy of the model's own ``forward`` code on the folded batch, with
  every parameterised layer swapped for a batched formulation that applies client ``c``'s weights to
  client ``c``'s rows (``bmm`` for ``Linear``, a grouped convolution for ``Conv``, shifted indices
  into a stacked table for ``Embedding``, per-client affine for ``GroupNorm``/``LayerNorm``, a
  cell loop for ``LSTM``/``GRU``/``RNN``). Parameter-free layers (activations, pooling, flatten,
  dropout) already act per sample and run unchanged. Each batched op is one kernel over the whole
  cohort, where ``torch.func.vmap`` adds per-op batching overhead (measured in docs/performance.md).
* :class:`VmapForward`: ``torch.func.functional_call`` under ``vmap``, for models with layers this
  module does not know. Correct for any per-sample model that vmap supports; slower.

Both assume a sample's output depends on that sample only. BatchNorm, whose output depends on the
batch, has its own batched layer (:mod:`lightning_fl.engines.batched_bn`, :class:`FoldedForward`
only): it reads which rows are real samples from :attr:`CohortForward.sample_mask`.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap
from typing_extensions import override


class CohortForward(ABC):
    """A model evaluated with stacked per-client parameters (see the module docstring).

    Attributes:
        params: The bound ``{name: (C, *shape)}`` tensors (parameters, and BatchNorm running statistics).
        sample_mask: ``(C * B,)``, true or 1 for the rows that are real samples, which alone enter
            batch statistics (the engine sets it every step); ``None``: every row is.
        smallest_batch: The fewest real samples of any client batch of this pass (``None``: unknown).
    """

    kind = "cohort"

    def __init__(self) -> None:
        self.params: dict[str, Tensor] = {}
        self.sample_mask: Tensor | None = None
        self.smallest_batch: int | None = None

    def bind(self, params: dict[str, Tensor]) -> None:
        """Use ``params`` (``(C, *shape)`` each, ``C`` = clients now training) from the next call on."""
        self.params = params

    @abstractmethod
    def __call__(self, x: Tensor) -> Tensor:
        """Outputs ``(C * B, ...)`` for folded inputs ``(C * B, ...)``."""


class FoldedLayer(nn.Module):
    """Base of batched layers: reads its stacked parameters from the owning :class:`FoldedForward`."""

    def __init__(self, src: nn.Module, prefix: str, owner: CohortForward) -> None:
        super().__init__()
        self.prefix = prefix
        object.__setattr__(self, "_owner", owner)  # not a submodule: avoids a reference cycle in modules()

    def param(self, name: str) -> Tensor | None:
        return self._owner.params.get(self.prefix + name)


class _StackedLinear(torch.autograd.Function):
    """``baddbmm(b, x, W^T)`` with its backward written out, each product in its fast layout.

    Autograd's ``bmm`` backward for ``x W^T`` forms ``W``'s gradient as ``(x^T g)^T``, a transposed view
    that ``.grad`` receives as a second full copy of all ``C`` weight matrices, and ``x``'s gradient as
    ``W^T``-major products that ran 6x slower than ``g W`` on J3's first dense layer (10 clients x
    512 x 3136). Here ``dW = g^T x`` and ``dx = g W`` come out contiguous.
    """

    @staticmethod
    def forward(ctx, xs: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # noqa: ANN001 - autograd's ctx
        ctx.save_for_backward(xs, weight)
        ctx.has_bias = bias is not None
        return torch.bmm(xs, weight.mT) if bias is None else torch.baddbmm(bias.unsqueeze(1), xs, weight.mT)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:  # noqa: ANN001
        xs, weight = ctx.saved_tensors
        grad_x = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad.mT, xs) if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(1) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


class FoldedLinear(FoldedLayer):
    """``y_c = x_c W_c^T + b_c`` for every client ``c`` as one ``baddbmm`` (backward: :class:`_StackedLinear`).

    Under autocast autograd differentiates the product itself (it knows the casts); there the
    transposed form ``(W_c x_c^T)^T`` is used when a client has fewer rows than input features, so that
    ``W``'s gradient arrives contiguous and the copy is the (smaller) output's.
    """

    @override
    def forward(self, x: Tensor) -> Tensor:
        weight, bias = self.param("weight"), self.param("bias")
        n = weight.shape[0]
        xs = x.reshape(n, -1, x.shape[-1])
        if not torch.is_autocast_enabled(x.device.type):
            out = _StackedLinear.apply(xs, weight, bias)
        elif xs.shape[1] < xs.shape[2]:
            out = (torch.bmm(weight, xs.mT) if bias is None else torch.baddbmm(bias.unsqueeze(2), weight, xs.mT)).mT
        else:
            out = torch.bmm(xs, weight.mT) if bias is None else torch.baddbmm(bias.unsqueeze(1), xs, weight.mT)
        return out.reshape(*x.shape[:-1], weight.shape[1])


class FoldedConv(FoldedLayer):
    """Convolution with per-client kernels as one grouped convolution (``groups = C * groups``).

    The cohort moves from the batch dimension to the channel dimension and back: ``(C B, Ch, ...)``
    -> ``(B, C Ch, ...)`` -> conv -> ``(C B, Out, ...)``.
    """

    def __init__(self, src: nn.Conv1d | nn.Conv2d | nn.Conv3d, prefix: str, owner: CohortForward) -> None:
        super().__init__(src, prefix, owner)
        self.fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(src.kernel_size)]
        self.stride, self.padding, self.dilation, self.groups = src.stride, src.padding, src.dilation, src.groups

    @override
    def forward(self, x: Tensor) -> Tensor:
        weight, bias = self.param("weight"), self.param("bias")
        n, out_ch = weight.shape[:2]
        batch = x.shape[0] // n
        grouped = x.reshape(n, batch, *x.shape[1:]).transpose(0, 1).reshape(batch, n * x.shape[1], *x.shape[2:])
        y = self.fn(grouped, weight.reshape(n * out_ch, *weight.shape[2:]), None if bias is None else bias.reshape(-1),
                    self.stride, self.padding, self.dilation, self.groups * n)
        return y.reshape(batch, n, out_ch, *y.shape[2:]).transpose(0, 1).reshape(n * batch, out_ch, *y.shape[2:])


class FoldedEmbedding(FoldedLayer):
    """Per-client tables stacked into one: client ``c``'s index ``i`` reads row ``c * V + i``."""

    def __init__(self, src: nn.Embedding, prefix: str, owner: CohortForward) -> None:
        super().__init__(src, prefix, owner)
        self.padding_idx, self.scale_grad_by_freq = src.padding_idx, src.scale_grad_by_freq

    @override
    def forward(self, idx: Tensor) -> Tensor:
        weight = self.param("weight")
        n, vocab, dim = weight.shape
        shift = torch.arange(n, device=idx.device).repeat_interleave(idx.shape[0] // n) * vocab
        out = F.embedding(idx + shift.view(-1, *[1] * (idx.dim() - 1)), weight.reshape(n * vocab, dim),
                          scale_grad_by_freq=self.scale_grad_by_freq)
        if self.padding_idx is not None:
            # nn.Embedding sends no gradient to padding_idx; detach those positions to match.
            out = torch.where((idx == self.padding_idx).unsqueeze(-1), out.detach(), out)
        return out


class FoldedNorm(FoldedLayer):
    """GroupNorm/LayerNorm: per-sample normalisation (cohort-agnostic), then per-client affine."""

    def __init__(self, src: nn.GroupNorm | nn.LayerNorm, prefix: str, owner: CohortForward) -> None:
        super().__init__(src, prefix, owner)
        self.group = isinstance(src, nn.GroupNorm)
        self.num_groups = getattr(src, "num_groups", None)
        self.shape = tuple(getattr(src, "normalized_shape", ()))
        self.eps = src.eps

    @override
    def forward(self, x: Tensor) -> Tensor:
        weight, bias = self.param("weight"), self.param("bias")
        n = weight.shape[0]
        if self.group:
            y = F.group_norm(x, self.num_groups, None, None, self.eps)
            view = (n, 1, weight.shape[1]) + (1,) * (x.dim() - 2)
            ys = y.reshape(n, -1, *y.shape[1:])
        else:
            y = F.layer_norm(x, self.shape, None, None, self.eps)
            view = (n, 1) + self.shape
            ys = y.reshape(n, -1, *self.shape)
        ys = ys * weight.view(view)
        if bias is not None:
            ys = ys + bias.view(view)
        return ys.reshape(y.shape)


class VmapForward(CohortForward):
    """``vmap(functional_call(model, params_c, x_c))`` over the cohort: any vmap-able model."""

    kind = "vmap"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.module = copy.deepcopy(model).train()
        buffers = dict(self.module.named_buffers())

        def one_client(params: dict[str, Tensor], x: Tensor) -> Tensor:
            return functional_call(self.module, (params, buffers), (x,))

        # "different": dropout draws independent masks per client, as separate clients would.
        self._batched = vmap(one_client, randomness="different")

    @override
    def __call__(self, x: Tensor) -> Tensor:
        n = next(iter(self.params.values())).shape[0]
        out = self._batched(self.params, x.reshape(n, -1, *x.shape[1:]))
        return out.reshape(-1, *out.shape[2:])
