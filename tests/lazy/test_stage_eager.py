"""Staging a cohort of an eager federation: the hand-sliced tensors of those clients, in the order given."""

import pytest
import torch

from lightning_fl.state.data import ClientData, FederatedData, offsets_from_sizes, split_validation


def _federation() -> FederatedData:
    # Client k's train samples are the numbers 100 k + i, its test samples 1000 + 100 k + i: easy to slice by hand.
    train_sizes, test_sizes = [3, 1, 4], [1, 0, 2]
    x_tr = torch.tensor([100.0 * k + i for k, n in enumerate(train_sizes) for i in range(n)]).unsqueeze(1)
    x_te = torch.tensor([1000.0 + 100 * k + i for k, n in enumerate(test_sizes) for i in range(n)]).unsqueeze(1)
    return FederatedData(x_tr, (x_tr[:, 0] % 2).long(), offsets_from_sizes(train_sizes),
                         x_te, (x_te[:, 0] % 2).long(), offsets_from_sizes(test_sizes), num_classes=2)


def test_eager_federation_is_client_data() -> None:
    data = _federation()
    assert isinstance(data, ClientData)
    assert data.sizes("train").tolist() == [3, 1, 4] and data.sizes("test").tolist() == [1, 0, 2]
    assert data.sizes("val").tolist() == [0, 0, 0]


def test_stage_train_is_the_hand_sliced_clients_in_order() -> None:
    staged = _federation().stage(torch.tensor([2, 0]))
    assert staged.num_clients == 2
    assert staged.x_train.flatten().tolist() == [200.0, 201.0, 202.0, 203.0, 0.0, 1.0, 2.0]
    assert staged.y_train.tolist() == [0, 1, 0, 1, 0, 1, 0]
    assert staged.train_offsets.tolist() == [0, 4, 7]
    assert staged.test_sizes().tolist() == [0, 0] and not staged.has_validation


def test_stage_test_split_and_repeated_client() -> None:
    staged = _federation().stage([1, 2, 2], "test")
    assert staged.x_test.flatten().tolist() == [1200.0, 1201.0, 1200.0, 1201.0]
    assert staged.test_offsets.tolist() == [0, 0, 2, 4]
    assert staged.x_train.flatten().tolist() == [100.0, 200.0, 201.0, 202.0, 203.0, 200.0, 201.0, 202.0, 203.0]


def test_stage_val_split_equals_client_val() -> None:
    data = split_validation(_federation(), 0.5, seed=3)
    staged = data.stage([2], "val")
    x, y = data.client_val(2)
    assert torch.equal(staged.x_val, x) and torch.equal(staged.y_val, y)
    assert torch.equal(staged.x_train, data.client_train(2)[0])


def test_stage_refuses_unknown_split_and_ids() -> None:
    data = _federation()
    with pytest.raises(ValueError, match="split must be one of"):
        data.stage([0], "validation")
    with pytest.raises(ValueError, match="no validation split"):
        data.stage([0], "val")
    with pytest.raises(ValueError, match=r"client ids must lie in \[0, 3\)"):
        data.stage([3])
