"""``depthbench sft``: the study's template, loss mask and truncation on hand-written rows; Trainer runs for every
architecture; exact gradient accumulation; the output folder is a checkpoint lm-eval and ``depthbench eval`` load.

Run it with ``python -m pytest tests/training/test_sft.py -q``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.helpers import ARCH_IDS, max_abs_diff

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from depthbench.training.sft import PREAMBLE, PREAMBLE_WITH_INPUT, SFTConfig, SFTError, encode_example, format_prompt  # noqa: E402

ROWS = [
    {"instruction": "  Is the sky blue?\n", "input": "", "output": " yes \n", "answer": "yes"},
    {"instruction": "Pick the correct answer.", "input": " Question: which animal barks?\nOptions: cat, dog ",
     "output": "the answer is dog", "answer": "dog"},
    {"instruction": "Which number is larger, 3 or 7?", "output": "7"},  # no input field at all
    {"instruction": "Answer with one word: what is ice?", "input": "   ", "output": "cold water"},
]


@pytest.fixture(scope="module")
def tokenizer():
    from depthbench.data import make_tiny_tokenizer

    texts = [format_prompt(r["instruction"], r.get("input", "")) + r["output"] for r in ROWS] * 3
    return make_tiny_tokenizer(texts, vocab_size=300)


# ------------------------------------------------------------------------------------------- template and mask
def test_template_with_and_without_input():
    assert PREAMBLE == ("Below is an instruction that describes a task. Write a response that appropriately "
                        "completes the request.")
    assert format_prompt(ROWS[0]["instruction"], ROWS[0]["input"]) == (
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\nIs the sky blue?\n\n### Response:\n")
    assert format_prompt(ROWS[1]["instruction"], ROWS[1]["input"]) == (
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n### Instruction:\nPick the correct answer."
        "\n\n### Input:\nQuestion: which animal barks?\nOptions: cat, dog\n\n### Response:\n")
    assert format_prompt("x", "   ").startswith(PREAMBLE + "\n\n")  # a blank input counts as no input
    assert format_prompt("x", "y").startswith(PREAMBLE_WITH_INPUT + "\n\n")


def test_sequence_is_prompt_response_eos_with_loss_on_response_and_eos(tokenizer):
    eos = tokenizer.eos_token_id
    for i, row in enumerate(ROWS):
        ex = encode_example(tokenizer, row, max_seq_len=512, index=i)
        prompt = tokenizer.encode(format_prompt(row["instruction"], row.get("input", "")), add_special_tokens=False)
        response = tokenizer.encode(row["output"].strip(), add_special_tokens=False)
        assert ex["input_ids"] == prompt + response + [eos]
        assert ex["labels"] == [-100] * len(prompt) + response + [eos]
        assert ex["attention_mask"] == [1] * len(ex["input_ids"])
        supervised = [t for t in ex["labels"] if t != -100]
        assert tokenizer.decode(supervised[:-1]) == row["output"].strip() and supervised[-1] == eos


def test_truncation_keeps_first_tokens_and_forces_eos(tokenizer):
    eos = tokenizer.eos_token_id
    row = {"instruction": "Is the sky blue?", "input": "", "output": "yes " * 40}
    full = encode_example(tokenizer, row, max_seq_len=10_000)
    n_prompt = full["labels"].count(-100)
    max_len = n_prompt + 3  # room for 2 response tokens + the forced EOS
    ex = encode_example(tokenizer, row, max_seq_len=max_len)
    assert len(ex["input_ids"]) == max_len
    assert ex["input_ids"] == full["input_ids"][: max_len - 1] + [eos]
    assert ex["labels"] == full["labels"][: max_len - 1] + [eos]
    assert sum(t != -100 for t in ex["labels"]) == 3
    with pytest.raises(SFTError, match=r"row 7: the prompt is \d+ tokens, so no response token survives"):
        encode_example(tokenizer, row, max_seq_len=n_prompt + 1, index=7)


def test_bad_rows_and_tokenizer(tokenizer):
    with pytest.raises(SFTError, match="row 3 has no field 'output'"):
        encode_example(tokenizer, {"instruction": "x", "input": ""}, index=3)
    with pytest.raises(SFTError, match="row 0: field 'output' is empty"):
        encode_example(tokenizer, {"instruction": "x", "output": "  "}, index=0)
    with pytest.raises(SFTError, match="row 5 has no field 'instruction'"):
        encode_example(tokenizer, {"output": "y"}, index=5)
    with pytest.raises(SFTError, match="field 'input' must be a string"):
        encode_example(tokenizer, {"instruction": "x", "input": 3, "output": "y"}, index=1)

    class NoEOS:
        eos_token_id = None

    with pytest.raises(SFTError, match="no EOS token"):
        encode_example(NoEOS(), {"instruction": "x", "output": "y"})
    with pytest.raises(SFTError, match="not a multiple of --micro-batch-size 16"):
        SFTConfig("c", "o", global_batch_size=100).grad_accum()


def test_defaults_are_the_studys():
    cfg = SFTConfig("c", "o")
    assert (cfg.epochs, cfg.global_batch_size, cfg.micro_batch_size, cfg.lr, cfg.weight_decay) == (3, 128, 16, 1e-4,
                                                                                                   0.1)
    assert (cfg.betas, cfg.eps, cfg.warmup_ratio, cfg.grad_clip, cfg.max_seq_len) == ((0.9, 0.95), 1e-8, 0.03, 1.0,
                                                                                     512)
    assert cfg.data == "zwhe99/commonsense_170k" and cfg.shuffle_seed == 42 and cfg.grad_accum() == 8


# ------------------------------------------------------------------------------------------------ training
def _data_file(path: Path, n: int = 16) -> Path:
    rows = [dict(ROWS[i % len(ROWS)], output=ROWS[i % len(ROWS)]["output"] + " ok" * (i % 3)) for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _checkpoint(path: Path, tokenizer, arch: str, seed: int = 0) -> Path:
    import depthbench

    torch.manual_seed(seed)
    model = depthbench.build_model(arch, vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, max_position_embeddings=256)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _sft(ckpt: Path, data: Path, out: Path, **kw) -> dict:
    from depthbench.training.sft import run_sft

    cfg = SFTConfig(str(ckpt), str(out), data=str(data), use_cpu=True, logging_steps=1, **kw)
    return run_sft(cfg, log=lambda *a: None)


@pytest.mark.parametrize("arch_id", ARCH_IDS)
def test_a_few_trainer_steps_for_every_architecture(arch_id, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    ckpt = _checkpoint(tmp_path / "base", tokenizer, arch_id)
    summary = _sft(ckpt, _data_file(tmp_path / "rows.jsonl", 8), tmp_path / "out", max_steps=2,
                   global_batch_size=4, micro_batch_size=2, lr=1e-3, max_seq_len=160)
    assert summary["steps"] == 2
    losses = [h["loss"] for h in summary["log_history"] if "loss" in h]
    assert len(losses) == 2 and all(0 < loss < 20 for loss in losses)
    base = AutoModelForCausalLM.from_pretrained(ckpt)
    tuned = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert type(tuned) is type(base)
    moved = max(max_abs_diff(a, b) for a, b in zip(base.state_dict().values(), tuned.state_dict().values())
                if a.is_floating_point())
    assert moved > 1e-4


def test_gradient_accumulation_is_exact(tokenizer, tmp_path):
    """4 micro-batches of 2 with GA 4 == 1 batch of 8: the loss is the mean over the global batch's supervised
    tokens (rows have different numbers of them, so a per-micro-batch mean would differ)."""
    from transformers import AutoModelForCausalLM

    ckpt = _checkpoint(tmp_path / "base", tokenizer, "pre_ln")
    data = _data_file(tmp_path / "rows.jsonl", 16)
    common = dict(max_steps=2, global_batch_size=8, lr=1e-3, max_seq_len=160, warmup_ratio=0.0)
    ga = _sft(ckpt, data, tmp_path / "ga4", micro_batch_size=2, **common)
    full = _sft(ckpt, data, tmp_path / "ga1", micro_batch_size=8, **common)
    losses = [[h["loss"] for h in s["log_history"] if "loss" in h] for s in (ga, full)]
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "ga4").state_dict()
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "ga1").state_dict()
    assert max(max_abs_diff(a[k], b[k]) for k in a if a[k].is_floating_point()) < 1e-5


def test_cli_output_is_a_checkpoint_for_eval(tokenizer, tmp_path, capsys):
    from huggingface_hub import ModelCard

    from depthbench.cli import main

    ckpt = _checkpoint(tmp_path / "base", tokenizer, "hc")
    data = tmp_path / "rows.json"  # a JSON list, the format of commonsense_170k.json
    data.write_text(json.dumps([dict(r) for r in ROWS] * 2))
    out = tmp_path / "sft"
    assert main(["sft", str(ckpt), "--data", str(data), "-o", str(out), "--epochs", "1", "--global-batch-size", "4",
                 "--micro-batch-size", "2", "--cpu", "--max-seq-len", "160"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert "AutoModelForCausalLM" in config["auto_map"] and (out / "tokenizer.json").is_file()
    assert json.loads((out / "sft_summary.json").read_text())["steps"] == 2  # 8 rows / 4 per step
    card = (out / "README.md").read_text()
    assert str(ckpt.resolve()) in card and "sft" in ModelCard.load(out / "README.md").data.tags
    # the same folder again is refused (nothing is overwritten) ...
    assert main(["sft", str(ckpt), "--data", str(data), "-o", str(out), "--cpu"]) == 2
    assert "already holds a model" in capsys.readouterr().err
    # ... and depthbench eval accepts the output folder
    assert main(["eval", str(out), "--tasks", "depthbench_synthetic_mc_pointer", "--limit", "2", "--device",
                 "cpu"]) == 0
    results = json.loads((out / "eval" / "results.json").read_text())
    assert 0.0 <= results["results"]["depthbench_synthetic_mc_pointer"]["acc,none"] <= 1.0


def test_bad_data_file(tokenizer, tmp_path, capsys):
    from depthbench.cli import main

    ckpt = _checkpoint(tmp_path / "base", tokenizer, "pre_ln")
    bad = tmp_path / "rows.jsonl"
    bad.write_text(json.dumps({"instruction": "x", "input": ""}) + "\n")
    assert main(["sft", str(ckpt), "--data", str(bad), "-o", str(tmp_path / "o"), "--cpu"]) == 2
    assert "has no field 'output'" in capsys.readouterr().err
    assert main(["sft", str(ckpt), "--data", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o"),
                 "--cpu"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "o" / "config.json").exists()


def test_any_hf_causal_lm_fine_tunes_and_evaluates(tokenizer, tmp_path):
    """Not only depthbench's architectures: a plain transformers ``LlamaForCausalLM`` folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from depthbench.cli import main

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=256)
    base = tmp_path / "llama"
    LlamaForCausalLM(config).save_pretrained(base)
    tokenizer.save_pretrained(base)
    summary = _sft(base, _data_file(tmp_path / "rows.jsonl", 4), tmp_path / "out", max_steps=1,
                   global_batch_size=4, micro_batch_size=4, max_seq_len=160)
    assert summary["steps"] == 1
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "llama"
    assert main(["eval", str(tmp_path / "out"), "--tasks", "depthbench_synthetic_mc_pointer", "--limit", "2",
                 "--device", "cpu"]) == 0
    assert (tmp_path / "out" / "eval" / "results.json").is_file()


def test_a_bad_row_is_named_by_its_line_in_the_file_not_its_shuffled_position(tokenizer, tmp_path, capsys):
    """Rows are shuffled (seed 42) before they are tokenized; the error still names the bad row's line in the
    file (1-based, the blank line counted), and says which field is missing among the ones the row has."""
    from depthbench.cli import main

    ckpt = _checkpoint(tmp_path / "base", tokenizer, "pre_ln")
    lines = [json.dumps(dict(ROWS[i % len(ROWS)])) for i in range(8)]
    lines.insert(3, "")  # a blank line: JSONL readers skip it, the file's line numbers count it
    lines[6] = json.dumps({"instruction": "Name a colour.", "input": ""})  # line 7: no output
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(lines) + "\n")
    assert main(["sft", str(ckpt), "--data", str(data), "-o", str(tmp_path / "o"), "--cpu"]) == 2
    err = capsys.readouterr().err
    assert "line 7 of rows.jsonl" in err and "'output'" in err
    assert "(the row's fields with a value: 'instruction', 'input')" in err
    rows = [dict(r) for r in ROWS] * 2
    rows[5] = {"instruction": "x", "output": None}  # a JSON list: its 6th row
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    assert main(["sft", str(ckpt), "--data", str(tmp_path / "rows.json"), "-o", str(tmp_path / "o"), "--cpu"]) == 2
    err = capsys.readouterr().err
    assert "row 6 of rows.json" in err and "field 'output' is missing or null" in err
    assert not (tmp_path / "o" / "config.json").exists()
