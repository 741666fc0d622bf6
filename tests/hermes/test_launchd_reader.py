"""Reading a LaunchAgent (outside input): any plist, any bytes, any file kind, never an
exception or a hang; a plist whose keys launchd would refuse is not the WebUI's."""

from __future__ import annotations

import os
import plistlib
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalewatch.hermes.supervisors.kinds import MOST_BYTES, Launchd, _launch_agent
from tests.support.properties import budget

pytestmark = pytest.mark.unit

_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=12)  # what XML plists hold
_SCALARS = st.one_of(
    _TEXT,
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.booleans(),
    st.binary(max_size=12),
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1)),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
_AGENTS = st.fixed_dictionaries(  # a LaunchAgent's keys: of the right type, or any value
    {},
    optional={
        "Label": _TEXT | _VALUES,
        "Program": _TEXT | _VALUES,
        "ProgramArguments": st.lists(_TEXT, max_size=4) | _VALUES,
        "EnvironmentVariables": st.dictionaries(_TEXT, _TEXT, max_size=4) | _VALUES,
        "KeepAlive": _VALUES,
    },
)
_FORMATS = st.sampled_from([plistlib.FMT_XML, plistlib.FMT_BINARY])


def _read(raw: bytes) -> tuple[str, list[str], dict[str, str]] | None:
    with tempfile.TemporaryDirectory() as directory:
        plist = Path(directory) / "agent.plist"
        plist.write_bytes(raw)
        return _launch_agent(plist)


def _typed(found: tuple[str, list[str], dict[str, str]] | None) -> bool:
    if found is None:
        return True
    label, argv, environ = found
    return all(isinstance(word, str) for word in [label, *argv, *environ, *environ.values()])


def _as_launchd_reads(value: Any) -> tuple[str, list[str], dict[str, str]] | None:
    """What launchd takes of ``value``: every key it reads of its type, else nothing."""
    if not isinstance(value, dict):
        return None
    label, program = value.get("Label"), value.get("Program", "")
    arguments, environ = value.get("ProgramArguments", []), value.get("EnvironmentVariables", {})
    if not (isinstance(label, str) and isinstance(program, str)):
        return None
    if not (isinstance(arguments, list) and all(isinstance(a, str) for a in arguments)):
        return None
    if not (isinstance(environ, dict) and all(isinstance(v, str) for v in environ.values())):
        return None
    return label, [program, *arguments] if "Program" in value else arguments, environ


@budget(300)
@given(value=_AGENTS | _VALUES, fmt=_FORMATS)
def test_any_plist_value_is_read_as_launchd_reads_it_never_raising(
    value: Any, fmt: plistlib.PlistFormat
) -> None:
    found = _read(plistlib.dumps(value, fmt=fmt))
    assert _typed(found)
    expected = _as_launchd_reads(value)
    # An XML plist may hold what its reader refuses (U+FFFE): then it is not read at all.
    assert found == expected or (fmt == plistlib.FMT_XML and found is None)


@budget(300)
@given(
    head=st.sampled_from([b"", b"bplist00", b"<?xml version='1.0'?><plist>", b"<plist><dict>"]),
    body=st.binary(max_size=200),
)
def test_any_bytes_are_read_without_raising(head: bytes, body: bytes) -> None:
    assert _typed(_read(head + body))


@pytest.mark.parametrize(
    "agent",
    [
        {"Label": "w", "ProgramArguments": 5},  # was: TypeError, a traceback from setup
        {"Label": "w", "ProgramArguments": True},
        {"Label": "w", "ProgramArguments": "/bin/bash hermes-webui/start.sh"},  # a string, not a list
        {"Label": "w", "ProgramArguments": ["/bin/bash", 5, "hermes-webui/start.sh"]},
        {"Label": "w", "Program": ["hermes-webui/start.sh"]},
        {"Label": "w", "ProgramArguments": ["hermes-webui/start.sh"], "EnvironmentVariables": ["A=1"]},
        {"Label": "w", "ProgramArguments": ["hermes-webui/start.sh"], "EnvironmentVariables": {"P": 8}},
        {"Label": 5, "ProgramArguments": ["hermes-webui/start.sh"]},
        ["hermes-webui/start.sh"],  # not a dict
    ],
)
def test_a_launch_agent_with_keys_of_the_wrong_type_is_not_the_webuis(tmp_path: Path, agent: Any) -> None:
    agents = tmp_path / "Library" / "LaunchAgents"
    agents.mkdir(parents=True)
    (agents / "w.plist").write_bytes(plistlib.dumps(agent))
    assert Launchd().definitions(None, tmp_path) == []


def test_a_launch_agent_is_read_with_its_program_and_environment(tmp_path: Path) -> None:
    agent = {
        "Label": "w",
        "Program": "/bin/bash",
        "ProgramArguments": ["bash", "/srv/hermes-webui/start.sh"],
        "EnvironmentVariables": {"HERMES_WEBUI_PORT": "8800"},
    }
    plist = tmp_path / "w.plist"
    plist.write_bytes(plistlib.dumps(agent, fmt=plistlib.FMT_BINARY))
    assert _launch_agent(plist) == (
        "w",
        ["/bin/bash", "bash", "/srv/hermes-webui/start.sh"],
        {"HERMES_WEBUI_PORT": "8800"},
    )
    # Past the bound it is not read at all (a LaunchAgent is a few hundred bytes).
    plist.write_bytes(plistlib.dumps(agent).replace(b"<dict>", b"<dict>" + b" " * MOST_BYTES))
    assert _launch_agent(plist) is None


@pytest.mark.timeout(10)
def test_a_fifo_among_the_launch_agents_never_blocks(tmp_path: Path) -> None:
    agents = tmp_path / "Library" / "LaunchAgents"
    agents.mkdir(parents=True)
    os.mkfifo(agents / "a.plist")  # nobody writes it: a blocking open would wait for ever
    agent = {"Label": "w", "ProgramArguments": ["/bin/bash", "/srv/hermes-webui/start.sh"]}
    (agents / "w.plist").write_bytes(plistlib.dumps(agent))
    assert [found.name for found in Launchd().definitions(None, tmp_path)] == ["w"]
