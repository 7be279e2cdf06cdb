"""Character-level LSTM for LEAF's Shakespeare (next-character prediction)."""

from __future__ import annotations

from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.faults.validation import check_positive
from lightning_fl.models.base import ClientModule


class CharLSTM(ClientModule):
    """Embedding 8 -> two LSTM layers of 256 -> dense ``vocab_size`` on the last step (LEAF, FedProx, FedFa).

    Inputs are ``(B, seq_len)`` character codes of any integer dtype (the Shakespeare datamodule
    stores ``uint8``; they are cast to ``long`` here); the output ``(B, vocab_size)`` logits predict
    the next character, and :meth:`loss` is the base class's cross-entropy against ``(B,)`` targets.
    819,920 parameters with the defaults.

    Args:
        vocab_size: Number of characters (LEAF: 80); also the number of classes.
        seq_len: Input length (LEAF: 80); part of ``input_shape``.
        embedding_dim: Character embedding size.
        hidden_size: LSTM width.
        num_layers: Stacked LSTM layers.

    Example:
        >>> sum(p.numel() for p in CharLSTM().parameters())
        819920
    """

    def __init__(self, vocab_size: int = 80, seq_len: int = 80, embedding_dim: int = 8, hidden_size: int = 256,
                 num_layers: int = 2) -> None:
        for name, value in (("vocab_size", vocab_size), ("seq_len", seq_len), ("embedding_dim", embedding_dim),
                            ("hidden_size", hidden_size), ("num_layers", num_layers)):
            check_positive(name, value, integer=True)
        super().__init__(vocab_size, (seq_len,))
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, vocab_size)

    @override
    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.lstm(self.embedding(x.long()))
        return self.head(out[:, -1])
