"""A short run of scripts/torture.py: random git operations, no misses, no false alarms."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import torture


def test_c7_c8_c11_c12_random_git_operations_are_tracked_exactly(tmp_path: Path) -> None:
    result = torture.run(ops=80, seed=20261129, workdir=tmp_path)
    assert result.operations == 80
    assert result.head_changes > 10  # the run really moved HEAD
    assert len(result.by_op) >= 12  # and exercised most kinds of operation
    assert result.problems == []
    assert (result.misses, result.false_alarms) == (0, 0)
