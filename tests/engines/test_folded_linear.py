"""The batched dense layer (both operand orders) against torch's ``linear`` run client by client."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightning_fl.engines.folded import FoldedForward


# (rows per client, in, out, bias): fewer rows than inputs (J3's dense layers: the transposed product),
# more rows than inputs, and no bias.
@pytest.mark.parametrize("rows,inp,out,bias", [(2, 7, 3, True), (6, 3, 4, True), (2, 7, 3, False), (5, 5, 2, True)])
def test_folded_linear_matches_linear_per_client(rows, inp, out, bias):
    gen = torch.Generator().manual_seed(0)
    clients = 3
    forward = FoldedForward(nn.Sequential(nn.Linear(inp, out, bias=bias)))
    params = {"0.weight": torch.randn(clients, out, inp, generator=gen).requires_grad_()}
    if bias:
        params["0.bias"] = torch.randn(clients, out, generator=gen).requires_grad_()
    forward.bind(params)
    x = torch.randn(clients * rows, inp, generator=gen).requires_grad_()  # a hidden layer: dx is needed too
    got = forward(x)
    want = torch.cat([F.linear(x[c * rows:(c + 1) * rows], params["0.weight"][c],
                               params["0.bias"][c] if bias else None) for c in range(clients)])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    cotangent = torch.randn(want.shape, generator=gen)
    (got * cotangent).sum().backward()
    grads = {n: p.grad for n, p in params.items()}
    torch.testing.assert_close(x.grad, torch.cat([cotangent[c * rows:(c + 1) * rows] @ params["0.weight"][c].detach()
                                                  for c in range(clients)]), rtol=1e-5, atol=1e-6)
    for p in params.values():
        p.grad = None
    (want * cotangent).sum().backward()
    for n, p in params.items():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows,inp", [(2, 7), (6, 3)])
def test_folded_linear_weight_gradient_is_made_contiguous(rows, inp):
    """The backward hands out ``W``'s gradient in ``W``'s layout itself, so ``.grad`` needs no copy of it
    (a transposed view here costs a full copy of every client's weights each step)."""
    gen = torch.Generator().manual_seed(4)
    forward = FoldedForward(nn.Sequential(nn.Linear(inp, 5)))
    weight = torch.randn(3, 5, inp, generator=gen).requires_grad_()
    forward.bind({"0.weight": weight, "0.bias": torch.zeros(3, 5)})
    (grad,) = torch.autograd.grad(forward(torch.randn(3 * rows, inp, generator=gen)).square().sum(), [weight])
    assert grad.is_contiguous()


def test_folded_linear_keeps_leading_dimensions():
    """A sequence input ``(C * B, T, in)``: client ``c``'s rows are its ``B`` samples at every time step."""
    gen = torch.Generator().manual_seed(1)
    forward = FoldedForward(nn.Sequential(nn.Linear(6, 2)))
    params = {"0.weight": torch.randn(2, 2, 6, generator=gen), "0.bias": torch.randn(2, 2, generator=gen)}
    forward.bind(params)
    x = torch.randn(2 * 1, 2, 6, generator=gen)  # 2 rows per client < 6 inputs: the transposed product
    got = forward(x)
    for c in range(2):
        torch.testing.assert_close(got[c], F.linear(x[c], params["0.weight"][c], params["0.bias"][c]))


@pytest.mark.parametrize("rows,inp", [(2, 7), (6, 3)])
def test_folded_linear_under_autocast_matches_linear_per_client(rows, inp):
    """bf16 autocast (autograd's own backward, either operand order): gradients as per-client ``linear`` gives."""
    gen = torch.Generator().manual_seed(3)
    forward = FoldedForward(nn.Sequential(nn.Linear(inp, 4)))
    params = {"0.weight": torch.randn(2, 4, inp, generator=gen).requires_grad_(),
              "0.bias": torch.randn(2, 4, generator=gen).requires_grad_()}
    forward.bind(params)
    x = torch.randn(2 * rows, inp, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = forward(x)
        want = torch.cat([F.linear(x[c * rows:(c + 1) * rows], params["0.weight"][c], params["0.bias"][c])
                          for c in range(2)])
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    grads = torch.autograd.grad(got.float().sum(), list(params.values()))
    want_grads = torch.autograd.grad(want.float().sum(), list(params.values()))
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
