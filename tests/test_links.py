"""Every relative link in README, the docs and the result studies points at a file that is there,
and every #anchor in README and the studies at a heading of the page it names (GitHub's slugs; the
docs site's anchors are checked by `mkdocs build --strict`)."""

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^ {0,3}#{1,6} (.+)$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _markdown_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in ("docs", "run"):
        files += sorted((ROOT / folder).rglob("*.md"))
    return files


def _broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        if not (path.parent / target.split("#")[0]).exists():
            broken.append(target)
    return broken


def _slug(heading: str) -> str:
    """GitHub's anchor base of a heading's Markdown text: its rendered text (links as their text,
    emphasis markers and a closing run of #s dropped), lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"\s+#+\s*$", "", heading.strip())
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"(?<!\w)[*_]+|[*_]+(?!\w)", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _slugs(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: code blocks skipped, a repeat numbered -1, -2
    (as github-slugger numbers them)."""
    seen: dict[str, int] = {}
    fence = ""
    for line in page.read_text(encoding="utf-8").splitlines():
        if m := FENCE.match(line):
            if not fence:
                fence = m.group(1)
            elif m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = ""
            continue
        if not fence and (m := HEADING.match(line)):
            slug = base = _slug(m.group(1))
            while slug in seen:
                seen[base] += 1
                slug = f"{base}-{seen[base]}"
            seen[slug] = 0
    return set(seen)


def _broken_anchors(path: Path) -> list[str]:
    broken, slugs = [], {}  # each page's headings read once
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        name, _, anchor = target.partition("#")
        if not anchor or target.startswith(("http://", "https://")):
            continue
        page = (path.parent / name) if name else path
        page = page / "README.md" if page.is_dir() else page
        if page.suffix != ".md" or not page.exists():
            continue
        if page not in slugs:
            slugs[page] = _slugs(page)
        if unquote(anchor) not in slugs[page]:
            broken.append(target)
    return broken


def test_relative_links_resolve():
    broken = {str(p.relative_to(ROOT)): b for p in _markdown_files() if (b := _broken_links(p))}
    assert broken == {}


def test_a_missing_target_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[there](page.md) [gone](gone.png) ![fig](fig.png) [web](https://x.org)\n")
    assert _broken_links(page) == ["gone.png", "fig.png"]


def test_anchors_resolve():
    pages = [p for p in _markdown_files() if "docs" not in p.relative_to(ROOT).parts[:1]]
    broken = {str(p.relative_to(ROOT)): b for p in pages if (b := _broken_anchors(p))}
    assert broken == {}


def test_a_missing_anchor_is_found(tmp_path):
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "README.md").write_text("# Top\n## A: b, c (1)\n```\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text("## Same\n## Same\n[a](study/#a-b-c-1) [b](#same-1) [c](#not-a-heading) [d](study/#top)\n")
    assert _broken_anchors(page) == ["#not-a-heading"]


def test_anchors_follow_githubs_slugs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "## Step 1\n## Step\n## Step\n## Results ([report](r.md))\n## _Why_ not `log_q`\n## Closed ##\n"
        "~~~\n# tilde fenced\n~~~\n````\n```\n# inside a 4-backtick fence\n````\n## Ünïcode\n"
    )
    assert _slugs(page) == {"step-1", "step", "step-2", "results-report", "why-not-log_q", "closed", "ünïcode"}
    page.write_text(page.read_text() + "[u](#%C3%BCn%C3%AFcode) [f](#tilde-fenced)\n")
    assert _broken_anchors(page) == ["#tilde-fenced"]
