"""The README and docs/ read as user documentation: a README that fits a screen or two, with the two
commands at the top; every link between them resolves; no issue numbers or paths of a particular
machine (measurements live on dated pages under docs/measurements/, with their host and commit)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\bitems? \d+(?:-\d+)? of issue")
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|home|root|Users|mnt|scratch)/[\w.-]+")


def test_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines; at most 120 (the detail lives in docs/)"
    top = "\n".join(lines[:20])
    assert "make bench-collectives" in top and "make test" in top


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    missing = [target for target in LINK.findall(page.read_text())
               if "://" not in target and not (page.parent / target).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_or_machine_paths(page):
    text = page.read_text()
    found = ISSUE.findall(text) + MACHINE_PATH.findall(text)
    assert not found, f"{page.relative_to(ROOT)}: {found} (docs are for users; see docs/measurements/)"


def test_every_doc_is_in_the_index():
    index = (ROOT / "docs" / "index.md").read_text()
    pages = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md"]
    assert [p for p in pages if f"({p})" not in index] == []


def test_make_help_lists_every_target():
    makefile = (ROOT / "Makefile").read_text()
    targets = {m for m in re.findall(r"^([a-z][\w-]*):", makefile, re.M)}
    help_text = makefile.split("\nhelp:", 1)[1].split("\n\n", 1)[0]
    assert [t for t in sorted(targets - {"help"}) if t not in help_text] == []
