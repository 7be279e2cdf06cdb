"""The figure of ``make robust``: honest accuracy against the Byzantine fraction, one panel per method."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Line style per attack and colour per rule.
ATTACK_STYLES = {"label_flip": "-", "alie": "--"}
RULE_COLOURS = {"mean": "tab:red", "trimmed_mean": "tab:blue", "geometric_median": "tab:green"}


def robust_panels(rows: Sequence[Mapping[str, Any]], fractions: Sequence[float]) -> Figure:
    """Honest clients' mean test accuracy (with 95% intervals) against the Byzantine fraction.

    Args:
        rows: ``make robust``'s rows: ``method``, ``attack`` (``none`` at fraction 0), ``fraction``, ``rule``
            and ``honest_acc_mean`` (a :class:`~lightning_fl.experiments.stats.Stats`, or ``None``).
        fractions: The fractions on the x axis, 0 included (shared by both attacks).

    Returns:
        One panel per method; a line per attack (style) and rule (colour).
    """
    methods = list(dict.fromkeys(row["method"] for row in rows))
    fig = Figure(figsize=(4.2 * len(methods), 3.6), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(methods), squeeze=False, sharey=True)[0]
    for ax, method in zip(axes, methods, strict=True):
        mine = [row for row in rows if row["method"] == method]
        for attack, style in ATTACK_STYLES.items():
            for rule, colour in RULE_COLOURS.items():
                points = [row for row in mine if row["rule"] == rule and row["honest_acc_mean"] is not None and (
                    row["attack"] == attack or row["fraction"] == 0)]
                points.sort(key=lambda row: row["fraction"])
                if len(points) < 2:
                    continue
                x = [row["fraction"] for row in points]
                y = [100 * row["honest_acc_mean"].mean for row in points]
                err = [100 * (row["honest_acc_mean"].ci if row["honest_acc_mean"].n > 1 else 0.0) for row in points]
                ax.errorbar(x, y, yerr=err, linestyle=style, color=colour, marker="o", capsize=3,
                            label=f"{attack}, {rule}")
        ax.set_title(method)
        ax.set_xlabel("Byzantine fraction")
        ax.set_xticks(list(fractions))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("honest clients' test accuracy, %")
    axes[-1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


__all__ = ["robust_panels"]
