"""FedFa's ``train_acc_k``: the trained ``y_k`` on the full train split (docs/algorithms.md, Notation)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytorch_lightning as pl
import torch
from lightning_fl.callbacks import FedFa
from lightning_fl.datamodules import SyntheticDataModule
from torch import Tensor

from lightning_fl.engines.batched import VmapForward
from lightning_fl.engines.cohort_accuracy import prefix_correct
from lightning_fl.models import LogisticRegression
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.simulation.system import SystemHeterogeneity


class RecordingFedFa(FedFa):
    """FedFa that keeps, per round, the clients, their trained rows, step counts, accuracies and its weights."""

    def __init__(self) -> None:
        super().__init__(server_momentum=0.5)
        self.seen: list[dict[str, Tensor]] = []

    def client_weights(self, update, like):
        weights, degenerate = super().client_weights(update, like)
        self.seen.append({"ids": update.client_ids.clone(), "rows": update.weights.clone(),
                          "steps": update.num_steps.clone(), "participation": update.participation.clone(),
                          "trained_acc": update.trained_acc.clone(), "weights": weights.clone()})
        return weights, degenerate


# Who is online in each round (sampling: all trains every online client): the participation counts
# f_k (this round included) follow by hand, and are unequal in round 2, where an offset of f_k shows.
ONLINE = {1: [0, 1, 2, 3], 2: [1, 2, 4, 5]}
F_BY_HAND = {1: [1, 1, 1, 1], 2: [2, 2, 1, 1]}  # round 2: clients 1 and 2 for the second time, 4 and 5 the first


def _fit(engine: str) -> tuple[FederatedLoop, RecordingFedFa]:
    """Two rounds of the 6 Synthetic clients online in ``ONLINE``; a deadline leaves some of them partial work."""
    torch.manual_seed(0)
    trace = Path(tempfile.mkdtemp(prefix="lfl-")) / "online.csv"
    trace.write_text("round,client,available\n" + "".join(f"{r},{k},1\n" for r, ks in ONLINE.items() for k in ks))
    callback = RecordingFedFa()
    loop = FederatedLoop(client=LogisticRegression(60, 10), optimizer=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.5),
                         clients_per_round=6, sampling="all", local_epochs=2, batch_size=10, seed=0, engine=engine,
                         system=SystemHeterogeneity(availability_trace=str(trace), speed_mean=3.0, speed_sigma=1.0,
                                                    deadline=3.0, stragglers="partial"))
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=2, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         limit_val_batches=0, callbacks=[callback])
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=6, max_samples_per_client=60, seed=1))
    return loop, callback


def _reference_accuracy(row: Tensor, x: Tensor, y: Tensor) -> float:
    """Logistic regression ``x W^T + b`` with ``W, b`` read from the flat row (weight then bias)."""
    weight, bias = row[:600].view(10, 60), row[600:610]
    return float(((x @ weight.T + bias).argmax(1) == y).double().mean())


def _fedfa_weights(acc: list[float], freq: list[int]) -> list[float]:
    """Steps 1-4 of docs/algorithms.md, FedFa, with alpha = beta = 0.5 (no accuracy is 0 here)."""
    a = [v / sum(acc) for v in acc]
    f = [v / sum(freq) for v in freq]
    i_acc = [-math.log2(v) for v in a]
    i_f = [-math.log2(1 - v) for v in f]
    return [0.5 * p / sum(i_acc) + 0.5 * q / sum(i_f) for p, q in zip(i_acc, i_f, strict=True)]


def test_trained_accuracy_is_y_k_on_the_full_train_split_in_both_engines() -> None:
    runs = {engine: _fit(engine) for engine in ("sequential", "vectorized")}
    for engine, (loop, callback) in runs.items():
        assert loop.engine.name == engine and len(callback.seen) == 2
        partial = False
        for r, seen in enumerate(callback.seen, start=1):
            ids = seen["ids"].tolist()
            assert ids == ONLINE[r] and seen["participation"].tolist() == F_BY_HAND[r], engine
            sizes = loop.data.train_sizes()[seen["ids"]]
            partial |= bool((seen["steps"] < 2 * ((sizes + 9) // 10)).any())  # a straggler stopped early
            # The reference evaluates each trained row on the client's whole train split, not on what it saw.
            reference = [_reference_accuracy(row, *loop.data.client_train(k)) for k, row in zip(ids, seen["rows"])]
            assert seen["trained_acc"].tolist() == reference, engine
            # f_k by hand (F_BY_HAND), not the run's own counts: an f_k off by one changes round 2's weights.
            expected = _fedfa_weights(reference, F_BY_HAND[r])
            torch.testing.assert_close(seen["weights"].double(), torch.tensor(expected, dtype=torch.float64),
                                       rtol=1e-6, atol=1e-7)
        assert partial, engine
    sequential, vectorized = runs["sequential"][1].seen, runs["vectorized"][1].seen
    for one, other in zip(sequential, vectorized, strict=True):
        assert torch.equal(one["ids"], other["ids"]) and torch.equal(one["trained_acc"], other["trained_acc"])


def test_prefix_passes_count_every_sample_once() -> None:
    # 3 clients of 7, 4 and 1 samples, 5 rows per pass: position 0 for all three (5 // 3 = 1 row each), then
    # positions 1-2 and 3-4 for the first two (2 rows each), then 5-9 for the first (7-9 padding, not counted).
    # Reference: each client's own model on its own rows.
    gen = torch.Generator().manual_seed(0)
    model = LogisticRegression(3, 4)
    x, y = torch.randn(12, 3, generator=gen), torch.randint(0, 4, (12,), generator=gen)
    params = {"linear.weight": torch.randn(3, 4, 3, generator=gen), "linear.bias": torch.randn(3, 4, generator=gen)}
    forward = VmapForward(model)
    got = prefix_correct(forward, params, x, y, offsets=[0, 7, 11], sizes=[7, 4, 1], rows_per_pass=5)
    want = []
    for c, (lo, hi) in enumerate(((0, 7), (7, 11), (11, 12))):
        logits = x[lo:hi] @ params["linear.weight"][c].T + params["linear.bias"][c]
        want.append(float((logits.argmax(1) == y[lo:hi]).sum()))
    assert got.tolist() == want
