"""What a daemon's start reads and binds before it opens anything.

``stalewatch daemon`` and ``stalewatch daemon --check`` both call :func:`read` and
:func:`bind`, so the check is the start's own reading (every key of the file, every
checkout bound) stopped before the socket, its lock and the watchers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..core import settings as core_settings
from ..core.errors import DaemonConfigError
from ..protocol.socket_path import default_socket_path
from .checkout import Checkout
from .config import CheckoutConfig, DaemonConfig, load, with_checkouts
from .reloader import plan_reload


@dataclass(frozen=True)
class Startup:
    """The configuration a daemon starts with (``metrics_daemon`` resolved) and its socket."""

    settings: DaemonConfig
    socket: Path


def read(file: Path | None, checkouts: Sequence[str], socket: Path | None) -> Startup:
    """The configuration as a start resolves it: ``file`` (if any) plus ``checkouts``
    named on the command line; the socket is ``socket``, else the file's, else the default.

    Raises:
        DaemonConfigError: the file is unreadable or invalid (its file, line and key), or
            there is nothing to watch.
        SocketPathError: no socket is given and no default directory is set.
        ConfigError: ``STALEWATCH_METRICS_DAEMON`` is invalid.
    """
    settings = with_checkouts(load(file) if file is not None else DaemonConfig(), checkouts)
    if not settings.checkouts:
        reason = "nothing to watch: name a CHECKOUT or add [[checkout]] tables"
        raise DaemonConfigError("checkout", None, reason, file=settings.file)
    path = socket or settings.socket or default_socket_path()
    name = core_settings.metrics_daemon(settings.metrics_daemon, str(path))
    return Startup(replace(settings, metrics_daemon=name), path)


def bind(settings: DaemonConfig, make: Callable[[CheckoutConfig, int], Checkout]) -> dict[str, Checkout]:
    """Every checkout of ``settings`` made by ``make`` (bound, none started), by key.

    Raises:
        BindError: a checkout cannot be bound (it does not exist, is in no git checkout,
            is a file no repository tracks, or its HEAD cannot be read).
        DaemonConfigError: a checkout is configured twice.
    """
    return plan_reload({}, settings, settings, make).fresh
