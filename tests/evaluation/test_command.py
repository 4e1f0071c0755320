"""``depthbench.evaluation.command``: the ``eval`` and ``tasks-path`` parsers, their value checks, and what the
handler hands the harness (replaced by recorders here; the harness runs for real in test_harness.py).

Run it with ``python -m pytest tests/evaluation/test_command.py -q``.
"""

from __future__ import annotations

import argparse

import pytest

from depthbench.evaluation import command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    command.register_cli(parser.add_subparsers())
    return parser


@pytest.mark.parametrize("text, value", [("100", 100), ("100.0", 100), ("0.25", 0.25), ("1.5", 1.5), ("1e2", 100)])
def test_limit_is_a_count_or_a_fraction(text, value):
    limit = _parser().parse_args(["eval", "ckpt", "--limit", text]).limit
    assert limit == value and type(limit) is type(value)  # lm-eval reads an int as documents, a float < 1 as a share


@pytest.mark.parametrize("text, value", [("16", 16), ("auto", "auto"), ("auto:4", "auto:4")])
def test_batch_size_is_a_positive_count_or_lm_eval_s_auto(text, value):
    assert _parser().parse_args(["eval", "ckpt", "--batch-size", text]).batch_size == value


@pytest.mark.parametrize("argv, message", [
    (["--limit", "0"], "--limit must be > 0 (a count, or a fraction < 1), got 0"),
    (["--limit", "-3"], "--limit must be > 0 (a count, or a fraction < 1), got -3"),
    (["--batch-size", "0"], "--batch-size must be a positive integer or 'auto', got '0'"),
    (["--batch-size", "big"], "--batch-size must be a positive integer or 'auto', got 'big'"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
])
def test_bad_values_are_usage_errors_that_say_what_is_allowed(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["eval", "ckpt", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def _recorders(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(command, "evaluate_checkpoint", lambda *a, **k: calls.append(("checkpoint", a, k)))
    monkeypatch.setattr(command, "evaluate_sweep", lambda *a, **k: calls.append(("sweep", a, k)))
    return calls


def test_a_checkpoint_gets_the_listed_tasks_and_every_option(monkeypatch, tmp_path):
    calls = _recorders(monkeypatch)
    args = _parser().parse_args(["eval", str(tmp_path), "--tasks", " a, ,b ,", "--limit", "4", "--device", "cpu",
                                 "--no-card", "-o", "out", "--data-dir", "nll", "--max-length", "64"])
    assert args.func(args) == 0
    assert calls == [("checkpoint", (str(tmp_path), ["a", "b"]),
                      {"out_dir": "out", "update_card": False, "limit": 4, "batch_size": 8, "device": "cpu",
                       "dtype": "auto", "data_dir": "nll", "include_path": None, "trust_remote_code": False,
                       "max_length": 64})]


def test_a_sweep_folder_is_evaluated_run_by_run_and_refuses_one_output_folder(monkeypatch, tmp_path):
    from depthbench.evaluation.harness import EvalError

    calls = _recorders(monkeypatch)
    (tmp_path / "sweep.json").write_text("{}")  # what makes a folder a sweep: a definition and a runs/ folder
    (tmp_path / "runs").mkdir()
    args = _parser().parse_args(["eval", str(tmp_path), "--tasks", "t"])
    assert args.func(args) == 0
    assert [(kind, a) for kind, a, _ in calls] == [("sweep", (str(tmp_path), ["t"]))]
    assert "out_dir" not in calls[0][2] and "update_card" not in calls[0][2]
    args = _parser().parse_args(["eval", str(tmp_path), "--tasks", "t", "-o", "elsewhere"])
    with pytest.raises(EvalError, match="-o/--output is for one checkpoint; a sweep writes into each run's eval/"):
        args.func(args)
    assert len(calls) == 1  # refused before anything ran


def test_tasks_path_prints_the_installed_task_folder(capsys):
    from importlib import resources

    args = _parser().parse_args(["tasks-path"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(resources.files("depthbench.eval_tasks"))
