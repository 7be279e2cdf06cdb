"""APFL's local updates (docs/algorithms.md, APFL): hand-worked numbers and a naive per-client loop."""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from lightning_fl.functional.apfl import apfl_alpha_step, apfl_local_step, apfl_mix, apfl_personal_step

F64 = torch.float64


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_mix_by_hand() -> None:
    # 0.25 [4, 0] + 0.75 [0, 8] = [1, 6]
    assert torch.allclose(apfl_mix(t(4.0, 0.0), t(0.0, 8.0), 0.25), t(1.0, 6.0), rtol=0, atol=1e-15)
    # per client: alpha = [1, 0] picks v for client 0 and w for client 1
    v, w = torch.stack([t(1.0, 2.0), t(3.0, 4.0)]), torch.stack([t(5.0, 6.0), t(7.0, 8.0)])
    assert torch.equal(apfl_mix(v, w, t(1.0, 0.0)), torch.stack([t(1.0, 2.0), t(7.0, 8.0)]))
    out = apfl_mix({"a": v, "b": w}, {"a": w, "b": v}, t(1.0, 0.0))
    assert torch.equal(out["a"], torch.stack([t(1.0, 2.0), t(7.0, 8.0)]))
    assert torch.equal(out["b"], torch.stack([t(5.0, 6.0), t(3.0, 4.0)]))


def test_personal_step_by_hand() -> None:
    # v - lr alpha g = [1, 1] - 0.1 * 0.4 * [5, -10] = [0.8, 1.4]
    assert torch.allclose(apfl_personal_step(t(1.0, 1.0), t(5.0, -10.0), 0.4, 0.1), t(0.8, 1.4), rtol=0, atol=1e-14)


def test_alpha_step_by_hand_and_clipping() -> None:
    # <v - w, g> = <[1, -1], [2, 1]> = 1;  0.5 - 0.1 * 1 = 0.4
    assert torch.allclose(apfl_alpha_step(0.5, t(2.0, 0.0), t(1.0, 1.0), t(2.0, 1.0), 0.1), t(0.4)[0], rtol=0, atol=1e-14)
    # FedTorch's variant adds 0.02 alpha: 0.5 - 0.1 * (1 + 0.01) = 0.399
    assert torch.allclose(apfl_alpha_step(0.5, t(2.0, 0.0), t(1.0, 1.0), t(2.0, 1.0), 0.1, alpha_l2=0.02),
                          t(0.399)[0], rtol=0, atol=1e-14)
    # lr 1: 0.5 - 1 = -0.5 -> 0;  with g negated, 0.5 + 1 = 1.5 -> 1
    assert float(apfl_alpha_step(0.5, t(2.0, 0.0), t(1.0, 1.0), t(2.0, 1.0), 1.0)) == 0.0
    assert float(apfl_alpha_step(0.5, t(2.0, 0.0), t(1.0, 1.0), t(-2.0, -1.0), 1.0)) == 1.0


def test_alpha_step_per_client_sums_every_key() -> None:
    # client 0: <v - w, g> = (1 * 1 + 1 * 1) + (2 * 0.5) = 3 -> 0.5 - 0.1 * 3 = 0.2
    # client 1: v = w -> 0 -> alpha stays 0.9
    v = {"w": torch.stack([t(1.0, 1.0), t(0.0, 0.0)]), "b": torch.stack([t(2.0), t(0.0)])}
    w = {"w": torch.zeros(2, 2, dtype=F64), "b": torch.zeros(2, 1, dtype=F64)}
    g = {"w": torch.ones(2, 2, dtype=F64), "b": torch.stack([t(0.5), t(7.0)])}
    assert torch.allclose(apfl_alpha_step(t(0.5, 0.9), v, w, g, 0.1), t(0.2, 0.9), rtol=0, atol=1e-15)


def test_local_step_fixed_alpha() -> None:
    w2, v2, a2 = apfl_local_step(t(1.0), t(3.0), 0.5, t(1.0), t(2.0), 0.1, adaptive_alpha=False)
    # w - 0.1 * 1 = 0.9, v - 0.1 * 0.5 * 2 = 2.9, alpha unchanged
    assert torch.allclose(w2, t(0.9)) and torch.allclose(v2, t(2.9)) and float(a2) == 0.5


# --- A naive per-client APFL loop (autograd through the mixture for alpha) against the vectorized functions.

D_IN, D_OUT, C, STEPS, B, LR = 4, 3, 3, 6, 5, 0.1


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(C, STEPS, B, D_IN, generator=g, dtype=F64),
            torch.randint(0, D_OUT, (C, STEPS, B), generator=g))


def _naive(model: nn.Linear, v0: dict, x: torch.Tensor, y: torch.Tensor) -> list[tuple[dict, dict, float]]:
    """Per client: w and v as plain tensors, alpha's gradient taken by autograd through alpha v + (1 - alpha) w."""
    out = []
    for k in range(C):
        w = {n: p.detach().clone() for n, p in model.named_parameters()}
        v = {n: p.clone() for n, p in v0.items()}
        alpha = 0.5
        for s in range(STEPS):
            xb, yb = x[k, s], y[k, s]
            w_req = {n: p.clone().requires_grad_(True) for n, p in w.items()}
            loss_w = nn.functional.cross_entropy(xb @ w_req["weight"].T + w_req["bias"], yb)
            g_w = dict(zip(w_req, torch.autograd.grad(loss_w, list(w_req.values()))))
            a = torch.tensor(alpha, dtype=F64, requires_grad=True)
            v_req = {n: p.clone().requires_grad_(True) for n, p in v.items()}
            mixed = {n: a * v_req[n] + (1 - a) * w[n] for n in w}
            loss_v = nn.functional.cross_entropy(xb @ mixed["weight"].T + mixed["bias"], yb)
            grads = torch.autograd.grad(loss_v, [a, *v_req.values()])
            g_alpha, g_v = float(grads[0]), dict(zip(v_req, grads[1:]))
            w = {n: w[n] - LR * g_w[n] for n in w}
            v = {n: v[n] - LR * g_v[n] for n in v}  # autograd's d/dv already carries the factor alpha
            alpha = min(max(alpha - LR * g_alpha, 0.0), 1.0)
        out.append((w, v, alpha))
    return out


def test_functions_reproduce_a_naive_loop() -> None:
    torch.manual_seed(2)
    model = nn.Linear(D_IN, D_OUT).to(F64)
    v0 = {n: torch.randn_like(p, dtype=F64) for n, p in model.named_parameters()}  # v != w so alpha moves
    x, y = _data()
    ref = _naive(model, v0, x, y)

    def loss(params: dict, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(functional_call(model, params, (xb,)), yb)

    per_client_grad = vmap(grad(loss))
    w = {n: p.detach().unsqueeze(0).repeat(C, *([1] * p.dim())) for n, p in model.named_parameters()}
    v = {n: p.unsqueeze(0).repeat(C, *([1] * p.dim())) for n, p in v0.items()}
    alpha = torch.full((C,), 0.5, dtype=F64)
    for s in range(STEPS):
        g_w = per_client_grad(w, x[:, s], y[:, s])
        g_vbar = per_client_grad(apfl_mix(v, w, alpha), x[:, s], y[:, s])
        w, v, alpha = apfl_local_step(w, v, alpha, g_w, g_vbar, LR)
    moved = False
    for k, (w_ref, v_ref, a_ref) in enumerate(ref):
        for n in w_ref:
            assert torch.allclose(w[n][k], w_ref[n], rtol=0, atol=1e-12)
            assert torch.allclose(v[n][k], v_ref[n], rtol=0, atol=1e-12)
        assert abs(float(alpha[k]) - a_ref) < 1e-12
        moved |= abs(a_ref - 0.5) > 1e-3
    assert moved  # the loop exercised alpha's update, not only its starting value
