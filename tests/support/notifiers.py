"""Which notifier the suite runs through (``STALEWATCH_NOTIFIER``; CI runs the contract and
daemon tests a second time with ``observer``), and the mark for tests of the inotify
implementation's own behaviour."""

from __future__ import annotations

import pytest

from stalewatch.core import settings
from stalewatch.watching.notifier import platform_default

__all__ = ["NOTIFIER", "inotify_only"]

NOTIFIER = settings.notifier() or platform_default()
"""The notifier every LocalSource of this run uses."""

inotify_only = pytest.mark.skipif(
    NOTIFIER != "inotify",
    reason=f"the shared inotify instance's own behaviour (this run: STALEWATCH_NOTIFIER={NOTIFIER})",
)
"""Tests of what only the inotify implementation does (its instance, its reader thread,
the kernel's overflow)."""
