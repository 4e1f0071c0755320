"""``depthbench/__init__.py``: the lazy registry names and the ``sys.meta_path`` hook that registers the
architectures with the Auto classes whatever the import order.

Registration is checked in fresh interpreters for the import orders users meet (depthbench first, transformers
first, a modeling file first); the hook's own bookkeeping in one that never imports transformers (fast).

    python -m pytest tests/test_init.py -q
"""

from __future__ import annotations

import json

import pytest

import depthbench
from depthbench.registry import ARCHITECTURES
from tests.test_cli_latency import _python

REGISTRATION_ORDERS = {
    "depthbench first": "import depthbench, sys\nassert 'torch' not in sys.modules\n"
                        "from transformers import AutoConfig, AutoModelForCausalLM\n",
    "transformers first": "from transformers import AutoConfig, AutoModelForCausalLM\nimport depthbench\n",
    "a modeling file first": "from depthbench.modeling.modeling_hc import HCConfig\n"
                             "from transformers import AutoConfig, AutoModelForCausalLM\n",
}


@pytest.mark.parametrize("order", list(REGISTRATION_ORDERS))
def test_import_depthbench_registers_the_auto_classes(order):
    code = REGISTRATION_ORDERS[order] + (
        "import json\n"
        "from depthbench.registry import ARCHITECTURES\n"
        "config = AutoConfig.for_model('depthbench_mhc', hidden_size=32, num_attention_heads=2, intermediate_size=64,"
        " num_hidden_layers=1, vocab_size=32)\n"
        "model = AutoModelForCausalLM.from_config(config)\n"
        "print(json.dumps([type(model).__name__, sorted(a.model_type for a in ARCHITECTURES.values()"
        " if AutoConfig.for_model(a.model_type).model_type == a.model_type)]))\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    name, registered = json.loads(result.stdout.strip().splitlines()[-1])
    assert name == "MHCForCausalLM"
    assert registered == sorted(a.model_type for a in ARCHITECTURES.values())


def test_the_registry_names_are_the_registry_s_and_an_unknown_name_is_python_s_error():
    import types

    from depthbench import registry

    for name in ("ARCHITECTURES", "build_config", "build_model", "get"):
        assert getattr(depthbench, name) is getattr(registry, name)
    assert all(hasattr(depthbench, name) for name in depthbench.__all__)
    with pytest.raises(AttributeError) as ours:
        depthbench.no_such_name  # noqa: B018
    with pytest.raises(AttributeError) as plain:  # what Python says for any module without the name
        types.ModuleType("depthbench").no_such_name  # noqa: B018
    assert str(ours.value) == str(plain.value)


def test_the_hook_hands_back_plain_loaders_and_stays_single_across_re_imports():
    """Before transformers is imported the hook watches depthbench's imports: each imported module ends up with the
    loader Python's own finders give it (so ``inspect``/resources work), a re-imported depthbench (its modules
    dropped from ``sys.modules``, as tools that reload do) leaves one hook, not two, and other imports pass by."""
    code = (
        "import importlib.machinery, importlib.util, inspect, json, sys\n"
        "import depthbench\n"
        "import depthbench.atomic as atomic\n"
        "hooks = lambda: [f for f in sys.meta_path if getattr(f, '_depthbench_auto_registration', False)]\n"
        "first = len(hooks())\n"
        "plain = importlib.machinery.PathFinder.find_spec('depthbench.atomic', depthbench.__path__).loader\n"
        "loaders = [type(atomic.__loader__).__name__, type(atomic.__spec__.loader).__name__, type(plain).__name__]\n"
        "source_ok = 'def read_json' in inspect.getsource(atomic)\n"
        "for name in [m for m in sys.modules if m == 'depthbench' or m.startswith('depthbench.')]:\n"
        "    del sys.modules[name]\n"
        "import depthbench\n"
        "import json.decoder\n"
        "print(json.dumps([first, len(hooks()), loaders, source_ok, 'transformers' in sys.modules]))\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    first, after_reimport, loaders, source_ok, transformers_loaded = json.loads(result.stdout.splitlines()[-1])
    assert (first, after_reimport) == (1, 1)
    assert loaders == ["SourceFileLoader"] * 3 and source_ok
    assert not transformers_loaded  # nothing of the hook imports transformers by itself
