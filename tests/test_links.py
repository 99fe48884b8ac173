"""Every relative link in README, the docs and the result studies points at a file that is there,
and every #anchor in README and the studies at a heading of the page it names (GitHub's slugs; the
docs site's anchors are checked by `mkdocs build --strict`)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$")


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


def _slugs(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (code blocks skipped; repeats numbered)."""
    slugs, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced ^= line.lstrip().startswith("```")
        if not fenced and (m := HEADING.match(line)):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = sum(s == slug or s.startswith(slug + "-") and s[len(slug) + 1 :].isdigit() for s in slugs)
            slugs.add(f"{slug}-{n}" if n else slug)
    return slugs


def _broken_anchors(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        name, _, anchor = target.partition("#")
        if not anchor or target.startswith(("http://", "https://")):
            continue
        page = (path.parent / name) if name else path
        page = page / "README.md" if page.is_dir() else page
        if page.suffix == ".md" and page.exists() and anchor not in _slugs(page):
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
