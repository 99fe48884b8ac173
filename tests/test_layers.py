"""The package's own import graph: no cycle, and no import from a lower layer to a higher one.

Every import of a bgp4 module counts, also those inside functions or under TYPE_CHECKING; imports
of other packages (torch, OpenMM, Dask), lazy or not, are not part of the graph.

The package's own imports sit at the top of each module, except in the modules the CLI loads at
its start (and the MD replica process), which import the heavy parts lazily: the last test holds
that start-up free of them.
"""

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

import bgp4

PACKAGE = Path(bgp4.__file__).parent
#: From the bottom up; a module may import its own layer and the layers below it.
LAYERS = (
    (
        "bgp4.errors",
        "bgp4._io",
        "bgp4._child",
        "bgp4._rng",
        "bgp4._stop",
        "bgp4.platform",
        "bgp4.kinds",
        "bgp4.settings",
        "bgp4.config",
        "bgp4.stage",
    ),
    ("bgp4.simulation",),
    ("bgp4.flows",),
    ("bgp4.analysis",),
    ("bgp4.generator",),
    ("bgp4.report",),
    ("bgp4.sweep",),
    ("bgp4.pipeline",),
    ("bgp4.cli",),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def import_graph() -> nx.DiGraph:
    """Edges module -> bgp4 module it imports (the package's own modules only)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                if target in modules and target != name and target != "bgp4":
                    graph.add_edge(name, target)
    return graph


def test_every_module_has_a_layer():
    graph = import_graph()
    assert [m for m in graph if m != "bgp4" and _layer(m) is None] == []


def test_no_import_cycle():
    assert list(nx.simple_cycles(import_graph())) == []


def test_no_import_points_up():
    upward = [(a, b) for a, b in import_graph().edges if _layer(a) is not None and _layer(b) > _layer(a)]
    assert upward == []


def test_the_graph_is_read():
    graph = import_graph()
    assert ("bgp4.cli._app", "bgp4.errors") in graph.edges
    assert graph.number_of_edges() > 50


#: Third-party packages the CLI's start-up (and so `bgp4 --help`) must not load.
HEAVY = ("torch", "openmm", "distributed", "matplotlib", "mdtraj")


def test_cli_start_up_is_free_of_heavy_imports():
    code = f"import sys, bgp4.cli; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
