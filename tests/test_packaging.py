"""The package as it is installed: the wheel built from the committed tree holds every file of the package's folders
(each module, run file, task YAML and data file, card template), the files the code reads at run time are found
inside the installed package, and there is one version string.

The behaviour of the installed wheel outside the checkout (every command from a fresh venv) is checked by
``.ci/wheel_check.sh``.

    python -m pytest tests/test_packaging.py -q --runslow
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import depthbench
from depthbench.cards import CARD_TEMPLATE
from depthbench.config import SHIPPED_RUN_FILES, load_run_config, read_config_file, shipped_run_file
from depthbench.evaluation.harness import tasks_dir

REPO = Path(__file__).resolve().parents[1]

#: Where each folder of the repository lands in the installed package (the layout setup.py promises): written out
#: here, not read from setup.py, so a mapping that setup.py drops or changes is a failure.
INSTALLED_AS = {"src/depthbench": "depthbench", "modeling": "depthbench/modeling",
                "model_cards": "depthbench/model_cards", "eval_tasks": "depthbench/eval_tasks"}


def _need_git() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the committed tree is unknown")


def _committed_files() -> list[str]:
    """The files of the package's folders in the commit the wheel is built from (HEAD), relative to the
    repository."""
    _need_git()
    out = subprocess.run(["git", "-C", str(REPO), "ls-tree", "-r", "-z", "--name-only", "HEAD", "--", *INSTALLED_AS],
                         capture_output=True, check=True).stdout.decode()
    return sorted(f for f in out.split("\0") if f)


def _installed_name(path: str | os.PathLike) -> str:
    """The wheel entry of a repository file (``eval_tasks/x.yaml`` -> ``depthbench/eval_tasks/x.yaml``)."""
    rel = Path(os.path.abspath(path)).relative_to(REPO).as_posix()
    for folder, target in sorted(INSTALLED_AS.items(), key=lambda item: -len(item[0])):
        if rel == folder or rel.startswith(folder + "/"):
            return target + rel[len(folder):]
    raise AssertionError(f"{rel} is in none of the package's folders {sorted(INSTALLED_AS)}")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel ``pip wheel`` builds from a copy of the committed files (no build/ or egg-info of the checkout)."""
    _need_git()
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "HEAD"], capture_output=True,
                             check=True).stdout
    source.mkdir()
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q",
                           "--disable-pip-version-check", "-w", str(tmp / "dist")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = (tmp / "dist").glob("depthbench-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_the_wheel_holds_every_committed_file_of_the_package_folders(wheel):
    names = set(wheel.namelist())
    tracked = _committed_files()
    assert len(tracked) > 100
    missing = sorted(path for path in tracked if _installed_name(path) not in names)
    assert not missing, f"committed files missing from the wheel: {missing}"
    for name in ("depthbench/analysis/causal.py", "depthbench/eval_tasks/depthbench_nll/_default_template_yaml",
                 "depthbench/eval_tasks/depthbench_synthetic/data/test.jsonl", "depthbench/configs/400m.yaml",
                 f"depthbench/model_cards/{CARD_TEMPLATE}"):
        assert name in names, name
    assert not [n for n in names if n.endswith((".pyc", ".pyo")) or "__pycache__" in n]


@pytest.mark.slow
def test_the_files_read_at_run_time_are_in_the_wheel(wheel):
    """Every file the code finds through its owner (the task folder of ``depthbench eval``, the card template, the
    run files named without a path) is a file of the installed package, i.e. an entry of the wheel."""
    from importlib import resources

    names = set(wheel.namelist())
    read = [p for p in tasks_dir().rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    read.append(Path(str(resources.files("depthbench.model_cards").joinpath(CARD_TEMPLATE))))
    read += [Path(shipped_run_file(name)) for name in SHIPPED_RUN_FILES]
    assert len(read) > 20
    missing = sorted(str(p) for p in read if _installed_name(p) not in names)
    assert not missing, f"read at run time but not in the wheel: {missing}"


@pytest.mark.slow
def test_the_wheel_metadata_carries_the_one_version_and_the_license(wheel):
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    fields = [line.split(": ", 1) for line in wheel.read(metadata).decode().split("\n\n")[0].splitlines()
              if ": " in line]
    meta = {}
    for key, value in fields:
        meta.setdefault(key, []).append(value)
    assert meta["Version"] == [depthbench.__version__]
    assert meta["License"] == ["Apache-2.0"] and any(n.endswith("licenses/LICENSE") for n in wheel.namelist())
    assert "Apache License" in wheel.read(next(n for n in wheel.namelist() if n.endswith("licenses/LICENSE"))).decode()
    assert meta["Description-Content-Type"] == ["text/markdown"]
    assert any(url.startswith("Paper, https://arxiv.org/abs/2609.32534") for url in meta["Project-URL"])
    assert meta["Keywords"] and len(meta["Classifier"]) >= 5


def test_tasks_dir_is_the_installed_package_folder():
    """``tasks_dir()`` is the folder of the installed ``depthbench.eval_tasks`` (in this editable install: the
    repository's ``eval_tasks/``), a real folder lm-eval can index."""
    import depthbench.eval_tasks
    from lm_eval.tasks import TaskManager

    assert tasks_dir() == Path(depthbench.eval_tasks.__file__).parent
    assert tasks_dir().resolve() == (REPO / "eval_tasks").resolve()  # the editable install maps the repo's folder
    manager = TaskManager(include_path=str(tasks_dir()), include_defaults=False)
    assert {"depthbench_synthetic", "depthbench_synthetic_mc_pointer", "depthbench_nll"} <= set(manager.all_tasks)


def test_tasks_path_prints_the_folder_for_the_stock_cli():
    proc = subprocess.run([sys.executable, "-m", "depthbench.cli", "tasks-path"], capture_output=True, text=True,
                          timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{tasks_dir()}\n"


def test_one_version_string():
    """``depthbench --version``, the installed metadata (setup.py reads ``__version__``) and the package agree."""
    proc = subprocess.run([sys.executable, "-m", "depthbench.cli", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"depthbench {importlib.metadata.version('depthbench')}\n"
    assert importlib.metadata.version("depthbench") == depthbench.__version__


def test_a_shipped_run_file_is_found_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import yaml

    for name in SHIPPED_RUN_FILES:
        assert read_config_file(name) == yaml.safe_load((REPO / "src" / "depthbench" / "configs" / name).read_text())
    shipped = yaml.safe_load((REPO / "src" / "depthbench" / "configs" / "demo.yaml").read_text())
    assert load_run_config("demo.yaml").model.shape == shipped["model"]["shape"]
    (tmp_path / "demo.yaml").write_text("model: {arch: hc, shape: tiny-L2}\n")  # a local file of the name wins
    assert read_config_file("demo.yaml") == {"model": {"arch": "hc", "shape": "tiny-L2"}}
    with pytest.raises(ValueError, match="does not exist.*400m.yaml, demo.yaml"):
        read_config_file("nope.yaml")
    with pytest.raises(ValueError, match="does not exist"):
        read_config_file("sub/400m.yaml")  # a path is never replaced by the shipped file
