"""scripts/mutation.py: its list of modules and their tests holds, and it parses its arguments.

The mutation run itself takes minutes per module: it is run by hand, never by the suite.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_script", ROOT / "scripts" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mutation = _load()


def test_every_target_module_and_test_file_exists() -> None:
    assert mutation.TARGETS
    for target in mutation.TARGETS:
        assert (ROOT / target.source).is_file(), target.source
        assert target.tests, target.module
        for test in target.tests:
            assert (ROOT / test).is_file(), test
        for node in target.deselect:
            path, _, name = node.partition("::")
            assert path in target.tests, node
            assert f"def {name}(" in (ROOT / path).read_text(), node


def test_the_pure_decision_modules_are_targets() -> None:
    modules = {t.module for t in mutation.TARGETS}
    assert {
        "core/status.py",
        "git/refs.py",
        "git/files.py",
        "git/packed.py",
        "git/reflog.py",
        "git/moves.py",
        "watching/plan.py",
    } <= modules
    assert len(modules) == len(mutation.TARGETS)


def test_modules_are_chosen_by_path_and_unknown_ones_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = mutation.parse_args(["git/moves.py", "--max-children", "1"])
    assert [t.module for t in args.targets] == ["git/moves.py"]
    assert (args.max_children, args.nice, args.recheck) == (1, 19, False)
    assert [t.module for t in mutation.parse_args([]).targets] == [t.module for t in mutation.TARGETS]
    with pytest.raises(SystemExit):
        mutation.parse_args(["git/nothing.py"])
    assert "not a target: git/nothing.py" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mutation.parse_args(["--max-children", "0"])


def test_the_mutmut_table_it_writes_is_valid_toml_naming_the_module_and_its_tests() -> None:
    target = next(t for t in mutation.TARGETS if t.deselect)
    table = tomllib.loads(mutation.mutmut_config(target))["tool"]["mutmut"]
    assert table["only_mutate"] == [target.source]
    assert table["pytest_add_cli_args_test_selection"] == list(target.tests)
    assert [a for a in table["pytest_add_cli_args"] if a.startswith("--deselect=")] == [
        f"--deselect={node}" for node in target.deselect
    ]


def test_list_prints_the_targets_without_running_mutmut() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "mutation.py"), "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{t.module}: {' '.join(t.tests)}" for t in mutation.TARGETS]
