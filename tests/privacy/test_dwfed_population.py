"""DP-safe DWFed with a declared public label distribution P (``population``: a .json, .csv or .pt file)."""

from __future__ import annotations

import json

import pytest
import torch

from lightning_fl.callbacks import DWFed
from lightning_fl.callbacks.dwfed import load_population
from lightning_fl.faults.validation import ConfigError
from tests.callbacks.helpers import aggregate, make_update
from tests.privacy.test_dp_safe import GLOBAL, ROWS, _under_dp

HIST = torch.tensor([[5, 5, 0], [2, 2, 2], [0, 0, 9], [3, 3, 3]])


@pytest.mark.parametrize("suffix", [".json", ".csv", ".pt"])
def test_each_file_type_reads_the_same_normalised_distribution(tmp_path, suffix):
    path = tmp_path / f"p{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps([2, 1, 1]))
    elif suffix == ".csv":
        path.write_text("label_share\n2\n1\n1\n")  # a header line, then one number per line
    else:
        torch.save(torch.tensor([2.0, 1.0, 1.0]), path)
    assert load_population(str(path)).tolist() == [0.5, 0.25, 0.25]


def test_dp_safe_dwfed_measures_each_client_against_the_declared_population(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("[2, 1, 1]")
    callback, fed = _under_dp(DWFed(dp_safe=True, population=str(path)), "DWFed", {"dp_safe": True}, label_hist=HIST)
    # P = (1/2, 1/4, 1/4). Client 0: p = (1/2, 1/2, 0), D = 0 + 1/4 + 1/4 = 1/2; client 3: p = 1/3 each,
    # D = 1/6 + 1/12 + 1/12 = 1/3. K := qN = 2, eta = 1: ISH_0 = (1 - 1/4) / (3/2) = 1/2,
    # ISH_3 = (1 - 1/6) / (4/3) = 5/8; the fixed denominator qN = 2.
    update = make_update(0, [0, 3], ROWS)
    new_w = aggregate(callback, fed, 0, GLOBAL, update)
    torch.testing.assert_close(new_w, GLOBAL + torch.tensor([0.5, 0.625, 0.0]) / 2)


@pytest.mark.parametrize(("content", "message"), [
    ("[1, -1, 2]", "must hold at least two finite numbers >= 0 with a positive sum"),
    ("[0, 0, 0]", "must hold at least two finite numbers >= 0 with a positive sum"),
    ("[1, 2", "cannot read"),
    ('["a", 1]', "cannot read"),
])
def test_a_bad_population_file_is_one_line_naming_the_field(tmp_path, content, message):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        DWFed(dp_safe=True, population=str(path))
    assert str(err.value).startswith("population: ") and message in str(err.value) and "\n" not in str(err.value)


def test_a_missing_file_another_type_or_no_dp_safe_is_refused_before_training(tmp_path):
    with pytest.raises(ConfigError, match="^population: the file .*does not exist$"):
        DWFed(dp_safe=True, population=str(tmp_path / "absent.json"))
    with pytest.raises(ConfigError, match="^population must be 'uniform' or a .json, .csv, .pt file"):
        DWFed(dp_safe=True, population="census.txt")
    (tmp_path / "p.json").write_text("[1, 1, 1]")
    with pytest.raises(ConfigError, match="^population: a declared P is the DP-safe variant's"):
        DWFed(population=str(tmp_path / "p.json"))


def test_a_population_of_the_wrong_length_is_refused_at_set_up(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("[1, 1]")  # two labels; the data has three
    with pytest.raises(ConfigError, match="^population: .* holds 2 frequencies; the data has 3 labels$"):
        _under_dp(DWFed(dp_safe=True, population=str(path)), "DWFed", {"dp_safe": True}, label_hist=HIST)
