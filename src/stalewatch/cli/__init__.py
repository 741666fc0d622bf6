"""The ``stalewatch`` command line: :func:`main` (the console script and ``python -m
stalewatch`` run it through :func:`stalewatch.__main__.run`, which answers Ctrl-C).

- :mod:`.run`: every command's arguments, and :func:`~.run.main`, which imports the
  command that runs (``cmd_<command>`` of its module).
- :mod:`.watch`: ``watch`` and ``status`` (a checkout watched from this process),
  ``events`` and ``status --socket`` (reading a running daemon).
- :mod:`.daemon`: ``daemon`` (the process, wired: configuration, log, socket, metrics)
  and ``daemon --check`` (what a start would run, printed; nothing opened).
- :mod:`.human_lines`: one human line per protocol message.
- :mod:`.hermes`: ``hermes setup``.

Exit codes: :mod:`stalewatch.core.exits`.
"""

from .run import main

__all__ = ["main"]
