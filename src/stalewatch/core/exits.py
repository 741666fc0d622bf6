"""The exit codes of every ``stalewatch`` command, defined once.

====  ================================================================================
code  meaning
====  ================================================================================
0     success (``watch``, ``daemon``, ``events`` stopped by SIGTERM; a status printed;
      ``hermes setup`` printed or wrote its files)
1     ``status``: HEAD cannot be resolved (a corrupt or unreadable repository);
      ``daemon``: an unexpected failure while serving (logged)
2     bad input: a usage error, a path that is not a git checkout, an invalid setting or
      configuration, a socket path that cannot be used, no Hermes install found,
      ``daemon`` where there are no Unix sockets (Windows)
3     ``events`` / ``status --socket``: the daemon cannot be reached
130   Ctrl-C (SIGINT), at any moment, every command (never a traceback; see
      :mod:`stalewatch.__main__`)
====  ================================================================================
"""

from __future__ import annotations

OK = 0
UNREADABLE = 1
FAILED = 1
USAGE = 2
UNREACHABLE = 3
INTERRUPTED = 130
