"""``batch_repeats``: every minibatch stepped ``K`` times (pFedMe's inner steps), in both engines."""

from __future__ import annotations

import copy

import pytest
import torch

from lightning_fl.engines import ClientHooks, ClientHookSet, LocalTrainingPlan, SequentialEngine, VectorizedEngine
from lightning_fl.engines.base import epoch_permutation
from lightning_fl.engines.schedule import build_schedule
from lightning_fl.models import LogisticRegression
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData, offsets_from_sizes

SIZES = (23, 7, 4, 15, 9)  # B = 5, E = 2: 10, 4, 2, 6, 4 minibatches
CPU = torch.device("cpu")


def _data() -> FederatedData:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(sum(SIZES), 6, generator=gen), torch.randint(0, 4, (sum(SIZES),), generator=gen)
    ones = offsets_from_sizes([1] * len(SIZES))
    return FederatedData(x, y, offsets_from_sizes(list(SIZES)), x[: len(SIZES)], y[: len(SIZES)], ones, 4)


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05)


def _engine(cls, data, model):
    engine = cls(LocalTrainingPlan(_sgd, local_epochs=2, batch_size=5, seed=3, lr=0.05))
    engine.setup(model, data, ClientStateStore(data.num_clients, False))
    return engine


class _Steps(ClientHooks):
    """Records which clients step at each local step."""

    def __init__(self) -> None:
        self.active: list[int] = []

    def after_local_step(self, ctx, params, step_delta):
        self.active.append(int(ctx.active_mask().sum()))


def _train(engine, ids, repeats, num_steps=None, hooks=()):
    ids = torch.tensor(ids)
    return engine.train_cohort(0, ids, torch.ones(len(ids), dtype=torch.long), ClientHookSet(list(hooks)),
                               num_steps=num_steps, batch_repeats=repeats)


def test_schedule_repeats_every_minibatch():
    args = dict(seed=1, round_idx=2, sub_round=0, client_ids=[0, 3, 1], sizes=[23, 15, 7], offsets=[0, 34, 23],
                local_epochs=2, batch_size=5, device=CPU)
    once, thrice = build_schedule(**args), build_schedule(**args, batch_repeats=3)
    assert thrice.active == [a for a in once.active for _ in range(3)]
    for j in range(3):
        base = [t[once.client == j].view(-1, 5) for t in (once.index, once.weight, once.final)]
        rep = [t[thrice.client == j].view(-1, 5) for t in (thrice.index, thrice.weight, thrice.final)]
        assert torch.equal(rep[0], base[0].repeat_interleave(3, 0))
        assert torch.equal(rep[1], base[1].repeat_interleave(3, 0))
        assert torch.equal(rep[2][::3], base[2]) and not rep[2].view(-1, 3, 5)[:, 1:].any()  # counted once


def test_schedule_caps_the_repeated_steps():
    schedule = build_schedule(seed=1, round_idx=0, sub_round=0, client_ids=[0, 1], sizes=[23, 7], offsets=[0, 23],
                              local_epochs=2, batch_size=5, device=CPU, num_steps=[8, 7], batch_repeats=3)
    assert schedule.active == [2] * 7 + [1]  # client 0: minibatches 0, 0, 0, 1, 1, 1, 2, 2
    index = schedule.index[schedule.client == 1].view(-1, 5)  # client 1: 0, 0, 0, 1, 1, 1, 2
    assert len(index) == 7 and all(torch.equal(index[s], index[s // 3 * 3]) for s in range(7))
    # Each minibatch of the last epoch reached counts once: client 0's first 3 (epoch 0), client 1's third.
    assert int(schedule.final.sum()) == 15 + 5


@pytest.mark.parametrize("num_steps", [None, [7, 5, 3, 9, 4]], ids=["full", "capped"])
def test_engines_agree_with_repeats(num_steps):
    data, model = _data(), LogisticRegression(6, 4)
    steps = None if num_steps is None else torch.tensor(num_steps)
    hooks = [_Steps(), _Steps()]
    seq = _train(_engine(SequentialEngine, data, copy.deepcopy(model)), [0, 1, 2, 3, 4], 3, steps, [hooks[0]])
    vec = _train(_engine(VectorizedEngine, data, copy.deepcopy(model)), [0, 1, 2, 3, 4], 3, steps, [hooks[1]])
    torch.testing.assert_close(vec.weights, seq.weights, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(vec.train_acc, seq.train_acc)
    torch.testing.assert_close(vec.train_loss, seq.train_loss, rtol=1e-5, atol=1e-6)
    expected = [30, 12, 6, 18, 12] if num_steps is None else num_steps
    assert seq.num_steps.tolist() == vec.num_steps.tolist() == expected
    assert len(hooks[0].active) == sum(expected) and len(hooks[1].active) == max(expected)
    if num_steps is not None:  # samples seen: ceil(steps / 3) minibatches of 5, at most n_k
        assert seq.num_samples.tolist() == vec.num_samples.tolist() == [15, 7, 4, 15, 9]


def test_sequential_repeats_match_a_plain_loop():
    data, model = _data(), LogisticRegression(6, 4)
    result = _train(_engine(SequentialEngine, data, copy.deepcopy(model)), [3], 4, torch.tensor([18]))
    reference = copy.deepcopy(model)
    optimizer = _sgd(reference.parameters())
    x, y = data.client_train(3)
    steps = 0
    for epoch in range(2):
        order = epoch_permutation(3, 0, 3, epoch, len(y))
        for start in range(0, len(y), 5):
            batch = order[start : start + 5]
            for _ in range(4):
                if steps < 18:
                    optimizer.zero_grad()
                    reference.loss(reference(x[batch]), y[batch]).backward()
                    optimizer.step()
                    steps += 1
    flat = torch.cat([p.detach().flatten() for p in reference.parameters()])
    torch.testing.assert_close(result.weights[0], flat)


def test_repeats_below_one_are_refused():
    with pytest.raises(ValueError, match="batch_repeats"):
        _train(_engine(SequentialEngine, _data(), LogisticRegression(6, 4)), [0], 0)
