"""The daemon: one process watching checkouts and pushing every change to whoever listens.

Server side:

- :mod:`.server`: :class:`~.server.DaemonServer`, the socket loop and its checkouts.
- :mod:`.clients`: socket clients with bounded queues and non-blocking writes.
- :mod:`.protocol`: the wire protocol (JSON lines), pure.
- :mod:`.config`: the TOML configuration file.
- :mod:`.hooks`: hook commands run on status changes.
- :mod:`.supervision` and :mod:`.sdnotify`: systemd readiness, status and watchdog.
- :mod:`.cli`: the ``daemon``, ``events`` and ``status --socket`` commands.

Client side:

- :mod:`.client`: :class:`~.client.Daemon`, a :class:`~stalewatch.Source` fed by the
  daemon's socket.
- :mod:`.connection`: connecting to a daemon and following its lines (shared by the
  client and the ``events``/``status --socket`` commands).
"""
