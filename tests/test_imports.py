"""The import graph of the package flows one way: ``graphs`` -> ``solvers`` -> ``placement``, with no
circle between modules (function-level imports included: a lazy import is still a dependency); and the
registry is the one list of solver names."""

from __future__ import annotations

import ast
import functools
import os

import networkx as nx

ROOT = os.path.join(os.path.dirname(__file__), "..")
PACKAGES = ("graphs", "solvers", "placement")


@functools.cache
def _parsed(path: str, stamp: tuple[int, int]) -> ast.Module:
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read())


def _tree(path) -> ast.Module:
    """The syntax tree of the file at ``path``, parsed once for the tests here (the four read the same
    files; none changes a tree), again when the file changed."""
    path = os.path.abspath(path)
    st = os.stat(path)
    return _parsed(path, (st.st_mtime_ns, st.st_size))


def _module(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def import_graph() -> nx.DiGraph:
    g = nx.DiGraph()
    modules = {}
    for pkg in PACKAGES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    p = os.path.join(dirpath, f)
                    modules[_module(p)] = p
    for name, path in modules.items():
        g.add_node(name)
        is_pkg = path.endswith("__init__.py")
        for node in ast.walk(_tree(path)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".")
                    parts = parts if is_pkg else parts[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and not name.startswith(t + ".") and not t == name.rpartition(".")[0]:
                    g.add_edge(name, t)
    return g


def test_the_import_graph_has_no_circle():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, f"import circles: {sorted(cycles, key=len)[:5]}"


def test_imports_flow_from_graphs_to_solvers_to_placement():
    rank = {p: i for i, p in enumerate(PACKAGES)}
    wrong = [(a, b) for a, b in import_graph().edges if rank[b.split(".")[0]] > rank[a.split(".")[0]]]
    assert not wrong, wrong


def test_no_module_is_named_after_a_second_model():
    """One model: the stage model's modules are named for what they hold (stages), not as a twin
    ("replicated") of the one-device-per-stage model's."""
    names = [os.path.relpath(os.path.join(d, f), ROOT) for top in ("graphs", "solvers", "placement", "tests",
                                                                   "benchmarks")
             for d, _, fs in os.walk(os.path.join(ROOT, top)) for f in fs if f.endswith(".py")]
    assert names and not [n for n in names if "replicated" in n or "parallel_coarsen" in n]


#: literal lists of solver names that are not lists of solvers: the reference results file's field names
_NOT_SOLVER_LISTS = {("placement/bench/catalog.py", ("dp", "pipedream", "expert"))}


def test_one_list_of_solver_names():
    """The registry (solvers/registry.py) is the one list of solver names: CLI choices, --help and the
    benchmark suite's tables derive from it. A tuple, list or set literal naming two or more registered
    solvers anywhere else is a second list (the bench report's EXACT and HEADLINE, its warm-up and plot
    lists were four)."""
    import ast
    import pathlib

    from solvers.registry import SOLVERS

    root = pathlib.Path(__file__).resolve().parent.parent
    found = []
    for package in ("placement", "solvers", "graphs"):
        for f in sorted((root / package).rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            if rel == "solvers/registry.py":
                continue
            for node in ast.walk(_tree(f)):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    names = tuple(e.value for e in node.elts
                                  if isinstance(e, ast.Constant) and e.value in SOLVERS)
                    if len(names) >= 2 and (rel, names) not in _NOT_SOLVER_LISTS:
                        found.append(f"{rel}:{node.lineno} {names}")
    assert not found, found


def test_every_import_of_the_project_names_what_exists():
    """Every ``from <our module> import name`` of the packages, the benchmarks and the tests, lazy ones
    inside functions included, names a module or attribute that exists. A lazy import is checked only
    when its function runs, so a renamed function left a benchmark importing names that were gone
    (benchmarks/bench_stage_run.py: ``run_replicated``)."""
    import importlib

    root = os.path.abspath(ROOT)
    ours = PACKAGES + ("benchmarks", "tests")
    missing = []
    for top in ours:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                path = os.path.join(dirpath, f)
                name = _module(path)
                is_pkg = f == "__init__.py"
                for node in ast.walk(_tree(path)):
                    if not isinstance(node, ast.ImportFrom):
                        continue
                    base = node.module or ""
                    if node.level:
                        parts = name.split(".") if is_pkg else name.split(".")[:-1]
                        parts = parts[: len(parts) - (node.level - 1)]
                        base = ".".join(parts + ([base] if base else []))
                    if base.split(".")[0] not in ours:
                        continue
                    module = importlib.import_module(base)
                    for alias in node.names:
                        if alias.name == "*" or hasattr(module, alias.name):
                            continue
                        try:
                            importlib.import_module(f"{base}.{alias.name}")
                        except ModuleNotFoundError:
                            missing.append(f"{os.path.relpath(path, root)}:{node.lineno} {base}.{alias.name}")
    assert not missing, missing
