"""``depthbench upcycle`` end to end: a tiny transformers model saved to a folder, upcycled by the command line,
loaded back by ``from_pretrained`` and compared with the source run by transformers; bad input is one line, a
non-zero exit and nothing written.

    python -m pytest tests/upcycle/test_command.py -q
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from depthbench.cli import main
from tests.upcycle import tiny_sources
from tests.upcycle.tiny_sources import inputs, relative_difference


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("src") / "tiny-qwen3"
    model = tiny_sources.qwen3()
    model.save_pretrained(folder)
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# tiny\n")
    return str(folder), model


def test_upcycle_writes_a_checkpoint_that_computes_the_source(source_dir, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    folder, source = source_dir
    out = tmp_path / "hc"
    assert main(["upcycle", folder, "-o", str(out), "--arch", "hc", "--grow-depth", "2"]) == 0
    printed = capsys.readouterr().out
    assert "start: exact" in printed and "2 new blocks (interleave)" in printed
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert model.config.model_type == "depthbench_hc" and model.config.num_hidden_layers == 5
    ids = inputs(length=30)
    with torch.no_grad():
        assert relative_difference(model(ids).logits, source(ids).logits) <= 1e-5
    record = json.loads((out / "upcycle.json").read_text())
    assert record["source"]["license"] == "mit" and record["start"] == "exact"
    assert record["growth"]["positions"] == [1, 3]
    card = (out / "README.md").read_text()
    assert "license: mit" in card and "Upcycled by `depthbench upcycle` from the pretrained **tiny-qwen3**" in card
    assert "2 new block(s)" in card
    assert os.path.isfile(out / "modeling_hc.py") and os.path.isfile(out / "generation_config.json")


def test_depth_grows_to_that_many_blocks(source_dir, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    folder, source = source_dir
    out = tmp_path / "hc5"
    assert main(["upcycle", folder, "-o", str(out), "--arch", "hc", "--depth", "5", "--grow-mode", "append"]) == 0
    assert "2 new blocks (append)" in capsys.readouterr().out
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert model.config.num_hidden_layers == 5
    assert json.loads((out / "upcycle.json").read_text())["growth"]["positions"] == [3, 4]
    ids = inputs(length=30)
    with torch.no_grad():
        assert relative_difference(model(ids).logits, source(ids).logits) <= 1e-5


def test_function_change_prints_the_measured_loss_change(source_dir, tmp_path, capsys):
    folder, _ = source_dir
    out = tmp_path / "post"
    assert main(["upcycle", folder, "-o", str(out), "--arch", "post_ln"]) == 2
    err = capsys.readouterr().err
    assert "post_ln changes the function" in err and "--allow-function-change" in err and not out.exists()
    assert main(["upcycle", folder, "-o", str(out), "--arch", "post_ln", "--allow-function-change"]) == 0
    assert "step-0 loss on 128 tokens" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message,usage_error", [  # usage_error: argparse's (the usage, then one line)
    (["--arch", "nope"], "unknown architecture 'nope'", False),
    (["--arch", "pre_ln", "--grow-depth", "0"], "--grow-depth '0' is not allowed", True),
    (["--arch", "pre_ln", "--grow-depth", "two"], "--grow-depth 'two' is not allowed", True),
    (["--arch", "pre_ln", "--set", "oops"], "--set 'oops' is not allowed", False),
    (["--arch", "pre_ln", "--depth", "0"], "--depth '0' is not allowed", True),
    (["--arch", "pre_ln", "--depth", "5", "--grow-depth", "2"], "argument --grow-depth: not allowed with argument "
                                                                "--depth", True),
    (["--arch", "pre_ln", "--depth", "2"], "depth=2 is below the source's 3 blocks", False),
])
def test_bad_input_is_one_line_and_writes_nothing(source_dir, tmp_path, capsys, argv, message, usage_error):
    folder, _ = source_dir
    out = tmp_path / "out"
    with pytest.raises(SystemExit) if usage_error else _nothing():
        code = main(["upcycle", folder, "-o", str(out), *argv])
        assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err.splitlines()[-1] and not out.exists()
    if not usage_error:
        assert len(err.splitlines()) == 1


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_sources_that_are_not_causal_lms_or_other_families_are_refused(tmp_path, capsys):
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

    bert = tmp_path / "bert"
    BertModel(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                         vocab_size=50)).save_pretrained(bert)
    assert main(["upcycle", str(bert), "-o", str(tmp_path / "o1"), "--arch", "pre_ln"]) == 2
    assert "is not a causal language model" in capsys.readouterr().err
    gpt2 = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32)).save_pretrained(gpt2)
    assert main(["upcycle", str(gpt2), "-o", str(tmp_path / "o2"), "--arch", "pre_ln"]) == 2
    err = capsys.readouterr().err
    assert "unsupported source family GPT2LMHeadModel" in err and "Qwen3ForCausalLM" in err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_an_output_folder_holding_another_model_is_refused(source_dir, tmp_path, capsys):
    folder, _ = source_dir
    before = sorted(os.listdir(folder))
    assert main(["upcycle", folder, "-o", folder, "--arch", "pre_ln"]) == 2
    assert "holds another model" in capsys.readouterr().err
    assert sorted(os.listdir(folder)) == before
    out = tmp_path / "again"
    assert main(["upcycle", folder, "-o", str(out), "--arch", "pre_ln"]) == 0
    assert main(["upcycle", folder, "-o", str(out), "--arch", "hc"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["upcycle", folder, "-o", str(out), "--arch", "hc", "--overwrite"]) == 0
    assert json.loads((out / "upcycle.json").read_text())["arch"] == "hc"


def test_help_and_docs_state_each_architectures_own_start(capsys):
    from pathlib import Path

    from depthbench.registry import ARCHITECTURES
    from depthbench.upcycle.command import DOCS_TABLE_BEGIN, DOCS_TABLE_END, starts_markdown

    with pytest.raises(SystemExit):
        main(["upcycle", "--help"])
    lines = capsys.readouterr().out.splitlines()
    for arch_id, spec in ARCHITECTURES.items():
        cls = spec.config_class
        line = next(x for x in lines if x.split()[:1] == [arch_id])
        assert line.split()[1] == cls.upcycle_start and cls.upcycle_reason in line
    docs = (Path(__file__).parents[2] / "docs" / "upcycling.md").read_text(encoding="utf-8")
    table = docs.split(DOCS_TABLE_BEGIN, 1)[1].split(DOCS_TABLE_END, 1)[0].strip()
    assert table == starts_markdown(), "regenerate docs/upcycling.md's table with starts_markdown()"
