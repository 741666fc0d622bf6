"""Prometheus metrics: the daemon's (``metrics_address``, ``metrics_textfile``) and an app's.

Needs the ``metrics`` extra (``pip install 'stalewatch[metrics]'``: the official
``prometheus_client``). This package is the only one that imports it, and only when
one of its collectors is asked for: importing :mod:`stalewatch.metrics` itself works
without the extra, and asking for a collector without it raises
:class:`MetricsUnavailableError` (an ``ImportError``) naming the extra.

For an app without the daemon::

    from prometheus_client import REGISTRY
    from stalewatch.metrics import GuardCollector

    REGISTRY.register(GuardCollector(guard))   # read at scrape time; check() unchanged

The metric names, types and labels are in the README ("Metrics") and
:mod:`.families`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.errors import METRICS_EXTRA as EXTRA
from ..core.errors import MetricsError, MetricsUnavailableError
from ..server.checkout import Checkout
from ..server.config import DaemonConfig
from ..server.observer import DaemonObserver
from ..server.registry import Registry

if TYPE_CHECKING:  # both import prometheus_client: loaded only when asked for (load)
    from .collectors import DaemonMetrics, GuardCollector

__all__ = [
    "EXTRA",
    "DaemonMetrics",
    "DaemonObserver",
    "GuardCollector",
    "MetricsError",
    "MetricsUnavailableError",
    "available",
    "for_daemon",
]

_LAZY = ("GuardCollector", "DaemonMetrics")  # in .collectors


def available() -> bool:
    """Whether ``prometheus_client`` (the ``metrics`` extra) can be imported."""
    try:
        importlib.import_module("prometheus_client")
    except ImportError:
        return False
    return True


def load(name: str, what: str) -> Any:
    """``name`` from this package, importing ``prometheus_client`` for it.

    Raises:
        MetricsUnavailableError: the extra is not installed (``what`` names the
            setting or class that asked, for the message).
    """
    if not available():
        raise MetricsUnavailableError(what)
    return getattr(importlib.import_module(f"{__name__}.collectors"), name)


def for_daemon(
    settings: DaemonConfig, entries: Callable[[], Sequence[Checkout]], registry: Registry
) -> DaemonObserver:
    """What the daemon calls: :class:`DaemonMetrics` when the configuration asks for
    metrics, else a :class:`DaemonObserver` that does nothing (and imports nothing).

    Raises:
        MetricsUnavailableError: metrics are configured and the extra is missing.
    """
    if not settings.metrics:
        return DaemonObserver()
    what = "metrics_address" if settings.metrics_address is not None else "metrics_textfile"
    factory: type[DaemonMetrics] = load("DaemonMetrics", what)
    return factory(
        entries,
        registry,
        address=settings.metrics_address,
        textfile=settings.metrics_textfile,
        interval=settings.metrics_interval,
        daemon=settings.metrics_daemon,
    )


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return load(name, f"stalewatch.metrics.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
