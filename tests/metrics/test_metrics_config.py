"""The metrics keys of the daemon's configuration: validated at load, errors naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalewatch.core import settings
from stalewatch.core.errors import ConfigError, DaemonConfigError
from stalewatch.server.config import DaemonConfig, load

pytestmark = pytest.mark.unit


def _load(tmp_path: Path, text: str) -> DaemonConfig:
    file = tmp_path / "c.toml"
    file.write_text(text)
    return load(file)


def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    config = _load(tmp_path, "")
    assert (config.metrics_address, config.metrics_textfile, config.metrics_interval) == (None, None, 15.0)
    assert not config.metrics


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ('metrics_address = "127.0.0.1:9840"', ("127.0.0.1", 9840)),
        ('metrics_address = "0.0.0.0:0"', ("0.0.0.0", 0)),  # noqa: S104 - parsing, not binding
        ('metrics_address = "[::1]:9840"', ("::1", 9840)),
        ('metrics_address = "[::]:9840"', ("::", 9840)),
    ],
)
def test_an_address_is_an_ip_and_a_port(tmp_path: Path, text: str, address: tuple[str, int]) -> None:
    config = _load(tmp_path, text + "\n")
    assert config.metrics_address == address and config.metrics


def test_a_textfile_relative_to_the_file_and_an_interval(tmp_path: Path) -> None:
    (tmp_path / "collector").mkdir()
    config = _load(tmp_path, 'metrics_textfile = "collector/s.prom"\nmetrics_interval = 30\n')
    assert config.metrics_textfile == tmp_path / "collector" / "s.prom"
    assert config.metrics_interval == 30.0 and config.metrics


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('metrics_address = "localhost:9840"', "IP:PORT"),  # no name lookups at load
        ('metrics_address = "127.0.0.1"', "IP:PORT"),
        ('metrics_address = "127.0.0.1:65536"', "IP:PORT"),
        ('metrics_address = "::1:9840"', "IP:PORT"),
        ('metrics_address = "[127.0.0.1]:9840"', "brackets hold an IPv6 address only"),
        ('metrics_address = "300.1.1.1:9840"', "IP:PORT"),
        ("metrics_address = 9840", "IP:PORT"),
        ('metrics_textfile = "{tmp}/s.txt"', "ending in .prom"),
        ('metrics_textfile = "{tmp}/missing/s.prom"', "does not exist"),
        ('metrics_textfile = ""', "non-empty path"),
        ("metrics_interval = 0.5", "between 1 and 3600"),
        ('metrics_interval = "15"', "expected a number"),
        ('metrics_daemon = ""', "1 to 200 printable characters"),
        ("metrics_daemon = 7", "1 to 200 printable characters"),
        ('metrics_daemon = "a\\nb"', "1 to 200 printable characters"),
        ('metrics_daemon = "' + "x" * 201 + '"', "1 to 200 printable characters"),
    ],
)
def test_invalid_metrics_keys_name_file_line_and_key(tmp_path: Path, text: str, reason: str) -> None:
    file = tmp_path / "c.toml"
    file.write_text('log_level = "info"\n\n' + text.format(tmp=tmp_path) + "\n")
    with pytest.raises(DaemonConfigError) as caught:
        load(file)
    key = text.split(" =", 1)[0]
    assert (caught.value.name, caught.value.line, caught.value.file) == (key, 3, file)
    assert str(caught.value).startswith(f"{file}:3: {key}: ")
    assert reason in str(caught.value)


def test_the_daemon_name_from_the_file_then_the_environment_then_the_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _load(tmp_path, 'metrics_daemon = "hermes-webui"\n').metrics_daemon == "hermes-webui"
    assert _load(tmp_path, "").metrics_daemon is None  # resolved at start
    monkeypatch.delenv("STALEWATCH_METRICS_DAEMON", raising=False)
    assert settings.metrics_daemon(None, "/run/x/stalewatch.sock") == "/run/x/stalewatch.sock"
    monkeypatch.setenv("STALEWATCH_METRICS_DAEMON", "api")  # what stalewatch@api.service sets
    assert settings.metrics_daemon(None, "/run/x/stalewatch.sock") == "api"
    assert settings.metrics_daemon("web", "/run/x/stalewatch.sock") == "web"
    monkeypatch.setenv("STALEWATCH_METRICS_DAEMON", "")
    with pytest.raises(ConfigError):
        settings.metrics_daemon(None, "/run/x/stalewatch.sock")
