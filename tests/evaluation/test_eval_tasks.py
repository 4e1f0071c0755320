"""The lm-eval task YAMLs shipped in ``eval_tasks/`` parse, resolve and score offline.

Checks: every YAML loads with lm-eval's own loader and carries ``metadata.version``; a ``TaskManager`` restricted
to ``eval_tasks/`` (no 15 s built-in index) finds our tasks and groups; every built-in task our groups reference
exists in the installed lm-eval with the output type and metrics the group aggregates (found by scanning the
package's YAMLs, then resolved with lm-eval's loader); the committed synthetic JSONL is exactly what
``make_data.py`` regenerates and its answers agree with ``depthbench.data.synthetic``'s generators; and an in-process
``simple_evaluate`` of the ``depthbench_synthetic`` group on a tiny random ``pre_ln`` model returns accuracies in
[0, 1], per family and aggregated, over the right number of samples.

Run it with ``python -m pytest tests/evaluation/test_eval_tasks.py -q``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import lm_eval  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from lm_eval.tasks._yaml_loader import load_yaml  # noqa: E402

from depthbench.evaluation.harness import tasks_dir  # noqa: E402

ROOT = tasks_dir()
SYNTH = ROOT / "depthbench_synthetic"
FAMILIES = ("pointer", "permutation", "arithmetic", "variables")
FAMILY_TASKS = [f"depthbench_synthetic_mc_{f}" for f in FAMILIES]
NLL_TASKS = [f"depthbench_nll_{s}" for s in ("mbpp", "humaneval", "sciq", "gpqa_diamond", "gsm8k", "math500")]
NLL_GROUPS = ["depthbench_nll", "depthbench_nll_coding", "depthbench_nll_math", "depthbench_nll_stem"]
LOCAL_TASKS = ["depthbench_synthetic_mc", *FAMILY_TASKS, *NLL_TASKS]
LOCAL_GROUPS = ["depthbench_bbh_reasoning", "depthbench_synthetic", "depthbench_zeroshot", *NLL_GROUPS]
# The study's task sets (zero-shot commonsense and the BBH reasoning subset), restated here so a YAML edit cannot
# silently drop one.
ZEROSHOT = ["openbookqa", "winogrande", "arc_challenge", "arc_easy", "hellaswag", "social_iqa", "piqa"]
BBH = [
    f"bbh_zeroshot_{name}"
    for name in (
        "tracking_shuffled_objects_three_objects", "tracking_shuffled_objects_five_objects",
        "tracking_shuffled_objects_seven_objects", "logical_deduction_three_objects",
        "logical_deduction_five_objects", "logical_deduction_seven_objects", "boolean_expressions",
        "multistep_arithmetic_two", "web_of_lies", "navigate",
    )
]
LIMIT = 8


def _import_from(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def manager() -> TaskManager:
    return TaskManager(include_path=str(ROOT), include_defaults=False)


@pytest.fixture(scope="module")
def make_data():
    return _import_from(SYNTH / "make_data.py", "depthbench_eval_tasks_make_data")


@pytest.fixture(scope="module")
def builtin_configs() -> dict[str, dict]:
    """Resolved configs (includes merged, functions unresolved) of the built-in tasks our groups reference.

    Scanning the package's YAML text for ``task: <name>`` takes ~1 s, against ~15 s for the default index.
    """
    wanted = set(ZEROSHOT) | set(BBH)
    pattern = re.compile(r"""^["']?task["']?\s*:\s*["']?([\w.-]+)["']?\s*$""", re.MULTILINE)
    configs: dict[str, dict] = {}
    for path in sorted((Path(lm_eval.__file__).parent / "tasks").rglob("*.yaml")):
        for match in pattern.finditer(path.read_text(encoding="utf-8", errors="replace")):
            if match.group(1) in wanted:
                cfg = load_yaml(path, resolve_func=False)
                if cfg.get("task") == match.group(1):
                    configs[match.group(1)] = cfg
    return configs


# --------------------------------------------------------------------------------------------- YAML and index


def test_every_yaml_parses_and_is_versioned():
    paths = sorted(ROOT.rglob("*.yaml"))
    assert len(paths) == 18
    for path in paths:
        cfg = load_yaml(path, resolve_func=True)  # also imports utils.load_local for the synthetic tasks
        if "group" in cfg:  # a group lists its members under `task`
            assert isinstance(cfg["task"], list), path
            assert cfg["group"] in NLL_GROUPS or cfg["aggregate_metric_list"], path
        else:
            expected = "loglikelihood" if cfg["task"] in NLL_TASKS else "multiple_choice"
            assert isinstance(cfg["task"], str) and cfg["output_type"] == expected, path
        assert isinstance(cfg["metadata"]["version"], float), path
        if "custom_dataset" in cfg:
            expected = "load" if cfg["task"] in NLL_TASKS else "load_local"
            assert callable(cfg["custom_dataset"]) and cfg["custom_dataset"].__name__ == expected


def test_task_manager_finds_local_tasks_and_groups(manager):
    assert set(LOCAL_TASKS) <= set(manager.all_subtasks)
    assert set(LOCAL_GROUPS) <= set(manager.all_groups)
    assert set(manager.all_tasks) == set(LOCAL_TASKS) | set(LOCAL_GROUPS)


def test_group_members(manager):
    assert manager.task_index["depthbench_zeroshot"].cfg["task"] == ZEROSHOT
    assert manager.task_index["depthbench_bbh_reasoning"].cfg["task"] == BBH
    assert manager.task_index["depthbench_synthetic"].cfg["task"] == FAMILY_TASKS
    assert manager.task_index["depthbench_nll"].cfg["task"] == [
        "depthbench_nll_coding", "depthbench_nll_stem", "depthbench_nll_math"]
    assert manager.task_index["depthbench_nll_coding"].cfg["task"] == NLL_TASKS[:2]
    assert manager.task_index["depthbench_nll_stem"].cfg["task"] == NLL_TASKS[2:4]
    assert manager.task_index["depthbench_nll_math"].cfg["task"] == NLL_TASKS[4:]
    for group in LOCAL_GROUPS:
        cfg = manager.task_index[group].cfg
        if group in NLL_GROUPS:  # token-weighted by depthbench.evaluation.results (lm-eval weights groups by documents)
            assert not cfg.get("aggregate_metric_list"), group
            continue
        assert all(agg["aggregation"] == "mean" for agg in cfg["aggregate_metric_list"])
    zeroshot_aggs = manager.task_index["depthbench_zeroshot"].cfg["aggregate_metric_list"]
    assert [(a["metric"], a["weight_by_size"]) for a in zeroshot_aggs] == [("acc", False), ("acc_norm", False)]


def test_builtin_tasks_exist_in_installed_lm_eval(builtin_configs):
    missing = sorted((set(ZEROSHOT) | set(BBH)) - set(builtin_configs))
    assert not missing, f"not in lm_eval {lm_eval.__version__}: {missing}"
    for name in ZEROSHOT:
        cfg = builtin_configs[name]
        assert cfg["output_type"] == "multiple_choice", name
        assert "acc" in [m["metric"] for m in cfg["metric_list"]], name
    # the README and the group's comment say acc_norm is averaged over the five tasks that report it
    without_norm = {n for n in ZEROSHOT if "acc_norm" not in [m["metric"] for m in builtin_configs[n]["metric_list"]]}
    assert without_norm == {"winogrande", "social_iqa"}
    for name in BBH:
        cfg = builtin_configs[name]
        assert cfg["output_type"] == "generate_until", name
        assert [m["metric"] for m in cfg["metric_list"]] == ["exact_match"], name
        assert {f["name"] for f in cfg["filter_list"]} == {"strict-match", "flexible-extract"}, name


def test_readme_documents_every_task_and_group(manager):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in manager.all_tasks:
        assert f"`{name}`" in readme, name


# ------------------------------------------------------------------------------------------------ synthetic data


def test_make_data_reproduces_committed_files_byte_for_byte(make_data):
    files = make_data.build_all()
    assert sorted(files) == ["dev.jsonl", "test.jsonl"]
    for name, text in files.items():
        assert (SYNTH / "data" / name).read_text(encoding="utf-8") == text, f"{name} is stale: rerun make_data.py"


def test_synthetic_rows_are_well_formed_and_held_out(make_data):
    splits = {split: _read_jsonl(SYNTH / "data" / f"{split}.jsonl") for split in ("test", "dev")}
    demo_train = make_data.demo_training_texts()
    prompts = {split: [r["prompt"] for r in rows] for split, rows in splits.items()}
    assert not set(prompts["test"]) & set(prompts["dev"])
    for split, rows in splits.items():
        assert len({r["id"] for r in rows}) == len(rows)
        assert len(set(prompts[split])) == len(rows)
        assert [r["task"] for r in rows[:4]] == list(FAMILIES)  # interleaved, so a --limit sees every family
        for family in FAMILIES:
            assert sum(r["task"] == family for r in rows) == make_data.PER_FAMILY[split]
        for row in rows:
            choices, answer = row["choices"], row["choices"][row["answer"]]
            assert len(choices) == 4 and len(set(choices)) == 4, row
            assert {len(c) for c in choices} == {len(answer)}, row
            assert f"{row['prompt']} {answer}" not in demo_train, row
            assert 1 <= row["steps"] <= make_data.DIFFICULTY
    # the answer index is not a constant
    assert len({r["answer"] for r in splits["test"]}) == 4


def test_synthetic_answers_match_the_generators(make_data):
    """Every row's prompt and correct choice is an instance drawn by ``generate_examples`` with the stated seeds."""
    from depthbench.data.synthetic import generate_examples

    for split, seed in (("test", make_data.TEST_SEED), ("dev", make_data.DEV_SEED)):
        n = make_data.PER_FAMILY[split]
        truth = {}
        for family in FAMILIES:
            for batch in range(10):
                for ex in generate_examples(n, seed=f"{seed}-{family}-{batch}", difficulty=4, tasks=(family,)):
                    truth[ex.prompt] = (ex.answer, ex.steps, ex.task)
        for row in _read_jsonl(SYNTH / "data" / f"{split}.jsonl"):
            assert truth[row["prompt"]] == (row["choices"][row["answer"]], row["steps"], row["task"]), row


def test_solver_and_distractors(make_data):
    from depthbench.data.synthetic import SyntheticExample

    ex = SyntheticExample("pointer", 2, "pointer: k>b e>k w>j b>q q>w j>e. start e, 2 hops. answer:", "b")
    assert make_data.solve_trace(ex) == ["e", "k", "b", "q", "w"]
    import random

    choices, index = make_data.make_choices(ex, random.Random(0))
    assert choices[index] == "b" and {"k", "q"} <= set(choices)  # one hop short and one hop too many
    arith = SyntheticExample("arithmetic", 3, "arith: (((7+5)*3)-4) mod 10. answer:", "2")
    assert make_data.solve_trace(arith) == ["7", "2", "6", "2"]
    choices, index = make_data.make_choices(arith, random.Random(0))
    assert choices[index] == "2" and "6" in choices and len(set(choices)) == 4
    wrong = SyntheticExample("variables", 1, "vars mod 10: q=3; x=7; k=q+2; k? answer:", "6")
    with pytest.raises(ValueError, match="re-solved answer"):
        make_data.make_choices(wrong, random.Random(0))


def test_load_local_is_cwd_independent_and_filters(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    utils = _import_from(SYNTH / "utils.py", "depthbench_eval_tasks_utils")
    everything = utils.load_local(version=1.0)  # lm-eval passes the task metadata as keyword arguments
    assert {k: len(v) for k, v in everything.items()} == {"test": 400, "validation": 40}
    pointer = utils.load_local(family="pointer", version=1.0)
    assert len(pointer["test"]) == 100 and set(pointer["test"]["task"]) == {"pointer"}
    with pytest.raises(ValueError, match="unknown family"):
        utils.load_local(family="sorting")


# ---------------------------------------------------------------------------------------- end-to-end with lm-eval


@pytest.fixture(scope="module")
def tiny_lm():
    """``HFLM`` around a random 2-layer ``pre_ln`` model and a BPE trained on the task's own texts."""
    import torch
    from lm_eval.models.huggingface import HFLM

    import depthbench
    from depthbench.data import make_tiny_tokenizer

    rows = _read_jsonl(SYNTH / "data" / "test.jsonl")
    tokenizer = make_tiny_tokenizer((f"{r['prompt']} {c}" for r in rows for c in r["choices"]), vocab_size=300)
    torch.manual_seed(0)
    model = depthbench.build_model(
        "pre_ln", vocab_size=320, hidden_size=32, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4
    ).eval()
    assert model.config.vocab_size >= len(tokenizer)
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=4, max_length=256, backend="causal")


def _evaluate(lm, manager, tasks: list[str], **kwargs) -> dict:
    import lm_eval.evaluator
    from lm_eval import simple_evaluate

    # simple_evaluate's environment report shells out to `pip list` (seconds on a busy machine); not needed here
    add_env_info = lm_eval.evaluator.add_env_info
    lm_eval.evaluator.add_env_info = lambda storage: None
    try:
        return simple_evaluate(model=lm, tasks=tasks, task_manager=manager, bootstrap_iters=0, log_samples=True,
                               **kwargs)
    finally:
        lm_eval.evaluator.add_env_info = add_env_info


@pytest.fixture(scope="module")
def synthetic_results(tiny_lm, manager):
    return _evaluate(tiny_lm, manager, ["depthbench_synthetic"], limit=LIMIT)


def test_simple_evaluate_synthetic_group(synthetic_results):
    results = synthetic_results["results"]
    for task in FAMILY_TASKS:
        assert synthetic_results["n-samples"][task] == {"original": 100, "effective": LIMIT}
        for metric in ("acc,none", "acc_norm,none"):
            assert 0.0 <= results[task][metric] <= 1.0
        samples = synthetic_results["samples"][task]
        assert len(samples) == LIMIT
        # acc is the fraction of documents whose gold choice has the highest log-likelihood
        hits = [max(range(4), key=lambda i: s["resps"][i][0][0]) == s["target"] for s in samples]
        assert results[task]["acc,none"] == pytest.approx(sum(hits) / LIMIT)
        family = task.rsplit("_", 1)[1]
        for sample in samples:
            doc = sample["doc"]
            assert doc["task"] == family
            assert [a[1] for a in sample["arguments"]] == [f" {c}" for c in doc["choices"]]
            assert all(a[0] == doc["prompt"] for a in sample["arguments"])
    group = synthetic_results["groups"]["depthbench_synthetic"]
    assert group["sample_len"] == 4 * LIMIT
    assert group["acc,none"] == pytest.approx(sum(results[t]["acc,none"] for t in FAMILY_TASKS) / 4)
    assert 0.0 <= group["acc_norm,none"] <= 1.0


def test_few_shot_examples_come_from_the_dev_split_of_the_same_family(tiny_lm, manager):
    """0-shot by default, but ``num_fewshot`` can be overridden; shots are dev rows with their correct answers."""
    task = "depthbench_synthetic_mc_arithmetic"
    result = _evaluate(tiny_lm, manager, [task], limit=2, num_fewshot=2)
    assert result["configs"][task]["num_fewshot"] == 2
    dev = {r["prompt"]: r["choices"][r["answer"]] for r in _read_jsonl(SYNTH / "data" / "dev.jsonl")}
    for sample in result["samples"][task]:
        context = sample["arguments"][0][0]
        *shots, question = context.split("\n\n")
        assert question == sample["doc"]["prompt"] and len(shots) == 2
        for shot in shots:
            prompt, answer = shot.rsplit(" ", 1)
            assert prompt.startswith("arith: ") and dev[prompt] == answer
