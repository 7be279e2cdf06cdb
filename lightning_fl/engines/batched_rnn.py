"""Batched ``LSTM``/``GRU``/``RNN`` with per-client weights (``vmap`` has no batching rule for them).

The fused cuDNN/MKL recurrent kernels take one weight set, so the cohort version runs the cell
equations of the PyTorch documentation step by step with ``bmm`` over the cohort: the input
projection of every time step is one ``bmm`` per layer and direction, the recurrent projection one
``bmm`` per time step. Outputs and ``(h_n, c_n)`` have ``nn.LSTM``'s layout over the folded batch.
Checked against ``nn.LSTM``/``nn.GRU`` per client by the engine's set-up self-check.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.engines.batched import CohortForward, FoldedLayer

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class FoldedRNN(FoldedLayer):
    """Multi-layer, optionally bidirectional ``LSTM``/``GRU``/``RNN`` over a folded cohort batch.

    Args:
        src: The layer it replaces (``proj_size`` must be 0; checked by the formulation analysis).
        prefix: Its name in the model plus ``"."``.
        owner: The forward that holds the stacked parameters.
    """

    def __init__(self, src: nn.RNNBase, prefix: str, owner: CohortForward) -> None:
        super().__init__(src, prefix, owner)
        self.mode, self.num_layers, self.hidden = src.mode, src.num_layers, src.hidden_size
        self.batch_first, self.dirs, self.dropout = src.batch_first, 2 if src.bidirectional else 1, src.dropout

    @override
    def forward(self, x: Tensor, hx: Tensor | tuple[Tensor, Tensor] | None = None):  # noqa: ANN201 - nn.LSTM's type
        if not isinstance(x, Tensor) or x.dim() != 3:
            raise ValueError("the vectorized engine supports batched, unpacked recurrent inputs only")
        seq = x if self.batch_first else x.transpose(0, 1)  # (m, L, in)
        m, length = seq.shape[:2]
        n = self.param("weight_ih_l0").shape[0]
        lstm = self.mode == "LSTM"
        h0, c0 = (hx if lstm else (hx, None)) if hx is not None else (None, None)
        layer_in, h_last, c_last = seq, [], []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(self.dirs):
                k = layer * self.dirs + direction
                h = h0[k].reshape(n, -1, self.hidden) if h0 is not None else seq.new_zeros(n, m // n, self.hidden)
                c = None
                if lstm:
                    c = c0[k].reshape(n, -1, self.hidden) if c0 is not None else torch.zeros_like(h)
                out, h, c = self._direction(layer_in, n, layer, direction, h, c)
                outs.append(out)
                h_last.append(h.reshape(m, self.hidden))
                if lstm:
                    c_last.append(c.reshape(m, self.hidden))
            layer_in = torch.cat(outs, -1) if self.dirs == 2 else outs[0]  # (m, L, dirs*H)
            if self.dropout and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, self.training)
        output = layer_in if self.batch_first else layer_in.transpose(0, 1)
        h_n = torch.stack(h_last)
        return output, ((h_n, torch.stack(c_last)) if lstm else h_n)

    def _direction(self, x: Tensor, n: int, layer: int, direction: int, h: Tensor, c: Tensor | None
                   ) -> tuple[Tensor, Tensor, Tensor | None]:
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        w_ih, w_hh = self.param("weight_ih" + suffix), self.param("weight_hh" + suffix)
        b_ih, b_hh = self.param("bias_ih" + suffix), self.param("bias_hh" + suffix)
        m, length, _ = x.shape
        proj = torch.bmm(x.reshape(n, (m // n) * length, -1), w_ih.mT)
        if b_ih is not None:
            proj = proj + b_ih.unsqueeze(1)
        proj = proj.view(n, m // n, length, -1)
        steps: list[Tensor | None] = [None] * length
        order = range(length - 1, -1, -1) if direction else range(length)
        for t in order:
            gh = torch.bmm(h, w_hh.mT) if b_hh is None else torch.baddbmm(b_hh.unsqueeze(1), h, w_hh.mT)
            h, c = self._cell(proj[:, :, t], gh, h, c)
            steps[t] = h
        return torch.stack(steps, 2).reshape(m, length, self.hidden), h, c

    def _cell(self, gi: Tensor, gh: Tensor, h: Tensor, c: Tensor | None) -> tuple[Tensor, Tensor | None]:
        if self.mode == "LSTM":
            i, f, g, o = (gi + gh).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c), c
        if self.mode == "GRU":
            i_r, i_z, i_n = gi.chunk(3, -1)
            h_r, h_z, h_n = gh.chunk(3, -1)
            r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
            candidate = torch.tanh(i_n + r * h_n)
            return (1 - z) * candidate + z * h, None
        pre = gi + gh
        return (torch.tanh(pre) if self.mode == "RNN_TANH" else torch.relu(pre)), None
