"""The ``depthbench_nll_*`` completion-NLL tasks (eval_tasks/depthbench_nll): prompts, counts, metrics, bad input.

* Prompts and targets of every dataset are checked on hand-written fixture rows (``tests/fixtures/depthbench_nll``,
  each dataset's own schema, made-up contents) against strings written out by hand from the study's table
  (arXiv 2609.32534, Sec. 6.3), including the single-space rule and GPQA's seeded choice order.
* A tiny random model is scored by lm-eval in-process (``HFLM`` on the model object) and the per-task NLL per
  token, perplexity, bits per byte and token counts are recomputed by hand from the model's logits (one unbatched
  forward per document): they agree to 1e-5, and so do the token-weighted domain groups.
* The stock ``lm_eval --model hf`` command line runs one task from the local fixtures and gives the same NLL.
* Bad input: a missing field, an empty target, no tokenizer in the metadata, a missing local file.

Run it with ``python -m pytest tests/evaluation/test_nll_tasks.py -q``.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depthbench.evaluation.harness import tasks_dir
from tests.helpers import FIXTURES_DIR

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

TASKS_DIR = tasks_dir()
FIXTURES = FIXTURES_DIR / "depthbench_nll"
SOURCES = ["mbpp", "humaneval", "sciq", "gpqa_diamond", "gsm8k", "math500"]
TASKS = [f"depthbench_nll_{s}" for s in SOURCES]
GROUPS = {"depthbench_nll_coding": ["mbpp", "humaneval"], "depthbench_nll_stem": ["sciq", "gpqa_diamond"],
          "depthbench_nll_math": ["gsm8k", "math500"], "depthbench_nll": SOURCES}


def _utils():
    path = TASKS_DIR / "depthbench_nll" / "utils.py"
    spec = importlib.util.spec_from_file_location("depthbench_nll_utils_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(source: str) -> list[dict]:
    path = next(FIXTURES.glob(f"{source}.*"))
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------- prompts and targets
def test_prompts_and_targets_follow_the_study_table():
    u = _utils()
    mbpp = u.make_doc("mbpp", _rows("mbpp")[0], 0)
    assert mbpp == {
        "id": "901",
        "prompt": "You are an expert Python programmer, and here is your task: Write a function to add two numbers. "
                  "Your code should pass these tests:\n\nassert add(1, 2) == 3\nassert add(0, 0) == 0\n"
                  "assert add(-1, 1) == 0\n[BEGIN]\n",
        "target": "def add(a, b):\n    return a + b\n",
    }
    humaneval = u.make_doc("humaneval", _rows("humaneval")[0], 0)
    assert humaneval["prompt"] == 'def double(x):\n    """Return twice x."""\n'
    assert humaneval["target"] == "    return 2 * x\n"
    sciq = u.make_doc("sciq", _rows("sciq")[1], 1)
    assert sciq["prompt"] == "Question: What is the frozen form of water called?\nAnswer:"
    assert sciq["target"] == " ice\nExplanation: Water freezes into ice below zero degrees."
    assert sciq["id"] == "1"
    gsm8k = u.make_doc("gsm8k", _rows("gsm8k")[0], 0)
    assert gsm8k["prompt"] == "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:"
    assert gsm8k["target"] == " Tom has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"
    math500 = u.make_doc("math500", _rows("math500")[1], 1)
    assert math500["prompt"] == "Problem:\nSolve $x + 5 = 9$.\n\nSolution:"
    assert math500["target"] == " Subtract 5 from both sides: $x = \\boxed{4}$."
    assert math500["id"] == "test/algebra/fixture-2.json"


def test_gpqa_choices_are_shuffled_by_the_record_id_seed():
    u = _utils()
    row = _rows("gpqa_diamond")[1]
    seed = int.from_bytes(hashlib.sha256(b"recFixture0002").digest()[:8], "big")
    expected = [row["Correct Answer"], row["Incorrect Answer 1"], row["Incorrect Answer 2"], row["Incorrect Answer 3"]]
    random.Random(seed).shuffle(expected)
    assert u.gpqa_choices(row) == expected == ["14", "7", "1", "5"]  # pinned: a changed rule changes the prompt
    doc = u.make_doc("gpqa_diamond", row, 1)
    assert doc["prompt"] == "Question: What is the pH of pure water at 25 C?\nA. 14\nB. 7\nC. 1\nD. 5\nAnswer:"
    assert doc["target"] == " 7\nExplanation: Pure water has equal hydrogen and hydroxide ions, so its pH is 7."
    assert doc["id"] == "recFixture0002"


def test_single_space_rule():
    u = _utils()
    assert u.join_single_space("Answer:", "42") == " 42"          # neither side has whitespace: one space
    assert u.join_single_space("Answer:", " 42") == " 42"         # the target brings its own
    assert u.join_single_space("[BEGIN]\n", "code") == "code"     # the prompt ends in whitespace
    assert u.join_single_space("def f():\n", "    pass") == "    pass"
    row = {"question": "q?", "answer": "no leading space"}
    assert u.make_doc("gsm8k", row, 0)["target"] == " no leading space"  # the table's " {answer}"
    humaneval = {"task_id": "x", "prompt": "def f():", "canonical_solution": "return 1"}
    assert u.make_doc("humaneval", humaneval, 0)["target"] == " return 1"


def test_counts_follow_lm_evals_split(tiny_tokenizer):
    """Trailing whitespace of the prompt is scored with the target (lm-eval's ``_encode_pair``)."""
    u = _utils()
    assert u.split_like_hflm("[BEGIN]\n", "code") == ("[BEGIN]", "\ncode")
    assert u.scored_bytes("[BEGIN]\n", "cafe\u0301") == len("\ncafe\u0301".encode())
    whole = tiny_tokenizer.encode("Answer: 42", add_special_tokens=False)
    context = tiny_tokenizer.encode("Answer:", add_special_tokens=False)
    assert u.count_target_tokens(tiny_tokenizer, "Answer:", " 42") == len(whole) - len(context)


# ------------------------------------------------------------------------------------------------------ bad input
def test_missing_field_and_empty_target_are_named():
    u = _utils()
    row = dict(_rows("sciq")[0])
    del row["support"]
    with pytest.raises(u.TaskDataError, match=r"depthbench_nll_sciq: row 3 .* no field 'support'"):
        u.make_doc("sciq", row, 3)
    with pytest.raises(u.TaskDataError) as exc:  # a null field: said so, and not listed among the row's values
        u.make_doc("gsm8k", {"question": "q", "answer": None}, 2)
    assert "field 'answer' is null" in str(exc.value) and "fields with a value: 'question')" in str(exc.value)
    row = dict(_rows("mbpp")[1], code="   ")
    with pytest.raises(u.TaskDataError, match=r"depthbench_nll_mbpp: row 1 \(id '902'\): field 'code' is empty"):
        u.make_doc("mbpp", row, 1)
    row = dict(_rows("gpqa_diamond")[0], **{"Correct Answer": ""})
    with pytest.raises(u.TaskDataError, match="'Correct Answer' is empty"):
        u.make_doc("gpqa_diamond", row, 0)


def test_loader_needs_a_tokenizer_and_the_local_files(tmp_path):
    u = _utils()
    with pytest.raises(u.TaskDataError, match="counts target tokens with the model's tokenizer"):
        u.load(source="gsm8k", version=1.0, depthbench_data_dir=str(FIXTURES))
    with pytest.raises(u.TaskDataError, match=r"no local copy in .* \(looked for gsm8k.jsonl"):
        u.local_file("gsm8k", tmp_path)
    with pytest.raises(u.TaskDataError, match="unknown depthbench_nll source 'gsm9k'"):
        u.load(source="gsm9k")


@pytest.mark.parametrize("text", ["None", "NA", "N/A", "null", "nan", "NaN", "#N/A", "1.50"])
def test_csv_cell_text_is_text(tmp_path, text):
    """A GPQA answer written ``None`` (or any spelling pandas reads as missing, or a number) is that text."""
    u = _utils()
    header = (FIXTURES / "gpqa_diamond.csv").read_text().splitlines()[0].split(",")
    row = {name: f"text of {name}" for name in header}
    row.update({"Correct Answer": text, "Incorrect Answer 1": text, "Record ID": "rec1"})
    with open(tmp_path / "gpqa_diamond.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerow(row)
    (read,) = u.read_rows("gpqa_diamond", tmp_path)
    assert read["Correct Answer"] == text and read["Incorrect Answer 1"] == text
    doc = u.make_doc("gpqa_diamond", read, 0)
    assert doc["target"].startswith(f" {text}\nExplanation:")


def _lines(rows: list) -> str:
    return "".join(json.dumps(r) + "\n" if r is not None else "\n" for r in rows)


def test_a_row_without_a_field_is_named_by_its_line_in_the_file(tmp_path):
    """Row messages name the line of the local file (1-based, blank lines counted) and list the fields the row
    really has: an absent field and a null one are told apart, and neither contradicts the list."""
    u = _utils()
    good = {"question": "q", "answer": "a"}
    (tmp_path / "gsm8k.jsonl").write_text(_lines([good, None, good, {"question": "q2"}]))
    with pytest.raises(u.TaskDataError) as exc:
        u.build_docs("gsm8k", u.read_rows("gsm8k", tmp_path), labels=u.row_labels("gsm8k", tmp_path))
    message = str(exc.value)
    assert "line 4 of gsm8k.jsonl" in message and "has no field 'answer'" in message
    assert "(the row has 'question')" in message
    (tmp_path / "gsm8k.jsonl").write_text(_lines([good, {"question": "q2", "answer": None}]))
    with pytest.raises(u.TaskDataError) as exc:
        u.build_docs("gsm8k", u.read_rows("gsm8k", tmp_path), labels=u.row_labels("gsm8k", tmp_path))
    message = str(exc.value)
    assert "line 2 of gsm8k.jsonl" in message and "field 'answer' is null" in message
    assert "has no field" not in message and "(the row's fields with a value: 'question')" in message
    with open(tmp_path / "gpqa_diamond.csv", "w", newline="", encoding="utf-8") as f:  # a quoted cell of 2 lines
        f.write("Record ID,Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3,"
                "Explanation\nrec1,\"two\nlines\",a,b,c,d,e\nrec2,q,,b,c,d,e\n")
    with pytest.raises(u.TaskDataError, match=r"line 4 of gpqa_diamond.csv \(id 'rec2'\): field 'Correct Answer' "
                                              r"is empty"):
        u.build_docs("gpqa_diamond", u.read_rows("gpqa_diamond", tmp_path),
                     labels=u.row_labels("gpqa_diamond", tmp_path))


# ------------------------------------------------------------------------------------------- lm-eval end to end
@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from depthbench.data import make_tiny_tokenizer

    texts = [line for p in sorted(FIXTURES.iterdir()) if p.suffix != ".md" for line in p.read_text().splitlines()]
    path = tmp_path_factory.mktemp("nll_tokenizer")
    return make_tiny_tokenizer(texts, vocab_size=300, save_dir=str(path))


@pytest.fixture(scope="module")
def tiny_checkpoint(tiny_tokenizer, tmp_path_factory) -> Path:
    import depthbench

    torch.manual_seed(0)
    model = depthbench.build_model("pre_ln", vocab_size=320, hidden_size=32, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256)
    path = tmp_path_factory.mktemp("nll_ckpt")
    model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def nll_results(tiny_checkpoint, tiny_tokenizer):
    """In-process lm-eval on all six tasks (fixture data), plus the model for the hand computation."""
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM

    from depthbench.evaluation.harness import _simple_evaluate
    from depthbench.evaluation.results import add_token_weighted_groups

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()
    lm = HFLM(pretrained=model, tokenizer=tiny_tokenizer, batch_size=3, backend="causal")
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False,
                          metadata={"pretrained": str(tiny_checkpoint), "depthbench_data_dir": str(FIXTURES)})
    results = _simple_evaluate(model=lm, tasks=["depthbench_nll"], task_manager=manager, bootstrap_iters=0,
                               log_samples=True)
    assert sorted(add_token_weighted_groups(results)) == sorted(GROUPS)
    return model, results


def _by_hand(model, tokenizer, prompt: str, target: str) -> tuple[float, int, int]:
    """(sum of target-token NLL, target tokens, scored bytes) from one unbatched forward, by the definition."""
    context = prompt.rstrip()
    continuation = prompt[len(context):] + target
    whole = tokenizer.encode(context + continuation)
    n_context = len(tokenizer.encode(context))
    ids = torch.tensor([whole])
    with torch.no_grad():
        logprobs = model(input_ids=ids, use_cache=False).logits.double().log_softmax(-1)[0]
    nll = -sum(logprobs[i - 1, whole[i]].item() for i in range(n_context, len(whole)))
    return nll, len(whole) - n_context, len(continuation.encode("utf-8"))


def test_nll_per_token_matches_a_hand_computation_from_logits(nll_results, tiny_tokenizer):
    model, results = nll_results
    u = _utils()
    totals = {}
    for source, task in zip(SOURCES, TASKS):
        docs = [u.make_doc(source, row, i) for i, row in enumerate(_rows(source))]
        assert results["n-samples"][task]["effective"] == len(docs)
        sums = [_by_hand(model, tiny_tokenizer, d["prompt"], d["target"]) for d in docs]
        nll, tokens, n_bytes = (sum(s[k] for s in sums) for k in range(3))
        totals[source] = (nll, tokens, n_bytes)
        row = results["results"][task]
        assert row["target_tokens,none"] == tokens and row["target_bytes,none"] == n_bytes
        assert abs(row["nll,none"] - nll / tokens) < 1e-5, task
        assert abs(row["ppl,none"] / math.exp(nll / tokens) - 1) < 1e-5, task
        assert abs(row["bits_per_byte,none"] - nll / n_bytes / math.log(2)) < 1e-5, task
        # lm-eval scored exactly our prompt/target strings
        sample = results["samples"][task][0]
        assert sample["arguments"][0] == (docs[0]["prompt"], docs[0]["target"])
    for group, members in GROUPS.items():
        nll = sum(totals[m][0] for m in members)
        tokens = sum(totals[m][1] for m in members)
        n_bytes = sum(totals[m][2] for m in members)
        row = results["results"][group]
        assert abs(row["nll,none"] - nll / tokens) < 1e-5, group  # token-weighted, not a mean of task values
        assert abs(row["bits_per_byte,none"] - nll / n_bytes / math.log(2)) < 1e-5, group
        assert row["target_tokens,none"] == tokens


@pytest.mark.slow  # ~20-55 s: the CLI indexes lm-eval's 14k built-in tasks and records the environment
def test_stock_lm_eval_cli_runs_a_task_offline(tiny_checkpoint, nll_results, tmp_path):
    """``lm_eval --model hf`` gets the tokenizer for the counts from --model_args, the data from --metadata."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               HF_DATASETS_CACHE=str(tmp_path / "datasets"), TOKENIZERS_PARALLELISM="false")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
               f"pretrained={tiny_checkpoint},trust_remote_code=True,dtype=float32", "--include_path", str(TASKS_DIR),
               "--tasks", "depthbench_nll_gsm8k", "--metadata", json.dumps({"depthbench_data_dir": str(FIXTURES)}),
               "--device", "cpu", "--batch_size", "2", "--output_path", str(out)]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(sorted(out.rglob("results_*.json"))[-1].read_text())
    in_process = nll_results[1]["results"]["depthbench_nll_gsm8k"]
    assert abs(result["results"]["depthbench_nll_gsm8k"]["nll,none"] - in_process["nll,none"]) < 1e-5
    assert result["results"]["depthbench_nll_gsm8k"]["target_tokens,none"] == in_process["target_tokens,none"]
