"""One checkout the daemon watches: its guard, its watcher's heartbeat, its hooks.

The server owns a :class:`Checkout` per configured checkout. The guard's events and
the watcher's health reports arrive on the watcher's thread; they are handed to the
server's loop through ``post`` (never handled on the watcher's thread), and to the
hook runner, which starts a thread of its own while it has a hook to run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..core.errors import BindError
from ..core.guard import Guard
from ..core.status import Event
from .config import CheckoutConfig
from .hooks import HookRunner
from .output import OutputDrain
from .supervision import ObservedSource

__all__ = ["Checkout", "bind_checkout"]

logger = logging.getLogger(__name__)

Post = Callable[[str, "Checkout", Any], None]
"""Hands ``(kind, checkout, payload)`` to the server's loop: ``event`` or ``health``."""


def bind_checkout(checkout: CheckoutConfig, source: ObservedSource | None = None) -> Guard:
    """A guard for one configured checkout (not started).

    Raises:
        BindError: the path does not exist, is not in a git checkout, or is a file no
            repository tracks.
    """
    feed = source or ObservedSource()
    path = checkout.path
    if path.is_file():
        guard = Guard.for_file(path, loaded_revision=checkout.revision, source=feed)
        if not guard.binding.tracked:
            raise BindError(path, "is not tracked by any git repository; there is nothing to watch")
        return guard
    return Guard.for_checkout(path, loaded_revision=checkout.revision, source=feed)


class Checkout:
    """A watched checkout: guard, source, hooks, and the daemon's generation offset.

    Args:
        config: the checkout's configuration.
        post: where events and health reports go (the server's inbox).
        base: added to the guard's generations, so they keep increasing for clients
            across a reload that re-binds the checkout (a new guard starts at 0).
        drain: the daemon's drain for hook output held by background processes.

    Raises:
        BindError: as :func:`bind_checkout`.
    """

    def __init__(
        self, config: CheckoutConfig, post: Post, base: int = 0, drain: OutputDrain | None = None
    ) -> None:
        self.config = config
        self.source = ObservedSource()
        self.guard = bind_checkout(config, self.source)
        self.base = base
        self.key = str(self.guard.checkout)
        self._drain = drain
        self.hooks = HookRunner(self.guard.checkout, config.hooks, drain) if config.hooks.any else None
        self.was_trusted = False
        self.health: tuple[bool, str] | None = None  # last (trusted, mode) the loop handled
        self._post = post
        self._unsubscribe: Callable[[], None] | None = None
        self.source.on_report = lambda trusted, mode: post("health", self, (trusted, mode))

    def generation(self) -> int:
        """The daemon's generation for this checkout now."""
        return self.base + self.guard.snapshot().generation

    def start(self) -> None:
        """Subscribe, let the hook runner take work, start the guard's watcher."""
        self._unsubscribe = self.guard.subscribe(self._on_event)
        if self.hooks is not None:
            self.hooks.start()
        self.guard.start()

    def _on_event(self, event: Event) -> None:
        # On the watcher's thread: hand over, never block here.
        self._post("event", self, event)
        hooks = self.hooks  # read each time: a reload may add the runner
        if hooks is not None:
            hooks.submit(event, self.base + event.generation)

    def update(self, config: CheckoutConfig) -> None:
        """Take a reloaded configuration with the same path and revision (new hooks)."""
        self.config = config
        if self.hooks is not None:
            self.hooks.update(config.hooks)  # dropping every hook leaves an idle runner
        elif config.hooks.any:  # the first hooks of a checkout watched without any
            self.hooks = HookRunner(self.guard.checkout, config.hooks, self._drain).start()

    def request_stop(self) -> None:
        """Begin ending a running hook without waiting (see :meth:`HookRunner.request_stop`)."""
        if self.hooks is not None:
            self.hooks.request_stop()

    def stop(self) -> None:
        """Unsubscribe and stop the hooks and the watcher (harmless twice)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.hooks is not None:
            self.hooks.stop()
        self.guard.stop()
