"""The errors of :mod:`stalewatch.metrics` (importable without ``prometheus_client``)."""

from __future__ import annotations

from ..core.errors import StalewatchError

__all__ = ["EXTRA", "MetricsError", "MetricsUnavailableError"]

EXTRA = "pip install 'stalewatch[metrics]'"
"""What installs the metrics extra (``prometheus_client``)."""


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
        super().__init__(what, f"needs the prometheus_client library, which is not installed: {EXTRA}")
