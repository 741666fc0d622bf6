"""Every contract code the repository cites (C1-C12, R1-R10) is defined in docs/contract.md.

Code comments, test names and the docs cite the contract by its codes; a clone must hold
their meaning. So: every ``C<n>``/``R<n>`` written in the tree, and every ``c<n>``/``r<n>``
token of a test's name (``test_c4_c5_...``), must have its own anchor and definition in
docs/contract.md, and nothing may send a reader to a design file outside the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "docs" / "contract.md"
CITED_IN = ("src", "tests", "scripts", "docs", "systemd", "prometheus")
TOP_FILES = ("README.md", "ARCHITECTURE.md", "CHANGELOG.md", "pyproject.toml", "mkdocs.yml")
SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".service", ".conf"}
CODE = re.compile(r"\b([CR])(\d{1,2})\b")
TEST_NAME = re.compile(r"def (test_\w+)")
OUTSIDE = re.compile(r"shared/DESIGN\.md|DESIGN\.md")


def _files() -> list[Path]:
    found = [ROOT / name for name in TOP_FILES if (ROOT / name).exists()]
    for folder in CITED_IN:
        found += [
            path
            for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts
        ]
    return found


def _citations() -> dict[str, set[str]]:
    """``{code: {file:line, ...}}`` for every code cited anywhere in the tree."""
    cited: dict[str, set[str]] = {}
    for path in _files():
        where = path.relative_to(ROOT)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            codes = [f"{letter}{int(digits)}" for letter, digits in CODE.findall(line)]
            for name in TEST_NAME.findall(line):
                codes += [token.upper() for token in name.split("_") if re.fullmatch(r"[cr]\d{1,2}", token)]
            for code in codes:
                cited.setdefault(code, set()).add(f"{where}:{number}")
    return cited


def _defined() -> dict[str, str]:
    """``{code: definition text}`` from docs/contract.md: an anchor, then a heading naming it."""
    text = CONTRACT.read_text()
    defined = {}
    for match in re.finditer(
        r'<a id="([cr]\d{1,2})"></a>\n### ([CR]\d{1,2})\. ([^\n]+)\n\n(.+?)(?=\n<a id=|\n## |\Z)', text, re.S
    ):
        anchor, code, title, body = match.groups()
        assert anchor == code.lower(), (anchor, code)
        defined[code] = f"{title}\n{body}"
    return defined


def test_every_cited_code_is_defined_in_the_contract() -> None:
    defined = _defined()
    missing = {code: sorted(where)[:5] for code, where in _citations().items() if code not in defined}
    assert missing == {}, f"cited but not defined in docs/contract.md: {missing}"


def test_the_contract_defines_c1_to_c12_and_r1_to_r10_each_once_with_a_definition() -> None:
    text = CONTRACT.read_text()
    expected = [f"C{n}" for n in range(1, 13)] + [f"R{n}" for n in range(1, 11)]
    defined = _defined()
    assert sorted(defined, key=expected.index) == expected
    for code in expected:
        assert text.count(f'<a id="{code.lower()}"></a>') == 1, code
        assert len(defined[code].split()) >= 20, f"{code}: a definition, not just a title"


def test_the_scan_sees_codes_in_comments_docs_and_test_names() -> None:
    # The scan itself must find what it is meant to find, or the first test passes vacuously.
    cited = _citations()
    assert any(w.startswith("src/") for w in cited["C9"])
    assert any(w.startswith("docs/") for w in cited["C10"])
    assert any(w.startswith("tests/") for w in cited["R5"])
    assert [m.group(0) for m in CODE.finditer("C4, R10 and c5; AC1 C123 R7b")] == ["C4", "R10"]


def test_nothing_sends_a_reader_to_a_design_file_outside_the_repository() -> None:
    offending = []
    for path in _files():
        where = str(path.relative_to(ROOT))
        if path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) or "../shared" in line:
                offending.append(f"{where}:{number}: {line.strip()}")
    assert offending == []
