"""Partition heat map: clients x classes label distribution (docs/algorithms.md, Data).

Built on :class:`matplotlib.figure.Figure` with an Agg canvas, never through :mod:`matplotlib.pyplot`,
so nothing is shown, no GUI backend is touched and the figure is not kept in pyplot's global list.
"""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from torch import Tensor

from lightning_fl.functional.label_stats import emd_to_population, label_distributions

__all__ = ["label_distribution_figure"]


def label_distribution_figure(histograms: Tensor, title: str = "Label distribution per client") -> Figure:
    """Heat map of each client's normalised label distribution ``p_k(c)`` (docs/algorithms.md, Data).

    Clients run down the y axis and classes along the x axis; the colour is the fraction of the
    client's training samples in that class (``0..1``, shared colour bar). Tick labels are thinned by
    :class:`~matplotlib.ticker.MaxNLocator`, and the figure height grows slowly with the number of
    clients (capped), so 10 and 1000 clients both stay readable. The title gives ``N`` and the mean
    EMD to the population distribution.

    Args:
        histograms: ``(N, C)`` label counts.
        title: First line of the title.

    Returns:
        The figure (not shown, not closed).

    Raises:
        ValueError: If ``histograms`` is not 2-D.

    Example:
        >>> import torch
        >>> fig = label_distribution_figure(torch.tensor([[5, 0], [1, 1]]))
        >>> fig.axes[0].get_ylabel()
        'client'
    """
    if histograms.ndim != 2:
        raise ValueError(f"histograms must be (num_clients, num_classes); got shape {tuple(histograms.shape)}")
    dist = label_distributions(histograms.cpu()).numpy()
    num_clients, num_classes = dist.shape
    mean_emd = float(emd_to_population(histograms.cpu()).mean()) if num_clients else float("nan")

    width = float(np.clip(3.0 + 0.3 * num_classes, 5.0, 12.0))
    height = float(np.clip(2.0 + 0.15 * num_clients, 3.5, 10.0))
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)  # attaches itself as fig.canvas
    ax = fig.add_subplot(1, 1, 1)
    # extent puts integer client/class ids at cell centres; nearest keeps 1000 rows crisp.
    image = ax.imshow(
        dist, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0.0, vmax=1.0,
        extent=(-0.5, num_classes - 0.5, num_clients - 0.5, -0.5),
    )
    ax.xaxis.set_major_locator(MaxNLocator(nbins=min(num_classes, 20), integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=min(num_clients, 15), integer=True))
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(f"{title}\nN={num_clients} clients, {num_classes} classes, mean EMD to population {mean_emd:.3f}")
    colorbar = fig.colorbar(image, ax=ax)
    colorbar.set_label("fraction of the client's train samples")
    fig.tight_layout()
    return fig
