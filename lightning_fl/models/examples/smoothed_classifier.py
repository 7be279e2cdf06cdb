"""A classifier trained with label smoothing and scored by a torchmetrics Accuracy."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import torchmetrics


class SmoothedClassifier(pl.LightningModule):
    """A one-hidden-layer MLP on label-smoothed cross-entropy; logs ``val/acc`` and ``test/acc``."""

    def __init__(self, in_features: int = 60, num_classes: int = 10, hidden: int = 32, smoothing: float = 0.1,
                 lr: float = 0.05) -> None:
        super().__init__()
        self.lr, self.smoothing = lr, smoothing
        self.net = torch.nn.Sequential(torch.nn.Linear(in_features, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, num_classes))
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.test_acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y, label_smoothing=self.smoothing)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.val_acc(self(x), y)
        self.log("val/acc", self.val_acc)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.test_acc(self(x), y)
        self.log("test/acc", self.test_acc)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)
