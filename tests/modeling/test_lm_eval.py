"""lm-eval scores every architecture's saved checkpoint (with its tokenizer) offline on a local task.

A tiny multiple-choice task (YAML + JSONL with absolute paths) is written to a temp folder. Every selected
architecture is scored in-process with ``lm_eval.simple_evaluate`` + ``HFLM(pretrained=<dir>,
trust_remote_code=True)`` in one session fixture; the per-choice log-likelihoods lm-eval computed (batched and
padded) are checked against our own unbatched forward. One architecture (the reference, ``pre_ln``) also goes
through the real ``lm_eval`` command line in a subprocess, where depthbench is not imported and the model is
loaded as remote code.

Run it with ``python -m pytest tests/modeling/test_lm_eval.py -q``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import ARCH_IDS, TINY

ARCH = pytest.mark.parametrize("arch_id", ARCH_IDS)
TASK = "depthbench_contract_mc"
LIMIT = 6  # of 8 documents: checks that --limit is honoured
CLI_ARCH = "pre_ln"

DOCS = [
    ("what does a dog do?", ["it barks", "it flies", "it meows"], 0),
    ("what is the colour of the sky?", ["blue", "white", "cold"], 0),
    ("which animal meows?", ["a bird", "a cat", "a fox"], 1),
    ("what is ice?", ["hot", "wet", "cold"], 2),
    ("what comes after one?", ["two", "ten", "six"], 0),
    ("where did the cat sit?", ["on the log", "on the mat", "in the tree"], 1),
    ("what can fly over the house?", ["a dog", "a bird", "a log"], 1),
    ("what is fire?", ["hot", "blue", "white"], 0),
]

TASK_YAML = """\
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def _offline_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_MODULES_CACHE=str(work / "modules"),
        HF_DATASETS_CACHE=str(work / "datasets"), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
    )
    return env


@pytest.fixture(scope="session")
def task_dir(tmp_path_factory) -> Path:
    """A folder with the task YAML; its JSONL data sits next to it, referenced by absolute path."""
    root = tmp_path_factory.mktemp("lm_eval_task")
    data = root / "test.jsonl"
    with data.open("w") as f:
        for i, (question, choices, answer) in enumerate(DOCS):
            f.write(json.dumps({"id": i, "question": question, "choices": choices, "answer": answer}) + "\n")
    (root / f"{TASK}.yaml").write_text(TASK_YAML.format(task=TASK, data=data))
    return root


@pytest.fixture(scope="session")
def lm_eval_results(checkpoints, selected_arch_ids, task_dir, tmp_path_factory) -> dict:
    """``simple_evaluate`` results per selected architecture (one TaskManager, one HFLM per checkpoint)."""
    import lm_eval.evaluator
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(task_dir), include_defaults=False)
    results = {}
    # simple_evaluate records the environment via torch's collect_env, which shells out to `pip list` (5+ s per
    # call, far more on a busy machine); that report is irrelevant here, so skip it for the in-process runs.
    add_env_info = lm_eval.evaluator.add_env_info
    lm_eval.evaluator.add_env_info = lambda storage: None
    try:
        for arch_id in selected_arch_ids:
            path = checkpoints.get(arch_id).path
            lm = HFLM(pretrained=str(path), trust_remote_code=True, dtype="float32", device="cpu", batch_size=4,
                      backend="causal")
            results[arch_id] = (
                lm,
                simple_evaluate(model=lm, tasks=[TASK], task_manager=manager, limit=LIMIT, bootstrap_iters=0,
                                log_samples=True),
            )
    finally:
        lm_eval.evaluator.add_env_info = add_env_info
    return results


@ARCH
def test_lm_eval_in_process(arch_id, lm_eval_results):
    lm, result = lm_eval_results[arch_id]
    metrics = result["results"][TASK]
    assert 0.0 <= metrics["acc,none"] <= 1.0
    assert result["n-samples"][TASK]["effective"] == LIMIT
    samples = result["samples"][TASK]
    assert len(samples) == LIMIT
    # lm-eval's batched, padded log-likelihoods equal our own forward on each (context, continuation) alone
    model = lm.model.eval()
    for sample in samples[:2]:
        for request, response in zip(sample["arguments"], sample["resps"]):
            context, continuation = request[0], request[1]
            context_ids, continuation_ids = lm._encode_pair(context, continuation)
            ids = torch.tensor([context_ids + continuation_ids])
            with torch.no_grad():
                logprobs = model(input_ids=ids, use_cache=False).logits.float().log_softmax(-1)
            n = len(continuation_ids)
            targets = ids[0, -n:]
            ours = logprobs[0, -n - 1 : -1].gather(-1, targets[:, None]).sum().item()
            assert abs(ours - float(response[0][0])) < 1e-4, (context, continuation)


@pytest.mark.slow  # 12-32 s on 2 cores: the default suite stays near 10 minutes
def test_lm_eval_cli(checkpoints, task_dir, tmp_path):
    """The real ``lm_eval`` CLI, offline, on a saved checkpoint loaded as remote code."""
    if CLI_ARCH not in ARCH_IDS:
        pytest.skip(f"{CLI_ARCH} is not registered")
    path = checkpoints.get(CLI_ARCH).path
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "lm_eval", "--model", "hf",
        "--model_args", f"pretrained={path},trust_remote_code=True,dtype=float32",
        "--tasks", TASK, "--include_path", str(task_dir), "--device", "cpu", "--batch_size", "4",
        "--limit", str(LIMIT), "--output_path", str(out),
    ]
    proc = subprocess.run(command, cwd=tmp_path, env=_offline_env(tmp_path), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"lm_eval failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    files = sorted(out.rglob("results_*.json"))
    assert files, f"no results JSON under {out}:\n{proc.stdout[-2000:]}"
    result = json.loads(files[-1].read_text())
    assert 0.0 <= result["results"][TASK]["acc,none"] <= 1.0
    assert result["n-samples"][TASK]["effective"] == LIMIT


def test_tiny_tokenizer_fits_the_model_and_encodes_the_task(checkpoints):
    """The saved tokenizer fits the 128-token model and round-trips every prompt and choice of the task."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoints.get(ARCH_IDS[0]).path)
    assert len(tokenizer) <= TINY["vocab_size"]
    assert tokenizer.eos_token_id is not None and tokenizer.pad_token_id not in (None, tokenizer.eos_token_id)
    for question, choices, _ in DOCS:
        for text in [f"Question: {question}\nAnswer:"] + [f" {c}" for c in choices]:
            ids = tokenizer(text)["input_ids"]
            assert max(ids) < TINY["vocab_size"]
            assert tokenizer.decode(ids) == text
