"""Every relative link in README, the docs and the result studies points at a file that is there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


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


def test_relative_links_resolve():
    broken = {str(p.relative_to(ROOT)): b for p in _markdown_files() if (b := _broken_links(p))}
    assert broken == {}


def test_a_missing_target_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[there](page.md) [gone](gone.png) ![fig](fig.png) [web](https://x.org)\n")
    assert _broken_links(page) == ["gone.png", "fig.png"]
