"""`stalewatch hermes setup`: a Hermes install found as the WebUI finds it, files a daemon takes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stalewatch.cli import main
from stalewatch.server.config import load
from tests.support.daemons import short_dir, start_daemon
from tests.support.repos import make_agent


@pytest.fixture
def hermes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with ~/.hermes/hermes-agent (a git checkout with run_agent.py and a venv)."""
    home = tmp_path / "home"
    agent = make_agent(home / ".hermes" / "hermes-agent")
    (agent.path / "venv" / "bin").mkdir(parents=True)
    (agent.path / "venv" / "bin" / "python").symlink_to(sys.executable)
    for name in (
        "HERMES_HOME",
        "HERMES_WEBUI_AGENT_DIR",
        "HERMES_WEBUI_PYTHON",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("HERMES_WEBUI_PORT", "8800")
    return home


def test_setup_prints_a_configuration_the_daemon_loads(
    hermes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hermes", "setup"]) == 0
    out = capsys.readouterr().out
    assert "nothing written" in out
    config = hermes / ".config" / "stalewatch" / "hermes.toml"
    assert not config.exists()
    assert main(["hermes", "setup", "--write"]) == 0
    agent = hermes / ".hermes" / "hermes-agent"
    (checkout,) = load(config).checkouts  # also: owner and mode are what the daemon accepts
    policy = checkout.restart
    assert checkout.path == agent and policy is not None
    assert policy.action == ("systemctl", "--user", "restart", "hermes-webui.service")
    assert policy.update_marker == hermes / ".hermes" / ".hermes-update-in-progress"
    assert set(policy.incomplete_markers) == {
        agent / ".update-incomplete",
        agent / ".lazy-refresh-incomplete",
    }
    assert policy.verify == (str(agent / "venv" / "bin" / "python"), "-c", "import run_agent")
    assert policy.confirm is not None and policy.confirm[-1] == "http://127.0.0.1:8800/"
    unit = (hermes / ".config" / "systemd" / "user" / "stalewatch-hermes.service").read_text()
    assert f"--config {config}" in unit and "Before=hermes-webui.service" in unit
    assert "\nPartOf=" not in unit  # the daemon must outlive the restarts it drives
    dropin = hermes / ".config" / "systemd" / "user" / "hermes-webui.service.d" / "stalewatch.conf"
    assert "STALEWATCH_SOCKET=%t/stalewatch-hermes/stalewatch.sock" in dropin.read_text()
    assert (config.stat().st_mode & 0o777) == 0o600


def test_setup_never_overwrites_without_force_nor_writes_through_a_link(
    hermes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = hermes / ".config" / "stalewatch" / "hermes.toml"
    config.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text("# mine\n")
    config.symlink_to(elsewhere)
    assert main(["hermes", "setup", "--write"]) == 2
    err = capsys.readouterr().err
    assert "not overwriting" in err and "--force" in err
    assert config.is_symlink() and elsewhere.read_text() == "# mine\n"
    assert main(["hermes", "setup", "--write", "--force"]) == 0
    assert not config.is_symlink() and elsewhere.read_text() == "# mine\n"  # the link replaced, not followed


def test_setup_finds_the_venv_root_markers_and_the_webui_s_overrides(
    hermes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = tmp_path / "install" / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    monkeypatch.setenv("HERMES_WEBUI_PYTHON", str(venv / "python"))
    monkeypatch.setenv("HERMES_WEBUI_SYSTEMD_UNIT", "my-webui")
    assert main(["hermes", "setup", "--write", "--config", str(tmp_path / "c.toml")]) == 0
    (checkout,) = load(tmp_path / "c.toml").checkouts
    assert checkout.restart is not None
    assert tmp_path / "install" / ".update-incomplete" in checkout.restart.incomplete_markers
    assert checkout.restart.action == ("systemctl", "--user", "restart", "my-webui.service")


def test_setup_without_hermes_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("HERMES_HOME", "HERMES_WEBUI_AGENT_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    if any(Path(p, "run_agent.py").exists() for p in ("/opt/hermes-agent", "/usr/local/hermes-agent")):
        pytest.skip("this machine has a system-wide Hermes Agent")
    assert main(["hermes", "setup"]) == 2
    assert "no Hermes Agent checkout found" in capsys.readouterr().err


@pytest.fixture
def workdir() -> Iterator[Path]:
    with short_dir() as path:
        yield path


def test_the_daemon_starts_with_what_setup_wrote(hermes: Path, workdir: Path) -> None:
    assert main(["hermes", "setup", "--write", "--config", str(workdir / "h.toml")]) == 0
    with start_daemon(workdir, "--config", str(workdir / "h.toml"), env={"HOME": str(hermes)}) as daemon:
        assert daemon.stop() == 0
    assert "watching" in daemon.log_text() or "serving" in daemon.log_text()


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="needs systemd-analyze: apt-get install systemd"
)
def test_the_written_unit_passes_systemd_analyze_verify(hermes: Path) -> None:
    assert main(["hermes", "setup", "--write"]) == 0
    unit = hermes / ".config" / "systemd" / "user" / "stalewatch-hermes.service"
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ},
    )
    complaints = [line for line in done.stderr.splitlines() if "stalewatch-hermes" in line]
    assert done.returncode == 0 and complaints == [], done.stderr
