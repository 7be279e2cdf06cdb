"""pFedMe against a naive per-client reference written here (docs/algorithms.md, Personalization, pFedMe).

The reference trains each client with plain loops: ``R`` minibatches drawn in the batch order of
docs/algorithms.md (Local training), cycling through epochs; on each, ``K`` explicit steps
``theta -= eta_p * grad(f + lam/2 ||theta - w_loc||^2 + mu/2 ||theta||^2)``, then
``w_loc -= eta lam (w_loc - theta)``; the server mixes ``(1 - beta) w^t + beta sum n_k w_loc_k / sum n_k``.
"""

from __future__ import annotations

import tempfile

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_fl.callbacks import FedAvg, PFedMe
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import MLP
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.seeding import derive_seed
from tests.conftest import run_cli

LR_P, B, N = 0.05, 10, 4
ARGS = dict(lam=2.0, lr=0.03, inner_steps=2, local_rounds=5, beta=1.5, inner_l2=0.01)


def _model() -> MLP:
    torch.manual_seed(0)
    return MLP(60, 10, hidden=(8,))


def _fit(callback, rounds: int, engine: str = "sequential", per_round: int = N, optimizer=None,
         protocol: EvalProtocol | None = None):
    optimizer = optimizer or (lambda p: torch.optim.SGD(p, lr=LR_P))
    loop = FederatedLoop(client=_model(), optimizer=optimizer, clients_per_round=per_round, local_epochs=1,
                         batch_size=B, seed=3, engine=engine, eval=protocol)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=rounds, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[callback])
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=N, max_samples_per_client=40))
    return loop, callback


def _minibatches(t: int, k: int, n: int, count: int) -> list[torch.Tensor]:
    """The first ``count`` minibatches of client ``k`` in round ``t``, epoch after epoch."""
    batches, epoch = [], 0
    while len(batches) < count:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(derive_seed(3, "batches", t, k, epoch)))
        batches += [order[s : s + B] for s in range(0, n, B)]
        epoch += 1
    return batches[:count]


def _client(w: dict, x, y, t: int, k: int, lam, lr, inner_steps, local_rounds, inner_l2, **_) -> tuple[dict, dict]:
    """One client's round: ``(theta, w_loc)``."""
    net = _model()
    net.load_state_dict(w)
    w_loc = {n: v.clone() for n, v in w.items()}
    for batch in _minibatches(t, k, len(y), local_rounds):
        for _ in range(inner_steps):
            loss = F.cross_entropy(net(x[batch]), y[batch])
            loss = loss + sum(lam / 2 * ((p - w_loc[n]) ** 2).sum() + inner_l2 / 2 * (p ** 2).sum()
                              for n, p in net.named_parameters())
            grads = torch.autograd.grad(loss, list(net.parameters()))
            with torch.no_grad():
                for p, g in zip(net.parameters(), grads):
                    p -= LR_P * g
        theta = {n: p.detach() for n, p in net.named_parameters()}
        w_loc = {n: w_loc[n] - lr * lam * (w_loc[n] - theta[n]) for n in w_loc}
    return {n: v.detach().clone() for n, v in net.state_dict().items()}, w_loc


def _flat(state: dict) -> torch.Tensor:
    return torch.cat([state[n].flatten() for n in state])


def _reference(loop, rounds: int, sampled, args=ARGS) -> tuple[dict, list, list]:
    data = [loop.data.client_train(k) for k in range(N)]
    sizes = [len(d[1]) for d in data]
    w = _model().state_dict()
    theta, w_loc = [None] * N, [None] * N
    for t in range(rounds):
        trained = range(N) if args.get("all_clients_train") else sampled(t)
        for k in trained:
            theta[k], w_loc[k] = _client(w, *data[k], t, k, **args)
        ids = sampled(t)
        total = sum(sizes[k] for k in ids)
        average = {n: sum(w_loc[k][n] * (sizes[k] / total) for k in ids) for n in w}
        w = {n: (1 - args["beta"]) * w[n] + args["beta"] * average[n] for n in w}
    return w, theta, w_loc


def test_pfedme_matches_a_naive_two_round_reference() -> None:
    loop, pfedme = _fit(PFedMe(**ARGS), rounds=2)
    w, theta, _ = _reference(loop, 2, lambda t: range(N))
    assert torch.allclose(loop.layout.flatten(loop.model.state_dict()), _flat(w), atol=1e-5)
    rows = pfedme.personal.gather(torch.arange(N))
    for k in range(N):
        assert torch.allclose(rows[k], _flat(theta[k]), atol=1e-5)


def test_all_clients_train_and_the_sampled_ones_are_aggregated_both_engines() -> None:
    args = {**ARGS, "all_clients_train": True, "evaluate": "w_loc"}
    seq, a = _fit(PFedMe(**args), rounds=2, per_round=2)
    vec, b = _fit(PFedMe(**args), rounds=2, per_round=2, engine="vectorized")
    assert vec.engine.name == "vectorized"
    w, _, w_loc = _reference(seq, 2, lambda t: seq.sampler.sample(t).tolist(), args)
    for loop, pfedme in ((seq, a), (vec, b)):
        assert torch.allclose(loop.layout.flatten(loop.model.state_dict()), _flat(w), atol=1e-5)
        assert torch.allclose(pfedme.personal.gather(torch.arange(N)), torch.stack([_flat(s) for s in w_loc]),
                              atol=1e-5)
    assert int(seq.store.participation.sum()) == 2 * 2  # only the sampled clients participated


def test_fedavg_local_steps_takes_fixed_minibatches_weighted_by_n_k() -> None:
    loop, _ = _fit(FedAvg(local_steps=5), rounds=1)
    data = [loop.data.client_train(k) for k in range(N)]
    w0, trained = _model().state_dict(), []
    for k, (x, y) in enumerate(data):  # FedAvg = pFedMe's client with lam = 0, one step per minibatch
        trained.append(_client(w0, x, y, 0, k, lam=0.0, lr=0.0, inner_steps=1, local_rounds=5, inner_l2=0.0)[0])
    total = sum(len(d[1]) for d in data)
    w = {n: sum(s[n] * (len(d[1]) / total) for s, d in zip(trained, data)) for n in w0}
    assert torch.allclose(loop.layout.flatten(loop.model.state_dict()), _flat(w), atol=1e-5)


@pytest.mark.parametrize(("make", "optimizer", "match"), [
    (lambda: PFedMe(), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), "model.optimizer"),
    (lambda: PFedMe(), lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=1e-3), "weight_decay"),
    (lambda: PFedMe(evaluate="v"), None, "evaluate"),
    (lambda: PFedMe(inner_steps=0), None, "inner_steps"),
], ids=["momentum", "weight-decay", "evaluate", "inner-steps"])
def test_bad_settings_fail_in_one_line(make, optimizer, match) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        _fit(make(), rounds=1, optimizer=optimizer)
    assert "\n" not in str(caught.value)


def test_two_plus_two_rounds_equal_four(tiny, tmp_path) -> None:
    config = {"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.PFedMe",
                                     "init_args": {"lam": 2.0, "lr": 0.03, "inner_steps": 2, "local_rounds": 3}},
                                    {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                                    {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                                     "init_args": {"save_last": True, "every_n_epochs": 1, "save_top_k": 0}}],
              "model.eval": {"model": "personal"}}
    whole = tiny(**config, **{"trainer.logger.init_args.name": "whole"})
    halves = tiny(**config, **{"trainer.logger.init_args.name": "halves"})
    assert run_cli("fit", "--config", str(whole)) == 0
    assert run_cli("fit", "--config", str(halves), "--trainer.max_epochs", "2") == 0
    assert run_cli("fit", "--config", str(halves), "--ckpt_path", "last") == 0
    states = []
    for name in ("whole", "halves"):
        path = tmp_path / "logs" / name / "version_0" / "checkpoints" / "last.ckpt"
        checkpoint = torch.load(path, weights_only=False)
        personal = next(v for k, v in checkpoint["callbacks"].items() if k.startswith("PFedMe"))["clients"]["personal"]
        states.append((checkpoint["state_dict"], personal))
    (w_a, p_a), (w_b, p_b) = states
    assert all(torch.equal(w_a[k], w_b[k]) for k in w_a)
    assert torch.equal(p_a["ids"], p_b["ids"]) and torch.equal(p_a["rows"], p_b["rows"])

