"""Hand-written forward and backward for cohorts of Linear/activation chains with cross-entropy.

On a CPU a logistic-regression or MLP step over a whole cohort is a handful of tiny kernels, so its
cost is per-op overhead, and autograd's graph bookkeeping is the largest share of it (profile in
docs/performance.md). For models whose ``forward`` is a chain of ``flatten`` -> ``Linear`` ->
activation -> ``Linear`` ... trained with the default mean cross-entropy, this module computes the
per-client gradients directly::

    dL/dz = w * (softmax(z) - onehot(y))        (w: 1/|batch| per real sample, 0 for padding)
    dL/dW_c = dz_c^T h_c,  dL/db_c = sum_b dz_c,  dL/dh_c = dz_c W_c       (one bmm each)

The chain is read from a ``torch.fx`` trace of the model, so any model written this way (not only
``LogisticRegression``/``MLP``) qualifies; anything else uses the autograd formulations. The engine's
set-up check compares these gradients with autograd's before using them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import override

from lightning_fl.engines.batched import CohortForward

#: Steps of at most this many rows (clients x batch) take ``torch.softmax`` in :meth:`FusedLinearChain.sgd_steps`:
#: over 10 classes on the 2-core CPU it takes 4.4 us at 10 rows against 9.3 us for the ops by hand, 8.0 against
#: 10.0 at 30, and loses from about 40 rows on (20.6 against 12.1 at 100).
TORCH_SOFTMAX_ROWS = 32

_ACTIVATION_MODULES = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid", nn.Identity: "identity"}
_ACTIVATION_FUNCTIONS = {torch.relu: "relu", F.relu: "relu", torch.tanh: "tanh", torch.sigmoid: "sigmoid"}


def linear_chain(model: nn.Module, input_dims: int) -> list[tuple[str, str]] | None:
    """The model as ``[(op, linear_name), ...]`` if it is a flatten/Linear/activation chain, else ``None``.

    Args:
        model: The client model.
        input_dims: Dimensions of one input sample (1 for vectors, 3 for images).
    """
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # noqa: BLE001 - any untraceable model simply takes the autograd path
        return None
    ops: list[tuple[str, str]] = []
    previous, dims = None, input_dims + 1
    for node in graph.nodes:
        if node.op == "placeholder":
            if previous is not None:
                return None
            previous = node
            continue
        if node.op == "output":
            return ops if node.args[0] is previous and any(op == "linear" for op, _ in ops) else None
        if not node.args or node.args[0] is not previous or len(previous.users) != 1:
            return None
        op = _classify(model, node, dims)
        if op is None:
            return None
        if op[0] == "flatten":
            dims = 2
        elif op[0] == "linear" and dims != 2:
            return None
        ops.append(op)
        previous = node
    return None


def _classify(model: nn.Module, node: torch.fx.Node, dims: int) -> tuple[str, str] | None:
    args, kwargs = node.args[1:], node.kwargs
    if node.op == "call_module":
        module = model.get_submodule(node.target)
        if type(module) is nn.Linear:
            return ("linear", node.target)
        if type(module) in _ACTIVATION_MODULES and not kwargs and not args:
            return (_ACTIVATION_MODULES[type(module)], "")
        if type(module) is nn.Flatten and module.start_dim == 1 and module.end_dim in (-1, dims - 1):
            return ("flatten", "")
        return None
    flatten_args = (args in ((1,), (1, -1)) and not kwargs) or (not args and kwargs == {"start_dim": 1})
    if node.op == "call_method" and node.target == "flatten" and flatten_args:
        return ("flatten", "")
    if node.op == "call_function" and node.target is torch.flatten and flatten_args:
        return ("flatten", "")
    if node.op == "call_function" and node.target in _ACTIVATION_FUNCTIONS and not args and not kwargs:
        return (_ACTIVATION_FUNCTIONS[node.target], "")
    if node.op == "call_method" and node.target in ("relu", "tanh", "sigmoid") and not args and not kwargs:
        return (node.target, "")
    return None


class FusedLinearChain(CohortForward):
    """Cohort forward and hand-written backward of a Linear/activation chain (module docstring).

    Args:
        ops: The chain from :func:`linear_chain`.
    """

    kind = "fused-linear"

    def __init__(self, ops: list[tuple[str, str]]) -> None:
        super().__init__()
        self.ops = ops
        self._first_linear = next(i for i, (op, _) in enumerate(ops) if op == "linear")
        self._layers: dict[str, tuple[Tensor, Tensor, Tensor | None]] = {}
        # One Linear (after an optional flatten): logistic regression, whose steps are so small that the
        # generic chain walk costs as much Python time as its kernels; it gets a straight-line path.
        layers = [name for op, name in ops if op not in ("flatten", "identity")]
        self._single = (ops[-1][1] if len(layers) == 1 and ops[-1][0] == "linear" else None)

    @override
    def bind(self, params: dict[str, Tensor]) -> None:
        super().bind(params)
        # Views made once per bind (they follow the optimizer's in-place updates): two ops less per
        # Linear and step.
        self._layers = {}
        for op, name in self.ops:
            if op == "linear":
                weight, bias = params[name + ".weight"], params.get(name + ".bias")
                self._layers[name] = (weight, weight.mT, None if bias is None else bias.unsqueeze(1))

    @override
    def __call__(self, x: Tensor) -> Tensor:
        return self._forward(x, None)

    def _forward(self, x: Tensor, saved: list[Tensor] | None, out: Tensor | None = None) -> Tensor:
        h = x
        last = len(self.ops) - 1
        for position, (op, name) in enumerate(self.ops):
            if op == "flatten":
                h = h.flatten(1)
            elif op == "linear":
                weight, weight_t, bias = self._layers[name]
                hs = h.view(weight.shape[0], -1, h.shape[-1])
                if saved is not None:
                    saved.append(hs)
                target = None
                if out is not None and position == last:
                    target = out.view(weight.shape[0], -1, weight.shape[1])
                z = (torch.bmm(hs, weight_t, out=target) if bias is None else
                     torch.baddbmm(bias, hs, weight_t, out=target))
                h = z.view(-1, z.shape[-1])
            elif op != "identity":
                h = torch.relu(h) if op == "relu" else torch.tanh(h) if op == "tanh" else torch.sigmoid(h)
                if saved is not None:
                    saved.append(h)
        return h

    def gradients(self, x: Tensor, weight: Tensor, offset: Tensor, out: Tensor | None = None
                  ) -> tuple[dict[str, Tensor], Tensor]:
        """Per-client gradients of ``sum_c sum_b weight[c, b] * CE(z[c, b], y[c, b])``.

        Call under ``torch.no_grad()`` (the engine runs its whole step loop so; a per-call decorator
        costs as much as a small op).

        Args:
            x: ``(C * B, ...)`` folded inputs.
            weight: ``(C * B, 1)`` per-sample loss weights.
            offset: ``(C * B, classes)``: ``-weight * onehot(y)`` (label-only, staged per round).
            out: Optional ``(C * B, classes)`` tensor to write the logits into (saves a copy when the
                engine keeps them for statistics).

        Returns:
            ``(grads, logits)``: gradients by parameter name and the ``(C * B, classes)`` logits.
        """
        if self._single is not None:
            return self._single_linear_gradients(x, weight, offset, out)
        saved: list[Tensor] = []
        logits = self._forward(x, saved, out)
        # softmax by hand (max-shifted): on CPU torch.softmax over 10 classes costs more than these ops.
        shifted = (logits - logits.amax(1, keepdim=True)).exp_()
        grad = torch.addcmul(offset, shifted, weight / shifted.sum(1, keepdim=True))
        grads: dict[str, Tensor] = {}
        for position in range(len(self.ops) - 1, self._first_linear - 1, -1):
            op, name = self.ops[position]
            if op == "linear":
                weight_c, _, bias = self._layers[name]
                h_in = saved.pop()
                g3 = grad.view(weight_c.shape[0], -1, grad.shape[-1])
                _accumulate(grads, name + ".weight", torch.bmm(g3.mT, h_in))
                if bias is not None:
                    _accumulate(grads, name + ".bias", g3.sum(1))
                if position > self._first_linear:
                    grad = torch.bmm(g3, weight_c).view(-1, weight_c.shape[-1])
            elif op in ("relu", "tanh", "sigmoid"):
                out = saved.pop()
                if op == "relu":
                    grad = grad * (out > 0)
                elif op == "tanh":
                    grad = grad * (1 - out * out)
                else:
                    grad = grad * out * (1 - out)
        return grads, logits

    def _single_linear_gradients(self, x: Tensor, weight: Tensor, offset: Tensor, out: Tensor | None
                                 ) -> tuple[dict[str, Tensor], Tensor]:
        """:meth:`gradients` of a single Linear: the same kernels in the same order, without the chain walk."""
        name = self._single
        weight_c, weight_t, bias = self._layers[name]
        clients, classes, features = weight_c.shape
        hs = x.reshape(clients, -1, features)  # flatten(1) and the per-client view in one (a view of staged rows)
        target = None if out is None else out.view(clients, -1, classes)
        z = torch.bmm(hs, weight_t, out=target) if bias is None else torch.baddbmm(bias, hs, weight_t, out=target)
        logits = z.view(-1, classes)
        shifted = (logits - logits.amax(1, keepdim=True)).exp_()
        g3 = torch.addcmul(offset, shifted, weight / shifted.sum(1, keepdim=True)).view(clients, -1, classes)
        grads = {name + ".weight": torch.bmm(g3.mT, hs)}
        if bias is not None:
            grads[name + ".bias"] = g3.sum(1)
        return grads, logits

    def sgd_steps(self, steps: range, tables: tuple[tuple[Tensor, ...], tuple[Tensor, ...], tuple[Tensor, ...]],
                  named: dict[str, Tensor], lr: float, keep: Sequence[bool],
                  logits_buffer: Callable[[int, Tensor], Tensor]) -> None:
        """Local steps ``steps`` of a single Linear under plain SGD, in one loop (the engine's fast path).

        The gradients of :meth:`gradients` on the same memory viewed per client, with two cuts a step
        taken one at a time cannot make: the weight's update is one ``baddbmm_`` (``W - lr g^T x``, no
        gradient tensor), and a step of at most :data:`TORCH_SOFTMAX_ROWS` rows takes ``torch.softmax``,
        faster there than the five ops by hand. The result equals the step-by-step path's to float
        rounding; the loop also drops the per-step bookkeeping, which costs about as much as a J1 step's
        kernels (docs/performance.md, "The one-loop path").

        Args:
            steps: The step indices, all with the same clients still training.
            tables: Each step's ``(C, B, features)`` inputs, ``(C, B, 1)`` loss weights and ``(C, B, classes)``
                offsets (``StagedBatches.by_client``).
            named: The trained parameters (the bound leaves) by name.
            lr: The SGD learning rate.
            keep: Per step, whether its logits are kept.
            logits_buffer: ``(step, like) ->`` where a kept step's ``like``-shaped ``(rows, classes)`` logits go.
        """
        name = self._single
        _, weight_t, bias = self._layers[name]
        weight_leaf, bias_leaf = named[name + ".weight"], named.get(name + ".bias")
        train_weight = weight_leaf.requires_grad
        train_bias = bias is not None and bias_leaf.requires_grad
        xs, weights, offsets = tables
        first = offsets[steps[0]]
        by_torch = first.shape[0] * first.shape[1] <= TORCH_SOFTMAX_ROWS  # clients x batch
        # The step's temporaries written into the same three tensors every step (no allocation per step).
        logits, g3, bias_grad = (torch.empty_like(first, dtype=weight_leaf.dtype), torch.empty_like(first),
                                 first.new_empty(first.shape[0], first.shape[2]))
        for step in steps:
            hs, weight, offset = xs[step], weights[step], offsets[step]
            target = logits
            if keep[step]:
                target = logits_buffer(step, offset.view(-1, offset.shape[-1]).to(weight_leaf.dtype)).view(offset.shape)
            z = torch.bmm(hs, weight_t, out=target) if bias is None else torch.baddbmm(bias, hs, weight_t, out=target)
            if by_torch:
                torch.addcmul(offset, torch.softmax(z, 2), weight, out=g3)
            else:
                shifted = (z - z.amax(2, keepdim=True)).exp_()
                torch.addcmul(offset, shifted, weight / shifted.sum(2, keepdim=True), out=g3)
            if train_weight:
                weight_leaf.baddbmm_(g3.mT, hs, alpha=-lr)
            if train_bias:
                bias_leaf.add_(torch.sum(g3, 1, out=bias_grad), alpha=-lr)

    @property
    def single_linear(self) -> bool:
        """Whether the model is one Linear (after an optional flatten): :meth:`sgd_steps` applies."""
        return self._single is not None


def _accumulate(grads: dict[str, Tensor], name: str, value: Tensor) -> None:
    # A Linear used twice (weight tying) gets the sum of both uses' gradients, as autograd gives.
    grads[name] = value if name not in grads else grads[name] + value
