import torch
from torch import nn

from lightning_fl.state.flat_state import FlatStateLayout


def test_flatten_roundtrip_keeps_integer_buffers_out():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    state = model.state_dict()
    layout = FlatStateLayout(state)
    # Linear: 6 + 2, BatchNorm: weight 2, bias 2, running_mean 2, running_var 2 -> 16 floats.
    assert layout.numel == 16
    assert layout.other_names == ["1.num_batches_tracked"]
    flat = layout.flatten(state)
    assert torch.equal(flat[:6], state["0.weight"].reshape(-1))
    target = torch.arange(16, dtype=torch.float32)
    layout.load_into(target, state)
    assert torch.equal(model[0].weight.detach().reshape(-1), torch.arange(6.0))
    assert torch.equal(model[1].running_var, torch.tensor([14.0, 15.0]))


def test_flatten_stacked_matches_rowwise_flatten():
    model = nn.Linear(2, 2)
    layout = FlatStateLayout(model.state_dict())
    stacked = {"weight": torch.arange(12.0).view(3, 2, 2), "bias": torch.arange(6.0).view(3, 2)}
    rows = layout.flatten_stacked(stacked)
    assert rows.shape == (3, 6)
    assert rows[1].tolist() == [4.0, 5.0, 6.0, 7.0, 2.0, 3.0]
    assert torch.equal(layout.unflatten(rows)["bias"], stacked["bias"])
