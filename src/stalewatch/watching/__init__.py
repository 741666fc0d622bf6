"""Watching: how a guard learns that its checkout may have moved.

- :mod:`.source`: the :class:`~.source.Source` interface a guard is fed by.
- :mod:`.plan`: pure; which directories to watch and which writes matter (C7).
- :mod:`.local`: :class:`~.local.LocalSource`, a watchdog watcher in this process.
- :mod:`.observers`: watchdog's observers as stalewatch runs them, and the faults
  watchdog keeps to itself (C9).

The only package that imports watchdog; it owns the watcher threads.
"""

from .local import LocalSource
from .source import OnChange, OnHealth, Source, Watch

__all__ = ["LocalSource", "OnChange", "OnHealth", "Source", "Watch"]
