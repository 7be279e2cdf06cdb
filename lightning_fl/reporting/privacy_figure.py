"""The disparate-impact figure of ``make privacy``: each client's accuracy lost under DP against its size and rarity."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Colour per method (others take matplotlib's cycle).
METHOD_COLOURS = {"FedAvg": "tab:blue", "FedFa": "tab:orange", "q-FFL": "tab:green"}
AXES = {"size": ("training samples of the client (log scale)", "log"),
        "rarity": ("label rarity: mean 1 / (C P(y)) over its samples", "linear")}


def _trend(x: np.ndarray, y: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """A least-squares line of ``y`` on ``x`` (on ``log10 x`` for a log axis) across the range of ``x``."""
    keep = np.isfinite(x) & np.isfinite(y) & ((x > 0) if log else True)
    if keep.sum() < 3 or np.ptp(x[keep]) == 0:
        return None
    u = np.log10(x[keep]) if log else x[keep]
    slope, intercept = np.polyfit(u, y[keep], 1)
    grid = np.linspace(u.min(), u.max(), 50)
    return (10 ** grid if log else grid), slope * grid + intercept


def impact_panels(points: Mapping[str, Mapping[str, np.ndarray]], epsilon: float) -> Figure:
    """Accuracy lost (percentage points) against training-set size and against label rarity.

    Args:
        points: ``{method: {"loss": (M,), "size": (M,), "rarity": (M,)}}``, one entry per client and seed
            (loss = accuracy at epsilon inf minus accuracy under DP, same seed and client).
        epsilon: The DP run's epsilon (the title).

    Returns:
        Two panels (size, rarity); a colour per method, its clients as dots and a fitted line.
    """
    fig = Figure(figsize=(10, 4), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (axis, (label, scale)) in zip(axes, AXES.items(), strict=True):
        for i, (method, p) in enumerate(points.items()):
            colour = METHOD_COLOURS.get(method, f"C{i}")
            x, y = np.asarray(p[axis], dtype=np.float64), 100 * np.asarray(p["loss"], dtype=np.float64)
            ax.scatter(x, y, s=10, alpha=0.45, color=colour, label=method)
            if (line := _trend(x, y, scale == "log")) is not None:
                ax.plot(*line, color=colour, linewidth=2)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xscale(scale)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy lost under DP, pp")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Per-client accuracy at epsilon {epsilon:g} vs without DP (same seed and client);"
                 " lines: least squares")
    fig.tight_layout()
    return fig


__all__ = ["impact_panels"]
