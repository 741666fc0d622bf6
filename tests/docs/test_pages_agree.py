"""Pages that tell the same fact tell it alike, and as the code does it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.daemons import short_dir, start_daemon
from tests.support.repos import Repo

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sections_on(subject: str) -> dict[str, list[str]]:
    """Each page's sections (from one heading to the next) naming ``subject``, whitespace folded."""
    found = {}
    for page in PAGES:
        sections = [re.sub(r"\s+", " ", s) for s in re.split(r"\n#+ ", page.read_text()) if subject in s]
        if sections:
            found[page.name] = sections
    return found


def test_the_pages_agree_with_the_daemon_on_its_lock_file(git_repo: Repo) -> None:
    """Issue 29: daemon.md said `<socket>.lock` stays behind after the daemon exits;
    troubleshooting and the changelog said it goes (it does)."""
    with short_dir() as workdir, start_daemon(workdir, str(git_repo.path)) as daemon:
        lock = daemon.socket.with_name(daemon.socket.name + ".lock")
        assert lock.exists()
        assert daemon.stop() == 0  # SIGTERM
        assert not lock.exists()
    told = _sections_on("<socket>.lock")
    assert {"daemon.md", "troubleshooting.md"} <= set(told), told
    for page, sections in told.items():
        assert not [s for s in sections if "stays behind" in s], (page, sections)
    for page in ("daemon.md", "troubleshooting.md"):
        assert any("removes it when it exits" in s for s in told[page]), told[page]
