"""``depthbench.hub.command``: the parsers of ``publish``, ``convert`` and ``export-llama`` and what each handler
hands its library function and prints. The library functions are replaced by recorders here (their own tests are
test_publish.py, test_convert.py and test_export_llama.py).

Run: ``python -m pytest tests/hub/test_command.py -q``
"""

from __future__ import annotations

import argparse
import json

import pytest

from depthbench.hub.command import register_cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    return parser


def test_cli_takes_a_revision():
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(["export-llama", "org/name", "--revision", "step-000002", "-o", "out"])
    assert args.revision == "step-000002"


def test_publish_hands_every_option_to_publish(monkeypatch):
    """``--namespace`` is ``--org``'s other name; flags not given are off, options not given ``None``."""
    from depthbench.hub import publish

    seen = []
    monkeypatch.setattr(publish, "publish", lambda path, **kwargs: seen.append((path, kwargs)))
    args = _parser().parse_args(["publish", "runs/hc", "--namespace", "me", "--revisions", "--dry-run",
                                 "--lm-eval-json", "lm.json"])
    assert args.func(args) == 0
    assert seen == [("runs/hc", {"repo": None, "private": False, "revisions": True, "dry_run": True, "org": "me",
                                 "lm_eval_json": "lm.json"})]


def test_convert_hands_its_options_on_and_prints_the_record_it_wrote(monkeypatch, tmp_path, capsys):
    """The summary line and the notes come from the conversion record in the output folder (written by hand
    here), not from what the command was asked."""
    from depthbench.hub import convert

    seen = {}

    def fake_convert(source, output_dir, **kwargs):
        seen.update(kwargs, source=source, output_dir=output_dir)
        (tmp_path / convert.CONVERSION_RECORD).write_text(json.dumps(
            {"source_repo": "org/hc-release", "step": 700, "arch": "mhc", "dtype": "bfloat16",
             "notes": ["readout decided: sum", "no EOS id"]}))
        return str(tmp_path)

    monkeypatch.setattr(convert, "convert", fake_convert)
    args = _parser().parse_args(["convert", "org/hc-release", "-o", str(tmp_path), "--step", "700", "--readout",
                                 "sum", "--dtype", "bfloat16", "--overwrite"])
    assert args.func(args) == 0
    assert seen == {"source": "org/hc-release", "output_dir": str(tmp_path), "step": 700, "arch": None,
                    "config_path": None, "tokenizer_dir": None, "repo_name": None, "revision": None,
                    "overwrite": True, "readout": "sum", "dtype": "bfloat16"}
    assert capsys.readouterr().out.splitlines() == [
        f"converted org/hc-release (step 700) -> {tmp_path} as mhc (bfloat16)",
        "  note: readout decided: sum", "  note: no EOS id"]


@pytest.mark.parametrize("argv, wrong", [
    (["convert", "org/x"], "-o/--output"),
    (["convert", "org/x", "-o", "out", "--readout", "mean"], "'mean'"),
    (["convert", "org/x", "-o", "out", "--step", "last"], "'last'"),
    (["export-llama", "org/x"], "-o/--output"),
])
def test_bad_arguments_are_usage_errors_that_name_them(argv, wrong, capsys):
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(argv)
    assert exc.value.code == 2 and wrong in capsys.readouterr().err


def test_export_llama_hands_its_options_on_and_says_where_it_wrote(monkeypatch, capsys):
    from depthbench.hub import export_llama

    seen = []
    monkeypatch.setattr(export_llama, "export_llama", lambda *a, **k: seen.append((a, k)) or "out/llama")
    args = _parser().parse_args(["export-llama", "runs/p", "-o", "out/llama", "--overwrite"])
    assert args.func(args) == 0
    assert seen == [(("runs/p", "out/llama"), {"overwrite": True, "revision": None})]
    assert capsys.readouterr().out == "wrote a stock LlamaForCausalLM to out/llama (loads without trust_remote_code)\n"
