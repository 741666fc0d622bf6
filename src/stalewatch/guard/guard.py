"""The guard: the barrier, the constructors, and the lifecycle of its watch.

The barrier's fast path is one attribute read (``self._pass``, the flag
:class:`~.state.GuardState` recomputes under a lock whenever the status or the
watcher's health changes). Everything else — re-reading HEAD, raising, delivering
events — happens off that path.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypedDict, Unpack

from ..core import forking
from ..core.errors import BindError, StaleError
from ..watching.local import LocalSource
from ..watching.source import Source, Watch, start_watch
from . import identity
from .identity import Binding
from .release import LinkArg, PathArg
from .restart_as_seen import restart_as_seen
from .state import GuardState
from .work import Counter, WorkInFlight


class Options(TypedDict, total=False):
    """What every constructor takes besides what it binds (see :class:`Guard`)."""

    loaded_revision: str | None
    latch: bool
    source: Source | None


class Guard(GuardState):
    """A revision guard for the checkout that supplied some code.

    Build one with :meth:`for_module`, :meth:`for_file` or :meth:`for_checkout`; use it
    as a context manager (or :meth:`start` / :meth:`stop`) to run its watcher; call
    :meth:`check` on every request.

    Args:
        binding: what to watch (from :mod:`.identity`).
        loaded_revision: the full commit id the process loaded; ``None``: HEAD now.
        latch: stay blocked after a rollback instead of returning to current.
        source: where change notifications come from; default a
            :class:`~stalewatch.watching.local.LocalSource` (a watchdog thread here).

    Example::

        guard = Guard.for_module("run_agent")
        with guard:
            guard.check()            # raises StaleError once the checkout moved

    Raises:
        BindError: bad input, or HEAD unreadable while no revision is known.
    """

    def __init__(
        self,
        binding: Binding,
        *,
        loaded_revision: str | None = None,
        latch: bool = False,
        source: Source | None = None,
    ) -> None:  # named: a misspelt option is a TypeError, never a guard without it
        super().__init__(binding, loaded_revision, latch)
        self._source: Source = source if source is not None else LocalSource()
        self._lifecycle = threading.Lock()
        self._watch: Watch | None = None
        self._restart_after_fork = False
        self._pid = os.getpid()
        self._work = WorkInFlight()
        forking.in_child(self._after_fork_in_child)  # held weakly: a dropped guard is gone

    # -- constructors (options as for Guard) ----------------------------------------------

    @classmethod
    def for_module(cls, name: str, *, deploy_link: LinkArg = None, **options: Unpack[Options]) -> Guard:
        """Guard the checkout that supplied ``sys.modules[name]``.

        Example: ``Guard.for_module("run_agent")``. Options as for :class:`Guard`.
        ``deploy_link``: the symlink the release in use is switched by
        (``/srv/app/current``), when the module's path did not keep it: the link
        retargeted is the code moving (:mod:`stalewatch.guard.release`).
        """
        return cls(identity.bind_module(name, deploy_link), **options)

    @classmethod
    def for_file(cls, path: PathArg, *, deploy_link: LinkArg = None, **options: Unpack[Options]) -> Guard:
        """Guard the checkout whose repository tracks exactly this source file.

        Example: ``Guard.for_file(run_agent.__file__)``. An untracked file gives an
        ``UNTRACKED`` guard that never blocks (unless behind a deploy link): it logs one
        warning naming the file and the fix, and its snapshot's ``error`` says the same.
        ``deploy_link`` as for :meth:`for_module`.
        """
        return cls(identity.bind_file(os.fspath(path), deploy_link), **options)

    @classmethod
    def for_checkout(cls, path: PathArg, *, deploy_link: LinkArg = None, **options: Unpack[Options]) -> Guard:
        """Guard a whole working tree; ``path`` is any file or directory inside it, or a
        deploy link (``/srv/app/current``). ``deploy_link`` as for :meth:`for_module`.

        Example: ``Guard.for_checkout("/srv/hermes-agent")``.
        """
        return cls(identity.bind_checkout(os.fspath(path), deploy_link), **options)

    @classmethod
    def for_path(cls, path: PathArg, *, deploy_link: LinkArg = None, **options: Unpack[Options]) -> Guard:
        """What a command line or a configuration names: a checkout (any directory in
        it, or a deploy link to one), or a source file its repository tracks.

        Unlike :meth:`for_file`, a file no repository tracks is refused: a guard of it
        would never block, so whoever named it would watch nothing without a word.

        Raises:
            BindError: the path does not exist, is not in a git checkout, or is a file
                no repository tracks.
        """
        if not Path(path).is_file():
            return cls.for_checkout(path, deploy_link=deploy_link, **options)
        binding = identity.bind_file(os.fspath(path), deploy_link)
        if binding.reason is not None:
            raise BindError(Path(path), f"{binding.reason}; there is nothing to watch")
        return cls(binding, **options)

    # -- the barrier --------------------------------------------------------------------

    def check(self, strict: bool = False) -> None:
        """Return while the loaded code is current (or untracked); raise otherwise.

        Args:
            strict: re-resolve HEAD in-process first, so any update completed before
                the call is seen (~20 µs, no subprocess except for reftable).

        Raises:
            StaleError: the checkout moved or became unreadable.
        """
        if self._pass and not strict:
            return
        self._check_slow(strict)

    def _check_slow(self, strict: bool) -> None:
        if self.binding.dirs is None:
            return
        if self._pid != os.getpid():  # fork without our at-fork hook (os.fork is hooked)
            self._after_fork_in_child()
        if self._restart_after_fork:
            self._restart_after_fork = False
            self.start()
        if strict or not self._trusted or self._doubt:
            # C9: the flag cannot be trusted, or the caller wants a strict check. A read that
            # fails for want of descriptors decides nothing: the last reading stands.
            self.refresh()
        snap = self._snap
        if snap.status.blocks:
            restart = restart_as_seen(self._restart, snap, time.time())
            raise StaleError(
                snap.checkout,
                snap.loaded_revision,
                snap.current_revision,
                snap.status,
                snap.cause,
                restart=restart,
            )

    # -- work in flight ------------------------------------------------------------

    def work(self) -> AbstractContextManager[None]:
        """Count one unit of work in flight while the ``with`` block runs.

        A daemon's restart lets this process's work in flight end before stopping it
        (the barriers count each guarded request so). Any thread; no lock, nothing
        allocated. Example: ``with guard.work(): run_the_long_job()``.
        """
        return self._work

    def count_work(self, counter: Counter) -> Callable[[], None]:
        """Add work the application counts itself; returns the function removing it.

        ``counter()`` answers a whole number, or ``None`` when it cannot tell (nothing);
        it is called only when the total is asked for (a daemon's client asks while a
        restart is coming or the code is stale), never on the request path; one that
        raises counts nothing (logged once). Example:
        ``guard.count_work(lambda: len(active_streams))``.
        """
        return self._work.add(counter)

    def inflight(self) -> int:
        """The work in flight now: units of :meth:`work` plus every :meth:`count_work` counter."""
        return self._work.total()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Guard:
        """Start watching (a no-op for an untracked guard, or when already started)."""
        dirs = self.binding.dirs
        with self._lifecycle:
            if dirs is None or self._watch is not None:
                return self
            token = self._token = object()
            self._watch = start_watch(
                self._source,
                dirs,
                self._update,
                lambda trusted, mode: self._on_health(token, trusted, mode),
                loaded_revision=self._snap.loaded_revision,
                on_restart=lambda state: self._on_restart(token, state),
                work=self,
            )
            self._watch.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the watcher runs; True once it does, False on timeout.

        It runs with native notifications (``snapshot().trusted``: :meth:`check` is a
        flag read) or polling (never trusted: every :meth:`check` re-reads HEAD);
        either way every later move is seen. False again while the watcher is
        faulted and not polling. An untracked guard is always ready.
        Example: ``guard.start().wait_ready(5)``.
        """
        return self.binding.dirs is None or self._ready.wait(timeout)

    def stop(self) -> None:
        """Stop watching and join the watcher's thread. Harmless to call twice."""
        with self._lifecycle:
            watch, self._watch = self._watch, None
            self._restart_after_fork = False
            with self._lock:
                self._disconnect()
        if watch is not None:
            watch.stop()

    def __enter__(self) -> Guard:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _after_fork_in_child(self) -> None:
        # Threads do not survive fork(), and the parent's observer shares its inotify
        # fd and kill pipe with the parent: stopping it here would stop the parent's.
        # Forget it; the first check() in the child starts a fresh watcher. Any lock
        # may have been held by a thread that is gone: new ones.
        self._new_locks()
        self._lifecycle = threading.Lock()
        self._work.after_fork_in_child()
        self._restart_after_fork = self._watch is not None
        self._watch = None
        self._disconnect()
        self._pid = os.getpid()

    def __repr__(self) -> str:
        snap = self._snap
        return f"<Guard {snap.status.value} {snap.checkout} loaded={snap.loaded_revision}>"
