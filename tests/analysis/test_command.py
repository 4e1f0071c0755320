"""``depthbench analyze``: a saved checkpoint with token shards or a text file, pruning by an lm-eval task through
lm-eval's ``HFLM``, and a sweep folder (every run, resumable, comparison figures, the report section).

Run with ``python -m pytest tests/analysis/test_command.py -q``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import depthbench
from depthbench.cli import main
from depthbench.evaluation.harness import tasks_dir
from depthbench.runs import write_report_section
from tests.helpers import TINY_FIELDS, make_train_data

COMMON = ["--num-samples", "4", "--seq-len", "16", "--micro-batch-size", "2", "--no-progress"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A sweep folder with two architectures at two depths (saved checkpoints + tokenizer) and its data."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("analysis_sweep")
    data = make_train_data(root / "data")
    tok = AutoTokenizer.from_pretrained(str(data / "tokenizer"))
    out = root / "sweep"
    for arch in ("pre_ln", "hc"):
        for depth in (2, 3):
            torch.manual_seed(depth)
            fields = {**TINY_FIELDS, "num_hidden_layers": depth, "vocab_size": len(tok)}
            model = depthbench.build_model(arch, **fields)
            final = out / "runs" / f"{arch}__tiny-L{depth}__lr0.003__s0" / "final"
            model.save_pretrained(final)
            tok.save_pretrained(final)
            (final.parent / "summary.json").write_text(json.dumps({"status": "finished", "arch": arch}))
    (out / "sweep.json").write_text(json.dumps({"spec": {"base": {"data": {"data_dir": str(data)}}}}))
    write_report_section(str(out), "results", "# Sweep report\n\nearlier content\n")  # `depthbench report`'s
    return out


def _ckpt(sweep: Path, arch: str = "pre_ln", depth: int = 2) -> Path:
    return sweep / "runs" / f"{arch}__tiny-L{depth}__lr0.003__s0" / "final"


def test_analyze_checkpoint_with_token_shards_and_text(sweep, tmp_path):
    data = sweep.parent / "data"
    out = tmp_path / "out"
    assert main(["analyze", str(_ckpt(sweep)), "--metrics", "angular,logit_lens,token_collapse", "--data", str(data),
                 "-o", str(out), *COMMON]) == 0
    for metric in ("angular", "logit_lens", "token_collapse"):
        payload = json.loads((out / f"{metric}.json").read_text())
        assert payload["settings"]["model"] == str(_ckpt(sweep))
        assert payload["settings"]["windows"]["split"] == "eval"
        assert (out / f"{metric}.csv").stat().st_size > 0 and (out / f"{metric}.png").stat().st_size > 0
    assert json.loads((out / "logit_lens.json").read_text())["values"]["kl_to_final"][-1] == 0.0
    text = tmp_path / "docs.txt"
    text.write_text("\n".join(f"document {i}: the cat sat on the mat and the dog sat on the log " * 3
                              for i in range(6)) + "\n")
    assert main(["analyze", str(_ckpt(sweep, "hc")), "--metrics", "causal", "--data", str(text), "-o",
                 str(tmp_path / "text"), *COMMON]) == 0
    values = json.loads((tmp_path / "text" / "causal.json").read_text())["values"]
    assert len(values["matrix"]) == 2 and values["matrix"][0][1] is not None


def test_analyze_rejects_unknown_metric(sweep, capsys):
    assert main(["analyze", str(_ckpt(sweep)), "--metrics", "angular,bogus", "--data", "x"]) == 2
    assert "unknown metric 'bogus'" in capsys.readouterr().err


def test_pruning_by_lm_eval_task_through_hflm(sweep, tmp_path):
    import lm_eval.evaluator
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    include = str(tasks_dir() / "depthbench_synthetic")
    task = "depthbench_synthetic_mc_pointer"
    out = tmp_path / "prune"
    assert main(["analyze", str(_ckpt(sweep)), "--metrics", "pruning", "--data", str(sweep.parent / "data"),
                 "--task", task, "--include-path", include, "--limit", "4", "-o", str(out), *COMMON]) == 0
    values = json.loads((out / "pruning.json").read_text())["values"]
    assert values["signal"] == f"lm_eval:{task}" and values["metric"] == "acc_norm"
    # the same score by hand: lm-eval's HFLM on the model with block 1 skipped
    model = AutoModelForCausalLM.from_pretrained(str(_ckpt(sweep)), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(_ckpt(sweep)))
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=8, backend="causal")
    add_env_info, lm_eval.evaluator.add_env_info = lm_eval.evaluator.add_env_info, lambda storage: None
    try:
        with model.skip_block(1):
            manager = TaskManager(include_path=include, include_defaults=False)
            res = simple_evaluate(model=lm, tasks=[task], task_manager=manager, limit=4, bootstrap_iters=0)
    finally:
        lm_eval.evaluator.add_env_info = add_env_info
    assert values["pruned"][1] == pytest.approx(res["results"][task]["acc_norm,none"])
    assert values["delta"][1] == pytest.approx(values["pruned"][1] - values["base"])


def test_analyze_sweep_is_resumable_and_writes_comparisons(sweep):
    args = ["analyze", str(sweep), "--metrics", "causal,permutation,logit_lens", *COMMON]
    assert main(args) == 0
    runs = sorted(os.listdir(sweep / "runs"))
    for run in runs:
        for metric in ("causal", "permutation", "logit_lens"):
            assert (sweep / "analysis" / run / f"{metric}.json").is_file()
    assert (sweep / "analysis_late_fractions.png").stat().st_size > 0
    assert (sweep / "analysis_logit_lens.png").stat().st_size > 0
    report = (sweep / "report.md").read_text()
    assert report.startswith("# Sweep report") and "earlier content" in report
    assert report.count("## Layer analyses") == 1 and "causal.late_fraction_above" in report
    first = sweep / "analysis" / runs[0] / "causal.json"
    stamp = first.stat().st_mtime_ns
    assert main(args) == 0  # resumed: nothing recomputed, section replaced not duplicated
    assert first.stat().st_mtime_ns == stamp
    assert (sweep / "report.md").read_text().count("## Layer analyses") == 1
    summary = (sweep / "analysis" / "summary.csv").read_text()
    assert "permutation,late_fraction_above" in summary


@pytest.mark.parametrize("target", ["/nonexistent/depthbench-model", "./no-such-run/final", "runs//x", "~/no-model"])
def test_a_missing_model_path_is_a_clear_error(sweep, target, capsys):
    assert main(["analyze", target, "--metrics", "angular", "--data", str(sweep.parent / "data"), *COMMON]) == 2
    err = capsys.readouterr().err
    assert f"{target}: no such model folder" in err and "Repo id" not in err and "Traceback" not in err


def test_windows_longer_than_the_model_positions_are_refused(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["analyze", str(_ckpt(sweep)), "--metrics", "angular", "--data", str(sweep.parent / "data"), "-o", str(out),
            "--num-samples", "2", "--seq-len", "80", "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "80" in err and "max_position_embeddings=64" in err and "--seq-len" in err
    assert not out.exists()


@pytest.mark.parametrize("option", [["--metrics", "angular,permutation", "--anchor-layer", "5"],
                                    ["--metrics", "angular,pruning", "--layers", "0,7"]])
def test_out_of_range_blocks_are_refused_before_anything_is_computed(sweep, tmp_path, option, capsys):
    out = tmp_path / "out"
    assert main(["analyze", str(_ckpt(sweep)), "--data", str(sweep.parent / "data"), "-o", str(out), *option,
                 *COMMON]) == 2
    err = capsys.readouterr().err
    flag = option[2]
    assert f"{flag} {option[3].split(',')[-1]}" in err and "blocks 0..1" in err
    assert not (out / "angular.json").exists()


def test_a_target_where_no_metric_applies_is_an_error(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["analyze", str(_ckpt(sweep)), "--metrics", "depth_mixing,hc_transport", "--data",
                 str(sweep.parent / "data"), "-o", str(out), *COMMON]) == 2
    err = capsys.readouterr().err
    assert "no metric was computed" in err and "attention-residual" in err and "hyper-connection" in err


def test_usefulness_short_of_windows_is_skipped_from_the_default_list_and_an_error_by_name(sweep, tmp_path,
                                                                                            capsys):
    from depthbench.analysis.runner import analyze_target
    from depthbench.analysis.sampling import WindowSpec

    data, logs = str(sweep.parent / "data"), []
    spec = WindowSpec(num_samples=4, seq_len=16)  # pre_ln tiny: D = 32, the fit half holds 2 x 16 = 32 < 33 tokens
    timings = analyze_target(str(_ckpt(sweep)), ["angular", "usefulness"], str(tmp_path / "a"), data, spec,
                             named=set(), progress=False, log=logs.append)
    assert set(timings) == {"angular"}
    assert any(line.startswith("usefulness: skipped") and "--num-samples 5 or more" in line for line in logs)
    assert not (tmp_path / "a" / "usefulness.json").exists()
    assert main(["analyze", str(_ckpt(sweep)), "--metrics", "angular,usefulness", "--data", data, "-o",
                 str(tmp_path / "b"), *COMMON]) == 2
    assert "--num-samples 5 or more" in capsys.readouterr().err
    assert not (tmp_path / "b" / "angular.json").exists()  # refused before anything was computed


@pytest.fixture(scope="module")
def demo_like_run(sweep, tmp_path_factory) -> Path:
    """A training run whose data, like the demo's, has no ``eval`` split: ``eval_synthetic`` holds short documents
    (at most 18 tokens: too short for 24-token windows) and ``eval_text`` long ones; ``run_config.json`` records it."""
    import shutil

    from transformers import AutoTokenizer

    from depthbench.data import prepare_data

    root = tmp_path_factory.mktemp("demo_like")
    src = sweep.parent / "data_src"
    data = root / "data"
    tok = AutoTokenizer.from_pretrained(str(sweep.parent / "data" / "tokenizer"))
    text = root / "text.txt"
    text.write_text("\n".join(line for line in (src / "train.txt").read_text().splitlines()[-40:]) + "\n")
    prepare_data([str(src / "train.txt")], tok, str(data), progress=False,
                 extra_splits={"eval_synthetic": [str(src / "synthetic.txt")], "eval_text": [str(text)]})
    run = root / "runs" / "pre_ln__tiny-L2__lr0.003__s0"
    shutil.copytree(_ckpt(sweep), run / "final")
    (run / "run_config.json").write_text(json.dumps({"config": {"data": {"data_dir": str(data)}}}))
    return run


WINDOWS24 = [*COMMON, "--seq-len", "24"]


def test_a_run_is_analysed_on_its_own_data_and_the_split_that_fits(demo_like_run, tmp_path, capsys):
    """``analyze RUN`` needs no ``--data`` (the run records it) and, without ``--split``, takes the first split in
    which the windows fit inside documents; a split that cannot give them is refused naming the split that can."""
    out = tmp_path / "out"
    for target in (demo_like_run, demo_like_run / "final"):
        assert main(["analyze", str(target), "--metrics", "angular", "-o", str(out), "--force", *WINDOWS24]) == 0, \
            capsys.readouterr().err
        windows = json.loads((out / "angular.json").read_text())["settings"]["windows"]
        assert windows["split"] == "eval_text"  # eval_synthetic comes first but its documents are too short
    assert main(["analyze", str(demo_like_run), "--metrics", "angular", "--split", "eval_synthetic", "-o",
                 str(tmp_path / "short"), *WINDOWS24]) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # (after transformers' weight-loading bar)
    assert err.startswith("depthbench analyze: error: ") and "split 'eval_synthetic'" in err
    assert "pass --split eval_text (or train)" in err
    assert "eval_synthetic 0" in err  # how many windows each split holds
    assert not (tmp_path / "short").exists()
    assert main(["analyze", str(demo_like_run), "--metrics", "angular", "--split", "nope", *WINDOWS24]) == 2
    assert "'nope' is not a split" in capsys.readouterr().err


def test_a_model_without_a_run_still_needs_data(sweep, tmp_path, capsys):
    hf = tmp_path / "model"
    import shutil

    shutil.copytree(_ckpt(sweep), hf)
    assert main(["analyze", str(hf), "--metrics", "angular", *WINDOWS24]) == 2
    assert "--data is required" in capsys.readouterr().err
