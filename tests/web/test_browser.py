"""The example page in a real headless Chromium: "restarting…", then back on the new code.

A supervisord runs scripts/example_wsgi.py, fed by a daemon whose restart policy
restarts it through ``supervisorctl``. The page is opened, a commit lands, and the page
must say a restart is coming, then reload itself once the new server runs the new
revision.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.browser import CHROMIUM, Browser

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from restart_lab import Lab  # noqa: E402

pytestmark = [
    pytest.mark.real_server,
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)"
    ),
]

EXAMPLE = [
    sys.executable,
    str(SCRIPTS / "example_wsgi.py"),
    "{checkout}",
    "--port",
    "{port}",
    "--daemon",
    "{socket}",
]


def test_r7_the_page_says_restarting_and_reloads_itself_onto_the_new_revision() -> None:
    with Lab("supervisord", workers=1, policy="settle = 0.5\n", command=EXAMPLE) as lab, Browser() as browser:
        loaded = lab.head()
        browser.open(f"http://127.0.0.1:{lab.port}/")
        first = browser.console(lambda d: d.get("event") == "snapshot")
        assert first["loaded"] == loaded and first["status"] == "current"
        new = lab.commit("an update")
        restarting = browser.console(lambda d: d.get("event") == "restart")
        assert restarting["phase"] in ("scheduled", "waiting", "verifying", "restarting")
        banner = browser.evaluate("document.getElementById('banner').textContent")
        assert "restarting\u2026" in banner
        reload = browser.console(lambda d: d.get("event") == "reload")
        assert (reload["from"], reload["to"]) == (loaded, new)
        back = browser.console(lambda d: d.get("event") == "snapshot")
        assert (back["loaded"], back["status"]) == (new, "current")
        assert browser.evaluate("document.getElementById('banner').hidden") is True
        assert browser.evaluate("document.getElementById('loaded').textContent") == new[:7]
