"""Client optimizers on cohort-stacked parameters: which ones are exact, and their per-client state.

The vectorized engine builds the configured client optimizer once over parameters with a leading
cohort dimension ``(C, *shape)``. That is exact (docs/algorithms.md, Local training: every client runs *the* client
optimizer) only for optimizers whose update of an element depends on that element's parameter,
gradient and state alone, plus scalars that are the same for every client (the learning rate, and the
step count, which all stepping clients share). Optimizers that look at whole tensors (norms, matrix
factorisations, line searches) would mix clients and are refused.

The module also converts optimizer state between the stacked layout and the per-client
``state_dict`` the sequential engine stores in :class:`~lightning_fl.state.client_state.ClientStateStore`
(``keep_client_optimizer_state``), so both engines read and write the same format.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

# Each update is element-wise with per-tensor scalar state (step counts, NAdam's mu product, ASGD's
# eta/mu) that depends only on the number of steps taken; checked against the sequential engine in
# tests/test_vectorized_engine.py.
ELEMENT_WISE_OPTIMIZERS: tuple[type[Optimizer], ...] = (
    torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax, torch.optim.NAdam, torch.optim.RAdam,
    torch.optim.RMSprop, torch.optim.Adagrad, torch.optim.Adadelta, torch.optim.Rprop, torch.optim.ASGD,
)

# Scalar state entries; only needed to tell them from the state of a 0-dim parameter in a saved
# single-client state (in the stacked layout every parameter has a leading cohort dimension).
_SCALAR_KEYS = frozenset({"step", "mu_product", "eta", "mu"})


def optimizer_problem(factory: Callable[[Iterable[Tensor]], Optimizer]) -> str | None:
    """Why ``factory``'s optimizer cannot run on stacked parameters, or ``None`` if it can.

    The exact class is checked: a subclass may override ``step`` with a non-element-wise update.
    """
    try:
        probe = factory([torch.nn.Parameter(torch.zeros(2))])
    except Exception as err:  # noqa: BLE001 - a factory that cannot build is reported, not raised here
        return f"the client optimizer cannot be built ({err})"
    if type(probe) not in ELEMENT_WISE_OPTIMIZERS:
        allowed = ", ".join(cls.__name__ for cls in ELEMENT_WISE_OPTIMIZERS)
        return f"client optimizer {type(probe).__name__} is not element-wise (supported: {allowed})"
    if len(probe.param_groups) != 1:
        return "the client optimizer must put all parameters in one parameter group"
    return None


def step_function(optimizer: Optimizer) -> Callable[[], Any]:
    """``optimizer.step`` without the profiler range torch wraps around every call.

    On a CPU that wrapper (``record_function`` plus hook dispatch) costs about as much as an SGD
    update of a small model (docs/performance.md), and the engine calls ``step`` thousands of times a
    round. The wrapped function (``__wrapped__``, still under ``no_grad``) is used only when torch
    has installed its wrapper and no step hook is registered, globally or on this optimizer, so
    skipping the wrapper changes nothing observable but the profiler trace.
    """
    inner = getattr(type(optimizer).step, "__wrapped__", None)
    if not _unhooked(optimizer):
        return optimizer.step
    # The leaves an engine steps stay on their device, so where they are is checked once, here.
    if type(optimizer) is torch.optim.SGD and all(p.device.type == "cpu" for g in optimizer.param_groups
                                                  for p in g["params"]):
        return lambda: _plain_sgd_step(optimizer) or inner(optimizer)
    return lambda: inner(optimizer)


def _unhooked(optimizer: Optimizer) -> bool:
    """Whether torch wrapped ``optimizer.step`` and no step hook is registered, globally or on it."""
    from torch.optim import optimizer as optimizer_module

    step = type(optimizer).step
    hooks = (getattr(optimizer_module, "_global_optimizer_pre_hooks", None),
             getattr(optimizer_module, "_global_optimizer_post_hooks", None),
             getattr(optimizer, "_optimizer_step_pre_hooks", None),
             getattr(optimizer, "_optimizer_step_post_hooks", None))
    return (getattr(step, "__wrapped__", None) is not None and getattr(step, "hooked", False)
            and not any(h is None or len(h) for h in hooks))


def plain_sgd_rate(optimizer: Optimizer) -> float | None:
    """The learning rate if :func:`step_function` steps ``optimizer`` as ``param.add_(grad, alpha=-lr)``, else ``None``.

    That is: torch's ``SGD`` in one group without momentum, weight decay, ``maximize``, ``foreach``,
    ``fused`` or ``differentiable``, a float rate, CPU parameters and no step hook.
    """
    groups = optimizer.param_groups
    if type(optimizer) is not torch.optim.SGD or len(groups) != 1 or not _plain_group(groups[0]):
        return None
    if not _unhooked(optimizer) or any(p.device.type != "cpu" for p in groups[0]["params"]):
        return None
    return groups[0]["lr"]


def _plain_group(group: dict[str, Any]) -> bool:
    return not (group["momentum"] or group["weight_decay"] or group["maximize"] or group["foreach"] or group["fused"]
                or group["differentiable"] or not isinstance(group["lr"], float))


def _plain_sgd_step(optimizer: torch.optim.SGD) -> bool:
    """Plain SGD (no momentum, weight decay or maximize; float rate) as ``param.add_(grad, alpha=-lr)``.

    The op torch's single-tensor SGD runs for these settings, without its per-call bookkeeping (about
    a third of a logistic-regression cohort step on a CPU, docs/performance.md); returns ``False``,
    having done nothing, for any other setting.
    """
    groups = optimizer.param_groups
    if not all(_plain_group(group) for group in groups):
        return False
    if torch.is_grad_enabled():  # the autograd formulations step outside no_grad
        with torch.no_grad():
            return _plain_sgd_step(optimizer)
    for group in groups:
        lr = group["lr"]
        for param in group["params"]:
            if param.grad is not None:
                param.add_(param.grad, alpha=-lr)
    return True


def load_state(optimizer: Optimizer, state: dict[str, Any], lr: float) -> None:
    """Load a kept client optimizer ``state``, at this round's learning rate ``lr``.

    A saved ``param_groups`` holds the rate of the round it was saved in; with a per-round schedule
    (``model.lr_scheduler``) the client trains at the current one.
    """
    optimizer.load_state_dict(state)
    for group in optimizer.param_groups:
        group["lr"] = lr


def _is_row_state(value: Any, leaf: Tensor) -> bool:
    """Whether a stacked state entry holds one row per client (vs. a shared scalar)."""
    return isinstance(value, Tensor) and value.dim() > 0 and value.shape == leaf.shape


def narrow_leaves(optimizer: Optimizer, leaves: Sequence[Tensor], rows: Sequence[Tensor]) -> list[Tensor]:
    """Swap the optimizer's parameters for leaves on ``rows`` (each the first rows of a parameter).

    Called when the last clients of a chunk have finished: the new leaves and the per-client state
    tensors become views of the first ``len(rows[i])`` rows, so finished clients' rows (parameters
    and state) stay untouched in memory. New leaf tensors are needed (not a ``.data`` swap) because
    autograd checks gradient shapes against the shape a leaf was created with.

    Returns:
        The new leaves, in the order of ``leaves``.
    """
    new_leaves = [row.detach().requires_grad_(old.requires_grad) for old, row in zip(leaves, rows)]
    for old, new in zip(leaves, new_leaves):
        state = optimizer.state.pop(old, None)
        if state:
            optimizer.state[new] = {
                key: value[: len(new)] if isinstance(value, Tensor) and value.shape == old.shape else value
                for key, value in state.items()
            }
    optimizer.param_groups[0]["params"] = new_leaves
    return new_leaves


def client_state(optimizer: Optimizer, leaves: Sequence[Tensor], row: int) -> dict[str, Any]:
    """The ``state_dict`` a single-client optimizer would have for row ``row`` (cloned)."""
    state: dict[int, dict[str, Any]] = {}
    for index, leaf in enumerate(leaves):
        entries = optimizer.state.get(leaf)
        if not entries:
            continue
        state[index] = {
            key: (value[row].clone() if _is_row_state(value, leaf) else
                  value.clone() if isinstance(value, Tensor) else copy.deepcopy(value))
            for key, value in entries.items()
        }
    return {"state": state, "param_groups": optimizer.state_dict()["param_groups"]}


def state_signature(saved: dict[str, Any] | None) -> Hashable:
    """What must be equal for clients to share one stacked optimizer: which entries exist and the
    values of the shared scalars (e.g. Adam's step count). ``None`` for a fresh optimizer."""
    if saved is None:
        return None
    parts = []
    for index, entries in sorted(saved["state"].items()):
        items = []
        for key, value in sorted(entries.items()):
            scalar = not isinstance(value, Tensor) or value.dim() == 0 and key in _SCALAR_KEYS
            items.append((key, float(value) if scalar and isinstance(value, (Tensor, int, float)) else "row"))
        parts.append((index, tuple(items)))
    return tuple(parts)


def stack_states(saved: Sequence[dict[str, Any]], param_shapes: Sequence[torch.Size]) -> dict[str, Any]:
    """One stacked ``state_dict`` from per-client ones with the same :func:`state_signature`."""
    first = saved[0]
    state: dict[int, dict[str, Any]] = {}
    for index, entries in first["state"].items():
        stacked: dict[str, Any] = {}
        for key, value in entries.items():
            per_row = isinstance(value, Tensor) and value.shape == param_shapes[index] and not (
                value.dim() == 0 and key in _SCALAR_KEYS)
            stacked[key] = torch.stack([s["state"][index][key] for s in saved]) if per_row else value
        state[index] = stacked
    return {"state": state, "param_groups": copy.deepcopy(first["param_groups"])}
