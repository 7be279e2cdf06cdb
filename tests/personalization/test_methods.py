"""Personalization methods against naive references written here (docs/algorithms.md, Personalization).

Every client trains every round (``sampling: all``) with plain SGD, so each method's round is a few
loops over the batch orders of docs/algorithms.md (Local training), written out below independently of
the engines: the references train a copy of the model with explicit ``p -= lr * grad`` steps.
"""

from __future__ import annotations

import copy
import tempfile

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_fl.callbacks import Ditto, FedAvg, FedBN, FedPer, FedRep, Local
from lightning_fl.datamodules import SyntheticDataModule
from lightning_fl.faults.validation import ConfigError
from lightning_fl.models import MLP
from lightning_fl.personalization import EvalProtocol
from lightning_fl.simulation.loop import FederatedLoop
from lightning_fl.state.seeding import derive_seed

LR, B, N = 0.05, 10, 4
HEAD = ("net.2.weight", "net.2.bias")


def _model() -> MLP:
    torch.manual_seed(0)
    return MLP(60, 10, hidden=(8,))


def _bn_model() -> MLP:
    torch.manual_seed(0)
    return MLP(60, 10, hidden=(8,), batch_norm=True)


def _fit(callback, rounds: int, engine: str = "sequential", protocol: EvalProtocol | None = None, make=None):
    loop = FederatedLoop(client=(make or _model)(), optimizer=lambda p: torch.optim.SGD(p, lr=LR), clients_per_round=N,
                         sampling="all", local_epochs=1, batch_size=B, seed=3, engine=engine, eval=protocol)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=rounds, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[callback])
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=N, max_samples_per_client=40))
    return loop, callback


def _order(t: int, k: int, epoch: int, n: int, stream: str = "train") -> torch.Tensor:
    keys = (3, "batches", t, k, epoch) + ((stream,) if stream != "train" else ())
    return torch.randperm(n, generator=torch.Generator().manual_seed(derive_seed(*keys)))


def _sgd(state: dict, x, y, t: int, k: int, epochs: int = 1, stream: str = "train", frozen=(), lam: float = 0.0,
         anchor: dict | None = None, steps: int | None = None, total_steps: int | None = None, make=None) -> dict:
    """Plain SGD from ``state`` on client ``k``'s batches; ``lam``: Ditto's pull towards ``anchor``.

    ``steps`` caps the steps of the first epoch, ``total_steps`` those of the whole call.
    """
    net = (make or _model)()
    net.load_state_dict(state)
    net.train()
    taken = 0
    for epoch in range(epochs):
        order = _order(t, k, epoch, len(y), stream)
        for start in range(0, len(y), B):
            if (steps is not None and taken == steps) or (total_steps is not None and taken == total_steps):
                break
            idx = order[start : start + B]
            loss = F.cross_entropy(net(x[idx]), y[idx])
            if lam:
                loss = loss + lam / 2 * sum(((p - anchor[n]) ** 2).sum() for n, p in net.named_parameters())
            grads = torch.autograd.grad(loss, list(net.parameters()))
            with torch.no_grad():
                for (name, p), g in zip(net.named_parameters(), grads):
                    if name not in frozen:
                        p -= LR * g
            taken += 1
    return {n: v.detach().clone() for n, v in net.state_dict().items()}


def _mean(states: list[dict], sizes: list[int]) -> dict:
    total = sum(sizes)
    return {n: sum(s[n] * (m / total) for s, m in zip(states, sizes)) for n in states[0]}


def _flat(state: dict) -> torch.Tensor:
    return torch.cat([state[n].flatten() for n in state])


def _client_data(loop):
    return [loop.data.client_train(k) for k in range(N)]


def test_ditto_matches_a_naive_two_round_reference() -> None:
    loop, ditto = _fit(Ditto(lam=0.5), rounds=2)
    data = _client_data(loop)
    w = _model().state_dict()
    v = [None] * N
    for t in range(2):
        ys = [_sgd(w, *data[k], t, k) for k in range(N)]
        v = [_sgd(v[k] if v[k] is not None else w, *data[k], t, k, lam=0.5, anchor=w) for k in range(N)]
        w = _mean(ys, [len(d[1]) for d in data])
    assert torch.allclose(loop.layout.flatten(loop.model.state_dict()), _flat(w), atol=1e-6)
    rows = ditto.personal.gather(torch.arange(N))
    for k in range(N):
        assert torch.allclose(rows[k], _flat(v[k]), atol=1e-6)


def test_fedrep_trains_the_head_then_the_body_and_averages_only_the_body() -> None:
    loop, fedrep = _fit(FedRep(head_epochs=2, body_epochs=1), rounds=1)
    data = _client_data(loop)
    w0 = _model().state_dict()
    body = [n for n in w0 if n not in HEAD]
    trained = []
    for k in range(N):
        head_phase = _sgd(w0, *data[k], 0, k, epochs=2, stream="personal", frozen=body)
        trained.append(_sgd(head_phase, *data[k], 0, k, frozen=HEAD))
    expected = _mean(trained, [len(d[1]) for d in data])
    expected.update({n: w0[n] for n in HEAD})  # the head is never aggregated: it stays w^0's
    assert torch.allclose(loop.layout.flatten(loop.model.state_dict()), _flat(expected), atol=1e-6)
    rows = fedrep.personal.gather(torch.arange(N))
    head = fedrep.mask(torch.device("cpu"))
    for k in range(N):
        assert torch.allclose(rows[k][head], _flat({n: trained[k][n] for n in HEAD}), atol=1e-6)


def test_fedper_personal_evaluation_scores_the_averaged_body_with_each_head() -> None:
    loop, _ = _fit(FedPer(), rounds=1, protocol=EvalProtocol(model="personal"))
    data = _client_data(loop)
    w0 = _model().state_dict()
    trained = [_sgd(w0, *data[k], 0, k) for k in range(N)]
    body = _mean(trained, [len(d[1]) for d in data])
    x, y, offsets = loop.data.split("test")
    for k in range(N):
        personal = {**body, **{n: trained[k][n] for n in HEAD}}
        net = _model()
        net.load_state_dict(personal)
        xs, ys = x[offsets[k] : offsets[k + 1]], y[offsets[k] : offsets[k + 1]]
        assert loop.last_evaluation.correct[k] == float((net(xs).argmax(1) == ys).sum())
        assert loop.last_evaluation.total[k] == len(ys)


def test_local_never_changes_the_global_model_and_continues_each_client() -> None:
    loop, local = _fit(Local(), rounds=2)
    data = _client_data(loop)
    w0 = _model().state_dict()
    assert torch.equal(loop.layout.flatten(loop.model.state_dict()), _flat(w0))
    rows = local.personal.gather(torch.arange(N))
    for k in range(N):
        expected = _sgd(_sgd(w0, *data[k], 0, k), *data[k], 1, k)
        assert torch.allclose(rows[k], _flat(expected), atol=1e-6)


def test_finetuned_evaluation_takes_k_fresh_steps_from_the_global_model() -> None:
    loop, _ = _fit(FedAvg(), rounds=1, protocol=EvalProtocol(model="finetuned", finetune_steps=3))
    w1 = {n: v.clone() for n, v in loop.model.state_dict().items()}
    x, y, offsets = loop.data.split("test")
    for k in range(N):
        xk, yk = loop.data.client_train(k)
        # Evaluated after round 1: the eval_ft stream of round number 1; 3 steps span one epoch here.
        tuned = _sgd(w1, xk, yk, 1, k, epochs=1, stream="eval_ft", steps=3)
        net = _model()
        net.load_state_dict(tuned)
        xs, ys = x[offsets[k] : offsets[k + 1]], y[offsets[k] : offsets[k + 1]]
        assert loop.last_evaluation.correct[k] == float((net(xs).argmax(1) == ys).sum())


@pytest.mark.parametrize("method", [Ditto(lam=0.5), FedRep(head_epochs=2), FedPer(), Local()], ids=lambda m: type(m).__name__)
def test_both_engines_give_the_same_models(method) -> None:
    seq, a = _fit(copy.deepcopy(method), rounds=2, engine="sequential")
    vec, b = _fit(copy.deepcopy(method), rounds=2, engine="vectorized")
    assert vec.engine.name == "vectorized"
    assert torch.allclose(seq.layout.flatten(seq.model.state_dict()), vec.layout.flatten(vec.model.state_dict()),
                          atol=1e-5)
    assert torch.allclose(a.personal.gather(torch.arange(N)), b.personal.gather(torch.arange(N)), atol=1e-5)


@pytest.mark.parametrize(("callback", "protocol", "field"), [
    (FedRep(), EvalProtocol(model="global"), "model.eval.model"),
    (FedAvg(), EvalProtocol(model="personal"), "model.eval.model"),
    (FedPer(head_prefixes=["fc."]), EvalProtocol(model="personal"), "FedPer.head_prefixes"),
    (FedPer(head_prefixes=["net."]), EvalProtocol(model="personal"), "FedPer.head_prefixes"),
], ids=["global-of-fedrep", "personal-of-fedavg", "unknown-prefix", "head-is-everything"])
def test_bad_personalization_settings_fail_before_training_in_one_line(callback, protocol, field) -> None:
    with pytest.raises(ConfigError, match=field) as caught:
        _fit(callback, rounds=1, protocol=protocol)
    assert "\n" not in str(caught.value)


def test_unseen_clients_never_train_and_give_the_participation_gap() -> None:
    protocol = EvalProtocol(model="finetuned", finetune_steps=2, unseen_fraction=0.25)
    loop = FederatedLoop(client=_model(), optimizer=lambda p: torch.optim.SGD(p, lr=LR), clients_per_round=3,
                         local_epochs=1, batch_size=B, seed=3, eval=protocol)
    trainer = pl.Trainer(default_root_dir=tempfile.mkdtemp(prefix="lfl-"), max_epochs=3, accelerator="cpu",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(loop, datamodule=SyntheticDataModule("1_1", num_clients=N, max_samples_per_client=40))
    # max(1, floor(0.25 * 4)) = 1 client, the first of randperm(4) keyed by (seed, "unseen").
    held_out = int(torch.randperm(N, generator=torch.Generator().manual_seed(derive_seed(3, "unseen")))[0])
    assert int(loop.store.participation[held_out]) == 0
    assert int((loop.store.participation > 0).sum()) == N - 1
    assert "test/gap_client_mean" in trainer.callback_metrics


def test_finetuning_with_prox_and_head_only_matches_the_reference() -> None:
    protocol = EvalProtocol(model="finetuned", finetune_steps=2, finetune_prox=0.5, finetune_params="head")
    loop, _ = _fit(FedAvg(), rounds=1, protocol=protocol)
    w1 = {n: v.clone() for n, v in loop.model.state_dict().items()}
    body = [n for n in w1 if n not in HEAD]
    rows = loop.protocol_evaluation.finetuned_rows(torch.arange(N), 1)  # what the evaluation after round 1 scored
    for k in range(N):
        xk, yk = loop.data.client_train(k)
        # max(floor(k n_k / B), k) steps with k = 2, B = 10: epochs of ceil(n_k / B) batches, cycled.
        steps = max(2 * len(yk) // B, 2)
        epochs = -(-steps // -(-len(yk) // B))
        tuned = _sgd(w1, xk, yk, 1, k, epochs=epochs, stream="eval_ft", steps=None, frozen=body, lam=0.5,
                     anchor=w1, total_steps=steps)
        assert torch.allclose(rows[k], _flat(tuned), atol=1e-6)
        assert torch.equal(rows[k][: -len(_flat({n: w1[n] for n in HEAD}))], _flat({n: w1[n] for n in body}))


def test_a_finetuning_option_without_finetuning_is_refused() -> None:
    with pytest.raises(ConfigError, match="model.eval.finetune_prox"):
        EvalProtocol(model="global", finetune_prox=0.5)


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_fedbn_averages_all_but_batchnorm_and_keeps_each_clients_statistics(engine) -> None:
    loop, fedbn = _fit(FedBN(), rounds=2, engine=engine, make=_bn_model)
    data = _client_data(loop)
    bn = [n for n in _bn_model().state_dict() if n.startswith("net.1.") and n != "net.1.num_batches_tracked"]
    floats = lambda state: {n: v for n, v in state.items() if v.is_floating_point()}  # noqa: E731
    w = floats(_bn_model().state_dict())
    personal = [None] * N
    for t in range(2):
        trained = []
        for k in range(N):
            start = {**_bn_model().state_dict(), **w, **(personal[k] or {})}  # p_k's BN entries in place
            trained.append(floats(_sgd(start, *data[k], t, k, make=_bn_model)))
            personal[k] = {n: trained[k][n] for n in bn}
        mean = {n: sum(y[n] for y in trained) / N for n in w}  # FedBN's default: uniform weights
        w = {n: (w[n] if n in bn else mean[n]) for n in w}  # BN entries never leave the clients
    assert torch.allclose(loop.layout.flatten(loop.model.state_dict()), _flat(w), atol=1e-5)
    rows, mask = fedbn.personal.gather(torch.arange(N)), fedbn.mask(torch.device("cpu"))
    for k in range(N):
        assert torch.allclose(rows[k][mask], _flat(personal[k]), atol=1e-5)
