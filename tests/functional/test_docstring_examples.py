"""The ``Example:`` blocks in the algorithm modules' docstrings stay correct."""

from __future__ import annotations

import doctest
import importlib

import pytest
import torch

MODULES = [
    "weights",
    "server_optimizers",
    "scaffold",
    "feddyn",
    "fedprox",
    "fednova",
    "qffl",
    "fedadp",
    "fedfa",
    "igfl",
    "dwfed",
    "tempo",
    "attacks",
    "robust",
    "robust_distance",
    "apfl",
    "pfedme",
    "value_fairness",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"lightning_fl.functional.{name}")
    result = doctest.testmod(module, extraglobs={"torch": torch}, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
