"""Figures of an experiment over several seeds: the distribution of client accuracies per method.

Built with :class:`matplotlib.figure.Figure` on an Agg canvas, never through :mod:`matplotlib.pyplot`
(nothing is shown, no GUI backend is touched). Curves across seeds are
:func:`lightning_fl.reporting.figures.band_curves_figure`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["client_accuracy_figure"]


def client_accuracy_figure(accuracies: Mapping[str, Sequence[float]], title: str) -> Figure:
    """Box plot of client accuracies per method, with every client drawn as a dot beside its box.

    The box spans the quartiles, the line is the median, the whiskers reach the furthest client within
    1.5 interquartile ranges and the diamond is the mean (``acc_mean``); the dots show how the clients
    spread, e.g. the ones at 0% that the worst-20% mean averages.

    Args:
        accuracies: ``{method: client accuracies in [0, 1]}`` (e.g. the final round, pooled over seeds).
        title: Figure title (say which round, split and seeds).

    Returns:
        The figure (caller saves or closes it).

    Raises:
        ValueError: If ``accuracies`` is empty.

    Example:
        >>> fig = client_accuracy_figure({"FedAvg": [0.1, 0.5, 0.9], "FedFa": [0.4, 0.6, 0.8]}, "final round")
    """
    if not accuracies:
        raise ValueError("accuracies must name at least one method")
    fig = Figure(figsize=(max(5.0, 1.3 * len(accuracies) + 2.0), 4.5), dpi=100)
    FigureCanvasAgg(fig)  # attaches itself as fig.canvas
    ax = fig.add_subplot(1, 1, 1)
    data = [100.0 * np.asarray(values, dtype=np.float64) for values in accuracies.values()]
    positions = np.arange(1, len(data) + 1)
    ax.boxplot(data, positions=positions, widths=0.5, showmeans=True, showfliers=False,
               meanprops={"marker": "D", "markerfacecolor": "white", "markeredgecolor": "black"})
    rng = np.random.default_rng(0)  # a fixed jitter: the same data give the same picture
    for position, values in zip(positions, data, strict=True):
        ax.scatter(position + 0.3 + rng.uniform(-0.05, 0.05, len(values)), values, s=6, alpha=0.4, color="tab:blue")
    ax.set_xticks(positions)
    ax.set_xticklabels([f"{name}\n(n={len(values)})" for name, values in zip(accuracies, data, strict=True)],
                       fontsize="small")
    ax.set_ylabel("client accuracy (%)")
    ax.set_ylim(-2.0, 102.0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title, fontsize="medium")
    fig.tight_layout()
    return fig
