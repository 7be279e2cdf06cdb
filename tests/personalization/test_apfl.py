"""APFL against a naive per-client reference written here (docs/algorithms.md, Personalization, APFL).

The reference trains each client with plain loops over the batch order of docs/algorithms.md (Local
training): on each minibatch, from the pre-step values, ``w -= eta grad f(w)``, ``v -= eta alpha
grad f(vbar)`` and ``alpha = clip(alpha - eta <v - w, grad f(vbar)>, 0, 1)`` with ``vbar = alpha v +
(1 - alpha) w``; the server averages ``w`` with weights ``n_k``.
"""

from __future__ import annotations

import tempfile

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.func import functional_call

from lightning_fl.callbacks import APFL
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import MLP, LogisticRegression
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.seeding import derive_seed

LR, B, N = 0.1, 10, 4


def _mlp() -> MLP:
    torch.manual_seed(0)
    return MLP(60, 10, hidden=(8,))


class _OwnLossMLP(MLP):
    """The same model and loss, but a loss of its own: the vectorized engine takes its autograd path."""

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, y)


def _own_loss_mlp() -> MLP:
    torch.manual_seed(0)
    return _OwnLossMLP(60, 10, hidden=(8,))


def _logreg() -> LogisticRegression:
    torch.manual_seed(0)
    return LogisticRegression(60, 10)


def _fit(callback, rounds: int, engine: str = "sequential", make=_mlp, optimizer=None, per_round: int = N,
         protocol: EvalProtocol | None = None, **options):
    optimizer = optimizer or (lambda p: torch.optim.SGD(p, lr=LR))
    loop = FederatedLoop(client=make(), optimizer=optimizer, clients_per_round=per_round, local_epochs=1,
                         batch_size=B, seed=3, engine=engine, eval=protocol, **options)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=rounds, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[callback])
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=N))  # n_k 66 to 177: unequal tau_k
    return loop, callback


def _grad(net, params: dict, x, y) -> dict:
    leaves = {n: p.detach().requires_grad_() for n, p in params.items()}
    loss = F.cross_entropy(functional_call(net, leaves, (x,)), y)
    return dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))


def _client(net, w: dict, v: dict, alpha: float, x, y, t: int, k: int, adaptive: bool, gamma: float
            ) -> tuple[dict, dict, float]:
    """One client's round from ``(w^t, v_k, alpha_k)``: ``(w, v, alpha)`` after its local steps (step ``s``: lr
    ``LR gamma^s``)."""
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(derive_seed(3, "batches", t, k, 0)))
    for step, start in enumerate(range(0, len(y), B)):
        lr = LR * gamma**step
        batch = order[start : start + B]
        vbar = {n: alpha * v[n] + (1 - alpha) * w[n] for n in w}
        g_w, g_v = _grad(net, w, x[batch], y[batch]), _grad(net, vbar, x[batch], y[batch])
        if adaptive:
            inner = sum(float(((v[n] - w[n]) * g_v[n]).sum()) for n in w)
            new_alpha = min(max(alpha - lr * inner, 0.0), 1.0)
        else:
            new_alpha = alpha
        w = {n: w[n] - lr * g_w[n] for n in w}
        v = {n: v[n] - lr * alpha * g_v[n] for n in v}
        alpha = new_alpha
    return w, v, alpha


def _reference(loop, rounds: int, make=_mlp, adaptive: bool = True, gamma: float = 1.0) -> tuple[dict, list, list]:
    net = make()
    data = [loop.data.client_train(k) for k in range(N)]
    sizes = [len(d[1]) for d in data]
    w = {n: p.detach().clone() for n, p in net.named_parameters()}
    v, alpha = [None] * N, [0.5] * N
    for t in range(rounds):
        trained = []
        for k in range(N):
            start_v = v[k] if v[k] is not None else w  # v_k starts as the first w^t client k receives
            w_k, v[k], alpha[k] = _client(net, w, start_v, alpha[k], *data[k], t, k, adaptive, gamma)
            trained.append(w_k)
        w = {n: sum(trained[k][n] * (sizes[k] / sum(sizes)) for k in range(N)) for n in w}
    return w, v, alpha


def _flat(state: dict) -> torch.Tensor:
    return torch.cat([state[n].flatten() for n in state])


def _check(loop, apfl, reference, atol: float = 1e-5) -> None:
    w, v, alpha = reference
    assert torch.allclose(loop.layout.flatten(loop.model.state_dict()), _flat(w), atol=atol)
    assert torch.allclose(apfl.personal.gather(torch.arange(N)), torch.stack([_flat(s) for s in v]), atol=atol)
    assert torch.allclose(apfl.alpha.gather(torch.arange(N)), torch.tensor(alpha), atol=atol)


@pytest.mark.parametrize(("engine", "make", "kind"), [
    ("sequential", _mlp, None), ("vectorized", _mlp, "fused-linear"), ("vectorized", _own_loss_mlp, "batched"),
    ("sequential", _own_loss_mlp, None)], ids=["sequential", "vectorized-fused", "vectorized-autograd",
                                              "sequential-own-loss"])
def test_apfl_matches_a_naive_two_round_reference(engine: str, make, kind: str | None) -> None:
    loop, apfl = _fit(APFL(), rounds=2, engine=engine, make=make)
    assert loop.engine.name == engine
    assert kind is None or loop.engine.forward.kind == kind
    reference = _reference(loop, 2, make=make)
    assert any(0.0 < a < 1.0 and a != 0.5 for a in reference[2])  # alpha moved and is not clipped
    _check(loop, apfl, reference)


def test_fused_path_and_fixed_alpha_match_the_reference() -> None:
    loop, apfl = _fit(APFL(adaptive_alpha=False), rounds=2, engine="vectorized", make=_logreg)
    assert loop.engine.forward.kind == "fused-linear"
    _check(loop, apfl, _reference(loop, 2, make=_logreg, adaptive=False))
    assert torch.equal(apfl.alpha.gather(torch.arange(N)), torch.full((N,), 0.5))


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_a_per_step_lr_schedule_steps_v_and_alpha_at_the_step_rate(engine: str) -> None:
    schedule = dict(lr_scheduler=lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9),
                    lr_scheduler_interval="step")
    loop, apfl = _fit(APFL(), rounds=2, engine=engine, **schedule)
    _check(loop, apfl, _reference(loop, 2, gamma=0.9))


def test_both_engines_agree_with_partial_cohorts_and_evaluate_the_mixture() -> None:
    protocol = EvalProtocol(model="personal")
    seq, a = _fit(APFL(alpha_l2=0.02), rounds=3, per_round=2, protocol=protocol)  # alpha_l2: finished rows must stay
    vec, b = _fit(APFL(alpha_l2=0.02), rounds=3, per_round=2, engine="vectorized", protocol=protocol)
    ids = torch.arange(N)
    assert a.has_personal(ids) == b.has_personal(ids)
    seen = torch.tensor(a.has_personal(ids))
    assert torch.allclose(seq.layout.flatten(seq.model.state_dict()), vec.layout.flatten(vec.model.state_dict()),
                          atol=1e-5)
    assert torch.allclose(a.personal.gather(ids[seen]), b.personal.gather(ids[seen]), atol=1e-5)
    assert torch.allclose(a.alpha.gather(ids), b.alpha.gather(ids), atol=1e-5)
    global_w = seq.layout.flatten(seq.model.state_dict())
    alpha = a.alpha.gather(ids[seen]).unsqueeze(1)
    expected = alpha * a.personal.gather(ids[seen]) + (1 - alpha) * global_w
    assert torch.allclose(a.evaluated_rows(ids[seen], global_w.clone()), expected)


@pytest.mark.parametrize(("make", "optimizer", "match"), [
    (lambda: APFL(), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), "model.optimizer"),
    (lambda: APFL(), lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=1e-3), "weight_decay"),
    (lambda: APFL(alpha=1.5), None, "alpha"),
    (lambda: APFL(alpha_l2=-1.0), None, "alpha_l2"),
], ids=["momentum", "weight-decay", "alpha", "alpha-l2"])
def test_bad_settings_fail_in_one_line(make, optimizer, match) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        _fit(make(), rounds=1, optimizer=optimizer)
    assert "\n" not in str(caught.value)


def test_batchnorm_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="BatchNorm") as caught:
        _fit(APFL(), rounds=1, make=lambda: MLP(60, 10, hidden=(8,), batch_norm=True))
    assert "\n" not in str(caught.value)
