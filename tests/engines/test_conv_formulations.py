"""Batched convolutions over stacked clients against torch's own ``conv2d`` run client by client."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.profile_step import CONV_FORMS, step_functions
from lightning_fl.engines.folded import FoldedForward
from lightning_fl.models import CNN28

# (in, out, kernel, stride, padding, dilation): CNN28's two layers, and strided/dilated/asymmetric ones.
LAYERS = [(1, 32, (5, 5), (1, 1), (2, 2), (1, 1)), (32, 64, (5, 5), (1, 1), (2, 2), (1, 1)),
          (3, 4, (3, 2), (2, 1), (0, 1), (1, 2))]


def _per_client(x, weight, bias, stride, padding, dilation):
    """The reference: client ``c``'s rows through ``conv2d`` with client ``c``'s kernel, concatenated."""
    xs = x.reshape(weight.shape[0], -1, *x.shape[1:])
    return torch.cat([F.conv2d(xs[c], weight[c], bias[c], stride, padding, dilation) for c in range(len(weight))])


@pytest.mark.parametrize("form", sorted(CONV_FORMS))
@pytest.mark.parametrize("layer", LAYERS)
def test_formulation_matches_conv2d_per_client(form, layer):
    cin, cout, kernel, stride, padding, dilation = layer
    gen = torch.Generator().manual_seed(0)
    clients, batch = 3, 4
    x = torch.randn(clients * batch, cin, 11, 9, generator=gen)
    weight = torch.randn(clients, cout, cin, *kernel, generator=gen).requires_grad_()
    bias = torch.randn(clients, cout, generator=gen).requires_grad_()
    conv = {"stride": stride, "padding": padding, "dilation": dilation}
    got = CONV_FORMS[form](x, weight, bias, conv)
    want = _per_client(x, weight, bias, stride, padding, dilation)
    assert got.shape == want.shape
    # Float rounding of sums of Cin * k * k products (~30 in size here): tolerance relative to the largest output.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.detach().abs().max()))
    # Gradients with respect to every client's kernel and bias (a random cotangent, so rows are told apart).
    cotangent = torch.randn(want.shape, generator=gen)
    grads = torch.autograd.grad((got * cotangent).sum(), (weight, bias))
    want_grads = torch.autograd.grad((want * cotangent).sum(), (weight, bias))
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 * float(w.abs().max()))


def test_engine_conv_matches_conv2d_per_client():
    """The vectorized engine's own batched CNN28 (grouped convolution) against per-client functional calls."""
    torch.manual_seed(0)
    model = CNN28(10)
    forward = FoldedForward(model)
    gen = torch.Generator().manual_seed(1)
    params = {n: p.detach() + 0.01 * torch.randn(2, *p.shape, generator=gen) for n, p in model.named_parameters()}
    forward.bind(params)
    x = torch.randn(2 * 3, 1, 28, 28, generator=gen)
    got = forward(x)
    for c in range(2):
        want = torch.func.functional_call(model, {n: p[c] for n, p in params.items()}, (x[3 * c: 3 * c + 3],))
        torch.testing.assert_close(got[3 * c: 3 * c + 3], want, rtol=1e-5, atol=1e-5)


def test_compare_steps_are_one_sgd_step_of_each_client():
    """Every timed variant of ``--compare`` (but the centralized one) is one SGD step of each client from the
    same start: the weights after it equal ``w - lr * grad`` worked out here, client by client."""
    torch.manual_seed(0)
    model = CNN28(10)
    gen = torch.Generator().manual_seed(2)
    clients, batch, lr = 3, 2, 0.1
    x = torch.randn(clients * batch, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (clients * batch,), generator=gen)
    # 3 clients in chunks of 2: a pass of 2 stacked clients and one of 1.
    steps, weights = step_functions(model, x, y, clients, lr, sorted(CONV_FORMS), chunks=[2])
    assert set(weights) == {"sequential"} | {f"{f}/{c}" for f in CONV_FORMS for c in (2,)}
    names = [n for n, _ in model.named_parameters()]
    expected = {n: [] for n in names}
    for c in range(clients):
        rows = slice(c * batch, (c + 1) * batch)
        loss = F.cross_entropy(model(x[rows]), y[rows])
        grads = torch.autograd.grad(loss, list(model.parameters()))
        for n, p, g in zip(names, model.parameters(), grads):
            expected[n].append(p.detach() - lr * g)
    for name, step in steps.items():
        step()
        if name == "centralized":
            continue
        got = weights[name]()
        for n in names:
            torch.testing.assert_close(got[n], torch.stack(expected[n]), rtol=1e-4, atol=1e-6, msg=f"{name} {n}")
