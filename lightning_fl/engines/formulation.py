"""Which cohort formulation a model gets, and a set-up check that it computes what the model does.

Order of preference (fastest first):

1. ``fused-linear``: hand-written gradients of a Linear/activation chain with the default loss, fp32
   (:mod:`lightning_fl.engines.fused`);
2. ``batched``: the model's forward with batched layers swapped in, autograd
   (:class:`~lightning_fl.engines.folded.FoldedForward`);
3. ``vmap``: ``functional_call`` under ``vmap`` for layers without a batched formulation.

A model with ``BatchNorm1d/2d/3d`` (tracking running statistics) is trained by ``batched`` only, whose
BatchNorm layer keeps per-client masked batch statistics and running statistics
(:mod:`lightning_fl.engines.batched_bn`); neither the hand-written gradients nor vmap know them.
Other layers that keep batch statistics (InstanceNorm with running stats, SyncBatchNorm, BatchNorm
without running statistics, which normalises evaluation batches by their own statistics) are
refused. A model passes the check in :func:`verify` before a formulation is used, so an unusual
``forward`` (one that mixes samples, say) falls back to the next formulation or to the sequential
engine instead of training silently wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from lightning_fl.engines.batched import CohortForward, VmapForward
from lightning_fl.engines.batched_bn import BATCH_NORMS, FoldedBatchNorm, running_statistics
from lightning_fl.engines.folded import FoldedForward, folded_layer_types
from lightning_fl.engines.fused import FusedLinearChain, linear_chain
from lightning_fl.models.base import ClientModule

# Layers whose batched form is no faster than a plain loop on a CPU: ``auto`` trains such models sequentially
# there. Convolutions are compute-bound per image already at batch 10 (batching them saves nothing, and even the
# centralized bound, one batch of K * B images, measured under 2x the sequential engine on J3); recurrences run
# step by step either way.
_CPU_SLOW = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.RNNBase)
_RUNNING_STATS = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)


@dataclass(frozen=True)
class ModelAnalysis:
    """What the vectorized engine can do with a model, from its layer types alone.

    Attributes:
        kinds: Formulations to try, fastest first (empty: the model cannot be vectorized).
        reason: Why not, when ``kinds`` is empty; otherwise a short description for the log.
        cpu_slow: Layer types that make the vectorized engine slower than the sequential one on CPU.
    """

    kinds: tuple[str, ...]
    reason: str
    cpu_slow: tuple[str, ...] = ()


def _foldable(module: nn.Module) -> bool:
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        return module.padding_mode == "zeros"
    if isinstance(module, nn.Embedding):
        return module.max_norm is None and not module.sparse
    if isinstance(module, nn.RNNBase):
        return getattr(module, "proj_size", 0) == 0
    return True


def analyse_model(model: ClientModule, precision: str = "32-true") -> ModelAnalysis:
    """Classify ``model`` for the vectorized engine (see the module docstring)."""
    if not any(p.requires_grad for p in model.parameters()):
        return ModelAnalysis((), "the model has no trainable parameters")
    batch_norm = False
    for name, module in model.named_modules():
        if type(module) in BATCH_NORMS and module.track_running_stats:
            batch_norm = True
        elif type(module) in BATCH_NORMS:
            return ModelAnalysis((), f"{type(module).__name__} ({name}) has no running statistics: evaluation"
                                     " batches would be normalised by their own statistics")
        elif isinstance(module, _RUNNING_STATS) and getattr(module, "track_running_stats", False):
            return ModelAnalysis((), f"{type(module).__name__} ({name}) keeps running batch statistics per client")
    table = folded_layer_types()
    owners = {name: m for name, m in model.named_modules() if any(p is not None for p in m._parameters.values())}
    unknown = sorted({type(m).__name__ for m in owners.values() if type(m) not in table or not _foldable(m)})
    layer_names = sorted({type(m).__name__ for m in owners.values()})
    cpu_slow = tuple(sorted({type(m).__name__ for m in owners.values() if isinstance(m, _CPU_SLOW)}))
    if unknown and batch_norm:
        return ModelAnalysis((), f"BatchNorm with layers only vmap knows ({', '.join(unknown)})")
    if unknown:
        return ModelAnalysis(("vmap",), f"vmap over {', '.join(unknown)}", cpu_slow + tuple(unknown))
    if batch_norm:  # per-client batch statistics exist in the batched formulation only
        return ModelAnalysis(("batched",), f"{'/'.join(layer_names)} model", cpu_slow)
    kinds = ("batched", "vmap")
    chain = linear_chain(model, len(model.input_shape))
    default_loss = type(model).loss is ClientModule.loss
    if chain is not None and default_loss and precision == "32-true":
        linears = {name for op, name in chain if op == "linear"}
        if linears == set(owners):
            kinds = ("fused-linear",) + kinds
    return ModelAnalysis(kinds, f"{'/'.join(layer_names)} model", cpu_slow)


def build_forward(kind: str, model: ClientModule) -> CohortForward:
    """Instantiate formulation ``kind`` for ``model``."""
    if kind == "fused-linear":
        return FusedLinearChain(linear_chain(model, len(model.input_shape)))
    if kind == "batched":
        return FoldedForward(model)
    return VmapForward(model)


@contextmanager
def exact_fp32(device: torch.device) -> Iterator[None]:
    """TF32 off on CUDA while the block runs (cuDNN convolutions default to it), restored after.

    TF32 rounds inputs to 10 mantissa bits (~1e-3 relative): a grouped convolution and the model's own
    one may run different algorithms, one in TF32 and one not, and then differ by far more than the
    fp32 tolerance of :func:`verify`. Elsewhere (CPU) nothing changes.
    """
    if device.type != "cuda":
        yield
        return
    backends = torch.backends
    try:
        saved = backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32
        backends.cuda.matmul.allow_tf32 = backends.cudnn.allow_tf32 = False
    except RuntimeError:  # precision set through torch's newer fp32_precision API: leave it alone
        saved = None
    try:
        yield
    finally:
        if saved is not None:
            backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32 = saved


def verify(forward: CohortForward, model: ClientModule, x: Tensor, y: Tensor) -> str | None:
    """Compare ``forward`` with the model itself on two perturbed clients; the problem, or ``None``.

    Outputs are compared in eval mode (dropout off) and exact fp32 (no autocast, no TF32); for
    ``fused-linear`` the hand-written gradients are compared with autograd's too. For a model with
    BatchNorm each client has its own running statistics, and a train-mode pass is compared as well
    (:func:`_verify_batch_norm`).
    """
    reference = {n: p.detach().float() for n, p in model.named_parameters()}
    stat_names, _ = running_statistics(model)
    buffers = dict(model.named_buffers())
    gen = torch.Generator().manual_seed(0)
    clients = [{n: p + 0.05 * c * torch.randn(p.shape, generator=gen).to(p.device) for n, p in reference.items()}
               for c in range(2)]
    stats = [{n: _perturbed(n, buffers[n].detach().float(), 0.05 * c, gen) for n in stat_names} for c in range(2)]
    stacked = {n: torch.stack([c[n] for c in clients]).requires_grad_() for n in reference}
    stacked.update({n: torch.stack([s[n] for s in stats]) for n in stat_names})
    rows = x[: min(3, len(x))]
    folded_x = torch.cat([rows, rows])
    module = getattr(forward, "module", None)
    was_training = model.training
    try:
        with torch.autocast(x.device.type, enabled=False), exact_fp32(x.device):
            model.eval()
            if module is not None:
                module.eval()
            forward.bind(stacked)
            got = forward(folded_x).detach().view(2, len(rows), -1)
            for c, params in enumerate(clients):
                expected = functional_call(model, {**params, **stats[c]}, (rows,)).detach().reshape(len(rows), -1)
                if not torch.allclose(got[c], expected, rtol=1e-4, atol=1e-5):
                    return f"{forward.kind} outputs differ from the model's own forward"
            if isinstance(forward, FusedLinearChain):
                return _verify_gradients(forward, model, clients, rows, y[: len(rows)])
            if stat_names:
                return _verify_batch_norm(forward, model, stacked, clients, stats, rows)
    except Exception as err:  # noqa: BLE001 - an unsupported op surfaces here; report, don't crash
        return f"{forward.kind} formulation failed: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
    finally:
        model.train(was_training)
        forward.sample_mask = None
        if module is not None:
            module.train()
    return None


def _perturbed(name: str, value: Tensor, scale: float, gen: torch.Generator) -> Tensor:
    noise = scale * torch.randn(value.shape, generator=gen).to(value.device)
    # Variances stay positive: scaled, where means are shifted.
    return value * noise.exp() if name.endswith("running_var") else value + noise


def _verify_batch_norm(forward: CohortForward, model: ClientModule, stacked: dict[str, Tensor],
                       clients: list[dict[str, Tensor]], stats: list[dict[str, Tensor]], rows: Tensor) -> str | None:
    """Train-mode BatchNorm (every other layer in eval mode) with client 1's last row a padding row.

    Each client's outputs on its real rows and its updated running statistics must be the module's on
    those rows alone (``functional_call`` updates the copies of the buffers it is given).
    """
    real = [len(rows), len(rows) - 1 if len(rows) > 2 else len(rows)]  # nn.BatchNorm1d needs 2 rows to train
    for layer in (*forward.module.modules(), *model.modules()):
        if isinstance(layer, (*BATCH_NORMS, FoldedBatchNorm)):
            layer.train()
    forward.sample_mask = torch.arange(2 * len(rows), device=rows.device) < len(rows) + real[1]
    forward.start_pass(model.state_dict(), None)
    forward.bind(stacked)
    got = forward(torch.cat([rows, rows])).detach().view(2, len(rows), -1)
    for c, params in enumerate(clients):
        state = {n: b.clone() for n, b in model.named_buffers()}  # copies: the model's own are left alone
        state.update({**params, **{n: v.clone() for n, v in stats[c].items()}})
        expected = functional_call(model, state, (rows[: real[c]],)).detach().reshape(real[c], -1)
        if not torch.allclose(got[c, : real[c]], expected, rtol=1e-4, atol=1e-5):
            return f"{forward.kind} outputs in train mode (BatchNorm) differ from the model's own forward"
        for name in stats[c]:
            if not torch.allclose(stacked[name][c], state[name], rtol=1e-4, atol=1e-6):
                return f"{forward.kind} running statistics ({name}) differ from the model's own BatchNorm"
    return None


def _verify_gradients(forward: FusedLinearChain, model: ClientModule, clients: list[dict[str, Tensor]],
                      rows: Tensor, labels: Tensor) -> str | None:
    weight = torch.full((2 * len(rows), 1), 1.0 / len(rows), device=rows.device)
    offset = -weight * F.one_hot(torch.cat([labels, labels]), model.num_classes)
    with torch.no_grad():
        grads, _ = forward.gradients(torch.cat([rows, rows]), weight, offset)
    for c, params in enumerate(clients):
        leaves = {n: p.clone().requires_grad_() for n, p in params.items()}
        loss = F.cross_entropy(functional_call(model, leaves, (rows,)).float(), labels)
        expected = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
        for (name, _), want in zip(leaves.items(), expected):
            if want is not None and not torch.allclose(grads[name][c], want, rtol=1e-4, atol=1e-6):
                return f"fused-linear gradient of {name} differs from autograd's"
    return None
