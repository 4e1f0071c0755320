"""Checkpoints are self-contained Hugging Face remote code (parametrized over the registry).

``save_pretrained`` must write the weights, a ``config.json`` whose ``auto_map`` covers AutoConfig, AutoModel,
AutoModelForCausalLM and the task heads, and copies of the ``modeling/*.py`` files, so that a user without
depthbench installed loads the model with ``trust_remote_code=True``. Which files are copied is discovered, not
listed: transformers' ``custom_object_save`` copies the architecture's file and, transitively, every sibling it
imports with ``from .x import Y``; a check here fails if a copied file imports a sibling that was not copied. The
fresh-process check runs ONE subprocess for all architectures of the session (``import depthbench`` is blocked
there and verified to fail) and the parametrized tests read its JSON.
An AST check keeps every shipped file importable on the Hub (stdlib, torch, transformers, huggingface_hub and flat
sibling imports only) and on every supported transformers release: outside ``try: ... except ImportError`` guards
(modeling/hf_compat.py's fallbacks), only names present in every release since 5.0 may be imported from
transformers (``TRANSFORMERS_SINCE_5_0``), no private module (``torch.utils._pytree`` and the like) may be
imported, and each architecture file imports every sibling it needs directly (transformers before 5.10 copies
only those out of a local folder). Loading under real older releases is ``scripts/remote_code_matrix.py``'s job
(``.ci/remote_code_versions.sh``).

Run it with ``python -m pytest tests/modeling/test_remote_code.py -q``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from depthbench.registry import ARCHITECTURES
from tests.helpers import ARCH_IDS, BLOCK_DEPTHBENCH, REPO_ROOT

ARCH = pytest.mark.parametrize("arch_id", ARCH_IDS)
MODELING_DIR = REPO_ROOT / "modeling"
ALLOWED_TOP_LEVEL = {"torch", "transformers", "huggingface_hub", "__future__"} | set(sys.stdlib_module_names)
#: What remote code may import from transformers without a guard: names that every release from 5.0.0 to 5.24 has
#: (checked in their wheels; an addition needs the same check, and a name that moved or appeared later goes into
#: modeling/hf_compat.py behind ``try: ... except ImportError`` with a fallback).
TRANSFORMERS_SINCE_5_0: dict[str, set[str]] = {
    "transformers": {"AutoModel", "GenerationMixin", "PreTrainedModel", "PretrainedConfig", "initialization"},
    "transformers.cache_utils": {"Cache", "DynamicCache"},
    "transformers.masking_utils": {"create_causal_mask"},
    "transformers.modeling_layers": {"GenericForQuestionAnswering", "GenericForSequenceClassification",
                                     "GenericForTokenClassification", "GradientCheckpointingLayer"},
    "transformers.modeling_outputs": {"BaseModelOutputWithPast", "CausalLMOutputWithPast"},
    "transformers.modeling_rope_utils": {"ROPE_INIT_FUNCTIONS", "dynamic_rope_update"},
    "transformers.modeling_utils": {"ALL_ATTENTION_FUNCTIONS"},
    "transformers.utils": {"can_return_tuple", "logging"},
    "transformers.utils.deprecation": {"deprecate_kwarg"},
}

# Runs in a fresh interpreter: blocks `import depthbench`, then loads every checkpoint of the manifest through the
# three Auto classes with trust_remote_code=True and compares logits with the parent's reference.
_CHILD = BLOCK_DEPTHBENCH + r'''
import json

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

torch.set_num_threads(1)
HEADS = ("AutoModelForSequenceClassification", "AutoModelForTokenClassification", "AutoModelForQuestionAnswering")
manifest, out_path = json.load(open(sys.argv[1])), sys.argv[2]
results = {"depthbench_blocked": depthbench_blocked, "archs": {}}
for arch_id, item in manifest.items():
    entry = {}
    try:
        ref = torch.load(item["ref"])
        config = AutoConfig.from_pretrained(item["path"], trust_remote_code=True)
        base = AutoModel.from_pretrained(item["path"], trust_remote_code=True)
        model = AutoModelForCausalLM.from_pretrained(item["path"], trust_remote_code=True).eval()
        with torch.no_grad():
            logits = model(input_ids=ref["input_ids"], use_cache=False).logits
        ids = ref["input_ids"][:1, :4]
        kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=0, eos_token_id=None)
        entry.update(
            config_class=type(config).__module__ + "." + type(config).__name__,
            model_class=type(base).__module__ + "." + type(base).__name__,
            causal_lm_class=type(model).__module__ + "." + type(model).__name__,
            model_type=config.model_type,
            max_abs_diff=(logits.double() - ref["logits"].double()).abs().max().item(),
            generate_cache_equal=bool(torch.equal(model.generate(ids, use_cache=True, **kw),
                                                  model.generate(ids, use_cache=False, **kw))),
        )
        heads = {}
        for auto_name in HEADS:  # task heads on the causal LM's decoder, loaded as remote code too
            head = getattr(transformers, auto_name).from_pretrained(item["path"], trust_remote_code=True,
                                                                    num_labels=2)
            with torch.no_grad():
                head(input_ids=ids)
            decoder_equal = all(torch.equal(head.model.state_dict()[k], v)
                                for k, v in model.model.state_dict().items())
            heads[auto_name] = [type(head).__module__ + "." + type(head).__name__, decoder_equal]
        entry.update(
            heads=heads,
            depthbench_loaded=any(m == "depthbench" or m.startswith("depthbench.") for m in sys.modules),
        )
    except Exception as exc:  # reported per architecture by the parent
        entry["error"] = f"{type(exc).__name__}: {exc}"
    results["archs"][arch_id] = entry
json.dump(results, open(out_path, "w"))
'''


@pytest.fixture(scope="session")
def remote_code_results(checkpoints, selected_arch_ids, tmp_path_factory) -> dict:
    """Load every selected architecture's checkpoint in ONE fresh subprocess without depthbench; its JSON report."""
    work = tmp_path_factory.mktemp("remote_code")
    manifest = {}
    for arch_id in selected_arch_ids:
        ckpt = checkpoints.get(arch_id)
        manifest[arch_id] = {"path": str(ckpt.path), "ref": str(ckpt.ref_path)}
    (work / "manifest.json").write_text(json.dumps(manifest))
    (work / "child.py").write_text(_CHILD)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_MODULES_CACHE=str(work / "modules"),
        OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
    )
    proc = subprocess.run(
        [sys.executable, str(work / "child.py"), str(work / "manifest.json"), str(work / "results.json")],
        cwd=work, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"remote-code subprocess failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads((work / "results.json").read_text())


def _module_file(arch_id: str) -> str:
    return ARCHITECTURES[arch_id].causal_lm.rsplit(".", 1)[0] + ".py"


# ============================================================================================ saved files
@ARCH
def test_save_pretrained_writes_weights_auto_map_and_code(arch_id, checkpoints):
    path = checkpoints.get(arch_id).path
    assert (path / "model.safetensors").is_file()
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == f"depthbench_{arch_id}"
    auto_map = config.get("auto_map", {})
    assert {"AutoConfig", "AutoModel", "AutoModelForCausalLM"} <= set(auto_map), auto_map
    arch = ARCHITECTURES[arch_id]
    assert auto_map["AutoModelForCausalLM"].endswith(arch.causal_lm_class.__name__)
    assert auto_map["AutoModel"].endswith(arch.model_class.__name__)
    assert auto_map["AutoConfig"].endswith(arch.config_class.__name__)
    for target in auto_map.values():  # every class named in auto_map is defined in a copied file
        module, class_name = target.rsplit(".", 1)
        assert f"class {class_name}(" in (path / f"{module}.py").read_text(), target
    for name in (_module_file(arch_id), "modeling_depthbench.py", "configuration_depthbench.py"):
        assert (path / name).is_file(), f"{name} was not copied next to the weights"


def _sibling_imports(path: Path) -> set[str]:
    """The flat sibling modules (``from .x import Y``) that ``path`` imports anywhere in its file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}


def _missing_siblings(folder: Path) -> list[str]:
    """``"file.py -> sibling.py"`` for every sibling a ``.py`` file of ``folder`` imports that is not in ``folder``."""
    return [f"{path.name} -> {module}.py" for path in sorted(folder.glob("*.py"))
            for module in sorted(_sibling_imports(path)) if not (folder / f"{module}.py").is_file()]


def _import_closure(path: Path) -> set[str]:
    """File names of ``path`` and of every sibling it imports, transitively."""
    closure, todo = set(), [path.name]
    while todo:
        name = todo.pop()
        if name not in closure:
            closure.add(name)
            todo.extend(f"{module}.py" for module in _sibling_imports(path.parent / name))
    return closure


@ARCH
def test_checkpoint_ships_every_sibling_its_code_imports(arch_id, checkpoints):
    path = checkpoints.get(arch_id).path
    assert _missing_siblings(path) == [], "a shipped file imports a sibling that was not copied next to the weights"
    needed = _import_closure(MODELING_DIR / _module_file(arch_id))
    assert {"numerics.py", "fast_path.py", "norms.py"} <= needed  # the backbone's helpers are siblings too
    assert needed <= {p.name for p in path.glob("*.py")}


def test_missing_sibling_check_catches_an_unshipped_import(tmp_path):
    (tmp_path / "modeling_a.py").write_text("import torch\n\n\ndef f():\n    from .numerics import upcast\n")
    assert _missing_siblings(tmp_path) == ["modeling_a.py -> numerics.py"]
    (tmp_path / "numerics.py").write_text("from .fast_path import derived_weights\n")
    assert _missing_siblings(tmp_path) == ["numerics.py -> fast_path.py"]
    (tmp_path / "fast_path.py").write_text("")
    assert _missing_siblings(tmp_path) == []
    assert _import_closure(tmp_path / "modeling_a.py") == {"modeling_a.py", "numerics.py", "fast_path.py"}


@ARCH
def test_in_process_auto_classes_load_identically(arch_id, checkpoints):
    ckpt = checkpoints.get(arch_id)
    arch = ARCHITECTURES[arch_id]
    assert type(AutoConfig.from_pretrained(ckpt.path)) is arch.config_class
    assert type(AutoModel.from_pretrained(ckpt.path)) is arch.model_class
    model, info = AutoModelForCausalLM.from_pretrained(ckpt.path, output_loading_info=True)
    assert type(model) is arch.causal_lm_class
    assert not any(info.values()), f"checkpoint does not round-trip cleanly: {info}"
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ckpt.input_ids, use_cache=False).logits
    assert torch.equal(logits, ckpt.logits)


# ============================================================================================ fresh process
def test_subprocess_cannot_import_depthbench(remote_code_results):
    assert remote_code_results["depthbench_blocked"] is True


@ARCH
def test_trust_remote_code_in_fresh_process(arch_id, remote_code_results):
    entry = remote_code_results["archs"][arch_id]
    assert "error" not in entry, entry.get("error")
    arch = ARCHITECTURES[arch_id]
    for key, cls in (("config_class", arch.config_class), ("model_class", arch.model_class),
                     ("causal_lm_class", arch.causal_lm_class)):
        assert entry[key].startswith("transformers_modules."), entry[key]
        assert entry[key].endswith("." + cls.__name__), entry[key]
    assert entry["model_type"] == f"depthbench_{arch_id}"
    assert not entry["depthbench_loaded"]
    assert entry["max_abs_diff"] == 0.0, f"remote-code logits differ by {entry['max_abs_diff']}"
    assert entry["generate_cache_equal"]
    for auto_name, (class_path, decoder_equal) in entry["heads"].items():
        assert class_path.startswith("transformers_modules."), class_path
        assert class_path.endswith("." + arch.auto_classes[auto_name].__name__), class_path
        assert decoder_equal, f"{auto_name} did not load the causal LM's decoder weights"


# ============================================================================================ import allow-list
def _import_violations(path: Path) -> list[str]:
    """Imports in ``path`` that would break it as Hub remote code (one message per offending import)."""
    problems = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found = [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found = [(node.level, node.module)]
        else:
            continue
        for level, module in found:
            where = f"{path.name}:{node.lineno}"
            if level and module is None:
                problems.append(f"{where}: 'from . import x' is not copied as remote code; use 'from .x import Y'")
            elif level and (level != 1 or "." in module):
                problems.append(f"{where}: only flat sibling imports ('from .x import Y') are copied")
            elif level and not (path.parent / f"{module}.py").is_file():
                problems.append(f"{where}: sibling {module}.py does not exist")
            elif not level and module.split(".")[0] == "depthbench":
                problems.append(f"{where}: remote code must not import depthbench")
            elif not level and module.split(".")[0] not in ALLOWED_TOP_LEVEL:
                problems.append(f"{where}: '{module}' is not stdlib/torch/transformers/huggingface_hub")
    return problems


@pytest.mark.parametrize("path", sorted(MODELING_DIR.glob("*.py")), ids=lambda p: p.name)
def test_modeling_files_import_only_hub_safe_modules(path):
    assert _import_violations(path) == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from . import modeling_depthbench", "from . import"),
        ("import depthbench.registry", "must not import depthbench"),
        ("from depthbench import build_model", "must not import depthbench"),
        ("from numpy import zeros", "'numpy' is not"),
        ("from .sub.mod import X", "flat sibling"),
        ("from .missing_sibling import X", "does not exist"),
        ("def f():\n    import yaml", "'yaml' is not"),
    ],
)
def test_import_allow_list_catches_bad_imports(tmp_path, source, expected):
    path = tmp_path / "modeling_bad.py"
    path.write_text(source + "\n")
    problems = _import_violations(path)
    assert len(problems) == 1 and expected in problems[0], problems


def test_import_allow_list_accepts_good_imports(tmp_path):
    (tmp_path / "modeling_sibling.py").write_text("")
    path = tmp_path / "modeling_good.py"
    path.write_text("import math\nimport torch.nn.functional as F\nfrom transformers import PreTrainedModel\n"
                    "from huggingface_hub import hf_hub_download\nfrom .modeling_sibling import X\n")
    assert _import_violations(path) == []


# ============================================================================================ every transformers 5.x
def _guarded_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes of ``try:`` statements that catch ``ImportError``: the import tried and its fallback for the
    releases without it (which the release matrix of scripts/remote_code_matrix.py exercises)."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers
        ):
            guarded.update(id(inner) for inner in ast.walk(node))
    return guarded


def _version_violations(path: Path) -> list[str]:
    """Unguarded imports in ``path`` that an older transformers 5.x (or another torch) may not have."""
    tree = ast.parse(path.read_text(), filename=str(path))
    guarded, problems = _guarded_nodes(tree), []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            modules = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in modules:
            if any(part.startswith("_") and not part.startswith("__") for part in module.split(".")):
                problems.append(f"{where}: '{module}' is a private module")
            elif module.split(".")[0] != "transformers" or id(node) in guarded:
                continue
            elif name is None and module != "transformers":
                problems.append(f"{where}: 'import {module}': import names from it, as the allow-list lists them")
            elif name is not None and name not in TRANSFORMERS_SINCE_5_0.get(module, set()):
                problems.append(f"{where}: '{module}.{name}' is not in TRANSFORMERS_SINCE_5_0 (guard it in "
                                "hf_compat.py with a fallback, or check it exists in every release since 5.0)")
    return problems


@pytest.mark.parametrize("path", sorted(MODELING_DIR.glob("*.py")), ids=lambda p: p.name)
def test_modeling_files_import_only_transformers_names_since_5_0(path):
    assert _version_violations(path) == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from transformers.utils.generic import merge_with_config_defaults", "not in TRANSFORMERS_SINCE_5_0"),
        ("from transformers import LlamaModel, PreTrainedModel", "'transformers.LlamaModel' is not"),
        ("import torch.utils._pytree as pytree", "private module"),
        ("from transformers.utils._private import x", "private module"),
        ("import transformers.masking_utils", "import names from it"),
        ("def f():\n    from transformers.utils.output_capturing import capture_outputs", "not in"),
        ("try:\n    import foo\nexcept ValueError:\n    pass\nfrom transformers.x import y", "'transformers.x.y'"),
    ],
)
def test_version_allow_list_catches_new_transformers_names(tmp_path, source, expected):
    path = tmp_path / "modeling_new.py"
    path.write_text(source + "\n")
    problems = _version_violations(path)
    assert len(problems) == 1 and expected in problems[0], problems


def test_version_allow_list_accepts_guarded_imports_and_old_names(tmp_path):
    path = tmp_path / "modeling_ok.py"
    path.write_text("import transformers\nfrom transformers import PreTrainedModel\nimport torch.nn.functional as F\n"
                    "try:\n    from transformers.utils.output_capturing import capture_outputs\n"
                    "except ImportError:\n    from transformers.utils.generic import check_model_inputs\n")
    assert _version_violations(path) == []


def test_every_architecture_file_imports_its_siblings_directly():
    """From a local folder, transformers before 5.10 copies only the direct sibling imports of the file that
    ``auto_map`` names: the architecture file must import every sibling of its import closure itself."""
    missing = {}
    for arch_id in ARCH_IDS:
        path = MODELING_DIR / _module_file(arch_id)
        indirect = _import_closure(path) - {path.name} - {f"{m}.py" for m in _sibling_imports(path)}
        if indirect:
            missing[path.name] = sorted(indirect)
    assert missing == {}


_TOKENIZER_CHILD = BLOCK_DEPTHBENCH + r'''
import contextlib, io, json, sys, warnings
import transformers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

folder, calls = sys.argv[1], json.loads(sys.argv[2])
out = {"class_resolves": tokenizer_class_from_name(
    json.load(open(folder + "/tokenizer_config.json"))["tokenizer_class"]) is not None}
for call in calls:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        transformers.logging.set_verbosity_warning()
        tokenizer = eval(call.replace("DIR", repr(folder)))
    out[call] = {"ids": tokenizer("the cat sat")["input_ids"], "stderr": err.getvalue(),
                 "warnings": [str(w.message) for w in caught]}
print(json.dumps(out))
'''


def _readme_tour_tokenizer_calls() -> list[str]:
    """The ``AutoTokenizer`` / ``PreTrainedTokenizerFast`` calls of the README's "A short tour" made without
    ``import depthbench`` (the first code block), with the folder or Hub id replaced by ``DIR``."""
    import re

    text = (REPO_ROOT / "README.md").read_text()
    tour = text[text.index("## A short tour"):]
    block = tour[tour.index("```python") + 9:]
    block = block[:block.index("import depthbench")]
    calls = re.findall(r"((?:AutoTokenizer|PreTrainedTokenizerFast)\.from_pretrained\(\"[^\"]+\"[^)]*\))", block)
    return [re.sub(r'\("[^"]+"', "(DIR", call) for call in calls]


def test_a_saved_tokenizer_loads_without_depthbench_as_the_readme_shows(tmp_path):
    """A checkpoint's tokenizer (saved by the trainer's rule: a standard transformers class named in
    tokenizer_config.json, no ``auto_map``) loads in a fresh process without depthbench by the calls the README's
    tour shows, with no ``[y/N]`` remote-code prompt (stdin closed: it would be printed on stdout) and no warning
    about the model type, and encodes as the saved tokenizer does.

    Why the README passes ``trust_remote_code=True`` to ``AutoTokenizer`` although the tokenizer has no code:
    transformers 5's ``AutoTokenizer`` reads ``config.json`` first, and a ``model_type`` only the shipped code knows
    (``auto_map.AutoConfig``) asks for the code; without the flag it prompts, and answered no it warns about the
    model type. ``PreTrainedTokenizerFast.from_pretrained`` reads no config and runs no code at all."""
    from depthbench.data.tokenizers import make_tiny_tokenizer, save_tokenizer
    from depthbench.registry import build_model
    from tests.helpers import TINY_FIELDS

    calls = _readme_tour_tokenizer_calls()
    assert any(c.startswith("AutoTokenizer.") for c in calls), calls  # the tour shows the Auto call
    folder = tmp_path / "final"
    tokenizer = make_tiny_tokenizer(["the cat sat on the mat"] * 8, vocab_size=300)
    build_model("hc", **{**TINY_FIELDS, "vocab_size": len(tokenizer)}).save_pretrained(folder)
    save_tokenizer(tokenizer, str(folder), model_max_length=TINY_FIELDS["max_position_embeddings"])
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert "auto_map" not in config  # no tokenizer code: the tokenizer is a transformers class
    result = subprocess.run([sys.executable, "-c", _TOKENIZER_CHILD, str(folder), json.dumps(calls)],
                            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[y/N]" not in result.stdout
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out.pop("class_resolves")
    want = tokenizer("the cat sat")["input_ids"]
    for call, got in out.items():
        assert got["ids"] == want, call
        assert got["stderr"] == "" and got["warnings"] == [], (call, got)
