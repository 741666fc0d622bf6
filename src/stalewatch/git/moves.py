"""What a reflog action means: its name, and how its new commit relates to its old one.

git writes the action first in every reflog message (``GIT_REFLOG_ACTION``): "commit",
"commit (amend)", "pull: Fast-forward", "merge x: Merge made by the 'ort' strategy.",
"reset: moving to HEAD~2", "rebase (pick)"... Each kind of action implies a relation
between the entry's old and new commit: a commit is a child (one commit ahead, along the
first parent), a merge commit or fast-forward a descendant (ahead by an unknown count),
an amend a sibling (the tip replaced, its parents kept), ``reset HEAD~k`` an ancestor
k steps back. :func:`step` and :func:`back` compose a known relation to the loaded commit
through one such entry. Pure functions over strings; no I/O.
"""

from __future__ import annotations

import functools
import re

_MAX_WORD = 40
_RESET_BACK = re.compile(r"(?:HEAD|@)((?:~[0-9]{0,4}|\^1?)+)")
_WORD = re.compile(r"[a-z][a-z0-9._-]{0,31}")

# How an entry's new commit relates to its old one.
CHILD = "child"  # a new commit on top (commit, cherry-pick, revert, rebase pick)
MERGE = "merge"  # a merge commit on top: ahead, by an unknown count
FORWARD = "forward"  # a fast-forward: a descendant, by an unknown count
SIBLING = "sibling"  # the tip replaced (amend, squash, fixup)
OTHER = "other"  # nothing known (checkout, reset to a name, rebase start)
_REBASE: dict[str | None, str] = dict.fromkeys(("pick", "continue", "reword", "edit"), CHILD)
_REBASE |= dict.fromkeys(("squash", "fixup"), SIBLING)  # the step of a rebase's (or pull's) phase
_FIXED = {"cherry-pick": CHILD, "revert": CHILD, "am": CHILD, "clone": OTHER, "branch": OTHER, "fetch": OTHER}


@functools.lru_cache(maxsize=512)
def classify(message: str) -> tuple[str, str | None, str, int]:
    """``(action, detail, step, back)``: ``back`` is k for ``reset: moving to HEAD~k``
    (kept: the entries of a reflog's tail are classified again at each update)."""
    head, _, rest = message.partition(": ")
    phase = None
    if head.endswith(")") and "(" in head:
        head, _, phase = head[:-1].rpartition("(")
        phase = phase.strip().lower() or None
    words = [w for w in head.split() if not w.startswith("-")]
    word = words[0].lower() if words else ""
    lowered = rest.lower()
    if word == "commit":
        return {
            None: ("commit", None, CHILD, 0),
            "amend": ("amend", None, SIBLING, 0),
            "initial": ("commit", "initial", OTHER, 0),
            "merge": ("merge", "commit", MERGE, 0),
        }.get(phase, ("commit", phase, CHILD, 0))
    if word in ("merge", "pull"):
        if lowered.startswith("fast-forward"):
            return word, "fast-forward", FORWARD, 0
        if lowered.startswith("merge made by"):
            return word, "merge", MERGE, 0
        if word == "pull" and ("--rebase" in head.split() or phase):
            return "pull", " ".join(p for p in ("rebase", phase) if p), _REBASE.get(phase, OTHER), 0
        return word, phase, OTHER, 0
    if word == "rebase":
        return "rebase", phase, _REBASE.get(phase, OTHER), 0
    if word == "reset":
        target = rest[len("moving to ") :] if lowered.startswith("moving to ") else rest
        return "reset", target[:_MAX_WORD] or None, OTHER, _steps_back(target)
    if word in ("checkout", "switch"):
        _, to, branch = rest.rpartition(" to ")
        return "checkout", f"to {branch[:_MAX_WORD]}" if to and branch else None, OTHER, 0
    if word in _FIXED:
        return word, phase, _FIXED[word], 0
    named = " ".join(words).lower()[:_MAX_WORD]
    return (named if _WORD.match(named) else "other"), phase, OTHER, 0


def _steps_back(target: str) -> int:
    """k for ``HEAD~k``, ``HEAD^^``, ``@~`` (first-parent steps); 0 for anything else."""
    match = _RESET_BACK.fullmatch(target.strip())
    if match is None:
        return 0
    parts = re.findall(r"~[0-9]*|\^1?", match.group(1))
    return sum(int(part[1:]) if part.startswith("~") and part[1:] else 1 for part in parts)


Rel = tuple[str, int | None, int | None]  # (relation, ahead, behind)
UNKNOWN: Rel = ("unknown", None, None)
SAME: Rel = ("same", 0, 0)


def _plus(count: int | None, n: int | None) -> int | None:
    return None if count is None or n is None else count + n


def step(rel: Rel, kind_of_move: str, steps_back: int) -> Rel:
    """The relation of an entry's new commit, from its old commit's and the action.

    Args:
        rel: how the entry's old commit relates to the loaded one.
        kind_of_move: ``CHILD``, ``MERGE``, ``FORWARD``, ``SIBLING`` or ``OTHER``.
        steps_back: k for ``reset HEAD~k`` (then ``kind_of_move`` is ignored), else 0.
    """
    kind, ahead, behind = rel
    if kind == "unknown":
        return UNKNOWN
    if steps_back:
        return back(rel, steps_back)
    if kind_of_move in (CHILD, MERGE):  # on top: ahead one more (a merge: by some count)
        one = 1 if kind_of_move == CHILD else None
        return ("ahead" if kind in ("same", "ahead") else "diverged", _plus(ahead, one), behind)
    if kind_of_move == FORWARD:
        return ("ahead", None, 0) if kind in ("same", "ahead") else UNKNOWN
    if kind_of_move == SIBLING:  # an amended commit keeps its parents: only the tip is replaced
        return {"same": ("diverged", 1, 1), "behind": ("diverged", 1, _plus(behind, 1))}.get(kind, rel)
    return UNKNOWN


def back(rel: Rel, k: int) -> Rel:
    """``reset HEAD~k``: k first-parent steps back from the old commit."""
    kind, ahead, behind = rel
    if ahead is None:
        return UNKNOWN
    if k < ahead:
        return (kind, ahead - k, behind)
    total = _plus(behind, k - ahead)  # past the commits ahead: behind from where they fork
    return SAME if total == 0 else ("behind", 0, total)
