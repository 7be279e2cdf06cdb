"""Tests for lightning_fl.reporting.figures (SPEC sections 4 and 7)."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

from lightning_fl.reporting.figures import (
    accuracy_histogram_figure,
    attention_figure,
    band_curves_figure,
    figure_to_image,
    weights_figure,
)


def _check_image(img: torch.Tensor) -> None:
    assert img.dtype == torch.uint8
    assert img.ndim == 3 and img.shape[0] == 3
    assert img.shape[1] > 50 and img.shape[2] > 50
    assert img.is_contiguous()
    flat = img.reshape(3, -1)
    # not all one colour: more than one distinct RGB pixel value
    assert torch.unique(flat, dim=1).shape[1] > 1


def test_accuracy_histogram_image():
    acc = torch.tensor([0.1, 0.5, 0.9, 0.7, 0.3, float("nan")], dtype=torch.float64)
    fig = accuracy_histogram_figure(acc, round_idx=7)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert "round 7" in ax.get_title()
    assert "N=5" in ax.get_title()  # NaN (no test samples) left out
    # mean (0.5), worst 20% (0.1) and best 20% (0.9) markers
    xs = sorted(line.get_xdata()[0] for line in ax.get_lines())
    assert xs == pytest.approx([0.1, 0.5, 0.9])
    _check_image(figure_to_image(fig))


def test_accuracy_histogram_empty_does_not_fail():
    _check_image(figure_to_image(accuracy_histogram_figure(torch.tensor([]), round_idx=0)))


def test_attention_matrix_image():
    att = torch.softmax(torch.arange(16, dtype=torch.float32).reshape(4, 4) / 4, dim=1)
    fig = attention_figure(att, [3, 8, 11, 20], round_idx=5)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["3", "8", "11", "20"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["3", "8", "11", "20"]
    assert len(fig.axes) == 2  # heat map + colorbar
    _check_image(figure_to_image(fig))


def test_attention_vector_image():
    fig = attention_figure(torch.tensor([0.1, 0.2, 0.7]), [0, 1, 2], round_idx=1)
    assert len(fig.axes) == 2
    _check_image(figure_to_image(fig))


def test_attention_bad_shapes():
    with pytest.raises(ValueError, match="client_ids"):
        attention_figure(torch.ones(3, 3), [0, 1], round_idx=0)
    with pytest.raises(ValueError, match=r"\(K, K\)"):
        attention_figure(torch.ones(2, 3), [0, 1], round_idx=0)


def test_weights_image():
    fig = weights_figure(torch.tensor([0.2, 0.5, 0.3]), [0, 4, 9], round_idx=2, title="DWFed weights")
    ax = fig.axes[0]
    assert ax.get_title() == "DWFed weights, round 2"
    assert [p.get_height() for p in ax.patches] == pytest.approx([0.2, 0.5, 0.3])
    _check_image(figure_to_image(fig))
    with pytest.raises(ValueError, match="client_ids"):
        weights_figure(torch.ones(2), [0], round_idx=0, title="w")


def test_figure_to_image_closes_pyplot_figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2), dpi=50)
    ax.plot([0, 1], [0, 1], color="red")
    num = fig.number
    img = figure_to_image(fig)
    assert img.shape == (3, 100, 100)
    assert not plt.fignum_exists(num)
    # the red line is in the image
    red = (img[0] > 200) & (img[1] < 80) & (img[2] < 80)
    assert red.any()


def test_band_curves_image_keeps_one_color_per_label():
    a = ([1, 2, 3], [1.0, 0.8, 0.6], [0.9, 0.7, 0.5], [1.1, 0.9, 0.7])
    b = ([1, 2, 3], [1.2, 1.0, 0.9], [1.2, 0.9, 0.8], [1.2, 1.1, 1.0])
    fig = band_curves_figure([("loss", {"A": a, "B": b}), ("accuracy", {"B": b, "A": a})], title="t")
    left, right = fig.axes
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", "accuracy"]
    colors = {ax: {line.get_label(): line.get_color() for line in ax.get_lines()} for ax in fig.axes}
    assert colors[left] == colors[right] and colors[left]["A"] != colors[left]["B"]
    assert len(left.collections) == 2  # one band per curve
    _check_image(figure_to_image(fig))


def test_band_curves_bad_input():
    with pytest.raises(ValueError, match="empty"):
        band_curves_figure([])
    with pytest.raises(ValueError, match="differ in length"):
        band_curves_figure([("loss", {"A": ([1, 2], [1.0], [1.0], [1.0])})])
