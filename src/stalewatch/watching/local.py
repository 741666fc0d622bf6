"""Watching in this process: :class:`LocalSource`, the default source of a guard."""

from __future__ import annotations

from ..core import settings
from ..git.refs import GitDirs
from .notifier import platform_default
from .source import OnChange, OnHealth
from .watcher import Watcher


class LocalSource:
    """Watch in this process: the process's inotify instance and its few worker threads.

    Args:
        verify_interval: seconds between periodic in-process re-verifications.
        poll: poll instead of kernel notifications (filesystems without them).
        poll_interval: seconds between polls.

    Each falls back to its ``STALEWATCH_*`` variable (see :mod:`stalewatch.core.settings`);
    the notifier is ``STALEWATCH_NOTIFIER``'s, else the platform's
    (:mod:`stalewatch.watching.notifier`).
    """

    def __init__(
        self,
        *,
        verify_interval: float | None = None,
        poll: bool | None = None,
        poll_interval: float | None = None,
    ) -> None:
        self.verify_interval = settings.verify_interval(verify_interval)
        chosen = settings.notifier()
        if poll is False and chosen == "polling":  # the keyword outranks the variable
            chosen = None
        self.notifier = chosen or platform_default()
        self.poll = settings.poll(poll) or self.notifier == "polling"
        self.poll_interval = settings.poll_interval(poll_interval)

    def watch(self, dirs: GitDirs, on_change: OnChange, on_health: OnHealth, **ignored: object) -> Watcher:
        """Watch ``dirs`` in this process (no daemon: no restart notices; the keywords of
        :meth:`Source.watch <stalewatch.watching.source.Source.watch>` are ignored)."""
        watching = settings.WatchSettings(self.verify_interval, self.poll, self.poll_interval, self.notifier)
        return Watcher(watching, dirs, on_change, on_health)
