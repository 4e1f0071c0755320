"""``depthbench.training`` (the package): ``train`` is the trainer's, loaded only when asked for, so importing the
package (``depthbench sft --help``, ``depthbench.training.command``) loads neither torch nor accelerate.

    python -m pytest tests/training/test_init.py -q
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT


def test_train_is_the_trainers_and_other_names_are_refused():
    import depthbench.training
    from depthbench.training.trainer import train

    assert depthbench.training.train is train
    with pytest.raises(AttributeError, match="module 'depthbench.training' has no attribute 'trian'"):
        depthbench.training.trian  # noqa: B018


def test_importing_the_package_loads_neither_torch_nor_accelerate():
    code = "import sys, depthbench.training; print(sorted({'torch', 'accelerate'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
