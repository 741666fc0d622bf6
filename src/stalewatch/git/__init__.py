"""Reading git: pure in-process parsing of HEAD and refs, and the one module that runs git.

- :mod:`.refs`: where a checkout's git data lives and what HEAD resolves to; pure
  functions, no threads, no processes (~20 µs per resolve, C10, C11).
- :mod:`.command`: the only code that spawns ``git`` (binding's ``ls-files``, and
  reftable, which is not parsed).
"""
