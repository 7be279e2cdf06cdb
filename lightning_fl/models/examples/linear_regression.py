"""Linear regression as a plain LightningModule: the clients minimise mean squared error."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F


class LinearRegression(pl.LightningModule):
    """``y = x w + b`` trained on MSE; logs ``val/mse`` and ``test/mse`` (lower is better)."""

    def __init__(self, in_features: int = 10, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        self.linear = torch.nn.Linear(in_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/mse", F.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test/mse", F.mse_loss(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)
