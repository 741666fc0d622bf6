"""The real Hermes WebUI server: ``scripts/check_hermes_server.py``'s core scenario, in the suite.

A chat turn in flight across ``hermes update`` (scenario 1), after the docs' lines are
appended to the WebUI's own file (scenario 0): the turn finishes, the daemon's restart
follows it, guarded requests get 409 meanwhile, the new revision is served, and the
restart is confirmed by the WebUI's registration. The WebUI runs from its own
``start.sh --foreground`` under a real supervisord, with the stalewatch of this tree.

The WebUI is never vendored. Provide it with:

- ``STALEWATCH_TESTS_WEBUI``: one or more (space-separated) Hermes WebUI checkouts or
  URLs git can clone, each optionally ``@REV`` (a tag or commit), e.g.
  ``"$HOME/hermes-webui@exp-v0.52.262"``. Each is cloned into the test's temporary
  directory (``git clone``; the source is never changed) and checked out at REV.
- ``STALEWATCH_TESTS_WEBUI_PYTHON``: a Python with the WebUI's ``requirements.txt``
  (pyyaml, cryptography); default: this one, when it imports them.

Otherwise the test skips, saying so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
SOURCES = "STALEWATCH_TESTS_WEBUI"
PYTHON = "STALEWATCH_TESTS_WEBUI_PYTHON"
HOW = (
    f"set {SOURCES} to a Hermes WebUI checkout or URL (optionally @REV, e.g. "
    f"~/hermes-webui@exp-v0.52.262; git clone https://github.com/nesquena/hermes-webui) "
    f"and {PYTHON} to a Python with its requirements.txt"
)
RUN_LIMIT = 420.0  # the harness's own bounds: the WebUI's start, settle, drain, confirm_timeout


def sources() -> list[str]:
    return os.environ.get(SOURCES, "").split()


def webui_python() -> str | None:
    """The Python that runs the WebUI, or None when none has its requirements."""
    python = os.environ.get(PYTHON) or sys.executable
    done = subprocess.run(
        [python, "-c", "import yaml, cryptography"], capture_output=True, timeout=60, check=False
    )
    return python if done.returncode == 0 else None


def clone(source: str, into: Path) -> Path:
    """``source`` (``PATH_OR_URL[@REV]``) cloned into ``into``, at REV when given."""
    where, at, rev = source.rpartition("@")
    if not (at and where) or "/" in rev or ":" in rev:  # git@host:path is a URL, not a REV
        where, rev = source, ""
    path = Path(where).expanduser()
    origin = str(path.resolve()) if path.exists() else where
    done = subprocess.run(
        ["git", "clone", "-q", origin, str(into)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{SOURCES}: git clone {origin} failed: {done.stderr.strip()}")
    if rev:
        done = subprocess.run(
            ["git", "-C", str(into), "checkout", "-q", rev],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"{SOURCES}: no {rev} in {origin}: {done.stderr.strip()}")
    return into


def run_harness(checkout: Path, python: str) -> tuple[int, str]:
    """``check_hermes_server.py CHECKOUT --only 1``; on overrun, interrupted so it stops what it started."""
    harness = subprocess.Popen(
        [sys.executable, "check_hermes_server.py", str(checkout), "--python", python, "--only", "1"],
        cwd=SCRIPTS,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = harness.communicate(timeout=RUN_LIMIT)
    except subprocess.TimeoutExpired:
        # SIGINT: its labs' exits stop supervisord, the WebUI and the daemon by pid.
        harness.send_signal(signal.SIGINT)
        try:
            out, _ = harness.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            harness.kill()
            out, _ = harness.communicate()
        return -1, f"overran {RUN_LIMIT:.0f} s\n{out}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            if harness.poll() is None:
                harness.kill()
    return harness.returncode, out


@pytest.mark.real_server
@pytest.mark.slow
@pytest.mark.timeout(RUN_LIMIT + 200)
@pytest.mark.parametrize("source", sources() or ["(none)"])
def test_a_chat_turn_in_flight_survives_hermes_update_on_the_real_webui(tmp_path: Path, source: str) -> None:
    if not sources():
        pytest.skip(f"no Hermes WebUI: {HOW}")
    python = webui_python()
    if python is None:
        pytest.skip(f"{os.environ.get(PYTHON) or sys.executable} lacks the WebUI's requirements: {HOW}")
    checkout = clone(source, tmp_path / "hermes-webui")

    code, out = run_harness(checkout, python)

    assert code == 0, out
    assert "2 of 2 scenarios passed" in out, out
    for check in (
        "PASS  the WebUI's Python imports the stalewatch under test",
        "PASS  2 lines appended: read accelerated; registers with the daemon",
        "PASS  the turn finished: `done` arrived",
        "PASS  the restart followed the turn",
        "PASS  409 meanwhile",
        "PASS  the new revision is served",
        "PASS  confirmed by the WebUI's registration",
        "waiting: drain: 1 in flight",
    ):
        assert check in out, out
