"""Reading a supervisord configuration (outside input): any text, any ``[include]``
pattern, never an exception, a walk of the whole disk, or an unbounded list."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from stalewatch.hermes.supervisors.supervisord import MOST_BYTES, MOST_INCLUDED, _programs, webui_programs
from tests.support.properties import budget

_PATTERNS = st.lists(
    st.one_of(
        st.sampled_from(["/", "/**", "**/*", "/*", "conf.d/*.conf", "..", "[", "*", "/proc/*/*", "a\x00b/*"]),
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=20),
    ),
    max_size=4,
)


@budget(200)
@given(patterns=_PATTERNS, body=st.text(max_size=200))
def test_any_include_and_any_text_read_without_raising(patterns: list[str], body: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "supervisord.conf"
        included = Path(directory) / "conf.d"
        included.mkdir()
        (included / "web.conf").write_text("[program:hermes-webui]\ncommand=python server.py\n")
        text = "[include]\nfiles = " + " ".join(p.strip() for p in patterns) + "\n" + body
        config.write_text(text, errors="replace")
        found = webui_programs(config, None)
        assert all(f.name for f in found)


def test_an_include_adds_a_bounded_number_of_files_and_never_walks_the_disk(tmp_path: Path) -> None:
    for n in range(MOST_INCLUDED + 10):
        (tmp_path / f"p{n:04}.conf").write_text(f"[program:p{n}]\ncommand=true\n")
    config = tmp_path / "supervisord.cfg"
    config.write_text("[include]\nfiles = *.conf\n[program:hermes-webui]\ncommand=true\n")
    assert len(_programs(config)) == 1 + MOST_INCLUDED
    # `**` is supervisord's `*`: the top of the disk, not every file under it.
    config.write_text("[include]\nfiles = /** /\n[program:hermes-webui]\ncommand=true\n")
    assert [f.name for f in webui_programs(config, None)] == ["hermes-webui"]


def test_an_included_file_past_the_bound_is_skipped_unread(tmp_path: Path) -> None:
    # As /proc/kcore would be (an include of /proc/*: read whole, it filled the memory).
    big = tmp_path / "big.conf"
    big.write_text("[program:hermes-webui]\ncommand=true\n" + "#" * MOST_BYTES)
    config = tmp_path / "supervisord.cfg"
    config.write_text("[include]\nfiles = big.conf\n")
    assert webui_programs(config, None) == []
    big.write_text("[program:hermes-webui]\ncommand=true\n")
    assert [f.name for f in webui_programs(config, None)] == ["hermes-webui"]


def test_patterns_repeated_add_each_file_once_and_a_fifo_never_blocks(tmp_path: Path) -> None:
    included = tmp_path / "inc"
    included.mkdir()
    for n in range(20):
        (included / f"p{n:02}.conf").write_text(f"[program:p{n}]\ncommand=true\n")
    os.mkfifo(included / "zz.conf")  # nobody writes it: a blocking open would wait for ever
    config = tmp_path / "supervisord.cfg"
    config.write_text("[include]\nfiles = " + "inc/*.conf " * 400 + "\n")
    assert sorted(f.name for f in _programs(config)) == sorted(f"p{n}" for n in range(20))
