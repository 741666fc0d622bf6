"""scripts/attacks.py's committer: every move it times is a change of the ref.

An event is a change of status: a ref rewritten with the commit it already holds gives
none, rightly. The reload attacks share their checkouts, so a committer may start on a
ref an earlier one left on either commit; one that "moved" it to the commit it held
counted an event that was never due as lost (issue 17's reload rows).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"

# The committer against a subscriber that sees every move at once (pure logic: the
# daemon's side is measured by the attack itself); prints the ref's content before each
# move and the commit moved to.
DRIVER = """
import sys, threading
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from attacks import Committer

ref = Path(sys.argv[2]) / ".git/refs/heads/main"
moves, done = [], threading.Event()

class Seen:
    def wait_event(self, revision, since, timeout):
        moves.append(revision)
        if len(moves) == 4:
            done.set()
        return since

before = ref.read_text().strip()
committer = Committer(ref.parents[3], ("a" * 40, "b" * 40), Seen(), interval=0.001).start()
assert done.wait(10), moves
committer.stop()
print(before, *moves[:4])
"""


@pytest.mark.parametrize("start", ["a", "b"])
def test_the_committers_first_move_changes_the_ref_whatever_it_holds(tmp_path: Path, start: str) -> None:
    heads = tmp_path / ".git" / "refs" / "heads"
    heads.mkdir(parents=True)
    (heads / "main").write_text(start * 40 + "\n")
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(SCRIPTS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    before, *moves = done.stdout.split()
    other = "b" if start == "a" else "a"
    assert before == start * 40
    assert moves == [other * 40, start * 40, other * 40, start * 40]
