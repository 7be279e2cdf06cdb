"""IGFL (individual and group behaviours, IJCAI 2021): client correction and attention aggregation.

docs/algorithms.md, IGFL. Stored state: ``dW_ps = w^t - w^{t-1}`` (zeros at ``t = 0``) and, per client,
``dW_k_prev``, the delta ``y_k - w`` of its last participation (zeros if none).

IGFL-C (Algorithm 2, :func:`igfl_client_correction`): at each local step, with ``D_I`` the step the
client optimizer just took (``w_after - w_before``; ``-eta_l g`` for plain SGD), ``T = tau_k`` the
client's local step count this round and ``K`` the cohort size, the step becomes ``D_I + D_G`` with
``D_G = (1/K) (D_I - dW_k_prev / T) + dW_ps / T``. After training ``dW_k_prev <- y_k - w^t``.

IGFL-S (Algorithm 3, :func:`igfl_attention_aggregate`): values and keys are the cohort deltas
``D_j = y_j - w^t``; scores ``s = psi(q, D_j) / temperature``, softmax over ``j``:

- ``self``: ``q_i = D_i``; ``w^{t+1} = w^t + (1/K) sum_i sum_j alpha_ij D_j`` (attention ``(K, K)``);
- ``global``: ``q = mean_j D_j``; ``w^{t+1} = w^t + sum_j alpha_j D_j`` (attention ``(K,)``);
- ``time``: ``s_j = psi(dW_j_prev, D_j)``, ``alpha = softmax_j(s)``;
  ``w^{t+1} = w^t + sum_j alpha_j D_j`` (attention ``(K,)``; ``time_reading="cohort"``, default);
  with ``time_reading="matrix"`` (Algorithm 3 read literally, ``q_i = dW_i_prev``):
  ``A_ij = softmax_j(psi(dW_i_prev, D_j))`` per row ``i``, ``w^{t+1} = w^t + (1/K) sum_i sum_j A_ij D_j``
  (attention ``(K, K)``).

``psi`` is the dot product of the flattened deltas (paper, default), ``scaled_dot`` (dot /
``sqrt(d)``) or ``cosine``. ``temperature`` defaults to 1.

Readings documented here:

- The softmax subtracts the row maximum (``torch.softmax``), so dot products of large deltas (1e6
  and more) give a sharp but finite distribution, never NaN.
- ``cosine`` with a zero vector is 0, not NaN (a client seen for the first time has
  ``dW_k_prev = 0``; in ``time`` mode with ``dot`` its score is 0 as well).
- For ``time``, our reading is the default (docs/algorithms.md, IGFL-S): each client's previous delta is scored
  against its own current delta only, then the softmax runs over the cohort (the paper's eq. in section
  4.3 pairs ``dW_j_prev`` with ``D_tau`` in its denominator, mixing indices). ``time_reading="matrix"``
  is Algorithm 3, line 3 (option III) taken literally with ``q_i = dW_i_prev``: every client's previous
  delta queries every current delta, like ``self`` with other queries. A first-timer's row
  (``dW_i_prev = 0``) is uniform.
- ``T`` in IGFL-C is the number of local steps the client takes this round (known in advance from
  epochs x batches); it must be >= 1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fl.functional.weights import broadcast_per_client, check_choice

__all__ = [
    "ATTENTION_MODES",
    "SIMILARITIES",
    "TIME_READINGS",
    "attention_scores",
    "igfl_attention_aggregate",
    "igfl_client_correction",
    "paired_similarity",
]

ATTENTION_MODES = ("self", "global", "time")
SIMILARITIES = ("dot", "scaled_dot", "cosine")
TIME_READINGS = ("cohort", "matrix")


def igfl_client_correction(
    step_delta: Tensor,
    prev_delta: Tensor,
    server_delta: Tensor,
    num_steps: Tensor | int,
    cohort_size: int,
) -> Tensor:
    """IGFL-C's group term ``D_G = (1/K) (D_I - dW_k_prev / T) + dW_ps / T`` (docs/algorithms.md, IGFL-C).

    Works for one client (all tensors shaped like the parameter) or a whole cohort with a leading
    dimension ``C`` (``step_delta`` and ``prev_delta`` ``(C, ...)``, ``server_delta`` ``(...)``
    broadcast, ``num_steps`` ``(C,)`` reshaped to broadcast).

    Args:
        step_delta: ``D_I``, the step the client optimizer just took (``w_after - w_before``).
        prev_delta: ``dW_k_prev``, the client's delta at its last participation (zeros if none).
        server_delta: ``dW_ps = w^t - w^{t-1}`` (zeros at ``t = 0``).
        num_steps: ``T = tau_k`` (>= 1): an int, or a ``(C,)`` tensor.
        cohort_size: ``K`` (>= 1).

    Returns:
        ``D_G``, shaped like ``step_delta``; the client applies ``D_I + D_G``.

    Raises:
        ValueError: If ``cohort_size < 1`` or any ``num_steps < 1``.

    Example:
        >>> igfl_client_correction(torch.tensor([-0.4]), torch.tensor([2.0]), torch.tensor([1.0]), 4, 2)
        tensor([-0.2000])
    """
    if cohort_size < 1:
        raise ValueError(f"cohort_size must be >= 1; got {cohort_size!r}")
    # Checked before moving to the parameters' device: this runs every local step, and a CPU (or
    # Python int) step count then costs no device synchronisation.
    if bool((torch.as_tensor(num_steps) < 1).any()):
        raise ValueError(f"num_steps must be >= 1; got {num_steps!r}")
    steps = broadcast_per_client(num_steps, step_delta)
    return (step_delta - prev_delta / steps) / cohort_size + server_delta / steps


def _check_temperature(temperature: float) -> None:
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0; got {temperature!r}")


def _unit_rows(x: Tensor) -> Tensor:
    """Rows scaled to unit L2 norm; zero rows stay zero (so their cosine is 0, not NaN)."""
    norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return torch.where(norms > 0, x / torch.where(norms > 0, norms, torch.ones_like(norms)), torch.zeros_like(x))


def attention_scores(
    queries: Tensor,
    keys: Tensor,
    similarity: str = "dot",
    temperature: float = 1.0,
) -> Tensor:
    """Pre-softmax attention scores ``psi(q_i, k_j) / temperature`` for all pairs.

    Args:
        queries: ``(Q, d)`` flattened queries.
        keys: ``(K, d)`` flattened keys.
        similarity: ``"dot"`` (default), ``"scaled_dot"`` (dot / sqrt(d)) or ``"cosine"``.
        temperature: Divides the similarity (> 0, default 1).

    Returns:
        ``(Q, K)`` scores; apply ``torch.softmax(scores, dim=-1)`` for the attention.

    Raises:
        ConfigError: If ``similarity`` is not one of ``dot``, ``scaled_dot``, ``cosine``.
        ValueError: If ``temperature <= 0``.

    Example:
        >>> attention_scores(torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 0.0], [0.0, 0.0]]), "cosine")
        tensor([[1., 0.]])
    """
    check_choice("similarity", similarity, SIMILARITIES)
    _check_temperature(temperature)
    if similarity == "cosine":
        queries, keys = _unit_rows(queries), _unit_rows(keys)
    scores = queries @ keys.transpose(-1, -2)
    if similarity == "scaled_dot":
        scores = scores / math.sqrt(queries.shape[-1])
    return scores / temperature


def paired_similarity(
    a: Tensor,
    b: Tensor,
    similarity: str = "dot",
    temperature: float = 1.0,
) -> Tensor:
    """Row-by-row scores ``psi(a_j, b_j) / temperature`` (time attention pairs each client with itself).

    Args:
        a: ``(K, d)``.
        b: ``(K, d)``.
        similarity: As for :func:`attention_scores`.
        temperature: As for :func:`attention_scores`.

    Returns:
        ``(K,)`` scores.

    Raises:
        ConfigError: If ``similarity`` is not one of ``dot``, ``scaled_dot``, ``cosine``.
        ValueError: If ``temperature <= 0``.

    Example:
        >>> paired_similarity(torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([[3.0, 4.0], [1.0, 1.0]]))
        tensor([11.,  0.])
    """
    check_choice("similarity", similarity, SIMILARITIES)
    _check_temperature(temperature)
    if similarity == "cosine":
        a, b = _unit_rows(a), _unit_rows(b)
    scores = (a * b).sum(dim=-1)
    if similarity == "scaled_dot":
        scores = scores / math.sqrt(a.shape[-1])
    return scores / temperature


def igfl_attention_aggregate(
    global_w: Tensor,
    client_w: Tensor,
    prev_deltas: Tensor | None = None,
    mode: str = "self",
    similarity: str = "dot",
    temperature: float = 1.0,
    time_reading: str = "cohort",
) -> tuple[Tensor, Tensor]:
    """IGFL-S attention-based aggregation (docs/algorithms.md, IGFL-S, Algorithm 3).

    Args:
        global_w: ``w^t``, ``(d,)``.
        client_w: ``(K, d)`` cohort weights ``y_j``.
        prev_deltas: ``(K, d)`` ``dW_j_prev`` of each cohort member (zeros for first-timers);
            required for ``mode="time"``, ignored otherwise.
        mode: ``"self"`` (default), ``"global"`` or ``"time"``.
        similarity: ``"dot"`` (default), ``"scaled_dot"`` or ``"cosine"``.
        temperature: Score divisor (> 0, default 1).
        time_reading: For ``mode="time"``: ``"cohort"`` (default, ``s_j = psi(dW_j_prev, D_j)``,
            one softmax over the cohort) or ``"matrix"`` (Algorithm 3 literally: ``q_i = dW_i_prev``
            against every ``D_j``, a ``(K, K)`` matrix averaged over its rows). Ignored otherwise.

    Returns:
        ``(new_w, attention)``: ``attention`` is ``(K, K)`` (rows sum to 1) for ``self`` and for
        ``time`` with ``time_reading="matrix"``, and ``(K,)`` otherwise; log it as the round's image.

    Raises:
        ConfigError: If ``mode``, ``similarity`` or ``time_reading`` is not an allowed value.
        ValueError: If ``mode="time"`` without ``prev_deltas`` of shape ``(K, d)``, or
            ``temperature <= 0``.

    Example:
        >>> new_w, att = igfl_attention_aggregate(torch.zeros(2), torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
        >>> new_w, att
        (tensor([1., 0.]), tensor([[0.5000, 0.5000],
                [0.5000, 0.5000]]))
    """
    check_choice("mode", mode, ATTENTION_MODES)
    check_choice("similarity", similarity, SIMILARITIES)
    check_choice("time_reading", time_reading, TIME_READINGS)
    _check_temperature(temperature)
    deltas = client_w - global_w
    if mode == "self":
        return _row_mean_attention(global_w, deltas, deltas, similarity, temperature)
    if mode == "global":
        query = deltas.mean(dim=0, keepdim=True)
        scores = attention_scores(query, deltas, similarity, temperature)[0]
    else:
        if prev_deltas is None or prev_deltas.shape != deltas.shape:
            got = None if prev_deltas is None else tuple(prev_deltas.shape)
            raise ValueError(f"mode 'time' needs prev_deltas of shape {tuple(deltas.shape)}; got {got}")
        prev = prev_deltas.to(device=deltas.device, dtype=deltas.dtype)
        if time_reading == "matrix":
            return _row_mean_attention(global_w, prev, deltas, similarity, temperature)
        scores = paired_similarity(prev, deltas, similarity, temperature)
    attention = torch.softmax(scores, dim=-1)
    return global_w + torch.tensordot(attention, deltas, dims=1), attention


def _row_mean_attention(global_w: Tensor, queries: Tensor, deltas: Tensor, similarity: str,
                        temperature: float) -> tuple[Tensor, Tensor]:
    """``A = softmax_j(psi(q_i, D_j) / temperature)`` per row; ``w^t + (1/K) sum_i sum_j A_ij D_j``."""
    attention = torch.softmax(attention_scores(queries, deltas, similarity, temperature), dim=-1)
    # (1/K) sum_i sum_j A_ij D_j = (column means of A) . D
    return global_w + torch.tensordot(attention.mean(dim=0), deltas, dims=1), attention
