"""Every link and every repository path the README and the docs name resolves, and the README's
index lists every page of docs/.

Checked in README.md, docs/*.md and examples/*/README.md:
- a Markdown link `[text](target)` that is not a URL must name an existing file or folder, relative
  to the page that holds it; a `#anchor` into a Markdown file must match one of its headings (as
  GitHub spells heading anchors);
- a path written in the text that starts with one of the repository's top-level folders
  (`docs/timing.md`, `runners/engine/stats.py:summarize`, `tests/perf/bench_history.py`) must exist
  in the repository (or next to the page), so that a moved module or page shows up here.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_FOLDERS = ("docs", "examples", "tests", "scripts", "suite", "runners", "db", "reports", "rooflab")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(rf"(?<![\w/.$~-])((?:{'|'.join(TOP_FOLDERS)})/[\w./-]*\w)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("examples/*/README.md"))]


def anchor_of(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {anchor_of(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    out = []
    for match in LINK.finditer(page.read_text()):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part) if file_part else page
        if not path.exists():
            out.append(f"{target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            out.append(f"{target} (no heading with that anchor)")
    return out


def missing_paths(page: Path) -> list[str]:
    out = []
    for path in sorted(set(PATH.findall(page.read_text()))):
        if not ((ROOT / path).exists() or (page.parent / path).exists()):
            out.append(path)
    return out


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_paths_resolve(page):
    assert broken_links(page) == [], f"{page.relative_to(ROOT)}: broken links"
    assert missing_paths(page) == [], f"{page.relative_to(ROOT)}: names paths that do not exist"


def test_the_readme_indexes_every_docs_page():
    linked = {m.group(1) for m in re.finditer(r"\]\((docs/[\w.-]+\.md)\)", (ROOT / "README.md").read_text())}
    every = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert every - linked == set(), "docs pages the README's index does not link"


def test_the_checks_catch_what_they_are_for(tmp_path):
    (tmp_path / "other.md").write_text("# A `code` heading, with punctuation!\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-code-heading-with-punctuation) [gone](nowhere.md) "
                    "[bad anchor](other.md#nope) [web](https://example.org/x.md) ![img](img/none.png)\n"
                    "see runners/engine/stats.py:summarize and runners/cpuinfo.py, not a/runners/x.py\n")
    assert broken_links(page) == ["nowhere.md (no such file)", "other.md#nope (no heading with that anchor)",
                                  "img/none.png (no such file)"]
    assert missing_paths(page) == ["runners/cpuinfo.py"]
