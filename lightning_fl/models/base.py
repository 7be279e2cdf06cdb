"""The per-client LightningModule that a FederatedLoop wraps."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pytorch_lightning import LightningModule
from torch import Tensor
from typing_extensions import override


class ClientModule(LightningModule):
    """Base class of client models: a classifier with a loss and a plain Lightning training step.

    The federated engines call :meth:`forward` and :meth:`loss` directly (no Trainer per client);
    :meth:`training_step` makes the same module usable in a plain ``Trainer`` too, which is how the
    benchmark's naive baseline trains one client.

    Args:
        num_classes: Number of output classes.
        input_shape: Shape of one input sample (without the batch dimension); checked against the
            datamodule at setup.
    """

    def __init__(self, num_classes: int, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.input_shape = tuple(input_shape)

    @property
    def head_prefixes(self) -> tuple[str, ...]:
        """Name prefixes of the model's head, the part personalization keeps per client (FedPer, FedRep).

        Default: the last ``nn.Linear`` layer (the classifier). Override to declare another split;
        the body is every other entry (docs/algorithms.md, Personalization).
        """
        last = [name for name, module in self.named_modules() if isinstance(module, torch.nn.Linear)]
        return (f"{last[-1]}.",) if last else ()

    def loss(self, logits: Tensor, target: Tensor) -> Tensor:
        """Mean cross-entropy; override for other objectives (computed in fp32 under autocast)."""
        return F.cross_entropy(logits.float(), target)

    @override
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return self.loss(self(x), y)

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        # Only used when the module is trained on its own (benchmark baseline); the federated
        # loop builds client optimizers from its own `optimizer` config.
        return torch.optim.SGD(self.parameters(), lr=0.01)
