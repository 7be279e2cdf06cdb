"""The documentation is self-contained, and the packaging ranges admit the locked versions.

- No tracked file outside ``tests/`` cites a specification the project does not ship ("SPEC",
  "SPEC section N") or a path outside the repository (``../shared``): formulas and readings are
  documented in ``docs/algorithms.md``.
- Every pointer "docs/algorithms.md, <Section>" names a heading of ``docs/algorithms.md``.
- ``pyproject.toml``'s dependency ranges admit every exact pin of ``requirements.lock``, so
  ``make`` (which installs the lock) and ``pip install -e .`` into an existing environment agree.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ROOT / "docs" / "algorithms.md"

#: "SPEC" as a word (a citation of the specification), and any path into the sibling folder.
FORBIDDEN = (re.compile(r"\bSPEC\b"), re.compile(r"\.\./shared"))
POINTER = re.compile(r"docs/algorithms\.md, ([^\n]*)")
#: What may follow a section name in a pointer: end of line, punctuation closing the reference, or " (".
POINTER_END = set(")];,.:'\"`*")


def _tracked_text_files() -> list[tuple[str, str]]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        try:
            files.append((name, path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue  # binary files (checkpoints, ...)
    return files


def _headings() -> list[str]:
    headings = []
    for line in ALGORITHMS.read_text(encoding="utf-8").splitlines():
        match = re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)
        if match:
            headings.append(match.group(1))
    return headings


def test_no_citation_outside_the_project():
    offending = [
        f"{name}:{lineno}: {line.strip()}"
        for name, text in _tracked_text_files()
        if not name.startswith("tests/")
        for lineno, line in enumerate(text.splitlines(), 1)
        if any(pattern.search(line) for pattern in FORBIDDEN)
    ]
    assert not offending, "cite docs/algorithms.md or the paper instead:\n" + "\n".join(offending)


def _names_heading(rest: str, headings: list[str]) -> bool:
    for heading in headings:
        if rest.startswith(heading):
            after = rest[len(heading):]
            if not after.strip() or after[0] in POINTER_END or after.startswith(" ("):
                return True
    return False


def test_algorithms_pointers_name_existing_headings():
    headings = _headings()
    assert {"The round", "FedFa", "SCAFFOLD", "IGFL-S", "Tempo", "Fairness metrics"} <= set(headings)
    pointers = [
        (name, lineno, match.group(1))
        for name, text in _tracked_text_files()
        if name != "tests/test_docs.py"  # this file describes the pattern
        for lineno, line in enumerate(text.splitlines(), 1)
        for match in POINTER.finditer(line)
    ]
    assert pointers, "no pointer into docs/algorithms.md found"
    broken = [f"{name}:{lineno}: docs/algorithms.md, {rest}" for name, lineno, rest in pointers
              if not _names_heading(rest, headings)]
    assert not broken, f"pointers to no heading of docs/algorithms.md (headings: {headings}):\n" + "\n".join(broken)


def test_pointer_check_rejects_unknown_sections():
    headings = ["FedFa", "FedFa-mo", "The round"]
    assert _names_heading("FedFa-mo).", headings) and _names_heading("FedFa", headings)
    assert _names_heading("The round; see also", headings)
    assert not _names_heading("FedFa momentum)", headings)
    assert not _names_heading("Round)", headings)
    assert _names_heading("FedFa (paper eqs. 3-15).", headings)


def _locked_versions() -> dict[str, str]:
    locked = {}
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.lock pins exact versions; got {line!r}"
            locked[_canonical(name.split("[")[0])] = version.strip()
    return locked


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


#: Extras that ``make`` never installs, so the lock file does not pin them.
OPTIONAL_UNLOCKED = {"wandb", "mlflow"}


def test_dependency_ranges_admit_the_locked_versions():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    requirements = pytest.importorskip("packaging.requirements")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = list(project["dependencies"])
    # The extras make installs are locked; the optional loggers (wandb, mlflow) are the user's choice.
    for name, extra in project.get("optional-dependencies", {}).items():
        if name in OPTIONAL_UNLOCKED:
            for text in extra:
                assert not any(spec.operator in ("==", "===") for spec in requirements.Requirement(text).specifier)
            continue
        declared += extra
    locked = _locked_versions()
    for text in declared:
        req = requirements.Requirement(text)
        name = _canonical(req.name)
        assert name in locked, f"{req.name} is a dependency but requirements.lock does not pin it"
        assert req.specifier, f"{text}: give a compatible range (e.g. >=X,<Y), not an open dependency"
        assert not any(spec.operator in ("==", "===") for spec in req.specifier), (
            f"{text}: exact pins belong in requirements.lock; pyproject.toml takes compatible ranges")
        assert req.specifier.contains(locked[name], prereleases=True), (
            f"{text} does not admit the locked {req.name}=={locked[name]}")
