"""ARCHITECTURE.md is a codemap that stays true: it names every module, and only modules that exist.

A module renamed or removed leaves the map pointing at nothing (the restart sequence's
``sequence.py``, ``announce.py``... outlived their code once); a module added without a
line leaves a reader without a map. Both fail here, by name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "stalewatch"
MAP = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
# Paths the map names that are not our modules: Hermes WebUI's, the test tree's, git's refs.
NOT_OURS = ("api/", "tests/", "refs/")
TICKED = re.compile(r"`([^`\s]+)`")
# `server/restart/markers.assess`, `guard/guard.py`, `watching/plan.plan`: a module by path.
BY_PATH = re.compile(r"^([a-z_]+(?:/[a-z_]+)+)(?:\.py|\.[A-Za-z_][\w.]*)?$")


def _modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def _ticked() -> list[str]:
    return TICKED.findall(MAP)


def test_every_module_is_on_the_map() -> None:
    named = set(_ticked())
    missing = [
        str(path.relative_to(PACKAGE))
        for path in _modules()
        if path.name not in named
        and str(path.relative_to(PACKAGE)) not in named
        and not any(t.startswith(str(path.relative_to(PACKAGE).with_suffix("")) + ".") for t in named)
    ]
    assert missing == [], f"ARCHITECTURE.md does not name: {missing}"


def test_every_file_the_map_names_exists() -> None:
    names = {path.name for path in _modules()} | {"__init__.py", "py.typed"}
    gone = [token for token in _ticked() if token.endswith(".py") and "/" not in token and token not in names]
    assert gone == [], f"ARCHITECTURE.md names modules that do not exist: {gone}"


def test_every_module_path_the_map_names_exists() -> None:
    gone = []
    for token in _ticked():
        match = BY_PATH.match(token)
        if match is None or token.startswith(NOT_OURS):
            continue
        module = PACKAGE / match.group(1)
        if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
            gone.append(token)
    assert gone == [], f"ARCHITECTURE.md points at modules that do not exist: {gone}"
