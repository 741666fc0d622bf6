"""The exceptions stalewatch raises. All derive from :class:`StalewatchError`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # git.reflog imports this module: no import cycle at run time
    from ..git.reflog import Cause
    from .restart import RestartState


class StalewatchError(Exception):
    """Base class of every error stalewatch raises on purpose."""


class BindError(StalewatchError, ValueError):
    """A guard could not be bound to what it was given.

    Raised for bad input at binding time: a path that does not exist, a directory
    where a file was expected, a module that is not imported or has no ``__file__``,
    a symlink loop, a path outside any git working tree (for a whole checkout), or a
    checkout whose HEAD cannot be resolved when no revision is known yet.

    Attributes:
        path: the path (or module name) that could not be bound.
        reason: a short human explanation, also part of ``str(error)``.
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class HeadUnreadableError(BindError):
    """Binding found the checkout but could not resolve its HEAD, and no revision is known."""


class RefError(StalewatchError):
    """HEAD or a ref could not be read or parsed.

    Attributes:
        path: the file that could not be read or parsed.
        reason: what was wrong with it.
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class NeedsGitError(RefError):
    """In-process parsing cannot decide (reftable, an unknown ref format): ask ``git``."""


class ConfigError(StalewatchError, ValueError):
    """A setting (keyword argument or ``STALEWATCH_*`` variable) has an invalid value.

    Attributes:
        name: the setting's name, e.g. ``STALEWATCH_VERIFY_INTERVAL``.
        value: the value that was rejected.
    """

    def __init__(self, name: str, value: object, reason: str) -> None:
        self.name = name
        self.value = value
        super().__init__(f"{name}={value!r}: {reason}")


def short(revision: str | None) -> str:
    """Return the 7-character form of a revision, or ``(none)`` when unknown."""
    return revision[:7] if revision else "(none)"


class StaleError(StalewatchError, RuntimeError):
    """The barrier refused: the checkout no longer holds the loaded code (C3, C4).

    Attributes:
        checkout: the working tree the guard watches.
        loaded_revision: the commit the process loaded its code from.
        current_revision: the commit HEAD resolves to now (``None`` when unreadable).
        status: ``Status.STALE`` or ``Status.UNREADABLE``.
        cause: what moved HEAD (:class:`~stalewatch.git.reflog.Cause`), if known;
            the message then says it: *(loaded 1a2b3c4, now 5d6e7f8: pull
            (fast-forward, 3 commits ahead) by alice at 12:03)*.
        restart: the :class:`~stalewatch.core.restart.RestartState` a daemon with a
            restart policy last published, or ``None`` (R7).
    """

    def __init__(
        self,
        checkout: Path,
        loaded_revision: str | None,
        current_revision: str | None,
        status: object,
        cause: Cause | None = None,
        *,
        restart: RestartState | None = None,
    ) -> None:
        self.checkout = checkout
        self.loaded_revision = loaded_revision
        self.current_revision = current_revision
        self.status = status
        self.cause = cause
        self.restart = restart
        if str(status) == "unreadable":
            what = (
                f"the git checkout at {checkout} can no longer be read "
                f"(loaded {short(loaded_revision)}, now unknown)"
            )
        else:
            moved = f": {cause.describe()}" if cause is not None else ""
            what = (
                f"the code in {checkout} was updated while this process was running "
                f"(loaded {short(loaded_revision)}, now {short(current_revision)}{moved})"
            )
        super().__init__(f"{what[0].upper()}{what[1:]}; restart the process to load it.")
