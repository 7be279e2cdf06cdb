"""Package structure: one import path per module, every package installed, imports flow one way between packages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tomllib
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


# ----------------------------------------------------------------------------------------- layering
#: Every package and the packages it may import besides itself, lowest first (docs/architecture.md, Layers).
#: The core is lightning_fl: its base, the parts built on the base, the simulation that assembles them,
#: the experiments run with it and the apps on top. The algorithms (callbacks) and the data sets
#: (datamodules) import the core up to the simulation and never each other; only the apps import them.
BASE = {"faults", "state", "functional"}
PARTS = BASE | {"models", "engines", "reporting", "aggregation", "privacy", "personalization"}
SIMULATION = PARTS | {"simulation"}
ALLOWED: dict[str, set[str]] = {
    "faults": set(),                                             # errors, failed writes, checkpoints
    "state": {"faults"},                                         # client data, seeds, per-client rows
    "functional": {"faults", "state"},                           # the algorithms' pure functions
    "models": BASE,                                              # client models
    "engines": BASE | {"models"},                                # local training, batched evaluation
    "reporting": BASE,                                           # the round logger, figures, tables
    "aggregation": BASE | {"models", "engines", "reporting"},    # the aggregation pipeline's stages
    "privacy": BASE | {"models", "engines", "reporting", "aggregation"},  # client-level DP: stages, accounting
    "personalization": BASE,                                     # the declared evaluation protocol (model.eval)
    "simulation": PARTS,                                         # the loop, rounds, federation, ...
    "experiments": SIMULATION,                                   # configs x seeds in processes
    "reproduce": SIMULATION | {"experiments"},                   # the seed papers' experiments
    "callbacks": SIMULATION,                                     # lightning_fl.callbacks: algorithms
    "datamodules": SIMULATION,                                   # lightning_fl.datamodules: data sets
    "apps": SIMULATION | {"experiments", "reproduce", "callbacks", "datamodules"},  # commands
}
#: The modules of lightning_fl/ itself: the (empty) namespace package and ``python -m lightning_fl``.
ROOT = {"lightning_fl": "apps", "lightning_fl.__main__": "apps"}


def _module_files() -> dict[str, Path]:
    modules = {}
    for root in ("lightning_fl", *MAPPED):
        for file in (REPO / root).rglob("*.py"):
            package = _package_name(file.parent)
            modules[package if file.stem == "__init__" else f"{package}.{file.stem}"] = file
    return modules


def _imports(name: str, file: Path, known: set[str]) -> set[str]:
    """Every project module ``file`` imports, at any depth of the file (deferred and TYPE_CHECKING too)."""
    found = set()
    package = name if file.stem == "__init__" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # ``from lightning_fl import x`` imports the submodule x; the empty root package counts for nothing
            targets = ([base] if base != "lightning_fl" else []) + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def _package(module: str) -> str:
    """The package of ALLOWED that ``module`` belongs to (a module of lightning_fl/ itself: its own name)."""
    if module in ROOT:
        return ROOT[module]
    for folder, namespace in MAPPED.items():
        if module == namespace or module.startswith(namespace + "."):
            return folder
    return module.split(".")[1]


def _graph() -> dict[str, set[str]]:
    files = _module_files()
    return {name: _imports(name, file, set(files)) for name, file in files.items()}


def test_every_module_is_in_a_layer() -> None:
    # No flat modules in lightning_fl/: a module belongs to a package of the table, or the table grows a row.
    strays = sorted(m for m in _module_files() if _package(m) not in ALLOWED)
    assert not strays, "modules outside every package of ALLOWED: " + ", ".join(strays)


def test_packages_are_ordered_one_way() -> None:
    # The table itself has no circle: no package may import one that may import it, even through others.
    def reachable(package: str) -> set[str]:
        seen, todo = set(), [package]
        while todo:
            for nxt in ALLOWED[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    assert all(set(ALLOWED[p]) <= set(ALLOWED) for p in ALLOWED)
    circular = sorted(p for p in ALLOWED if p in reachable(p))
    assert not circular, f"packages that may import themselves through others: {circular}"


def test_imports_flow_one_way() -> None:
    wrong = sorted(f"{a} ({_package(a)}) imports {b} ({_package(b)})" for a, targets in _graph().items()
                   for b in targets
                   if _package(b) != _package(a) and _package(b) not in ALLOWED.get(_package(a), set()))
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = _graph()
    # Tarjan's strongly connected components: any component of two or more modules is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


#: What a callback may read from the LightningModule it is handed by Lightning's own hooks: the
#: Lightning API, never the loop's attributes (a federated callback gets a Federation instead).
LIGHTNING_MODULE_API = {"loggers", "log", "device"}


def test_callbacks_do_not_reach_into_the_loop() -> None:
    wrong = []
    for file in sorted((REPO / "callbacks").glob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Name) and node.id == "loop":
                wrong.append(f"{file.name}:{node.lineno} uses a name 'loop'")
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "pl_module" and node.attr not in LIGHTNING_MODULE_API):
                wrong.append(f"{file.name}:{node.lineno} reads pl_module.{node.attr}")
    assert not wrong, "\n".join(wrong)
