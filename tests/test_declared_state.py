"""DeclaredState: saving and loading copy in both directions; defaults; one name, one state."""

from __future__ import annotations

import io

import pytest
import torch

from lightning_fl.simulation.callback import FederatedCallback


class _Algo(FederatedCallback):
    def __init__(self) -> None:
        super().__init__()
        self.add_server_state("momentum")
        self.add_server_state("count", 0)
        self.add_client_state("control", shape="model", default=0.5)


def _roundtrip(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_and_load_state_dict_copy_in_both_directions() -> None:
    algo = _Algo()
    algo.bind_client_state(3)
    algo.momentum, algo.count = torch.tensor([1.0, 2.0, 3.0]), 4
    algo.control.scatter(torch.tensor([2, 0]), torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]))
    saved = algo.state_dict()
    algo.momentum.add_(100.0)  # live state changes after saving...
    algo.control.scatter(torch.tensor([2]), torch.full((1, 3), 9.0))
    assert saved["server"]["momentum"].tolist() == [1.0, 2.0, 3.0]  # ...the saved state does not
    assert saved["clients"]["control"]["ids"].tolist() == [0, 2]
    assert saved["clients"]["control"]["rows"].tolist() == [[2.0] * 3, [1.0] * 3]

    other = _Algo()
    other.bind_client_state(3)
    loaded = _roundtrip(saved)
    other.load_state_dict(loaded)
    loaded["server"]["momentum"].add_(1000.0)  # and the loaded instance does not alias the checkpoint
    loaded["clients"]["control"]["rows"].add_(1000.0)
    assert other.momentum.tolist() == [1.0, 2.0, 3.0] and other.count == 4
    assert other.control.gather(torch.tensor([0, 1, 2])).tolist() == [[2.0] * 3, [0.5] * 3, [1.0] * 3]


def test_reset_and_defaults() -> None:
    algo = _Algo()
    algo.bind_client_state(2)
    assert algo.momentum is None and algo.count == 0 and len(algo.control) == 0
    algo.count = 7
    algo.control.scatter(torch.tensor([1]), torch.ones(1, 2))
    algo.reset_state()
    assert algo.count == 0 and len(algo.control) == 0


def test_a_name_is_declared_once() -> None:
    algo = _Algo()
    with pytest.raises(ValueError, match="declared twice"):
        algo.add_client_state("momentum")


def test_unbound_model_shaped_state_says_so() -> None:
    with pytest.raises(RuntimeError, match="not bound"):
        _Algo().control.gather(torch.tensor([0]))
