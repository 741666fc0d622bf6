"""The client side of the daemon: a guard fed by a running daemon, and reading one.

- :mod:`.daemon`: :class:`~.daemon.Daemon`, a :class:`~stalewatch.Source` fed by the
  daemon's socket (one client thread per guard).
- :mod:`.connection`: connecting, reading lines, ``read_status`` (``status --socket``),
  and every line across the daemon's restarts (``Follower``: ``events``).
- :mod:`.inflight`: when a registered process tells its work in flight.
"""
