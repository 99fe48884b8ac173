"""The documentation site: its Python examples run, and `mkdocs build --strict` passes.

Every ```python block of docs/ is an example a reader may paste into a script or a notebook cell,
so each one runs on its own from an empty directory, both ways. Pages show anything costly as a
```bash command instead, except an example that starts worker processes (a sweep on a local Dask
cluster): it needs the `if __name__ == "__main__":` guard in a script, which is the one use of
`__name__` an example may make, and it runs in the slow tests only. So does an example that
imports more than numpy and the weights functions: torch or OpenMM start in its fresh interpreter.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
#: Modules whose every public function and class the API reference must show.
REFERENCED = (
    "bgp4.simulation.md",
    "bgp4.simulation.data",
    "bgp4.simulation.energy",
    "bgp4.simulation.molecule",
    "bgp4.simulation.ladder",
    "bgp4.simulation.remd",
    "bgp4.simulation.structure",
    "bgp4.simulation.system",
    "bgp4.flows.base",
    "bgp4.flows.coordinates",
    "bgp4.flows.coupling",
    "bgp4.flows.splines",
    "bgp4.flows.p4inv",
    "bgp4.flows.structure_fit",
    "bgp4.generator.model",
    "bgp4.generator.train",
    "bgp4.generator.sample",
    "bgp4.generator.refine",
    "bgp4.generator.targets",
    "bgp4.generator.losses",
    "bgp4.generator.rundir",
    "bgp4.analysis.weights",
    "bgp4.analysis.estimators",
    "bgp4.analysis.metrics",
    "bgp4.analysis.plots",
    "bgp4.analysis.plots_training",
    "bgp4.report.analyze",
    "bgp4.report.aggregate",
    "bgp4.sweep.runner",
    "bgp4.sweep.spec",
    "bgp4.pipeline",
    "bgp4.settings",
)


def _examples() -> list[tuple[str, str]]:
    """(id, code) of every ```python block under docs/, in page order."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for i, match in enumerate(FENCE.finditer(page.read_text())):
            found.append((f"{page.relative_to(DOCS).with_suffix('')}-{i}".replace("/", "-"), match.group(1)))
    return found


EXAMPLES = _examples()
#: The one use of `__name__` an example may make, at its top level.
GUARD = "__name__ == '__main__'"


def _guards(code: str) -> int:
    """Top-level `if __name__ == "__main__":` statements of an example."""
    return sum(isinstance(node, ast.If) and ast.unparse(node.test) == GUARD for node in ast.parse(code).body)


#: What an example may import and still run among the fast tests (no torch, no OpenMM).
LIGHT_IMPORTS = {"numpy", "bgp4.analysis.weights"}


def _imports(code: str) -> set[str]:
    """The modules an example imports."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def _params() -> list:
    # an example with the guard starts worker processes (multiprocessing spawn imports the script
    # again in each): it takes more than a few seconds; one that imports torch or OpenMM (most of
    # bgp4) spends seconds starting its interpreter
    return [
        pytest.param(code, id=name, marks=[pytest.mark.slow] if _guards(code) or _imports(code) - LIGHT_IMPORTS else [])
        for name, code in EXAMPLES
    ]


def _env() -> dict[str, str]:
    # this checkout's bgp4 first, whatever is installed
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_examples_are_there_and_fit_a_notebook():
    assert len(EXAMPLES) >= 2
    for name, code in EXAMPLES:
        compile(code, name, "exec")
        # a notebook cell has no __file__; the one use of __name__ is the guard, which holds in a
        # notebook too (its cells run as __main__), so the example runs there in full
        assert "__file__" not in code, name
        assert code.count("__name__") == _guards(code) <= 1, name
    other = [
        line
        for page in DOCS.rglob("*.md")
        for line in page.read_text().splitlines()
        if re.match(r"```\s*(py|python3|pycon|ipython)\b", line)
    ]
    assert other == []  # an example fenced another way would escape these tests


def test_the_guard_rule_is_read():
    guarded = 'import os\n\nif __name__ == "__main__":\n    print(os.getcwd())\n'
    assert _guards(guarded) == guarded.count("__name__") == 1
    assert _guards("if __name__ != '__main__':\n    pass\n") == 0
    assert _guards("print(__name__)\n") == 0
    assert any(_guards(code) for _, code in EXAMPLES)  # docs/guide/sweep.md: a sweep from a script


@pytest.mark.parametrize("code", _params())
def test_example_runs_as_a_script(code, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("code", [c for _, c in EXAMPLES], ids=[n for n, _ in EXAMPLES])
def test_example_runs_as_a_notebook_cell(code, tmp_path):
    # what a notebook kernel does with a cell: exec in a namespace named __main__ with no __file__
    (tmp_path / "cell.txt").write_text(code)
    runner = "exec(compile(open('cell.txt').read(), '<cell>', 'exec'), {'__name__': '__main__'})"
    done = subprocess.run(
        [sys.executable, "-c", runner], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _public_names(module: str) -> list[str]:
    """Top-level public functions and classes defined in a module's source."""
    path = ROOT / Path(*module.split("."))
    source = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
    tree = ast.parse(source.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node.name for node in tree.body if isinstance(node, kinds) and not node.name.startswith("_")]


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    anchors = set()
    for page in (site / "reference").rglob("*.html"):
        anchors.update(re.findall(r'id="(bgp4[\w.]*)"', page.read_text()))
    missing = [f"{m}.{name}" for m in REFERENCED for name in _public_names(m) if f"{m}.{name}" not in anchors]
    assert missing == []  # the API reference shows every public function and class of the stages
