"""The README and the pages under docs/: every relative link resolves, and the README stays a quick start.

A link ``[text](target)`` or ``[text](target#anchor)`` whose target is not an absolute URL
(``http(s)://``, ``mailto:``) must name an existing file or folder, relative to the page that links
it; an ``#anchor`` must be the slug of a heading of the target page, computed the way GitHub renders
Markdown (lower-cased; characters other than letters, digits, spaces, ``-`` and ``_`` dropped;
spaces turned into ``-``; a repeated heading gets ``-1``, ``-2``...). Links and headings inside
fenced code blocks and inline code spans are ignored.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 300

LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks, with inline code removed."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield number, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (before de-duplication)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(page: Path):
    """(line number, target) of every relative link of ``page``."""
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            yield number, target


def test_slugs_follow_github():
    assert github_slug("`compute_metrics`: the COCO caption metrics") == "compute_metrics-the-coco-caption-metrics"
    assert github_slug("Faults: killed workers, database restarts, broker outages") == (
        "faults-killed-workers-database-restarts-broker-outages"
    )
    assert github_slug("Hostile input: CSV formula injection and HTML/JS in captions") == (
        "hostile-input-csv-formula-injection-and-htmljs-in-captions"
    )


def test_the_docs_exist_and_the_readme_links_every_page():
    docs = sorted(p.name for p in PAGES[1:])
    assert "architecture.md" in docs and len(docs) >= 8, docs
    linked = {Path(t.split("#")[0]).name for _, t in relative_links(README) if t.startswith("docs/")}
    assert set(docs) <= linked, f"README.md does not link {sorted(set(docs) - linked)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for number, target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no heading with this anchor in {dest.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_is_a_quick_start():
    text = README.read_text(encoding="utf-8")
    n = len(text.splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; move details into docs/ (at most {MAX_README_LINES})"
    assert "./run demo" in text and "./run test" in text
    assert "CI runs `.ci/run`, which calls `./run test`." in text
