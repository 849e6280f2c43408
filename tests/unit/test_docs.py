"""The docs' links lead somewhere, and DRfC's install block works on a fresh account."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation dropped, spaces as `-`."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_of_a_page_leads_to_a_file_and_heading(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for link in _LINK.findall(text):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), (page.name, link)
        assert not anchor or anchor in _anchors(target), (page.name, link)
    assert "README's Swarm section" not in text  # the README has none


def test_drfc_install_makes_the_bin_folder_before_linking_into_it() -> None:
    text = (REPO / "docs" / "drfc.md").read_text(encoding="utf-8")
    assert "mkdir -p ~/.local/bin && ln -s" in text
