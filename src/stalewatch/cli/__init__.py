"""The ``stalewatch`` command line: :func:`main` (the console script and ``python -m
stalewatch`` run it through :func:`stalewatch.__main__.run`, which answers Ctrl-C).

- :mod:`.arguments`: every command's arguments (the parser imports no command).
- :mod:`.run`: :func:`~.run.main`, which imports the command that runs.
- :mod:`.watch`: ``watch`` and ``status`` (a checkout watched from this process),
  ``events`` and ``status --socket`` (reading a running daemon).
- :mod:`.daemon`: ``daemon`` (the process, wired: configuration, log, socket, metrics)
  and ``daemon --check`` (what a start would run, printed; nothing opened).
- :mod:`.human_lines`: one human line per protocol message.
- :mod:`.hermes`: ``hermes setup``.
"""

from ..core.exits import FAILED as EXIT_FAILED
from ..core.exits import INTERRUPTED as EXIT_INTERRUPTED
from ..core.exits import OK as EXIT_OK
from ..core.exits import UNREACHABLE as EXIT_UNREACHABLE
from ..core.exits import UNREADABLE as EXIT_UNREADABLE
from ..core.exits import USAGE as EXIT_USAGE
from .run import main

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_UNREADABLE",
    "EXIT_USAGE",
    "main",
]
