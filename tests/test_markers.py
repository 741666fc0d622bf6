"""The test suite's own rules: every test is exactly one of unit, integration, real_server;
helpers come from tests.support, never from a conftest."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from tests.support.kinds import KINDS

pytestmark = pytest.mark.unit


def test_every_collected_test_has_exactly_one_kind(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    assert request.node in items
    wrong = {
        item.nodeid: kinds
        for item in items
        if len(kinds := [kind for kind in KINDS if item.get_closest_marker(kind) is not None]) != 1
    }
    assert wrong == {}


def test_a_unit_test_may_not_start_a_thread() -> None:
    with pytest.raises(AssertionError, match="a unit test started a thread"):
        threading.Thread(target=lambda: None).start()


def test_no_test_imports_a_conftest() -> None:
    importing = []
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(name.split(".")[-1] == "conftest" for name in names):
                importing.append(str(path))
    assert importing == []
