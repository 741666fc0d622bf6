"""The docs' settings tables are the declarations' (scripts/settings_tables.py, in check mode).

A key added, renamed, given new bounds or a new default changes its declaration; the
docs follow only through the script, so a table written by hand, or left behind, fails
here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "settings_tables.py"


def check(docs: Path, *options: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(SCRIPT), "--docs", str(docs), *options]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_the_docs_tables_are_the_declarations() -> None:
    done = check(ROOT / "docs")
    assert done.returncode == 0, done.stderr


def test_a_table_that_differs_from_the_declarations_fails_and_write_mends_it(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "restart.md"
    text = page.read_text(encoding="utf-8")
    row = "| `settle` | seconds, 0 to 3600 | `2` |"
    assert row in text
    page.write_text(text.replace(row, "| `settle` | seconds, 0 to 3600 | `5` |"), encoding="utf-8")
    done = check(docs)
    assert done.returncode == 1
    assert f"{page}: a settings table differs from the declarations" in done.stderr
    assert check(docs, "--write").returncode == 0
    assert page.read_text(encoding="utf-8") == text
    assert check(docs).returncode == 0


def test_a_missing_or_unknown_table_fails(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "library.md"
    page.write_text(
        page.read_text(encoding="utf-8").replace("<!-- settings: environment -->", "<!-- settings: nope -->"),
        encoding="utf-8",
    )
    done = check(docs)
    assert done.returncode == 1
    assert "library.md: unknown settings table 'nope'" in done.stderr
    assert "no page holds the settings table 'environment'" in done.stderr
