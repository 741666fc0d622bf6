"""The README is the PyPI page: short, and its links work there (absolute, to files that exist)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REPOSITORY = "https://github.com/stalewatch/stalewatch"
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _links() -> list[str]:
    return _LINK.findall(README.read_text())


def test_the_readme_is_at_most_200_lines() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_the_readme_is_the_package_long_description() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["readme"] == "README.md"
    assert project["urls"]["Source"] == REPOSITORY


def test_every_readme_link_is_absolute() -> None:
    # PyPI renders the README away from the repository: a relative link breaks there.
    links = _links()
    assert len(links) > 10
    assert [link for link in links if not link.startswith("https://")] == []


def test_every_readme_link_into_the_repository_names_a_file_that_exists() -> None:
    for link in _links():
        for prefix in (f"{REPOSITORY}/blob/main/", f"{REPOSITORY}/tree/main/"):
            if link.startswith(prefix):
                target = ROOT / link.removeprefix(prefix).split("#")[0]
                assert target.exists(), link


def test_the_readme_renders_as_pypi_renders_it_with_absolute_links() -> None:
    markdown = pytest.importorskip(
        "readme_renderer.markdown", reason="the docs extra: pip install -e '.[docs]'"
    )
    html = markdown.render(README.read_text(), variant="GFM")
    assert html is not None and "<h1" in html
    hrefs = re.findall(r'href="([^"]+)"', html)
    assert hrefs and all(href.startswith("https://") or href.startswith("#") for href in hrefs), hrefs
    # Heading permalinks ("#...") are the renderer's own; no link of ours is in-page.
    assert not [href for href in hrefs if href.startswith("#") and not href.startswith("#user-content-")]
