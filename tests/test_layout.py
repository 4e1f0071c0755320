"""The package layout keeps its promises: dependencies point one way (the table :data:`MAY_IMPORT`, one row per
command family), nothing imports the command line, no import cycles among the package's own modules (counting
imports inside functions too, which Python only runs later but which still tie two modules together), and every
module imports on its own in a fresh interpreter (nothing depends on another module having been imported first).

Run: ``python -m pytest tests/test_layout.py -q``
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import depthbench.modeling  # binds `depthbench` too

ROOTS = {"depthbench": Path(depthbench.__file__).parent,
         "depthbench.modeling": Path(depthbench.modeling.__file__).parent}


def _modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the package (``depthbench.modeling`` is its own root)."""
    out = {}
    for prefix, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("").parts
            if rel[-1] == "__main__":  # runs a command when imported (python -m); not a library module
                continue
            if rel[-1] == "__init__":
                rel = rel[:-1]
            name = ".".join((prefix, *rel))
            if prefix == "depthbench" and name.startswith("depthbench.modeling"):
                continue
            out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's own modules that ``name`` imports anywhere in its file (top level or inside functions)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            if target in modules and target != name:
                found.add(target)
    # importing a submodule runs its packages' __init__ first (not an edge from a package's own submodules)
    for target in list(found):
        parts = target.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent in modules and parent != name and not name.startswith(parent + ".") and parent != "depthbench":
                found.add(parent)
    return found


#: Which families a family's modules may import (besides itself and the package root ``depthbench``, whose import
#: registers the architectures). "core" = the top-level modules (registry, config, shapes, runs, errors, ...).
#: ``depthbench.modeling`` imports nothing of the package (it ships to the Hub as remote code; see
#: tests/modeling/test_remote_code.py for its import allow-list), and nothing imports ``depthbench.cli``.
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    "modeling": set(),
    "data": {"core"},
    "hub": {"core"},
    "evaluation": {"core"},
    "training": {"core", "data", "hub"},  # checkpoints and exports write model cards (depthbench.hub.cards)
    "bench": {"core", "training", "data"},  # the trainer's compiled path; the GPU check's FSDP2 run prepares a corpus
    "analysis": {"core", "data", "bench"},  # the efficiency metric times blocks with the benchmark's clock
    "sweeps": {"core", "data", "training", "evaluation", "analysis", "hub", "upcycle"},  # released eval: catalogue,
    # conversion; upcycle-study: depthbench.upcycle
    "upcycle": {"core", "hub"},  # the checkpoint's card and atomic write, the built-in text sample
    "cli": {"core"},
    "root": {"core", "hub"},  # depthbench.from_released
}
FAMILIES = ("modeling", "data", "hub", "evaluation", "training", "bench", "analysis", "sweeps", "upcycle")


def family(module: str) -> str:
    parts = module.split(".")
    if module == "depthbench":
        return "root"
    if module == "depthbench.cli":
        return "cli"
    return parts[1] if parts[1] in FAMILIES else "core"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _wrong_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` that :data:`MAY_IMPORT` does not allow, as ``a -> b``."""
    return sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                  if family(b) not in {family(a), "root"} | MAY_IMPORT[family(a)])


def test_dependencies_point_one_way():
    graph = _graph()
    assert set(MAY_IMPORT) == {family(m) for m in graph}, "a family without a row in MAY_IMPORT"
    wrong = _wrong_arrows(graph)
    assert not wrong, "imports against the layout table: " + "; ".join(wrong)
    assert not [a for a, deps in graph.items() if "depthbench.cli" in deps], "nothing imports depthbench.cli"


def test_the_table_check_sees_a_wrong_arrow():
    """The checker itself: an import from training into sweeps is reported."""
    graph = {"depthbench.training.trainer": {"depthbench.sweeps.report", "depthbench.data.loader"},
             "depthbench.sweeps.report": {"depthbench.training.checkpoint"}}
    assert _wrong_arrows(graph) == ["depthbench.training.trainer -> depthbench.sweeps.report"]


def test_no_import_cycles_among_the_package_modules():
    modules = _modules()
    assert {"depthbench.training.trainer", "depthbench.training.checkpoint", "depthbench.sweeps.runner",
            "depthbench.sweeps.report", "depthbench.sweeps.demo", "depthbench.runs",
            "depthbench.data", "depthbench.data.prepare", "depthbench.data.loader",
            "depthbench.modeling.modeling_depthbench"} <= set(modules)
    graph = _graph()
    assert "depthbench.training.run" in graph["depthbench.training.trainer"]
    assert "depthbench.sweeps.report" in graph["depthbench.sweeps.runner"]
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(cycles)


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every back edge of a depth-first search of ``graph``, as ``a -> b -> a`` (empty: no cycle)."""
    cycles: list[str] = []
    state: dict[str, str] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join([*stack[stack.index(dep):], dep]))
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_the_cycle_check_sees_a_cycle(tmp_path, monkeypatch):
    """The checker itself: two modules importing each other (one of them inside a function) form a cycle."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from pkg import b\n")
    (root / "b.py").write_text("def f():\n    from pkg.a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOTS", {"pkg": root})
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert _cycles(graph) == ["pkg.a -> pkg.b -> pkg.a"]


def test_every_module_imports_on_its_own_in_a_fresh_interpreter():
    """A fresh child interpreter imports the modules one by one and drops every ``depthbench`` module from
    ``sys.modules`` before each import, so each one is imported with nothing of the package loaded (one process
    instead of one per module: torch is imported once)."""
    names = sorted(_modules())
    script = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m == 'depthbench' or m.startswith('depthbench.')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
        "print('ok', len(" + repr(names) + "))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"ok {len(names)}"
