"""``depthbench.evaluation.harness``, run through ``depthbench eval``: one checkpoint, a sweep folder, the model
card, and bad input.

A tiny random ``pre_ln`` checkpoint (tokenizer trained on the fixture texts) is evaluated through the real command
line (``depthbench.cli.main``) on two offline tasks: ``depthbench_nll_gsm8k`` (hand-written fixture rows via
``--data-dir``) and ``depthbench_synthetic_mc_pointer``. Checked: lm-eval's results JSON and the markdown table
are written, the model card's ``model-index`` round-trips through huggingface_hub with the same numbers, a rerun
skips finished tasks, a failing task keeps what was finished, unknown tasks / missing tokenizers / tokenizers
without EOS are clear errors, and so is a folder without a model; a two-run sweep folder gets per-run results (a run
that did not finish is skipped), ``eval_results.csv``, the domain-NLL plot and its report section. The modules' own
pieces are tested on hand-written results in ``test_results.py``, ``test_cards.py`` and ``test_sweep.py``.

Run it with ``python -m pytest tests/evaluation/test_harness.py -q``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from depthbench.cli import main  # noqa: E402
from depthbench.evaluation.harness import tasks_dir  # noqa: E402
from tests.helpers import FIXTURES_DIR

FIXTURES = FIXTURES_DIR / "depthbench_nll"
SYNTH = tasks_dir() / "depthbench_synthetic" / "data" / "test.jsonl"
TASKS = "depthbench_nll_gsm8k,depthbench_synthetic_mc_pointer"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from depthbench.data import make_tiny_tokenizer

    texts = [line for p in sorted(FIXTURES.iterdir()) if p.suffix != ".md" for line in p.read_text().splitlines()]
    texts += SYNTH.read_text().splitlines()[:200]
    return make_tiny_tokenizer(texts, vocab_size=300)


def _checkpoint(path: Path, tokenizer, layers: int = 2, width: int = 32, arch: str = "pre_ln") -> Path:
    import depthbench

    torch.manual_seed(layers)
    model = depthbench.build_model(arch, vocab_size=320, hidden_size=width, intermediate_size=64,
                                   num_hidden_layers=layers, num_attention_heads=4, max_position_embeddings=256)
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def evaluated(tokenizer, tmp_path_factory):
    ckpt = _checkpoint(tmp_path_factory.mktemp("eval") / "ckpt", tokenizer)
    code = main(["eval", str(ckpt), "--tasks", TASKS, "--limit", "4", "--data-dir", str(FIXTURES),
                 "--batch-size", "4", "--device", "cpu"])
    assert code == 0
    return ckpt


def test_results_files_and_model_card(evaluated):
    from huggingface_hub import ModelCard

    results = json.loads((evaluated / "eval" / "results.json").read_text())
    gsm8k = results["results"]["depthbench_nll_gsm8k"]
    pointer = results["results"]["depthbench_synthetic_mc_pointer"]
    assert gsm8k["nll,none"] > 0 and gsm8k["target_tokens,none"] > 0
    assert abs(gsm8k["ppl,none"] - torch.tensor(gsm8k["nll,none"]).exp().item()) < 1e-3 * gsm8k["ppl,none"]
    assert results["n-samples"]["depthbench_nll_gsm8k"]["effective"] == 2  # the fixture has 2 rows (< limit)
    assert results["n-samples"]["depthbench_synthetic_mc_pointer"]["effective"] == 4
    assert 0.0 <= pointer["acc,none"] <= 1.0
    assert results["limits"]["depthbench_nll_gsm8k"] == 4
    table = (evaluated / "eval" / "results.md").read_text()
    assert f"| depthbench_nll_gsm8k | nll | {gsm8k['nll,none']:.4f} | 2 |" in table
    assert f"| depthbench_synthetic_mc_pointer | acc | {pointer['acc,none']:.4f} | 4 |" in table
    card = ModelCard.load(evaluated / "README.md")
    entries = {(e.dataset_name, e.metric_type): e for e in card.data.eval_results}
    assert entries[("depthbench_nll_gsm8k", "nll")].metric_value == pytest.approx(gsm8k["nll,none"])
    assert entries[("depthbench_synthetic_mc_pointer", "acc")].metric_value == pytest.approx(pointer["acc,none"])
    assert "model-index" in (evaluated / "README.md").read_text()


def test_card_says_the_results_come_from_local_copies_and_subsets(evaluated):
    """``--data-dir`` fixture rows are filed as a local copy (with the file's sha256), not under the Hub dataset;
    ``--limit 4`` of the 100 pointer questions is a subset; the fixture's 2 gsm8k rows (< the limit) are all."""
    import hashlib

    from huggingface_hub import ModelCard

    card = ModelCard.load(evaluated / "README.md")
    entries = {(e.dataset_name, e.metric_type): e for e in card.data.eval_results}
    gsm8k, pointer = entries[("depthbench_nll_gsm8k", "nll")], entries[("depthbench_synthetic_mc_pointer", "acc")]
    assert gsm8k.dataset_type == "local:gsm8k.jsonl" and gsm8k.dataset_args["copy_of"] == "openai/gsm8k"
    assert gsm8k.dataset_args["sha256"] == hashlib.sha256((FIXTURES / "gsm8k.jsonl").read_bytes()).hexdigest()
    assert "limit" not in gsm8k.dataset_args and "local copy" in gsm8k.source_name
    assert (pointer.dataset_args["documents"], pointer.dataset_args["documents_in_task"]) == (4, 100)
    assert "subset: 4 of 100 documents" in pointer.source_name
    lines = {t.split(" | ")[0].lstrip("| "): t for t in card.text.splitlines() if t.startswith("| depthbench_")}
    assert "local copy" in lines["depthbench_nll_gsm8k"] and "subset" in lines["depthbench_synthetic_mc_pointer"]
    assert str(FIXTURES) not in card.content  # no local path in the card


def test_rebuilt_card_keeps_recorded_results(evaluated, tmp_path):
    """Rebuilding the export's card (what publishing and checkpoint exports do) keeps the results that
    ``depthbench eval`` recorded in it."""
    from huggingface_hub import ModelCard

    from depthbench.cards import card_files, write_card

    export = tmp_path / "export"
    shutil.copytree(evaluated, export)
    recorded = {(e.dataset_name, e.metric_type): e.metric_value
                for e in ModelCard.load(export / "README.md").data.eval_results}
    assert ("depthbench_nll_gsm8k", "nll") in recorded
    write_card(str(export))
    rebuilt = {(e.dataset_name, e.metric_type): e.metric_value
               for e in ModelCard.load(export / "README.md").data.eval_results}
    assert rebuilt == recorded
    published = card_files(str(export), None, "aspect-ratio-scaling/m")["README.md"].decode()
    assert "depthbench_nll_gsm8k" in published and "How to load" in (export / "README.md").read_text()
    # publishing carries the provenance through: the model-index entries and the text still say local / subset
    card = ModelCard(published)
    loaded = {(e.dataset_name, e.metric_type): e for e in card.data.eval_results}
    assert loaded[("depthbench_nll_gsm8k", "nll")].dataset_type == "local:gsm8k.jsonl"
    assert loaded[("depthbench_synthetic_mc_pointer", "acc")].dataset_args["documents_in_task"] == 100
    assert "Neither is the benchmark's result" in card.text and "**subset**: 4 of 100 documents" in card.text


def test_rerun_skips_finished_tasks(evaluated, capsys):
    before = (evaluated / "eval" / "results.json").read_text()
    assert main(["eval", str(evaluated), "--tasks", TASKS, "--limit", "4", "--data-dir", str(FIXTURES)]) == 0
    assert "already in" in capsys.readouterr().out
    assert (evaluated / "eval" / "results.json").read_text() == before


# ------------------------------------------------------------------------------------------------------ bad input
def test_unknown_task_is_an_error_and_writes_nothing(tokenizer, tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "ckpt", tokenizer)
    assert main(["eval", str(ckpt), "--tasks", "depthbench_nll_gsm9k", "--limit", "2"]) == 2
    err = capsys.readouterr().err
    assert "unknown task(s) 'depthbench_nll_gsm9k'" in err and "depthbench_nll" in err
    assert not (ckpt / "eval").exists() and not (ckpt / "README.md").exists()


def test_checkpoint_without_tokenizer_or_eos(tokenizer, tmp_path, capsys):
    bare = _checkpoint(tmp_path / "bare", None)
    assert main(["eval", str(bare), "--tasks", "depthbench_synthetic_mc_pointer", "--limit", "2"]) == 2
    assert "has no loadable tokenizer" in capsys.readouterr().err
    no_eos = _checkpoint(tmp_path / "no_eos", tokenizer)
    config = json.loads((no_eos / "tokenizer_config.json").read_text())
    config["eos_token"] = None
    (no_eos / "tokenizer_config.json").write_text(json.dumps(config))
    assert main(["eval", str(no_eos), "--tasks", "depthbench_synthetic_mc_pointer", "--limit", "2"]) == 2
    assert "has no EOS token" in capsys.readouterr().err


def test_failing_task_keeps_finished_results(tokenizer, tmp_path, capsys):
    from depthbench.evaluation.harness import EvalError, evaluate_checkpoint

    ckpt = _checkpoint(tmp_path / "ckpt", tokenizer)
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(FIXTURES / "gsm8k.jsonl", data / "gsm8k.jsonl")
    broken = [json.loads(line) for line in (FIXTURES / "sciq.jsonl").read_text().splitlines()]
    del broken[1]["support"]
    (data / "sciq.jsonl").write_text("".join(json.dumps(r) + "\n" for r in broken))
    # sciq fails on a bad row, gsm8k after it still runs, math500 fails too (no local copy): both errors reported
    with pytest.raises(EvalError, match=r"(?s)depthbench_nll_sciq failed.*line 2 of sciq.jsonl has no field 'support'.*"
                                        r"depthbench_nll_math500 failed.*no local copy"):
        evaluate_checkpoint(str(ckpt), ["depthbench_nll_sciq", "depthbench_nll_gsm8k", "depthbench_nll_math500"],
                            data_dir=str(data), limit=2, device="cpu", log=lambda *a: None)
    kept = json.loads((ckpt / "eval" / "results.json").read_text())
    assert "depthbench_nll_gsm8k" in kept["results"]
    assert "depthbench_nll_sciq" not in kept["results"] and "depthbench_nll_math500" not in kept["results"]
    # a later failing run does not delete what was finished
    with pytest.raises(EvalError, match="depthbench_nll_math500 failed"):
        evaluate_checkpoint(str(ckpt), ["depthbench_nll_math500"], data_dir=str(data), limit=2, device="cpu",
                            log=lambda *a: None)
    assert json.loads((ckpt / "eval" / "results.json").read_text())["results"].keys() == kept["results"].keys()


# ------------------------------------------------------------------------------------------------------ sweeps
def test_sweep_folder(tokenizer, tmp_path):
    from depthbench import runs
    from depthbench.evaluation.harness import evaluate_sweep

    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    runs.write_report_section(str(sweep), "results", "# Sweep\n\nexisting text\n")  # another command's section
    for layers, width in ((2, 48), (4, 32)):
        run = sweep / "runs" / f"pre_ln__tiny-L{layers}__lr0.003__s0"
        _checkpoint(run / "final", tokenizer, layers=layers, width=width)
        (run / "summary.json").write_text(json.dumps({"arch": "pre_ln", "status": "finished"}))
    diverged = sweep / "runs" / "pre_ln__tiny-L8__lr0.1__s0"  # has a final/ export, but did not finish
    _checkpoint(diverged / "final", tokenizer, layers=8, width=16)
    (diverged / "summary.json").write_text(json.dumps({"arch": "pre_ln", "status": "diverged"}))
    kwargs = dict(limit=2, data_dir=str(FIXTURES), device="cpu", log=lambda *a: None)
    evaluate_sweep(str(sweep), ["depthbench_nll_coding"], **kwargs)
    assert not (diverged / "eval").exists()
    for run in (sweep / "runs").iterdir():
        if run == diverged:
            continue
        results = json.loads((run / "eval" / "results.json").read_text())
        assert "nll,none" in results["results"]["depthbench_nll_coding"]  # token-weighted group row
    assert (sweep / "domain_nll_vs_aspect_ratio.png").stat().st_size > 1000
    section = (sweep / "sections" / "evaluation.md").read_text()
    assert section.startswith("## Downstream evaluation (`depthbench eval`)")
    assert "![domain_nll_vs_aspect_ratio.png](domain_nll_vs_aspect_ratio.png)" in section
    assert "| arch | L2 | L4 |" in section and "**depthbench_nll_coding** `nll` (lower is better)" in section
    report = (sweep / "report.md").read_text()
    assert section.rstrip() in report and "existing text" in report  # the other section is kept
    csv_text = (sweep / "eval_results.csv").read_text()
    assert csv_text.startswith("run,arch,L,d,aspect_ratio,task,metric,value")
    assert "pre_ln,4,32,8.0,depthbench_nll_coding,nll," in csv_text
    # resumable: a second call evaluates nothing and rewrites the section in place (not appended twice)
    mtimes = {p: p.stat().st_mtime_ns for p in sweep.glob("runs/*/eval/results.json")}
    evaluate_sweep(str(sweep), ["depthbench_nll_coding"], **kwargs)
    assert {p: p.stat().st_mtime_ns for p in sweep.glob("runs/*/eval/results.json")} == mtimes
    assert (sweep / "sections" / "evaluation.md").read_text() == section
    report = (sweep / "report.md").read_text()
    assert report.count("## Downstream evaluation") == 1 and "existing text" in report


def test_folder_that_is_not_a_checkpoint(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["eval", str(tmp_path / "empty"), "--tasks", "depthbench_synthetic_mc_pointer"]) == 2
    assert "holds no model (no config.json, nor final/config.json)" in capsys.readouterr().err
    run = tmp_path / "run"  # a training run that has not exported its final model yet
    run.mkdir()
    (run / "run_config.json").write_text("{}")
    assert main(["eval", str(run), "--tasks", "depthbench_synthetic_mc_pointer"]) == 2
    assert "training run without a final export yet" in capsys.readouterr().err
    assert not (tmp_path / "empty" / "eval").exists() and not (run / "eval").exists()


def test_lm_eval_git_lookup_is_quiet_outside_a_git_folder(tmp_path, monkeypatch, capfd):
    """lm-eval records ``git describe`` of the working directory; outside a git folder git itself prints
    ``fatal: not a git repository`` (lm-eval's own lookup, the reference here, does). depthbench's evaluation runs
    lm-eval with the same lookup made quiet: the same ``None``, nothing on the terminal."""
    import lm_eval
    import lm_eval.evaluator
    from lm_eval.loggers.utils import get_git_commit_hash

    from depthbench.evaluation import harness

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no enclosing repository is found
    reference = get_git_commit_hash()
    assert "not a git repository" in capfd.readouterr().err  # what users saw
    seen = {}

    def fake_simple_evaluate(**kwargs):
        seen["hash"] = lm_eval.evaluator.get_git_commit_hash()
        return {"results": {}}

    monkeypatch.setattr(lm_eval, "simple_evaluate", fake_simple_evaluate)
    harness._simple_evaluate(model=None, tasks=[])
    assert seen["hash"] == reference is None
    assert capfd.readouterr().err == ""
    assert lm_eval.evaluator.get_git_commit_hash is get_git_commit_hash  # restored afterwards


# ------------------------------------------------------------------------------------------------------ output
def test_a_sweep_evaluation_is_one_bar_and_each_warning_once(tokenizer, tmp_path, capfd, caplog):
    """Three tiny runs evaluated as the demo does: the whole stage prints a handful of lines (one progress bar,
    plain lines when the output is not a terminal, with the run and task counts), none of lm-eval's per-request
    bars nor transformers' weight-loading bar; lm-eval's warnings about how depthbench calls it are gone and any
    other warning comes once; lm-eval, datasets and transformers are as they were afterwards."""
    import logging

    import datasets
    import lm_eval.api.task
    from tqdm.std import tqdm
    from transformers.utils import logging as hf_logging

    from depthbench.evaluation.harness import evaluate_sweep

    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    for layers in (1, 2, 3):
        run = sweep / "runs" / f"pre_ln__tiny-L{layers}__lr0.003__s0"
        _checkpoint(run / "final", tokenizer, layers=layers)
        (run / "summary.json").write_text(json.dumps({"arch": "pre_ln", "status": "finished"}))
    capfd.readouterr()
    real_download = lm_eval.api.task.ConfigurableTask.download

    def download_and_warn(self, *args, **kwargs):  # a warning that matters, raised by every run's task
        logging.getLogger("lm_eval.api.task").warning("a warning that matters")
        return real_download(self, *args, **kwargs)

    caplog.set_level(logging.WARNING)
    # Once lm-eval has set up its logging (any earlier simple_evaluate in this process), its logger has a handler of
    # its own and does not propagate to the root, where caplog listens: listen on lm-eval's logger in that state.
    lm_logger = logging.getLogger("lm_eval")
    level_before = lm_logger.level
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lm_eval.api.task.ConfigurableTask, "download", download_and_warn)
        mp.setattr(lm_logger, "propagate", False)
        mp.setattr(lm_logger, "handlers", [*lm_logger.handlers, caplog.handler])
        evaluate_sweep(str(sweep), ["depthbench_synthetic_mc_pointer", "depthbench_synthetic_mc_arithmetic"],
                       limit=4, batch_size=4, device="cpu", log=lambda *a: None)
        assert not caplog.handler.filters  # the stage's filters are gone from every handler it put them on
    captured = capfd.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert len(lines) < 20 and "\r" not in captured.err, lines
    assert not any("Running loglikelihood" in line or "Loading weights" in line for line in lines), lines
    assert lines[-1].startswith("eval: 100%") and "6/6" in lines[-1], lines
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith(("lm_eval", "transformers"))]
    assert warnings.count("a warning that matters") == 1, warnings
    assert len(warnings) == len(set(warnings)), warnings
    assert not any("`pretrained` model kwarg" in w or "Custom kwargs" in w for w in warnings), warnings
    assert lm_eval.api.task.tqdm is tqdm  # everything restored
    assert datasets.is_progress_bar_enabled() and hf_logging.is_progress_bar_enabled()
    assert not any(h.filters for h in [*logging.getLogger().handlers, logging.lastResort])
    assert lm_logger.level == level_before


def test_a_task_counts_as_done_only_with_the_same_limit_and_data(monkeypatch, tmp_path):
    """The rerun rule on hand-written ``results.json`` contents: a task already there is re-evaluated when the
    ``--limit`` or the data folder differ; results written before ``limits`` were recorded per task use lm-eval's
    own ``config.limit``. The data folder is ``--data-dir``, else ``DEPTHBENCH_NLL_DATA_DIR``, made absolute."""
    from depthbench.evaluation.harness import _done, effective_data_dir

    results = {"results": {"t": {"acc,none": 0.5}}, "limits": {"t": 4}, "data_dirs": {"t": "/data"}}
    assert _done(results, "t", 4, "/data")
    assert not _done(results, "t", 8, "/data") and not _done(results, "t", None, "/data")
    assert not _done(results, "t", 4, None) and not _done(results, "t", 4, "/other")
    assert not _done(results, "u", 4, "/data") and not _done(None, "t", 4, "/data")
    older = {"results": {"t": {"acc,none": 0.5}}, "config": {"limit": 2}}
    assert _done(older, "t", 2, None) and not _done(older, "t", 4, None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEPTHBENCH_NLL_DATA_DIR", raising=False)
    assert effective_data_dir(None) is None
    assert effective_data_dir("nll") == str(tmp_path.resolve() / "nll")
    monkeypatch.setenv("DEPTHBENCH_NLL_DATA_DIR", "from_env")
    assert effective_data_dir(None) == str(tmp_path.resolve() / "from_env")
    assert effective_data_dir("given") == str(tmp_path.resolve() / "given")
