"""The daemon process: one process watching checkouts and pushing every change to whoever listens.

- :mod:`.loop`: :class:`~.loop.DaemonServer`, the single-threaded socket loop.
- :mod:`.inbox`: how other threads hand the loop typed messages, one wake-up per batch.
- :mod:`.checkout`: one watched checkout (guard, heartbeat source, hooks, restarts).
- :mod:`.connections`: socket clients with bounded queues and non-blocking writes, and what they ask.
- :mod:`.publisher`: what subscribers are told, and when.
- :mod:`.registry`: the server processes that registered the revision they loaded.
- :mod:`.config`: the configuration, and reading it safely; :mod:`.startup`: what a start reads and binds.
- :mod:`.reloader`: a SIGHUP's plan, bound before anything changes, and its course on the loop.
- :mod:`.hooks`, :mod:`.commands`, :mod:`.drain`: running commands, and their output.
- :mod:`.supervision`: systemd readiness, status and watchdog (sd_notify).
- :mod:`.listening`: the listening socket, bound safely; :mod:`.journal`: the log.
- :mod:`.observer`: what the daemon tells its metrics (the metrics package implements it).
- :mod:`.restart`: automatic restart.

The client side is :mod:`stalewatch.client`; the two share only :mod:`stalewatch.protocol`.
"""
