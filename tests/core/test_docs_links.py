"""Relative links in README and docs/ point at files that exist."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    broken = [
        target
        for target in LINK.findall(text)
        if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()
    ]
    assert not broken, f"{page.relative_to(REPO)} links to missing files: {broken}"


def test_every_docs_page_is_reachable_from_the_index():
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    linked = {(REPO / "docs" / t).resolve() for t in LINK.findall(index)}
    pages = {p.resolve() for p in (REPO / "docs").rglob("*.md")} - {(REPO / "docs" / "index.md").resolve()}
    assert not sorted(str(p) for p in pages - linked)
