"""Every exception stalewatch raises on purpose, under one base class: :class:`StalewatchError`.

Each error carries the data it is about (a path, a key, a line) as attributes, and
says it in its message. Barrier errors (:class:`StaleError`) are also
:class:`RuntimeError`; bad input is also :class:`ValueError`; a lock file that cannot
be opened is also :class:`OSError`; the metrics extra missing is also
:class:`ImportError`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from .cause import Cause
from .phases import RestartState
from .revisions import short
from .status import Status

METRICS_EXTRA = "pip install 'stalewatch[metrics]'"
"""What installs the metrics extra (``prometheus_client``)."""


class StalewatchError(Exception):
    """Base class of every error stalewatch raises on purpose."""


class _About(StalewatchError):
    """An error about one path (or name): its ``path`` and ``reason``, said as its class's
    ``_says`` words them (just the reason when there is no path)."""

    _says = "{path}: {reason}"

    def __init__(self, path: Path | str | None, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(reason if path is None else self._says.format(path=path, reason=reason))


# -- binding and reading git -------------------------------------------------------------


class BindError(_About, ValueError):
    """A guard could not be bound to what it was given.

    Raised for bad input at binding time: a path that does not exist, a directory
    where a file was expected, a module that is not imported or has no ``__file__``,
    a symlink loop, a path outside any git working tree (for a whole checkout), or a
    checkout whose HEAD cannot be resolved when no revision is known yet.

    Attributes:
        path: the path (or module name) that could not be bound.
        reason: a short human explanation, also part of ``str(error)``.
    """

    path: Path | str


class HeadUnreadableError(BindError):
    """Binding found the checkout but could not resolve its HEAD, and no revision is known
    (or the process could not read it at all: out of descriptors or memory)."""


class RefError(_About):
    """HEAD or a ref could not be read or parsed.

    Attributes:
        path: the file that could not be read or parsed.
        reason: what was wrong with it.
    """

    path: Path | str


class ResourceExhaustedError(RefError):
    """HEAD could not be read for want of a resource of this process, not of the checkout.

    Out of file descriptors (``EMFILE``, ``ENFILE``) or memory (``ENOMEM``,
    ``ENOBUFS``): the reader's fault. Nothing is known about HEAD, so the checkout is
    never called unreadable for it; the guard distrusts its flag and reads again.

    Attributes:
        errno: the ``OSError``'s errno.
    """

    def __init__(self, path: Path | str, reason: str, errno: int) -> None:
        super().__init__(path, reason)
        self.errno = errno


# -- settings and configuration ----------------------------------------------------------


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


class DaemonConfigError(ConfigError):
    """The daemon's configuration is unreadable or invalid.

    Attributes:
        name: the key, e.g. ``checkout[2].on_stale`` (as for :class:`ConfigError`).
        value: the rejected value.
        reason: what is wrong.
        file: the configuration file, ``None`` for command-line input.
        line: the 1-based line of the key in ``file``, when it can be found.
    """

    def __init__(
        self, name: str, value: object, reason: str, *, file: Path | None = None, line: int | None = None
    ) -> None:
        super().__init__(name, value, reason)
        self.reason = reason
        self.file = file
        self.line = line
        where = f"{file}:{line}: " if file is not None and line else f"{file}: " if file is not None else ""
        self.args = (f"{where}{name}: {reason}",)


class SupervisedHandoffError(DaemonConfigError):
    """A restart action the server's supervisor cannot follow: refused at start, on reload,
    and before each restart (gunicorn's ``USR2`` handoff under supervisord or systemd).

    Attributes:
        supervisor: ``supervisord`` or ``systemd``.
        how: how it was told (``SUPERVISOR_PROCESS_NAME in its environment``...).
        pid: the server's master.
        alternative: the configuration that works under that supervisor.
    """

    def __init__(self, supervisor: str, how: str, pid: int, alternative: str, **where: Any) -> None:
        """``where``: the ``name`` (default ``restart.handoff``), ``file`` and ``line`` of the key."""
        self.supervisor = supervisor
        self.how = how
        self.pid = pid
        self.alternative = alternative
        reason = (
            f"the master (pid {pid}) runs under {supervisor} ({how}), which cannot follow a"
            f" handoff: {_FOLLOWS.get(supervisor, 'it waits on the master that a handoff retires')}."
            f" Instead: {alternative}"
        )
        super().__init__(where.pop("name", "restart.handoff"), True, reason, **where)


_FOLLOWS = {
    "supervisord": (
        "the old master exits once retired, supervisord starts gunicorn again, which cannot"
        " bind (FATAL), and the new master runs unsupervised"
    ),
    "systemd": (
        "the old master is the unit's main process; when it exits the unit stops and its"
        " cgroup, the new master included, is killed"
    ),
}


# -- the barrier ---------------------------------------------------------------------------


class StaleError(StalewatchError, RuntimeError):
    """The barrier refused: the checkout no longer holds the loaded code.

    Attributes:
        checkout: the working tree the guard watches.
        loaded_revision: the commit the process loaded its code from.
        current_revision: the commit HEAD resolves to now (``None`` when unreadable).
        status: ``Status.STALE`` or ``Status.UNREADABLE``.
        cause: what moved HEAD (:class:`~stalewatch.core.cause.Cause`), if known;
            the message then says it: *(loaded 1a2b3c4, now 5d6e7f8: pull
            (fast-forward, 3 commits ahead) by alice at 12:03)*.
        restart: the :class:`~stalewatch.core.phases.RestartState` a daemon with a
            restart policy last published, or ``None``.

    Args:
        message: the whole text of the error, for a caller that words it itself
            (the Hermes drop-in does); default: composed from the revisions.
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
        message: str | None = None,
    ) -> None:
        self.checkout = checkout
        self.loaded_revision = loaded_revision
        self.current_revision = current_revision
        self.status = status
        self.cause = cause
        self.restart = restart
        super().__init__(message if message is not None else self._compose())

    def _compose(self) -> str:
        if str(self.status) == "unreadable":
            what, now = f"The git checkout at {self.checkout} can no longer be read", "unknown"
        else:
            moved = f": {self.cause.describe()}" if self.cause is not None else ""
            what = f"The code in {self.checkout} was updated while this process was running"
            now = f"{short(self.current_revision)}{moved}"
        return f"{what} (loaded {short(self.loaded_revision)}, now {now}); restart the process to load it."


class AgentRuntimeChangedError(StaleError):
    """The loaded Hermes Agent no longer matches its checkout: restart WebUI.

    A :class:`RuntimeError` and a :class:`StaleError`, so generic stalewatch barriers
    (:mod:`stalewatch.web`) answer it with a 409 too. Like the WebUI's own class it is
    built from one message; the revisions are optional.

    Args:
        message: the whole text of the error.
        checkout: the Agent source directory; default: :attr:`default_checkout`
            (the drop-in's bound directory, else its discovered ``_AGENT_DIR``).
        loaded_revision: the commit the WebUI loaded.
        current_revision: the commit HEAD resolves to now (``None``: unknown).
        status: ``Status.STALE`` or ``Status.UNREADABLE``.
        cause: what moved HEAD, from the reflog (also in the message), if known.

    Example::

        try:
            hermes.ensure_agent_runtime_current()
        except hermes.AgentRuntimeChangedError as exc:
            return json_response(hermes.agent_runtime_stale_payload(exc), status=409)
    """

    default_checkout: ClassVar[Callable[[], Path | None]] = staticmethod(lambda: None)
    """Where an error built without a ``checkout`` says the Agent is (set by the drop-in)."""

    def __init__(
        self,
        message: str,
        *,
        checkout: Path | None = None,
        loaded_revision: str | None = None,
        current_revision: str | None = None,
        status: Status = Status.STALE,
        cause: Cause | None = None,
    ) -> None:
        where = checkout if checkout is not None else (type(self).default_checkout() or Path())
        super().__init__(where, loaded_revision, current_revision, status, cause, message=message)


# -- the daemon's socket -------------------------------------------------------------------


class ProtocolError(StalewatchError):
    """A line that breaks the daemon's protocol.

    Attributes:
        line: the offending bytes (truncated to 200).
        reason: what is wrong with it.
    """

    def __init__(self, line: bytes, reason: str) -> None:
        self.line = line[:200]
        self.reason = reason
        super().__init__(f"{reason}: {self.line!r}")


class SocketPathError(_About):
    """No usable socket path: none given and no runtime directory, or a bad path.

    Attributes:
        path: the path (``None`` when there was none to try).
        reason: what is wrong.
    """


class DaemonUnavailableError(_About):
    """The daemon's socket cannot be reached, or it answered something unexpected.

    Attributes:
        path: the socket path.
        reason: what went wrong.
    """

    _says = "cannot reach the stalewatch daemon at {path}: {reason}"


class LockError(StalewatchError, OSError):
    """The handoff lock file cannot be opened or locked (a symlink, a missing directory,
    permissions). An :class:`OSError` too: ``errno`` and ``strerror`` say why."""


# -- metrics and setup ---------------------------------------------------------------------


class MetricsError(StalewatchError):
    """Metrics cannot be exposed as configured (an address in use, a textfile not writable).

    Attributes:
        what: the setting, e.g. ``metrics_address``.
        reason: what went wrong.
    """

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"{what}: {reason}")


class MetricsUnavailableError(MetricsError, ImportError):
    """Metrics were asked for, but ``prometheus_client`` (the ``metrics`` extra) is missing.

    Also an :class:`ImportError`, so ``from stalewatch.metrics import GuardCollector``
    fails the way a missing optional dependency usually does, with a message naming
    the extra.
    """

    def __init__(self, what: str) -> None:
        super().__init__(
            what, f"needs the prometheus_client library, which is not installed: {METRICS_EXTRA}"
        )


class SetupError(StalewatchError):
    """``stalewatch hermes setup`` has nothing to set up: no Hermes found, or a file is in the way."""
