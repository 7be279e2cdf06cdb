"""The model's own ``forward`` on a folded cohort batch, with every parameterised layer batched.

Lives apart from :mod:`lightning_fl.engines.batched` (the layers), :mod:`lightning_fl.engines.batched_rnn`
(recurrent layers) and :mod:`lightning_fl.engines.batched_bn` (BatchNorm) because it needs all three:
imports flow one way.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.engines.batched import (
    CohortForward,
    FoldedConv,
    FoldedEmbedding,
    FoldedLayer,
    FoldedLinear,
    FoldedNorm,
)
from lightning_fl.engines.batched_bn import BATCH_NORMS, FoldedBatchNorm
from lightning_fl.engines.batched_rnn import FoldedRNN


def folded_layer_types() -> dict[type[nn.Module], type[FoldedLayer]]:
    """Layer type -> batched formulation (exact types: a subclass may change ``forward``)."""
    table: dict[type[nn.Module], type[FoldedLayer]] = {nn.Linear: FoldedLinear, nn.Embedding: FoldedEmbedding}
    table.update({cls: FoldedConv for cls in (nn.Conv1d, nn.Conv2d, nn.Conv3d)})
    table.update({cls: FoldedNorm for cls in (nn.GroupNorm, nn.LayerNorm)})
    table.update({cls: FoldedRNN for cls in (nn.LSTM, nn.GRU, nn.RNN)})
    table.update({cls: FoldedBatchNorm for cls in BATCH_NORMS})
    return table


class FoldedForward(CohortForward):
    """The model's own ``forward`` on the folded batch with batched layers swapped in (module doc)."""

    kind = "batched"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.module = copy.deepcopy(model)
        table = folded_layer_types()
        for name, sub in list(self.module.named_modules()):
            make = table.get(type(sub))
            if make is None:
                continue
            parent_name, _, attr = name.rpartition(".")
            setattr(self.module.get_submodule(parent_name), attr, make(sub, name + ".", self))
        self.module.train()
        self.batch_norms = [m for m in self.module.modules() if isinstance(m, FoldedBatchNorm)]

    def start_pass(self, state: Mapping[str, Tensor], smallest_batch: int | None) -> None:
        """Before a pass of local training: BatchNorm step counts from ``state`` (``w^t``'s), and the
        fewest real samples of any batch to come."""
        self.smallest_batch = smallest_batch
        for layer in self.batch_norms:
            layer.tracked = int(state[layer.prefix + "num_batches_tracked"])

    @override
    def __call__(self, x: Tensor) -> Tensor:
        return self.module(x)
