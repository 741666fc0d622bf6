"""Reading git: in-process parsing of HEAD and refs, and the one module that runs git.

- :mod:`.refs`: where a checkout's git data lives, and which ref store keeps its refs.
- :mod:`.store`: the ref store interface (resolve HEAD, files to watch, reflogs); one
  module per store: :mod:`.files` (loose refs and ``packed-refs``, in-process, ~20 µs
  per resolve) and :mod:`.reftable` (through ``git``).
- :mod:`.packed`: ``packed-refs``, searched in place; one process-wide cache of what
  was read, by file identity.
- :mod:`.reflog`: what moved HEAD (action, who, when, ahead/behind), from the newest
  reflog entries read from the end of ``logs/HEAD`` and the branch's log; bounded.
- :mod:`.moves`: what each reflog action means for the commit it moved to; pure.
- :mod:`.command`: the only code that spawns ``git`` (binding's ``ls-files``, and
  reftable, which is not parsed).

Imports only :mod:`stalewatch.core`.
"""
