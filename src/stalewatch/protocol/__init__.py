"""The daemon's wire protocol, shared by both sides: JSON lines over a Unix socket.

- :mod:`.codec`: encoding, bounded decoding and line splitting (pure).
- :mod:`.messages`: every line, built and (where a side parses it) read.
- :mod:`.socket_path`: the default socket path.

Every field: docs/daemon.md, "Protocol (version 1)".
"""
