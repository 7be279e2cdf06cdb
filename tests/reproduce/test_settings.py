"""Derived configs of a reproduction: dotted changes, callback arguments, folder names."""

from __future__ import annotations

import pytest
import yaml

from lightning_fl.faults.validation import ConfigError
from lightning_fl.reproduce.settings import Setting, apply_changes, derive_config

BASE = {"trainer": {"max_epochs": 60, "callbacks": [{"class_path": "lightning_fl.callbacks.FedProx",
                                                     "init_args": {"mu": 0.01}},
                                                    {"class_path": "lightning_fl.callbacks.FairnessMetrics"}]},
        "data": {"init_args": {"variant": "1_1"}}}


def test_changes_reach_nested_keys_and_callback_arguments() -> None:
    out = apply_changes(BASE, {"trainer.max_epochs": 5, "data.init_args.variant": "iid", "callbacks.FedProx.mu": 1.0,
                               "model.local_epochs": 20})
    assert out["trainer"]["max_epochs"] == 5 and out["data"]["init_args"]["variant"] == "iid"
    assert out["trainer"]["callbacks"][0]["init_args"] == {"mu": 1.0}
    assert out["model"] == {"local_epochs": 20}
    assert BASE["trainer"]["max_epochs"] == 60 and BASE["trainer"]["callbacks"][0]["init_args"]["mu"] == 0.01


def test_none_removes_a_callback_and_unknown_callbacks_are_named() -> None:
    out = apply_changes(BASE, {"callbacks.FairnessMetrics": None})
    assert [c["class_path"] for c in out["trainer"]["callbacks"]] == ["lightning_fl.callbacks.FedProx"]
    with pytest.raises(ConfigError, match="no callback QFFL; it has \\['FedProx', 'FairnessMetrics'\\]"):
        apply_changes(BASE, {"callbacks.QFFL.q": 1.0})


def test_a_mapping_adds_or_replaces_a_callback_and_its_arguments_follow() -> None:
    dwfed = {"class_path": "lightning_fl.callbacks.DWFed", "init_args": {"eta_ish": 1.0}}
    out = apply_changes(BASE, {"callbacks.DWFed": dwfed, "callbacks.DWFed.figure_every_n_rounds": 0})
    assert out["trainer"]["callbacks"][2] == {"class_path": "lightning_fl.callbacks.DWFed",
                                              "init_args": {"eta_ish": 1.0, "figure_every_n_rounds": 0}}
    assert dwfed["init_args"] == {"eta_ish": 1.0}  # the change's own mapping is not modified
    out = apply_changes(BASE, {"callbacks.FedProx": {"class_path": "lightning_fl.callbacks.FedProx"}})
    assert [c["class_path"] for c in out["trainer"]["callbacks"]] == ["lightning_fl.callbacks.FedProx",
                                                                      "lightning_fl.callbacks.FairnessMetrics"]
    assert "init_args" not in out["trainer"]["callbacks"][0]  # replaced, not merged
    with pytest.raises(ConfigError, match="callbacks.DWFed: a callback to add needs a class_path ending in .DWFed"):
        apply_changes(BASE, {"callbacks.DWFed": {"class_path": "lightning_fl.callbacks.FedFa"}})
    with pytest.raises(ConfigError, match="set to None \\(remove it\\) or to a mapping"):
        apply_changes(BASE, {"callbacks.FedProx": 1.0})


def test_derived_config_is_a_plain_yaml(tmp_path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(BASE))
    path = derive_config(base, {"trainer.max_epochs": 7}, tmp_path / "out" / "m.yaml")
    assert yaml.safe_load(path.read_text())["trainer"]["max_epochs"] == 7


@pytest.mark.parametrize(("name", "folder"), [("Synthetic(1,1)", "synthetic_1_1"), ("Synthetic(0.5,0.5)", "synthetic_0.5_0.5"),
                                              ("Fashion-MNIST, 1 class per client", "fashion_mnist_1_class_per_client")])
def test_folder_names(name: str, folder: str) -> None:
    assert Setting(name, {}).folder == folder


def test_an_added_callback_takes_later_changes() -> None:
    igfl = {"class_path": "lightning_fl.callbacks.IGFL", "init_args": {"attention": "self"}}
    out = apply_changes(BASE, {"callbacks.IGFL": igfl, "callbacks.IGFL.attention": "global"})
    assert [c["class_path"] for c in out["trainer"]["callbacks"]] == [
        "lightning_fl.callbacks.FedProx", "lightning_fl.callbacks.FairnessMetrics", "lightning_fl.callbacks.IGFL"]
    assert out["trainer"]["callbacks"][2]["init_args"] == {"attention": "global"}
    assert igfl["init_args"] == {"attention": "self"}  # the change's own value is copied, not edited
