"""Tempo (ICASSP 2022): adaptive local epochs per institution in three-layer FL (docs/algorithms.md, Tempo).

After each global iteration the server measures ``omega_m = ||w^(m) - w^(c)||`` (flattened L2 over
the global model's floating-point entries, :func:`institution_distances`), takes
``l_m = ln(omega_m)`` and sets the next local epoch count of institution ``m``'s clients to
``tau_c^(m) = max(1, ceil((c/2) / (l_min - l_max) * (3 l_m + l_min - 4 l_max)))``
(paper eq. 9): ``2c`` epochs for the closest institution down to ``c/2`` (rounded up) for the
farthest, with ``c`` the initial epoch count. If ``l_max == l_min``, any ``omega == 0`` or
``M == 1``, every institution gets ``c``.

Readings documented here:

- The formula is evaluated as ``(c/2) (1 + 3 (l_max - l_m) / (l_max - l_min))``, which is the same
  expression rearranged: it makes the endpoints exact (``2c`` and ``c/2``) instead of, say,
  ``12.000000000000002`` that ``ceil`` would turn into 13. Arithmetic is in float64, and a value
  within a relative 1e-9 above an integer is treated as that integer for the same reason.
- The ``max(1, ...)`` floor is kept although the formula is >= ``c/2 > 0`` whenever it applies.
- Distances must be finite and >= 0 (a NaN model is a divergence, reported by the caller's checks);
  anything else is a ``ValueError``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["institution_distances", "tempo_local_epochs"]

_CEIL_TOLERANCE = 1e-9


def institution_distances(global_w: Tensor, institution_w: Tensor) -> Tensor:
    """``omega_m = ||w^(m) - w^(c)||_2`` for every institution (docs/algorithms.md, Tempo).

    Args:
        global_w: ``w^(c)``, ``(d,)``.
        institution_w: ``(M, d)`` institution models ``w^(m)`` (extra trailing dimensions are
            flattened).

    Returns:
        ``(M,)`` distances in ``institution_w``'s dtype.

    Example:
        >>> institution_distances(torch.zeros(2), torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
        tensor([5., 0.])
    """
    diff = (institution_w - global_w).reshape(institution_w.shape[0], -1)
    return torch.linalg.vector_norm(diff, dim=1)


def tempo_local_epochs(distances: Tensor, initial_epochs: int) -> Tensor:
    """Next global iteration's local epoch count per institution (docs/algorithms.md, Tempo, paper eq. 9).

    Args:
        distances: ``(M,)`` ``omega_m`` from :func:`institution_distances`.
        initial_epochs: ``c``, the epoch count of the first global iteration (int >= 1).

    Returns:
        ``(M,)`` ``torch.long`` epoch counts (on ``distances``' device).

    Raises:
        ValueError: If ``initial_epochs`` is not an int >= 1, ``distances`` is not a non-empty 1-D
            tensor, or a distance is negative or not finite.

    Example:
        >>> tempo_local_epochs(torch.tensor([1.0, 10.0, 100.0]), 6)  # l = ln 1, ln 10, ln 100
        tensor([12,  8,  3])
    """
    if isinstance(initial_epochs, bool) or not isinstance(initial_epochs, int) or initial_epochs < 1:
        raise ValueError(f"initial_epochs must be an integer >= 1; got {initial_epochs!r}")
    if distances.dim() != 1 or distances.numel() == 0:
        raise ValueError(f"distances must be a non-empty 1-D tensor; got shape {tuple(distances.shape)}")
    omega = distances.to(torch.float64)
    if not bool(torch.isfinite(omega).all()) or bool((omega < 0).any()):
        raise ValueError(f"distances must be finite and >= 0; got {distances.tolist()}")
    c = initial_epochs
    uniform = torch.full(omega.shape, c, dtype=torch.long, device=distances.device)
    if omega.numel() == 1 or bool((omega == 0).any()):
        return uniform
    log_omega = torch.log(omega)
    l_min, l_max = log_omega.min(), log_omega.max()
    if bool(l_max == l_min):
        return uniform
    # (c/2)/(l_min - l_max) * (3 l + l_min - 4 l_max) == (c/2) * (1 + 3 s), s = (l_max - l)/(l_max - l_min)
    s = (l_max - log_omega) / (l_max - l_min)
    x = (c / 2.0) * (1.0 + 3.0 * s)
    epochs = torch.ceil(x - _CEIL_TOLERANCE * x.abs().clamp_min(1.0))
    return epochs.clamp_min(1).to(torch.long)
