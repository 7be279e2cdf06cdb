"""Package structure: one import path per module, every package installed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
#: Top-level folders installed under the lightning_fl namespace (pyproject.toml [tool.setuptools.package-dir]).
MAPPED = {"callbacks": "lightning_fl.callbacks", "datamodules": "lightning_fl.datamodules"}


def _package_name(folder: Path) -> str:
    parts = folder.relative_to(REPO).parts
    return ".".join((MAPPED[parts[0]], *parts[1:])) if parts[0] in MAPPED else ".".join(parts)


def test_pyproject_lists_every_package_folder() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {init.parent for root in ("lightning_fl", *MAPPED) for init in (REPO / root).rglob("__init__.py")}
    assert set(setuptools["packages"]) == {_package_name(f) for f in folders}
    assert setuptools["package-dir"] == {"lightning_fl": "lightning_fl", **{v: k for k, v in MAPPED.items()}}


def test_top_level_folders_refuse_a_second_import_path() -> None:
    for folder, name in MAPPED.items():
        result = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=REPO, capture_output=True, text=True)
        assert result.returncode != 0
        assert f"import this package as {name}, not {folder}" in result.stderr


def test_configs_name_the_namespaced_modules() -> None:
    for config in sorted((REPO / "configs").rglob("*.yaml")):
        text = config.read_text()
        for folder in MAPPED:
            assert f"class_path: {folder}." not in text, config


def test_user_modules_named_callbacks_or_datamodules_do_not_break_the_cli(tmp_path: Path) -> None:
    # A researcher's working directory often has its own callbacks.py / datamodules.py.
    for folder in MAPPED:
        (tmp_path / f"{folder}.py").write_text(f"raise RuntimeError('the user module {folder}.py was imported')\n")
    config = yaml.safe_load((REPO / "configs" / "fedavg_synthetic.yaml").read_text())
    config["trainer"]["max_epochs"] = 1
    config["trainer"]["logger"] = False
    config["trainer"]["callbacks"] = [c for c in config["trainer"]["callbacks"]
                                      if "ModelCheckpoint" not in c["class_path"]]
    config["data"]["init_args"]["num_clients"] = 6
    config["model"]["clients_per_round"] = 2
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([sys.executable, "-m", "lightning_fl", "fit", "--config", "run.yaml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "was imported" not in result.stderr
