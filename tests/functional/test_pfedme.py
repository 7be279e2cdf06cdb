"""pFedMe's local and server updates (docs/algorithms.md, pFedMe): hand-worked numbers and a naive loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from lightning_fl.functional.pfedme import pfedme_inner_step, pfedme_outer_step, pfedme_server_step

F64 = torch.float64


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def test_inner_step_by_hand() -> None:
    # theta = [1, -2], w_loc = [0.5, 0], grad = [0.2, 0.4], lr_p = 0.1, lam = 15, mu = 0.001:
    #   lam (theta - w_loc) = [7.5, -30];  mu theta = [0.001, -0.002]
    #   step = [0.2 + 7.5 + 0.001, 0.4 - 30 - 0.002] = [7.701, -29.602]
    #   theta' = [1 - 0.7701, -2 + 2.9602] = [0.2299, 0.9602]
    out = pfedme_inner_step(t(1.0, -2.0), t(0.5, 0.0), t(0.2, 0.4), lr_p=0.1, lam=15.0, inner_l2=0.001)
    assert torch.allclose(out, t(0.2299, 0.9602), rtol=0, atol=1e-12)
    # Without mu (the paper's rule): step = [7.7, -29.6], theta' = [0.23, 0.96].
    assert torch.allclose(pfedme_inner_step(t(1.0, -2.0), t(0.5, 0.0), t(0.2, 0.4), 0.1, 15.0), t(0.23, 0.96),
                          rtol=0, atol=1e-12)


def test_outer_step_by_hand() -> None:
    # w_loc = [2, 0], theta = [1, 1], lr = 0.005, lam = 15: lr lam = 0.075
    #   w_loc' = [2 - 0.075 * 1, 0 - 0.075 * (-1)] = [1.925, 0.075]
    out = pfedme_outer_step(t(2.0, 0.0), t(1.0, 1.0), lr=0.005, lam=15.0)
    assert torch.allclose(out, t(1.925, 0.075), rtol=0, atol=1e-12)


def test_server_step_by_hand() -> None:
    # n = [100, 300] -> weights [0.25, 0.75]; avg = 0.25 [1, 2] + 0.75 [3, 6] = [2.5, 5]
    # beta = 2: (1 - 2) [1, 1] + 2 [2.5, 5] = [4, 9];  beta = 1: the average itself.
    w_t, locs, n = t(1.0, 1.0), torch.stack([t(1.0, 2.0), t(3.0, 6.0)]), torch.tensor([100, 300])
    assert torch.allclose(pfedme_server_step(w_t, locs, n, beta=2.0), t(4.0, 9.0), rtol=0, atol=1e-12)
    assert torch.allclose(pfedme_server_step(w_t, locs, n, beta=1.0), t(2.5, 5.0), rtol=0, atol=1e-12)
    # beta = 0.5: 0.5 [1, 1] + 0.5 [2.5, 5] = [1.75, 3]
    assert torch.allclose(pfedme_server_step(w_t, locs, n, beta=0.5), t(1.75, 3.0), rtol=0, atol=1e-12)


def test_dicts_and_per_client_rates() -> None:
    theta = {"w": torch.ones(2, 3, dtype=F64), "b": torch.zeros(2, 1, dtype=F64)}
    w_loc = {"w": torch.zeros(2, 3, dtype=F64), "b": torch.ones(2, 1, dtype=F64)}
    g = {"w": torch.zeros(2, 3, dtype=F64), "b": torch.zeros(2, 1, dtype=F64)}
    out = pfedme_inner_step(theta, w_loc, g, lr_p=t(0.1, 0.2), lam=2.0)
    # client 0: theta_w = 1 - 0.1 * 2 * 1 = 0.8, theta_b = 0 - 0.1 * 2 * (-1) = 0.2; client 1 with lr_p 0.2: 0.6, 0.4
    assert torch.allclose(out["w"], t(0.8, 0.6).reshape(2, 1).expand(2, 3))
    assert torch.allclose(out["b"], t(0.2, 0.4).reshape(2, 1))
    server = pfedme_server_step({"w": torch.zeros(3, dtype=F64)}, {"w": out["w"]}, torch.tensor([1, 1]), 1.0)
    assert torch.allclose(server["w"], torch.full((3,), 0.7, dtype=F64))


# --- A naive per-client pFedMe round on a tiny linear model, against the functions vectorized over clients.

D_IN, D_OUT, C, R, K, B = 4, 3, 3, 4, 5, 6
LR, LR_P, LAM, MU, BETA = 0.05, 0.1, 15.0, 0.001, 2.0


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(C, R, B, D_IN, generator=g, dtype=F64)  # one minibatch per client and local round
    y = torch.randint(0, D_OUT, (C, R, B), generator=g)
    return x, y


def _naive_round(model: nn.Linear, x: torch.Tensor, y: torch.Tensor) -> tuple[list[dict], list[dict]]:
    """The authors' loop in plain torch: theta trains in place, w_loc is a separate copy."""
    thetas, locs = [], []
    for k in range(C):
        theta = nn.Linear(D_IN, D_OUT).to(F64)
        theta.load_state_dict(model.state_dict())
        w_loc = {n: p.detach().clone() for n, p in model.named_parameters()}
        for r in range(R):
            for _ in range(K):
                theta.zero_grad()
                nn.functional.cross_entropy(theta(x[k, r]), y[k, r]).backward()
                with torch.no_grad():
                    for n, p in theta.named_parameters():
                        p -= LR_P * (p.grad + LAM * (p - w_loc[n]) + MU * p)
            with torch.no_grad():
                for n, p in theta.named_parameters():
                    w_loc[n] = w_loc[n] - LR * LAM * (w_loc[n] - p)
        thetas.append({n: p.detach().clone() for n, p in theta.named_parameters()})
        locs.append(w_loc)
    return thetas, locs


def test_functions_reproduce_a_naive_round() -> None:
    torch.manual_seed(1)
    model = nn.Linear(D_IN, D_OUT).to(F64)
    x, y = _data()
    ref_thetas, ref_locs = _naive_round(model, x, y)

    def loss(params: dict, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(functional_call(model, params, (xb,)), yb)

    per_client_grad = vmap(grad(loss))
    w_t = {n: p.detach().clone() for n, p in model.named_parameters()}
    theta = {n: v.unsqueeze(0).repeat(C, *([1] * v.dim())) for n, v in w_t.items()}
    w_loc = {n: v.clone() for n, v in theta.items()}
    for r in range(R):
        for _ in range(K):
            theta = pfedme_inner_step(theta, w_loc, per_client_grad(theta, x[:, r], y[:, r]), LR_P, LAM, MU)
        w_loc = pfedme_outer_step(w_loc, theta, LR, LAM)
    for k in range(C):
        for n in w_t:
            assert torch.allclose(theta[n][k], ref_thetas[k][n], rtol=0, atol=1e-12)
            assert torch.allclose(w_loc[n][k], ref_locs[k][n], rtol=0, atol=1e-12)

    n_k = torch.tensor([30, 10, 60])
    new_w = pfedme_server_step(w_t, w_loc, n_k, BETA)
    for n in w_t:
        naive = sum(int(n_k[k]) * ref_locs[k][n] for k in range(C)) / int(n_k.sum())
        assert torch.allclose(new_w[n], (1 - BETA) * w_t[n] + BETA * naive, rtol=0, atol=1e-12)


@pytest.mark.parametrize("lam", [0.0, 15.0])
def test_many_inner_steps_solve_the_personal_problem(lam: float) -> None:
    # f(theta) = 0.5 ||theta - a||^2: the personal problem's minimiser is (a + lam w_loc) / (1 + lam).
    a, w_loc, theta = t(3.0, -1.0), t(1.0, 1.0), t(0.0, 0.0)
    for _ in range(2000):
        theta = pfedme_inner_step(theta, w_loc, theta - a, lr_p=0.05, lam=lam)
    assert torch.allclose(theta, (a + lam * w_loc) / (1 + lam), rtol=0, atol=1e-10)
