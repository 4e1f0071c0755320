"""The package layout keeps its promises: dependencies point one way (the table :data:`MAY_IMPORT`, one row per
command family), nothing imports the command line, no import cycles among the package's own modules (counting
imports inside functions too, which Python only runs later but which still tie two modules together), and every
module imports on its own in a fresh interpreter (nothing depends on another module having been imported first).
No underscore name is used outside its module (in ``modeling/``, remote code, not by tests either), and each
``modeling/`` helper file is named by its owner (``mhc_sinkhorn.py`` is mHC's). Run and sweep folders' file and
folder names are spelled once, by their owner (:mod:`depthbench.runs`), and every JSON file goes through
:mod:`depthbench.atomic`.
Every module with logic of its own has a test file named after it (``_test_file``).
Commands live in their family's ``command.py`` (``archs`` and ``shapes`` in ``depthbench.cli``), each handled by
``_cmd_<command>``, and ``released`` names one place, the ``depthbench released`` family
(``depthbench.sweeps.released``).

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
    "training": {"core", "data"},
    "bench": {"core", "training", "data"},  # the trainer's compiled path; the GPU check's FSDP2 run prepares a corpus
    # pruning scores lm-eval tasks through evaluation's harness; a released model's published layer figures come from
    # the catalogue (depthbench.hub.catalogue)
    "analysis": {"core", "data", "evaluation", "hub"},
    "sweeps": {"core", "data", "training", "evaluation", "analysis", "hub", "upcycle"},  # released eval:
    # catalogue, conversion; upcycle-study: depthbench.upcycle
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


# ======================================================================================== modeling/ (remote code)
MODELING = ROOTS["depthbench.modeling"]


def _modeling_imports(path: Path, tree: ast.AST) -> list[tuple[str, ast.ImportFrom]]:
    """``(sibling module, node)`` for every import of a ``modeling/`` module in ``path``: ``from .x import ...``
    inside ``modeling/``, ``from depthbench.modeling.x import ...`` elsewhere."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1 and path.parent == MODELING and node.module:
            found.append((node.module, node))
        elif node.level == 0 and (node.module or "").startswith("depthbench.modeling."):
            found.append((node.module.split(".")[2], node))
    return found


def _private_modeling_imports(paths) -> list[str]:
    """``file: module.name`` for every underscore name a file imports from a ``modeling/`` module other than its
    own, or reads as an attribute of one (``from depthbench.modeling import m`` then ``m._x``)."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for module, node in _modeling_imports(path, tree):
            found += [f"{path.name}: {module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and module != path.stem]
        aliases = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and ((node.level == 0 and node.module == "depthbench.modeling")
                        or (node.level == 1 and node.module is None and path.parent == MODELING))
                   for a in node.names}
        found += [f"{path.name}: {aliases[n.value.id]}.{n.attr}" for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                  and n.attr.startswith("_") and not n.attr.startswith("__")]
    return sorted(found)


def test_no_private_name_crosses_modeling_files():
    """A helper that another file imports (a sibling in ``modeling/``, the package or a test) is public."""
    repo = MODELING.parent
    paths = [*MODELING.glob("*.py"), *(repo / "src").rglob("*.py"), *(repo / "tests").rglob("*.py")]
    assert len(paths) > 50
    found = _private_modeling_imports(paths)
    assert not found, "underscore names used outside their modeling file: " + "; ".join(found)


def _private_package_imports(modules: dict[str, Path]) -> list[str]:
    """``module: other.name`` for every underscore name a module of the package imports from another one of its
    modules (``from depthbench.x import _y``, relative imports too), or reads as an attribute of one it imported
    (``from depthbench import x`` then ``x._y``)."""
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in modules})
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, *([base] if base else [])])
            for a in node.names:
                if f"{base}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
                elif base in modules and base != name and a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{name}: {base}.{a.name}")
        found += [f"{name}: {aliases[n.value.id]}.{n.attr}" for n in ast.walk(tree)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                  and aliases[n.value.id] != name and n.attr.startswith("_") and not n.attr.startswith("__")]
    return sorted(found)


def test_no_private_name_crosses_package_files():
    """A helper another module of the package imports is public, across all of ``src/depthbench`` as in
    ``modeling/`` (tests may still reach a module's own underscore helpers: they test that module)."""
    modules = _modules()
    assert len(modules) > 100
    found = _private_package_imports(modules)
    assert not found, "underscore names used outside their module: " + "; ".join(found)


def test_the_package_private_name_check_sees_a_private_import(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    for rel, text in {"__init__.py": "", "a.py": "def _x(): ...\n", "sub/__init__.py": "",
                      "sub/b.py": "from ..a import _x\nfrom pkg import a\na._y\nfrom . import c as cc\ncc._z\n",
                      "sub/c.py": "from pkg.sub.c import _own\n"}.items():
        (root / rel).write_text(text)
    modules = {"pkg": root / "__init__.py", "pkg.a": root / "a.py", "pkg.sub": root / "sub/__init__.py",
               "pkg.sub.b": root / "sub/b.py", "pkg.sub.c": root / "sub/c.py"}
    assert _private_package_imports(modules) == ["pkg.sub.b: pkg.a._x", "pkg.sub.b: pkg.a._y",
                                                 "pkg.sub.b: pkg.sub.c._z"]


PRIVATE_TORCH_IN_REMOTE_CODE = {"hc_stream_memory.py"}
"""The one ``modeling/`` file allowed a private ``torch._C`` call; why: docs/design.md, "Decisions kept on purpose"."""


def test_no_private_torch_call_in_remote_code_but_the_recorded_one():
    found = {p.name for p in MODELING.glob("*.py") if "torch._C" in p.read_text(encoding="utf-8")}
    extra = sorted(found - PRIVATE_TORCH_IN_REMOTE_CODE)
    assert not extra, f"private torch._C calls in remote code: {extra}"
    assert found == PRIVATE_TORCH_IN_REMOTE_CODE, "the recorded exception is gone: drop it from the table and the docs"


def test_the_private_name_check_sees_a_private_import(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "MODELING", tmp_path)
    (tmp_path / "modeling_a.py").write_text("from .numerics import _fast, upcast\nfrom . import norms\n"
                                            "norms._inner(1)\n")
    test = tmp_path / "test_a.py"
    test.write_text("from depthbench.modeling.numerics import _fast\n")
    assert _private_modeling_imports([tmp_path / "modeling_a.py", test]) == [
        "modeling_a.py: norms._inner", "modeling_a.py: numerics._fast", "test_a.py: numerics._fast"]


def _used_helpers(path: Path) -> set[str]:
    """The ``modeling/`` helper modules whose names ``path`` uses (an import kept only so that transformers copies
    the file with the checkpoint, ``# noqa: F401``, is not a use)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return {module for module, node in _modeling_imports(path, tree)
            if any((a.asname or a.name) in loaded for a in node.names)}


def _misnamed_helpers(folder: Path) -> list[str]:
    """``file (why)`` for every helper file of ``folder`` (not ``modeling_*``, ``configuration_*``) whose name does
    not say its owner. The owner is the one architecture file that uses it, or the one every other user builds on
    (imports); such a helper is named ``<id>_*.py`` (``modeling_<id>.py``'s id). A helper only the backbone
    (``modeling_depthbench.py``) uses is ``depthbench_*.py``; one that several architectures or the backbone share
    carries no architecture's id."""
    files = {p.stem: p for p in folder.glob("*.py") if p.stem != "__init__"}
    archs = {stem[len("modeling_"):] for stem in files if stem.startswith("modeling_")} - {"depthbench"}
    helpers = sorted(s for s in files if not s.startswith(("modeling_", "configuration_")))
    users = {s: {u for u, p in files.items() if u != s and s in _used_helpers(p)} for s in helpers}
    imports = {u: {m for m, _ in _modeling_imports(p, ast.parse(p.read_text(encoding="utf-8")))}
               for u, p in files.items()}
    problems = []
    for helper in helpers:
        prefix = helper.split("_")[0]
        model_users = {u for u in users[helper] if u.startswith("modeling_")}
        owners = [u for u in model_users if u != "modeling_depthbench"
                  and all(u in imports[other] for other in model_users - {u})]
        owner = owners[0][len("modeling_"):] if owners and users[helper] == model_users else None
        if owner and not helper.startswith(owner + "_"):
            problems.append(f"{helper}.py (used by modeling_{owner}.py only: name it {owner}_...)")
        elif not owner and any(helper.startswith(a + "_") for a in archs):
            problems.append(f"{helper}.py (shared by {', '.join(sorted(users[helper])) or 'nobody'}: no "
                            "architecture's id)")
        if prefix == "depthbench" and users[helper] != {"modeling_depthbench"}:
            problems.append(f"{helper}.py (depthbench_ is for helpers only the backbone uses)")
    return problems


def test_modeling_helper_files_are_named_by_their_owner():
    names = {p.name for p in MODELING.glob("*.py")}
    assert {"mhc_sinkhorn.py", "hc_stream_memory.py", "depthbench_checkpointing.py", "norms.py"} <= names
    assert _misnamed_helpers(MODELING) == []


def test_the_owner_check_sees_a_misnamed_helper(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "MODELING", tmp_path)
    (tmp_path / "modeling_depthbench.py").write_text("from .norms import n\nn\n")
    (tmp_path / "modeling_hc.py").write_text("from .modeling_depthbench import x\nfrom .memory import m\nm\n")
    (tmp_path / "modeling_mhc.py").write_text("from .modeling_hc import y\nfrom .memory import m\nm\n"
                                              "from .mhc_norms import k  # noqa: F401\n")
    (tmp_path / "modeling_pre_ln.py").write_text("from .norms import n\nfrom .mhc_norms import k\nn, k\n")
    for name in ("norms.py", "memory.py", "mhc_norms.py"):
        (tmp_path / name).write_text("")
    assert _misnamed_helpers(tmp_path) == ["memory.py (used by modeling_hc.py only: name it hc_...)",
                                           "mhc_norms.py (used by modeling_pre_ln.py only: name it pre_ln_...)"]


# ================================================================================================ one owner each
def _docstrings(tree: ast.AST) -> set[int]:
    """``id`` of every docstring node of ``tree`` (prose about a file name or a call is not a use of it)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _modules_where(predicate) -> set[str]:
    """The package's modules whose code (docstrings aside) has a node for which ``predicate(node)`` holds."""
    found = set()
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        if any(predicate(node) for node in ast.walk(tree) if id(node) not in skip):
            found.add(name)
    return found


def _string(node: ast.AST, test) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and test(node.value)


def test_model_cards_are_rendered_by_one_module():
    """Every card is a template of ``model_cards/`` filled by :mod:`depthbench.cards`: nothing else calls
    ``ModelCard.from_template`` or passes an inline ``template_str``."""
    def renders(node):
        return (isinstance(node, ast.Attribute) and node.attr == "from_template") or (
            isinstance(node, ast.keyword) and node.arg == "template_str")

    assert _modules_where(renders) == {"depthbench.cards"}


def test_procfs_is_read_by_one_module():
    """``/proc`` is read by :mod:`depthbench.procfs` alone (the benchmark, the analyses and the lease import it)."""
    assert _modules_where(lambda node: _string(node, lambda s: s.startswith("/proc/"))) == {"depthbench.procfs"}


def test_run_folder_file_names_are_spelled_once():
    """The run and sweep folders' file names are :mod:`depthbench.runs` constants (the layout described once, in its
    docstring), the checkpoint's own names :mod:`depthbench.training.checkpoint` constants, a figure's name its
    writer's, the conversion record :mod:`depthbench.hub.convert`'s: no other module spells them."""
    from depthbench import runs
    from depthbench.analysis import sweep as analysis_sweep
    from depthbench.evaluation import sweep as evaluation_sweep
    from depthbench.hub import convert
    from depthbench.training import checkpoint

    owners = {
        "depthbench.runs": {runs.RUN_CONFIG, runs.SUMMARY, runs.METRICS, runs.FINAL_STAGING, runs.SWEEP_DEFINITION,
                            runs.REPORT, runs.REPORT_PAGE, runs.RESULTS_CSV, runs.RESULTS_JSONL, runs.RESULTS_PLOT,
                            runs.EVAL_TABLE, runs.EVAL_RESULTS, runs.BASE_CONFIG, runs.SLURM_SCRIPT, runs.SLURM_RUNS,
                            runs.DATA_META},
        "depthbench.training.checkpoint": {checkpoint.TRAINER_STATE, checkpoint.LATEST},
        "depthbench.evaluation.sweep": {evaluation_sweep.DOMAIN_PLOT, evaluation_sweep.SYNTHETIC_PLOT},
        "depthbench.analysis.sweep": {analysis_sweep.LATE_FIGURE, analysis_sweep.LENS_FIGURE},
        "depthbench.hub.convert": {convert.CONVERSION_RECORD},
    }
    for owner, names in owners.items():
        spelled = _modules_where(lambda node, names=names: _string(node, lambda s: s in names))
        assert spelled == {owner}, f"{sorted(names)} spelled outside {owner}: {sorted(spelled - {owner})}"


def _path_parts(node: ast.AST) -> list[ast.AST]:
    """The parts of a path that ``node`` builds: the arguments of ``os.path.join`` / ``.joinpath``, the operands of
    ``/`` (a ``pathlib`` path)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "joinpath" or (node.func.attr == "join" and isinstance(node.func.value, ast.Attribute)
                                             and node.func.value.attr == "path")):
        return list(node.args)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return [node.left, node.right]
    return []


def _spelled_folders(tree: ast.AST, names: set[str]) -> list[str]:
    return [part.value for node in ast.walk(tree) for part in _path_parts(node) if _string(part, names.__contains__)]


def test_run_folder_names_come_from_runs_wherever_a_path_is_built():
    """The folders of a run and a sweep (``checkpoints``, ``final``, ``runs``, ...) are words that are labels too
    (a ``final`` row, the ``analysis`` report section): a path is built with the :mod:`depthbench.runs` constant,
    never with the word, anywhere but in ``runs.py``."""
    from depthbench import runs

    names = {runs.CHECKPOINTS, runs.CHECKPOINT_EXPORT, runs.FINAL, runs.TENSORBOARD, runs.RUNS, runs.SECTIONS,
             runs.EVAL, runs.ANALYSIS}
    found = {name: spelled for name, path in _modules().items() if name != "depthbench.runs"
             and (spelled := _spelled_folders(ast.parse(path.read_text(encoding="utf-8")), names))}
    assert not found, f"run-folder names spelled in paths: {found}"


def test_the_folder_check_sees_a_path_and_not_a_label():
    tree = ast.parse("os.path.join(out, 'runs', x)\nPath(x) / 'final'\np.joinpath('eval')\nrow = {'k': 'final'}\n"
                     "','.join(['final'])\n")
    assert _spelled_folders(tree, {"runs", "final", "eval"}) == ["runs", "final", "eval"]


def _json_file_calls(tree: ast.AST) -> list[str]:
    """``json.dump`` / ``json.load`` (and ``from json import dump, load``) in ``tree``: JSON to or from a file."""
    found = [f"json.{n.func.attr}" for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr in ("dump", "load")
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "json"]
    return found + [f"from json import {a.name}" for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.module == "json" for a in n.names
                    if a.name in ("dump", "load")]


def test_json_files_are_written_and_read_by_atomic():
    """Every JSON file is written with ``atomic.write_json`` (atomically, NaN as ``null``, numpy and torch values as
    numbers) and read with ``atomic.read_json`` (a damaged file named in one line): ``json.dump`` and ``json.load``,
    the file forms, are called in :mod:`depthbench.atomic` only.

    ``json.dumps`` / ``json.loads`` on strings stay where the JSON is not a file of its own: one line of a JSON
    Lines file (``metrics.jsonl``, ``results.jsonl``, a corpus), a line printed or sent through a pipe, a
    command-line value, a hash's input. Two files are JSON read or written as text on purpose: a user's run-config
    file (``depthbench.config``: JSON or YAML, told apart by its name) and the writer lease (``depthbench.lease``:
    created with ``O_EXCL``, which a rename over it would defeat, and read while another process may be writing
    it)."""
    found = {name: calls for name, path in _modules().items()
             if (calls := _json_file_calls(ast.parse(path.read_text(encoding="utf-8"))))}
    assert set(found) == {"depthbench.atomic"}, f"JSON files outside depthbench.atomic: {found}"


def test_the_json_check_sees_a_file_call():
    tree = ast.parse("import json\njson.dump(x, f)\ns = json.dumps(x)\nfrom json import load, loads\n")
    assert _json_file_calls(tree) == ["json.dump", "from json import load"]


def _is_command_module(name: str) -> bool:
    return name == "depthbench.cli" or name.rsplit(".", 1)[-1] == "command"


def _top_level_functions(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_commands_live_in_command_modules():
    """Every command is registered and handled in its family's ``command.py`` (``archs`` and ``shapes`` in
    ``depthbench.cli``): ``register_cli`` and ``_cmd_*`` handlers are defined nowhere else, and the command table
    names only those modules."""
    from depthbench.cli import COMMANDS

    outside = sorted(f"{name}.{fn}" for name, path in _modules().items() if not _is_command_module(name)
                     for fn in _top_level_functions(path) if fn == "register_cli" or fn.startswith("_cmd_"))
    assert not outside, "command code outside a command module: " + ", ".join(outside)
    assert not [c for c, (module, _) in COMMANDS.items() if not _is_command_module(module)], COMMANDS


def _handler_names(parser, path: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """``(command path, handler's module, handler's name)`` of ``parser`` and every sub-parser below it (a
    ``functools.partial`` counts as the function it wraps)."""
    import argparse
    import functools

    found = []
    func = parser.get_default("func")
    if func is not None:
        func = func.func if isinstance(func, functools.partial) else func
        found.append((" ".join(path), func.__module__, func.__name__))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _handler_names(sub, (*path, name))
    return found


def _wrong_handlers(handlers: list[tuple[str, str, str]], module_of: dict[str, str]) -> list[str]:
    """The handlers not named ``_cmd_<command path>`` (``-`` and spaces as ``_``) or not in their command's
    module, as ``command: module.name``."""
    return [f"{path}: {module}.{name}" for path, module, name in handlers
            if name != "_cmd_" + path.replace("-", "_").replace(" ", "_") or module != module_of[path.split()[0]]]


def test_command_handlers_are_named_one_way():
    """Every command's handler (sub-commands included) is ``_cmd_<command>`` in its command module:
    ``_cmd_train``, ``_cmd_export_llama``, ``_cmd_released_list``."""
    from depthbench.cli import COMMANDS, build_parser

    module_of = {command: module for command, (module, _) in COMMANDS.items()}
    handlers = []
    for command in COMMANDS:
        handlers += [h for h in _handler_names(build_parser(command), ()) if h[0].split()[0] == command]
    assert {h[0].split()[0] for h in handlers} == set(COMMANDS)
    wrong = _wrong_handlers(handlers, module_of)
    assert not wrong, "handlers not named _cmd_<command> in their command module: " + "; ".join(wrong)


def test_the_handler_check_sees_a_wrong_name():
    """The checker itself: a ``run_cli`` handler and one in a library module are reported, nested names are not."""
    module_of = {"publish": "depthbench.hub.command", "released": "depthbench.sweeps.released.command"}
    handlers = [("publish", "depthbench.hub.command", "run_cli"),
                ("released list", "depthbench.sweeps.released.command", "_cmd_released_list"),
                ("publish", "depthbench.hub.publish", "_cmd_publish")]
    assert _wrong_handlers(handlers, module_of) == ["publish: depthbench.hub.command.run_cli",
                                                    "publish: depthbench.hub.publish._cmd_publish"]


def test_released_is_one_room():
    """``released`` names one place: the ``depthbench released`` command family (``depthbench.sweeps.released``);
    the catalogue of the study's releases is ``depthbench.hub.catalogue``."""
    stray = [name for name in _modules() if "released" in name.split(".")
             and not (name + ".").startswith("depthbench.sweeps.released.")]
    assert not stray, "modules named released outside depthbench.sweeps.released: " + ", ".join(stray)
    assert "depthbench.hub.catalogue" in _modules()


# ================================================================================================ tests by owner
REPO = MODELING.parent


def _has_logic(path: Path) -> bool:
    """A module has logic of its own when it defines a function (top level or a method): a module of constants,
    re-exports, exception classes or plain dataclasses has nothing a test could exercise on its own."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(tree))


def _test_file(path: Path) -> Path:
    """The test file named after ``path``: ``src/depthbench/<family>/<m>.py`` -> ``tests/<family>/test_<m>.py``
    (a package's ``__init__.py`` -> ``test_init.py``), ``modeling/modeling_<id>.py`` ->
    ``tests/modeling/residuals/test_<id>.py`` (each paper's equations), any other ``modeling/<m>.py`` ->
    ``tests/modeling/test_<m>.py``."""
    stem = "init" if path.name == "__init__.py" else path.stem
    if path.parent == MODELING:
        if stem.startswith("modeling_"):
            return REPO / "tests" / "modeling" / "residuals" / f"test_{stem[len('modeling_'):]}.py"
        return REPO / "tests" / "modeling" / f"test_{stem}.py"
    rel = path.relative_to(ROOTS["depthbench"]).parent
    return REPO / "tests" / rel / f"test_{stem}.py"


def _modules_without_test_file() -> set[str]:
    sources = [p for p in sorted(ROOTS["depthbench"].rglob("*.py")) if p.name != "__main__.py"]
    sources += sorted(p for p in MODELING.glob("*.py"))
    return {str(p.relative_to(REPO)) for p in sources if _has_logic(p) and not _test_file(p).is_file()}


def test_every_module_with_logic_has_a_test_file_named_after_it():
    missing = sorted(_modules_without_test_file())
    assert not missing, "modules with logic and no test file named after them: " + ", ".join(
        f"{m} -> {_test_file(REPO / m).relative_to(REPO)}" for m in missing)


def test_the_test_file_map_names_each_owner():
    assert _test_file(ROOTS["depthbench"] / "analysis" / "angular.py") == REPO / "tests/analysis/test_angular.py"
    assert _test_file(ROOTS["depthbench"] / "config.py") == REPO / "tests/test_config.py"
    assert _test_file(ROOTS["depthbench"] / "analysis" / "__init__.py") == REPO / "tests/analysis/test_init.py"
    assert _test_file(MODELING / "modeling_hc.py") == REPO / "tests/modeling/residuals/test_hc.py"
    assert _test_file(MODELING / "hc_stream_memory.py") == REPO / "tests/modeling/test_hc_stream_memory.py"
    assert not _has_logic(ROOTS["depthbench"] / "training" / "errors.py")  # exception classes only
    assert _has_logic(ROOTS["depthbench"] / "atomic.py")
