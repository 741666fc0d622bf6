"""The systemd drop-ins for metrics: valid beside both units, opening exactly what each route needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"
ANALYZE = shutil.which("systemd-analyze")


def _settings(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def test_the_http_drop_in_opens_tcp_and_nothing_else() -> None:
    settings = _settings(UNITS / "metrics-http.conf")
    assert ("PrivateNetwork", "no") in settings
    families = [value for key, value in settings if key == "RestrictAddressFamilies"]
    assert families == ["", "AF_UNIX AF_INET AF_INET6"]  # reset, then the full list
    assert ("IPAddressDeny", "any") in settings
    assert {key for key, _ in settings} == {
        "PrivateNetwork",
        "RestrictAddressFamilies",
        "IPAddressDeny",
        "IPAddressAllow",
    }


def test_the_textfile_drop_in_keeps_the_network_closed() -> None:
    settings = _settings(UNITS / "metrics-textfile.conf")
    assert settings == [("ReadWritePaths", "/var/lib/node_exporter/textfile_collector")]


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("drop_in", ["metrics-http.conf", "metrics-textfile.conf"])
@pytest.mark.parametrize(
    ("name", "verify_as"),
    [
        ("stalewatch.service", "stalewatch.service"),
        ("stalewatch@.service", "stalewatch@hermes-webui.service"),
    ],
)
def test_systemd_analyze_verify_with_the_drop_in(
    tmp_path: Path, drop_in: str, name: str, verify_as: str
) -> None:
    executable = Path(sys.executable).with_name("stalewatch")
    assert executable.exists()
    text = (UNITS / name).read_text().replace("/opt/stalewatch/bin/stalewatch", str(executable))
    (tmp_path / name).write_text(text)
    (tmp_path / f"{name}.d").mkdir()
    shutil.copy(UNITS / drop_in, tmp_path / f"{name}.d" / drop_in)
    assert ANALYZE is not None
    done = subprocess.run(
        [ANALYZE, "verify", str(tmp_path / verify_as)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Bad values are only warnings, naming the file: none may name the drop-in or the unit.
    unit = name.split("@", maxsplit=1)[0]
    complaints = [line for line in done.stderr.splitlines() if drop_in in line or unit in line]
    assert complaints == []
