"""The data family's public names (``depthbench.data``): each is the defining submodule's own object, loaded on first
use (importing the package loads no submodule), and an unknown name fails as Python fails for a missing attribute."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import depthbench.data as data


def test_every_public_name_is_its_submodules_object():
    for name, module in data._EXPORTS.items():
        assert getattr(data, name) is getattr(importlib.import_module(f"depthbench.data.{module}"), name)
    assert data.__all__ == sorted(data._EXPORTS) and set(data._EXPORTS) <= set(dir(data))


def test_an_unknown_name_fails_as_a_missing_attribute():
    with pytest.raises(AttributeError, match=r"^module 'depthbench.data' has no attribute 'prepare_everything'$"):
        data.prepare_everything  # noqa: B018
    assert not hasattr(data, "nothing_here")


def test_importing_the_package_loads_no_submodule():
    code = ("import sys, depthbench.data as d; loaded = sorted(m for m in sys.modules if m.startswith("
            "'depthbench.data.')); d.prepare_data; print(loaded, 'depthbench.data.prepare' in sys.modules, "
            "'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["[]", "True", "False"]
