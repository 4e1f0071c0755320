"""The command line answers at once.

``depthbench --help``, ``archs``, ``shapes`` and ``bench --help`` must not import torch, transformers or other heavy
frameworks (measured: 0.15-0.3 s per call on a shared 2-core machine, against ~8 s before); the wall-time bound here
is generous because the test machines are shared. That ``import depthbench`` still registers the Auto classes is
checked in tests/test_init.py.

    python -m pytest tests/test_cli_latency.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from depthbench.registry import ARCHITECTURES
from depthbench.shapes import GRIDS, _backbone_counts, grid_shapes

HEAVY = ("torch", "transformers", "numpy", "datasets", "accelerate", "lm_eval", "matplotlib", "huggingface_hub")
FAST_COMMANDS = [["--help"], ["--version"], ["tasks-path"], ["archs"], ["archs", "--json"], ["shapes"],
                 ["shapes", "400m"], ["shapes", "tiny", "--csv"], ["shapes", "400m", "--arch", "mhc"],
                 ["shapes", "--budget", "20m", "--depths", "4,8", "--arch", "moda"], ["bench", "--help"]]
HELP_NEEDS_MODEL_CODE = {"upcycle": "its epilog lists each architecture's start, read from the config classes"}
"""Commands whose ``--help`` may import torch, and why; every other command's ``--help`` imports no heavy framework."""


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("argv", FAST_COMMANDS, ids=" ".join)
def test_fast_commands_import_no_heavy_framework(argv):
    code = (
        "import sys, contextlib, io\n"
        "from depthbench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        code = main({argv!r})\n"
        "    except SystemExit as exc:\n"
        "        code = exc.code\n"
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0 []", result.stdout  # exit code 0, no heavy module loaded


def test_help_of_every_command_imports_no_heavy_framework():
    """``depthbench <command> --help`` for every command of :data:`depthbench.cli.COMMANDS` (one interpreter per
    command: each import is measured fresh) loads none of :data:`HEAVY`, except the commands listed in
    :data:`HELP_NEEDS_MODEL_CODE`; ``sweep --help`` builds the ``demo`` parser too, so the demo's constants must not
    pull in the runner."""
    from depthbench.cli import COMMANDS

    code = (
        "import sys, contextlib, io, json\n"
        "from depthbench.cli import main\n"
        "out = {}\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main([sys.argv[1], '--help'])\n"
        "    except SystemExit as exc:\n"
        "        out['code'] = exc.code\n"
        f"out['heavy'] = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    loaded = {}
    for command in COMMANDS:
        if command in HELP_NEEDS_MODEL_CODE:
            continue
        result = subprocess.run([sys.executable, "-c", code, command], capture_output=True, text=True, timeout=120,
                                env=env)
        assert result.returncode == 0, (command, result.stderr)
        out = json.loads(result.stdout.strip().splitlines()[-1])
        assert out["code"] == 0, (command, result.stderr)
        if out["heavy"]:
            loaded[command] = out["heavy"]
    assert loaded == {}, loaded


def test_console_script_latency():
    """The real console script, end to end: well under a second on an idle 2-core machine (bound: 5 s)."""
    script = os.path.join(os.path.dirname(sys.executable), "depthbench")
    if not os.path.exists(script):
        pytest.skip("console script not installed next to this interpreter")
    for argv in (["--help"], ["archs"], ["shapes", "400m"], ["shapes", "400m", "--arch", "hc"]):
        best = float("inf")
        for _ in range(2):  # the faster of two runs: one slow start on a busy machine is not the CLI's fault
            start = time.perf_counter()
            result = subprocess.run([script, *argv], capture_output=True, text=True, timeout=120)
            best = min(best, time.perf_counter() - start)
            assert result.returncode == 0, result.stderr
        assert best < 5.0, f"depthbench {' '.join(argv)} took {best:.2f} s"


def test_plain_python_backbone_counts_equal_the_config():
    """``depthbench shapes`` counts without transformers; the counts equal ``DepthBenchConfig.parameter_counts``."""
    from depthbench.modeling.configuration_depthbench import DepthBenchConfig

    for grid in GRIDS:
        for shape in grid_shapes(grid):
            fields = shape.config_fields()
            assert _backbone_counts(**fields) == DepthBenchConfig(**fields).parameter_counts(), shape.name


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_plain_python_extra_counts_equal_the_architecture_config(arch):
    """``depthbench shapes --arch`` counts with the registry's plain-Python ``extra``; every grid shape (and an
    ad-hoc grouped-query shape) gives exactly the counts of the architecture's own config class."""
    from depthbench.registry import build_config
    from depthbench.shapes import shape_for_budget

    shapes = [shape for grid in GRIDS for shape in grid_shapes(grid)]
    shapes.append(shape_for_budget(30_000_000, 6, vocab_size=1000, heads=8, kv_heads=2))
    for shape in shapes:
        want = build_config(arch, **shape.config_fields()).parameter_counts()
        assert shape.parameter_counts(arch) == want, (arch, shape.name)
