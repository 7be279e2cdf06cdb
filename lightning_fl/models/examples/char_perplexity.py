"""A next-character model judged by perplexity, ``exp`` of the mean cross-entropy per character."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torchmetrics.text import Perplexity


class CharPerplexity(pl.LightningModule):
    """Embedding -> LSTM -> linear on the last step; logs ``val/perplexity`` and ``test/perplexity``."""

    def __init__(self, vocab_size: int = 80, embedding_dim: int = 8, hidden_size: int = 64, lr: float = 0.8) -> None:
        super().__init__()
        self.lr = lr
        self.embedding = torch.nn.Embedding(vocab_size, embedding_dim)
        self.lstm = torch.nn.LSTM(embedding_dim, hidden_size, batch_first=True)
        self.head = torch.nn.Linear(hidden_size, vocab_size)
        self.val_perplexity, self.test_perplexity = Perplexity(), Perplexity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x.long()))  # the data stores characters as uint8
        return self.head(out[:, -1])

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        # Perplexity wants (batch, positions, vocab): one predicted position per window here.
        self.val_perplexity(self(x).unsqueeze(1), y.unsqueeze(1))
        self.log("val/perplexity", self.val_perplexity)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.test_perplexity(self(x).unsqueeze(1), y.unsqueeze(1))
        self.log("test/perplexity", self.test_perplexity)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)
