"""Watching: how a guard learns that its checkout may have moved.

- :mod:`.source`: the :class:`~.source.Source` interface a guard is fed by.
- :mod:`.plan`: pure; which directories to watch and which writes matter.
- :mod:`.local`: :class:`~.local.LocalSource`, watching in this process.
- :mod:`.watcher`: one checkout's turns (no thread of its own), its trust report, and
  polling while notification is unavailable.
- :mod:`.watches`: one checkout's registrations on the process's notifier.
- :mod:`.notifier`: the notifier interface, and which one runs.
- :mod:`.inotify`: the process's one inotify instance and its reader thread (Linux).
- :mod:`.observer`: watchdog's public observer (FSEvents, kqueue, ReadDirectoryChangesW).
- :mod:`.scheduler`: the process's few worker threads and their timers.
- :mod:`.stamp`: stat stamps that keep the periodic re-verification cheap.

The only package that imports watchdog; it owns the watching threads.
"""

from .local import LocalSource
from .source import OnChange, OnHealth, Source, Watch

__all__ = ["LocalSource", "OnChange", "OnHealth", "Source", "Watch"]
