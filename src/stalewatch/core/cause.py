"""What moved HEAD to the current commit: :class:`Cause`, a value type.

:mod:`stalewatch.git.reflog` reads it from the reflog when HEAD moves; a guard keeps it
in its :class:`~.status.Snapshot` and events, a :class:`~.errors.StaleError` says it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date
from typing import Any


@dataclass(frozen=True)
class Cause:
    """What moved HEAD to the current commit, as far as the reflog tells.

    Attributes:
        action: ``pull``, ``commit``, ``amend``, ``merge``, ``checkout``, ``reset``,
            ``rebase``, ``cherry-pick``, ``revert``, ``am``, ``clone``, ``branch``, or
            the first word(s) of a custom ``GIT_REFLOG_ACTION``; ``other`` if none.
        detail: what kind of that action (``fast-forward``, ``merge``, ``finish``, the
            reset's target, the branch checked out), if the message says.
        message: the reflog message itself.
        name, email: who ran it; ``at``: Unix time; ``tz``: the offset it was written in.
        relation: the new commit against the loaded one: ``ahead``, ``behind``,
            ``diverged``, ``same`` or ``unknown``.
        ahead, behind: commits along the first-parent line, when the chain tells.
    """

    action: str
    detail: str | None
    message: str
    name: str
    email: str
    at: float
    tz: str
    relation: str
    ahead: int | None = None
    behind: int | None = None

    def describe(self, now: float | None = None) -> str:
        """One phrase: ``pull (fast-forward, 3 commits ahead) by alice at 12:03``."""
        inside = [part for part in (self.detail, self._relation_words()) if part]
        text = f"{self.action} ({', '.join(inside)})"  # the relation's words are never empty
        who = self.name or self.email
        return f"{text}{f' by {who}' if who else ''} at {self._when(now)}"

    def _relation_words(self) -> str:
        if self.relation == "same":
            return "back to the loaded commit"
        if self.relation == "unknown":
            return "ahead/behind unknown"
        if self.relation == "diverged":
            counts = ", ".join(
                _commits(n, w) for n, w in ((self.ahead, "ahead"), (self.behind, "behind")) if n
            )
            return f"diverged: {counts}" if counts else "diverged"
        return _commits(self.ahead if self.relation == "ahead" else self.behind, self.relation)

    def _when(self, now: float | None) -> str:
        """``12:03`` in the entry's own offset; with the date unless it is today there.

        Arithmetic, not ``datetime``: this runs on every update's path, where the
        timezone, two datetimes and ``strftime`` cost ~150 µs of a cold CPU.
        """
        try:
            offset = int(self.tz[1:3]) * 60 + int(self.tz[3:5])
            shift = (-offset if self.tz[0] == "-" else offset) * 60
            day, seconds = divmod(int(self.at // 1) + shift, 86_400)
            today = (int(time.time() if now is None else now) + shift) // 86_400
            on = None if day == today else date.fromordinal(day + _EPOCH_ORDINAL)
        except (ValueError, OverflowError, IndexError):  # a time no calendar holds
            return f"@{self.at:.0f}"
        if offset >= _DAY_MINUTES:  # an offset datetime.timezone refuses: as before
            return f"@{self.at:.0f}"
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}"
        return clock if on is None else f"{on.year}-{on.month:02d}-{on.day:02d} {clock}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values, with ``summary`` (:meth:`describe`) for human lines."""
        return {**vars(self), "summary": self.describe()}  # the fields, in their order


_DAY_MINUTES = 24 * 60
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def _commits(count: int | None, relation: str) -> str:
    """``1 commit ahead``, ``3 commits behind``; ``some commits ahead`` when the reflog
    does not tell how many (a fast-forward, a merge): one wording for every cause."""
    if count is None:
        return f"some commits {relation}"
    return f"{count} commit{'s' if count != 1 else ''} {relation}"
