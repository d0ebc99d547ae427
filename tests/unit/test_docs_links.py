"""The documentation's links lead somewhere, and the README stays a front door.

For README.md, CONTRIBUTING.md, docs/*.md, benchmarks/*.md and scheduler_fork/README.md: every relative markdown
link names a file or folder that exists, and every `#anchor`, in the same file or another one, names a heading of
that file (GitHub's slugs: lowercase, punctuation other than hyphens and spaces dropped, spaces to hyphens, a
`-1`, `-2`... suffix for repeated headings). Links inside code blocks and code spans are not links. External
links (`https:`, `mailto:`) are not followed: the suite runs without a network.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250

#: `[text](target)` and `![alt](target)`, the target up to the first space or closing parenthesis (a title after a
#: space is allowed); reference-style definitions `[label]: target` too.
INLINE_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, http:, mailto:, ...


def documents() -> list[Path]:
    paths = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "scheduler_fork" / "README.md"]
    paths += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "benchmarks").glob("*.md"))
    return paths


def prose_lines(text: str, keep_code_spans: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks; inline code spans blanked out unless kept (a heading's
    code span is part of its anchor, a link inside a code span is no link)."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                fence = None
            continue
        lines.append((number, line if keep_code_spans else re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)),
                                                                   line)))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"(`+)(.+?)\1", r"\2", heading)  # code spans keep their text
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # drop punctuation but hyphens and spaces (letters and digits stay)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor the headings of a markdown file give, with GitHub's suffixes for repeated ones."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8"), keep_code_spans=True):
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in the file's prose."""
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        found += [(number, match.group(1)) for match in INLINE_LINK.finditer(line)]
        found += [(number, match.group(1)) for match in REFERENCE_DEFINITION.finditer(line)]
    return found


def broken_links(path: Path) -> list[str]:
    """One `FILE:LINE: target: what is wrong` per link of `path` that leads nowhere."""
    problems = []
    where = path.relative_to(ROOT)
    for number, target in links(path):
        if not target or EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / unquote(file_part)).resolve() if file_part else path
        if file_part and not destination.exists():
            problems.append(f"{where}:{number}: {target}: no such file or folder")
            continue
        if anchor:
            if destination.is_dir() or destination.suffix.lower() != ".md":
                problems.append(f"{where}:{number}: {target}: an anchor into something that is not markdown")
            elif unquote(anchor).lower() not in anchors(destination):
                problems.append(f"{where}:{number}: {target}: no heading with the anchor #{anchor} in "
                                f"{destination.relative_to(ROOT)}")
    return problems


def test_the_documents_checked_exist():
    names = {str(path.relative_to(ROOT)) for path in documents()}
    assert {"README.md", "CONTRIBUTING.md", "scheduler_fork/README.md", "benchmarks/README.md",
            "benchmarks/results.md", "docs/architecture.md"} <= names
    assert all(path.is_file() for path in documents())


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_a_heading(path):
    assert broken_links(path) == []


def test_the_readme_is_a_front_door_not_a_manual():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move reference material to docs/"


# -- the checker itself ------------------------------------------------------------------------------------------
def test_slugs_follow_github():
    assert slug("Batch size: fixed, linear or adaptive") == "batch-size-fixed-linear-or-adaptive"
    assert slug("Serving: a web page and an HTTP API (`coach serve`)") == \
        "serving-a-web-page-and-an-http-api-coach-serve"
    assert slug("The learned policy: `dl2`") == "the-learned-policy-dl2"
    assert slug("1. Calibration") == "1-calibration"
    assert slug("How `coach scheduler` fits pods to nodes") == "how-coach-scheduler-fits-pods-to-nodes"
    assert slug("Fidelity — gang vs default") == "fidelity--gang-vs-default"


def test_the_checker_finds_a_missing_file_a_missing_anchor_and_ignores_code(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Twice\n\n## Twice\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n\n"
        "[ok](docs/a.md) [ok](docs/a.md#twice-1) [ok](#top) [ok](docs/) [web](https://example.com/x#y)\n"
        "[gone](docs/b.md) [no heading](docs/a.md#three) [no local heading](#bottom)\n"
        "`[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n", encoding="utf-8")

    assert broken_links(page) == [
        "README.md:4: docs/b.md: no such file or folder",
        "README.md:4: docs/a.md#three: no heading with the anchor #three in docs/a.md",
        "README.md:4: #bottom: no heading with the anchor #bottom in README.md",
    ]
