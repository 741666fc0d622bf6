"""The bottom layer: value types, errors and process infrastructure; imports nothing of ours.

Values: :mod:`.status` (``Status``, ``Snapshot``, ``Event``, ``decide``,
``transition``), :mod:`.cause` (what moved HEAD), :mod:`.phases` (where an automatic
restart stands), :mod:`.revisions`. Errors: :mod:`.errors`, every one of them.
Infrastructure, one implementation each: :mod:`.settings` (defaults),
:mod:`.escaping` (outside text on one line), :mod:`.files` (atomic writes).
"""
