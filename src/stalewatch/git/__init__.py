"""Reading git: pure in-process parsing of HEAD and refs, and the one module that runs git.

- :mod:`.refs`: where a checkout's git data lives and what HEAD resolves to; pure
  functions, no threads, no processes (~20 µs per resolve, C10, C11).
- :mod:`.reflog`: what moved HEAD (action, who, when, ahead/behind), from the newest
  reflog entries read from the end of ``logs/HEAD`` and the branch's log; pure, bounded.
- :mod:`.moves`: what each reflog action means for the commit it moved to; pure.
- :mod:`.command`: the only code that spawns ``git`` (binding's ``ls-files``, and
  reftable, which is not parsed).
"""
