"""Matplotlib figures for the fairness / aggregation reports (docs/algorithms.md, Fairness metrics; IGFL-S).

* :func:`accuracy_histogram_figure`: histogram of client accuracies per evaluation (docs/algorithms.md, Fairness metrics).
* :func:`attention_figure`: heat map of an IGFL-S attention matrix or vector (docs/algorithms.md, IGFL-S; IGFL Fig. 2).
* :func:`weights_figure`: bar chart of per-client aggregation weights (FedFa, DWFed).
* :func:`band_curves_figure`: curves against the round, one line per method with a shaded band
  (e.g. the mean over seeds and their min..max), one panel per metric.
* :func:`figure_to_image`: render a figure to a ``(3, H, W)`` uint8 tensor for TensorBoard's
  ``SummaryWriter.add_image`` (default ``dataformats="CHW"``).

The figures are built with :class:`matplotlib.figure.Figure` on an Agg canvas, never through
:mod:`matplotlib.pyplot`: nothing is shown, no GUI backend is touched, and the figures are not
registered in pyplot's global figure list. The ``*_figure`` functions return the figure and close
nothing; :func:`figure_to_image` releases the figure it renders.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from lightning_fl.functional.fairness import tail_count

#: One curve of :func:`band_curves_figure`: ``(x, line, low, high)``.
Band = tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]

__all__ = [
    "accuracy_histogram_figure",
    "attention_figure",
    "band_curves_figure",
    "figure_to_image",
    "weights_figure",
]


def _new_figure(figsize: tuple[float, float], dpi: int = 100) -> Figure:
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)  # attaches itself as fig.canvas
    return fig


def _as_1d_numpy(values: Tensor | Sequence[float], name: str) -> np.ndarray:
    arr = torch.as_tensor(values).detach().to(device="cpu", dtype=torch.float64).numpy()
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr


def _check_ids(client_ids: Sequence[int], k: int, what: str) -> list[str]:
    ids = [str(int(c)) for c in client_ids]
    if len(ids) != k:
        raise ValueError(f"client_ids has {len(ids)} entries but {what} has {k} clients")
    return ids


def accuracy_histogram_figure(accuracies: Tensor, round_idx: int, bins: int = 20) -> Figure:
    """Histogram of client test accuracies at one evaluation (docs/algorithms.md, Fairness metrics).

    Vertical lines mark the mean, the worst-20% mean and the best-20% mean (means of the
    ``ceil(0.2 N)`` lowest / highest accuracies, as in :func:`~lightning_fl.functional.fairness.
    fairness_metrics`). ``NaN`` entries (clients without test samples, see
    :func:`~lightning_fl.functional.fairness.client_accuracies`) are left out.

    Args:
        accuracies: ``(N,)`` client accuracies as fractions in ``[0, 1]``.
        round_idx: Round of the evaluation, shown in the title.
        bins: Number of equal-width bins over ``[0, 1]``.

    Returns:
        The figure (caller closes it, e.g. via :func:`figure_to_image`).

    Raises:
        ValueError: If ``accuracies`` is not 1-D or ``bins < 1``.

    Example:
        >>> fig = accuracy_histogram_figure(torch.tensor([0.1, 0.5, 0.9]), round_idx=3)
        >>> img = figure_to_image(fig)
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    acc = _as_1d_numpy(accuracies, "accuracies")
    acc = acc[~np.isnan(acc)]
    fig = _new_figure((6.0, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    ax.hist(acc, bins=bins, range=(0.0, 1.0), color="tab:blue", edgecolor="white")
    if acc.size:
        ordered = np.sort(acc)
        m = tail_count(acc.size)
        markers = (
            (float(acc.mean()), "tab:green", "-", "mean"),
            (float(ordered[:m].mean()), "tab:red", "--", "worst 20%"),
            (float(ordered[-m:].mean()), "tab:purple", ":", "best 20%"),
        )
        for value, color, style, label in markers:
            ax.axvline(value, color=color, linestyle=style, linewidth=2, label=f"{label} = {100 * value:.2f}%")
        ax.legend(loc="upper left", fontsize="small")
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("client test accuracy")
    ax.set_ylabel("clients")
    ax.set_title(f"Client accuracies, round {round_idx} (N={acc.size})")
    fig.tight_layout()
    return fig


def attention_figure(attention: Tensor, client_ids: Sequence[int], round_idx: int) -> Figure:
    """Heat map of an IGFL-S attention matrix or vector (docs/algorithms.md, IGFL-S; IGFL paper Fig. 2).

    A ``(K, K)`` matrix (self-attention, or time attention with ``time_reading: matrix``) is drawn with row ``i`` = query client ``i`` and column
    ``j`` = key/value client ``j`` (entry ``alpha_ij``); a ``(K,)`` vector (global / time
    attention, ``alpha_j``) is drawn as a single row. Both axes are labelled with the client ids;
    a colorbar shows the scale.

    Args:
        attention: ``(K, K)`` or ``(K,)`` attention scores.
        client_ids: The ``K`` cohort clients' ids, in the order of ``attention``'s axes.
        round_idx: Round the scores belong to, shown in the title.

    Returns:
        The figure (caller closes it).

    Raises:
        ValueError: If ``attention`` is not ``(K,)`` or square ``(K, K)``, or ``client_ids`` does
            not have ``K`` entries.

    Example:
        >>> fig = attention_figure(torch.softmax(torch.randn(4, 4), dim=1), [3, 8, 11, 20], round_idx=5)
        >>> img = figure_to_image(fig)
    """
    att = torch.as_tensor(attention).detach().to(device="cpu", dtype=torch.float64).numpy()
    if att.ndim == 1:
        k = att.shape[0]
        matrix = att[None, :]
    elif att.ndim == 2 and att.shape[0] == att.shape[1]:
        k = att.shape[0]
        matrix = att
    else:
        raise ValueError(f"attention must be (K,) or (K, K), got shape {att.shape}")
    ids = _check_ids(client_ids, k, "attention")

    side = min(max(3.0, 0.45 * k + 2.0), 14.0)
    fig = _new_figure((side + 1.5, side if att.ndim == 2 else 2.5))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(matrix, cmap="viridis", aspect="auto", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="attention score")
    ax.set_xticks(range(k))
    ax.set_xticklabels(ids, rotation=90 if k > 12 else 0, fontsize="small")
    ax.set_xlabel("client j (key / value)")
    if att.ndim == 2:
        ax.set_yticks(range(k))
        ax.set_yticklabels(ids, fontsize="small")
        ax.set_ylabel("client i (query)")
        ax.set_title(f"Self-attention scores, round {round_idx}")
    else:
        ax.set_yticks([])
        ax.set_title(f"Attention weights, round {round_idx}")
    fig.tight_layout()
    return fig


def weights_figure(weights: Tensor, client_ids: Sequence[int], round_idx: int, title: str) -> Figure:
    """Bar chart of per-client aggregation weights (docs/algorithms.md, FedFa; DWFed).

    A dashed line marks the uniform weight ``1/K`` for reference.

    Args:
        weights: ``(K,)`` aggregation weights of the cohort.
        client_ids: The ``K`` clients' ids, in the order of ``weights``.
        round_idx: Round the weights belong to, appended to the title.
        title: Figure title, e.g. ``"FedFa weights"``.

    Returns:
        The figure (caller closes it).

    Raises:
        ValueError: If ``weights`` is not 1-D or ``client_ids`` does not have ``K`` entries.

    Example:
        >>> fig = weights_figure(torch.tensor([0.2, 0.5, 0.3]), [0, 4, 9], round_idx=2, title="DWFed weights")
        >>> img = figure_to_image(fig)
    """
    w = _as_1d_numpy(weights, "weights")
    k = w.shape[0]
    ids = _check_ids(client_ids, k, "weights")
    fig = _new_figure((min(max(4.0, 0.35 * k + 2.0), 16.0), 4.0))
    ax = fig.add_subplot(1, 1, 1)
    ax.bar(range(k), w, color="tab:orange", edgecolor="black", linewidth=0.5)
    if k:
        ax.axhline(1.0 / k, color="gray", linestyle="--", linewidth=1, label=f"uniform 1/K = {1.0 / k:.3g}")
        ax.legend(loc="upper right", fontsize="small")
    ax.set_xticks(range(k))
    ax.set_xticklabels(ids, rotation=90 if k > 16 else 0, fontsize="small")
    ax.set_xlabel("client")
    ax.set_ylabel("aggregation weight")
    ax.set_title(f"{title}, round {round_idx}")
    fig.tight_layout()
    return fig


def band_curves_figure(panels: Sequence[tuple[str, Mapping[str, Band]]], xlabel: str = "round",
                       title: str | None = None) -> Figure:
    """Side-by-side panels of curves, each drawn as a line with a shaded band around it.

    Made for results over several seeds: the line is e.g. the mean across seeds and the band their
    min..max or mean +- one standard deviation (the caller decides, and says so in ``title``). Every
    label keeps the same color in every panel.

    Args:
        panels: ``(y axis label, {curve label: (x, line, low, high)})`` per panel, left to right; the
            four sequences of a curve have the same length.
        xlabel: Label of every panel's x axis.
        title: Figure title (``None``: no title).

    Returns:
        The figure (caller closes it, or saves it with ``fig.savefig``).

    Raises:
        ValueError: If ``panels`` is empty or a curve's sequences differ in length.

    Example:
        >>> band = ([1, 2, 3], [0.5, 0.6, 0.7], [0.4, 0.5, 0.6], [0.6, 0.7, 0.8])
        >>> fig = band_curves_figure([("test accuracy", {"FedAvg": band})])
    """
    if not panels:
        raise ValueError("panels must not be empty")
    fig = _new_figure((5.5 * len(panels), 4.0))
    colors: dict[str, str] = {}
    for index, (ylabel, curves) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), index + 1)
        for label, (x, line, low, high) in curves.items():
            if not len(x) == len(line) == len(low) == len(high):
                raise ValueError(f"{label!r} in panel {ylabel!r}: x, line, low and high differ in length")
            color = colors.setdefault(label, f"C{len(colors) % 10}")
            ax.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)
            ax.plot(x, line, color=color, linewidth=1.5, label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig


def figure_to_image(fig: Figure) -> Tensor:
    """Render a figure to a ``(3, H, W)`` uint8 RGB tensor for ``SummaryWriter.add_image``.

    Draws ``fig`` on an Agg canvas and reads ``fig.canvas.buffer_rgba()``; any transparency is
    composited over white. The figure is then released: closed in pyplot if pyplot manages it
    (a figure from these helpers is not), and its artists cleared, so it must not be reused.

    Args:
        fig: A matplotlib figure.

    Returns:
        ``(3, H, W)`` uint8 tensor, channels first (TensorBoard's default ``dataformats="CHW"``).

    Example:
        >>> img = figure_to_image(weights_figure(torch.ones(3) / 3, [0, 1, 2], 0, "w"))
        >>> img.dtype, img.shape[0]
        (torch.uint8, 3)
    """
    canvas = fig.canvas
    if not isinstance(canvas, FigureCanvasAgg):
        canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgba = np.asarray(canvas.buffer_rgba(), dtype=np.float32)  # (H, W, 4), copied
    alpha = rgba[..., 3:4] / 255.0
    rgb = rgba[..., :3] * alpha + 255.0 * (1.0 - alpha)
    image = torch.from_numpy(np.ascontiguousarray(np.rint(rgb).astype(np.uint8))).permute(2, 0, 1).contiguous()

    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(fig)  # no-op for figures pyplot does not manage
    fig.clear()
    return image
