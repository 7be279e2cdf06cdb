"""A plain LightningModule federated through its own training_step and configure_optimizers (issue 25)."""

from __future__ import annotations

import tempfile

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_fl.callbacks import FedAvg, FedFa, QFFL
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.seeding import derive_seed
from tests.conftest import run_cli

LR, B, N = 0.1, 10, 4


class SmoothNet(pl.LightningModule):
    """What a user writes: a classifier whose objective is label-smoothed cross-entropy."""

    def __init__(self, in_features: int = 60, num_classes: int = 10, lr: float = LR) -> None:
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(in_features, 8), torch.nn.Tanh(), torch.nn.Linear(8, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y, label_smoothing=0.1)
        self.log("train_loss", loss)
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def _model(cls=SmoothNet) -> pl.LightningModule:
    torch.manual_seed(0)
    return cls()


def _fit(engine: str, rounds: int = 2, model=None, callback=None, samples: int = 35, **loop_args):
    loop = FederatedLoop(client=model or _model(), clients_per_round=N, sampling="all", batch_size=B, seed=3,
                         engine=engine, **loop_args)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=rounds, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[callback or FedAvg()])
    # Clients' last batches are smaller than B (the vectorized engine's padding); with 100 samples at most the
    # clients hold 72, 66, 72, 72 training samples: at one step some are at a full batch and one at 6 samples.
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=N, max_samples_per_client=samples))
    return loop


def _flat(loop) -> torch.Tensor:
    return loop.layout.flatten(loop.model.state_dict())


def _reference(loop, rounds: int) -> torch.Tensor:
    """FedAvg with plain SGD on the same batch orders (docs/algorithms.md, Local training), written out here."""
    data = [loop.data.client_train(k) for k in range(N)]
    net = _model()
    for t in range(rounds):
        states, sizes = [], []
        for k, (x, y) in enumerate(data):
            client = _model()
            client.load_state_dict(net.state_dict())
            order = torch.randperm(len(y), generator=torch.Generator().manual_seed(derive_seed(3, "batches", t, k, 0)))
            for step, start in enumerate(range(0, len(y), B)):
                index = order[start : start + B]
                loss = F.cross_entropy(client(x[index]), y[index], label_smoothing=0.1)
                grads = torch.autograd.grad(loss, list(client.parameters()))
                with torch.no_grad():
                    for p, g in zip(client.parameters(), grads):
                        p -= LR * g
            states.append(client.state_dict())
            sizes.append(len(y))
        total = sum(sizes)
        net.load_state_dict({n: sum(s[n] * (m / total) for s, m in zip(states, sizes)) for n in states[0]})
    return torch.cat([v.flatten() for v in net.state_dict().values()])


def test_both_engines_train_a_plain_module_as_the_naive_reference() -> None:
    sequential, vectorized = _fit("sequential", samples=100), _fit("vectorized", samples=100)
    assert sorted(loop.data.train_sizes().tolist() for loop in [sequential])[0] == [72, 66, 72, 72]
    assert vectorized.engine.name == "vectorized" and vectorized.engine.user
    assert torch.allclose(_flat(sequential), _flat(vectorized), atol=1e-6)
    assert torch.allclose(_flat(sequential), _reference(sequential, 2), atol=1e-6)


def test_configure_optimizers_is_used_when_model_optimizer_is_absent() -> None:
    assert _fit("sequential", rounds=1).client_lr == LR
    loop = _fit("sequential", rounds=1, optimizer=lambda p: torch.optim.SGD(p, lr=0.5))
    assert loop.client_lr == 0.5


class _Scheduled(SmoothNet):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.5)}


def test_the_module_scheduler_steps_per_round_in_both_engines() -> None:
    loops = [_fit(engine, rounds=2, model=_model(_Scheduled)) for engine in ("sequential", "vectorized")]
    assert loops[0].lr_schedule.lr() == pytest.approx(LR * 0.25)
    assert torch.allclose(_flat(loops[0]), _flat(loops[1]), atol=1e-6)
    assert not any(p.grad is not None for p in loops[0].model.parameters())


def _bad(step=None, optimizers=None, frozen=False):
    class Bad(SmoothNet):
        def training_step(self, batch, batch_idx):
            return step(self, batch) if step else super().training_step(batch, batch_idx)

        def configure_optimizers(self):
            return optimizers(self) if optimizers else super().configure_optimizers()

    model = _model(Bad)
    if frozen:
        model.requires_grad_(False)
    return model


@pytest.mark.parametrize(("model", "match"), [
    (lambda: _bad(step=lambda m, b: None), "training_step must return a scalar loss.*returned None"),
    (lambda: _bad(step=lambda m, b: F.cross_entropy(m(b[0]), b[1], reduction="none")), "shape \\(10,\\)"),
    (lambda: _bad(step=lambda m, b: {"acc": torch.zeros(())}), "dict with keys \\['acc'\\] and no \"loss\""),
    (lambda: _bad(frozen=True), "no trainable parameters"),
])
def test_bad_training_steps_fail_before_round_one_with_one_line(model, match) -> None:
    with pytest.raises(ConfigError, match=match) as error:
        _fit("sequential", rounds=1, model=model())
    assert "\n" not in str(error.value)


def test_several_optimizers_and_fedfa_are_one_line_errors() -> None:
    two = _bad(optimizers=lambda m: [torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.Adam(m.parameters())])
    with pytest.raises(ConfigError, match="configure_optimizers must return one optimizer.*2 optimizers \\(SGD, Adam\\)"):
        FederatedLoop(client=two)
    for fedfa in (FedFa(), FedFa(train_acc="running")):
        with pytest.raises(ConfigError, match="FedFa reads each client's training accuracy"):
            _fit("sequential", rounds=1, callback=fedfa)


def test_vectorized_falls_back_or_refuses_when_vmap_cannot_run_the_step() -> None:
    dropout = _bad(step=lambda m, b: F.cross_entropy(F.dropout(m(b[0]), 0.5), b[1]))
    assert _fit("auto", rounds=1, model=dropout).engine.name == "sequential"
    with pytest.raises(ConfigError, match="engine: vectorized cannot train this run \\(training_step under vmap"):
        _fit("vectorized", rounds=1, model=_bad(step=lambda m, b: F.cross_entropy(F.dropout(m(b[0]), 0.5), b[1])))


def test_the_cli_accepts_a_plain_module_by_class_path(tiny) -> None:
    config = tiny(**{"model.client": {"class_path": "tests.test_user_module.SmoothNet"}, "model.optimizer": None,
                     "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config)) == 0


class _RecordingQFFL(QFFL):
    """q-FFL that keeps each round's ``w^t``, cohort and ``loss_before``."""

    def __init__(self) -> None:
        super().__init__(q=1.0)
        self.seen: list[tuple[torch.Tensor, list[int], torch.Tensor]] = []

    def combination(self, round_idx, global_w, update, federation, log):
        self.seen.append((global_w.clone(), update.client_ids.tolist(), update.loss_before.clone()))
        return super().combination(round_idx, global_w, update, federation, log)


def _objective(loop, global_w, client_ids, cls=SmoothNet, smoothing: float = 0.1) -> torch.Tensor:
    """The module's objective at ``w^t`` on each client's whole train split, in eval mode, written out here."""
    net = _model(cls)
    loop.layout.load_into(global_w, net.state_dict())
    net.eval()
    with torch.no_grad():
        return torch.stack([F.cross_entropy(net(x), y, label_smoothing=smoothing).double()
                            for x, y in map(loop.data.client_train, client_ids)])


class _Dropped(SmoothNet):
    def __init__(self) -> None:
        super().__init__()
        self.net.insert(2, torch.nn.Dropout(0.5))


def test_qffl_reads_the_training_step_loss_the_same_way_in_both_engines() -> None:
    callbacks = {engine: _RecordingQFFL() for engine in ("sequential", "vectorized")}
    loops = {engine: _fit(engine, rounds=2, callback=callback, samples=100) for engine, callback in callbacks.items()}
    sequential = loops["sequential"]
    assert len(callbacks["sequential"].seen) == 2
    for (global_w, ids, loss_before), (_, other_ids, other) in zip(callbacks["sequential"].seen,
                                                                   callbacks["vectorized"].seen):
        expected = _objective(sequential, global_w, ids)
        assert torch.allclose(loss_before, expected, rtol=1e-6, atol=0)
        # Label smoothing is in it: not the plain cross-entropy of forward that a ClientModule is read by.
        assert not torch.allclose(loss_before, _objective(sequential, global_w, ids, smoothing=0.0), rtol=1e-3)
        assert ids == other_ids and torch.allclose(loss_before, other, rtol=1e-6, atol=0)
    assert torch.allclose(_flat(sequential), _flat(loops["vectorized"]), atol=1e-6)
    # With dropout the loss is read in eval mode (dropout off): deterministic, and equal to the written-out one.
    recording = _RecordingQFFL()
    dropped = _fit("sequential", rounds=1, model=_model(_Dropped), callback=recording)
    global_w, ids, loss_before = recording.seen[0]
    assert torch.allclose(loss_before, _objective(dropped, global_w, ids, _Dropped), rtol=1e-6, atol=0)


def test_qffl_refuses_a_negative_training_loss_with_one_line() -> None:
    negative = _bad(step=lambda m, b: F.cross_entropy(m(b[0]), b[1]) - 100.0)
    with pytest.raises(ConfigError, match="q-FFL needs a non-negative client loss F_k.*loss before training is -9"):
        _fit("sequential", rounds=1, model=negative, callback=QFFL())
