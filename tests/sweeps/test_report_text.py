"""Tests of the words of a sweep's ``report.md`` (``depthbench.sweeps.report``, ``depthbench.sweeps.report_study``):
the study's 400M result stands beside the sweep's, read from the published figures, with the gaps between the two
computed from the sweep's own rows (shapes, scale, tokens per parameter, learning rates) and a "cannot show" only
where those gaps are large; each seed-spread verdict is said once in words, not once per architecture and metric;
and no sentence is fixed text that a run with other settings would contradict (the demo's tokens per parameter).

The rows are built here as :func:`depthbench.sweeps.results.collect_results` returns them (the report renders
whatever rows it is given; tests/sweeps/test_sweep.py and tests/sweeps/test_demo.py run real sweeps).

Run: ``python -m pytest tests/sweeps/test_report_text.py -q``
"""

from __future__ import annotations

import re

import pytest

from depthbench.hub.catalogue import load_published
from depthbench.shapes import get_shape
from depthbench.sweeps import demo
from depthbench.sweeps.report import render_report
from depthbench.sweeps.results import result_metrics

METRICS = ["eval_synthetic", "eval_text"]


def make_rows(shapes: list[str], losses: dict[str, list[float]], *, seeds=(0, 1, 2), tokens=415_744, lr=3e-3,
              spread=0.002) -> list[dict]:
    """Finished runs at ``shapes`` (grid shapes): per architecture one base loss per shape, each seed ``spread``
    apart, the text split 2.5 nats above the synthetic one."""
    rows = []
    for arch, base in losses.items():
        for shape_name, loss in zip(shapes, base):
            shape = get_shape(shape_name)
            params = shape.parameter_counts(arch)["total"]
            for k, seed in enumerate(seeds):
                synthetic = loss + spread * (k - 1)
                rows.append({
                    "arch": arch, "shape": shape_name, "num_layers": shape.num_layers,
                    "hidden_size": shape.hidden_size, "aspect_ratio": round(shape.aspect_ratio, 3),
                    "params_total": params, "lr": lr, "seed": seed, "steps": tokens // 2048, "tokens": tokens,
                    "tokens_per_param": round(tokens / params, 2), "final_train_loss": synthetic + 1.0,
                    "eval_synthetic": synthetic, "eval_text": synthetic + 2.5, "eval_loss": synthetic + 1.25,
                    "best_lr": lr, "at_best_lr": True, "status": "finished", "wall_time_s": 1.0,
                    "tokens_per_s": 1.0, "run_dir": f"runs/{arch}__{shape_name}__s{seed}"})
    return rows


DEMO_SHAPES = ["micro-L2", "micro-L5", "micro-L8"]
WORSE = {"pre_ln": [1.48, 1.58, 1.69], "hc": [1.48, 1.57, 1.66], "attnres": [1.48, 1.60, 1.71]}


def report_of(rows, spec=None) -> str:
    return render_report(rows, result_metrics(rows), None, spec=spec or {"name": "t", "archs": sorted(
        {r["arch"] for r in rows})})


# ================================================================================================ the study beside
def test_the_study_s_400m_result_stands_beside_the_sweep_from_the_published_figures():
    report = report_of(make_rows(DEMO_SHAPES, WORSE))
    assert "## Beside the study" in report and "arXiv 2609.32534, Fig. 2" in report
    table = load_published()["validation_loss"]["grids"]["400m"]
    labels = load_published()["labels"]
    for arch in WORSE:  # the study's L16 and L32 losses and their change, as published
        low, high = table[arch]["16"], table[arch]["32"]
        line = next(line for line in report.splitlines() if line.startswith(f"| {arch} ({labels[arch]}) |"))
        assert f"| {low:.3f} \u2192 {high:.3f} | {high - low:+.3f} |" in line, line
    # the study's shapes from the 400m grid, ours from the rows
    assert f"d/L {get_shape('400m-L16').aspect_ratio:.0f} to {get_shape('400m-L32').aspect_ratio:.0f}" in report
    assert "d/L 20 to 3 here (none of them within the study's range)" in report
    # pre_ln gets worse in the study as here, hc and attnres better in the study, worse here
    assert re.search(r"\| pre_ln \(Pre-LN\) \|.*\| on every metric \|$", report, flags=re.M)
    assert re.search(r"\| hc \(HC\) \|.*\| no \|$", report, flags=re.M)
    assert "**What this sweep cannot show.**" in report and "neither confirm nor refute" in report


def test_the_gaps_are_computed_from_the_rows():
    rows = make_rows(DEMO_SHAPES, WORSE, tokens=40_960, seeds=(0, 1))
    report = report_of(rows)
    tpp = [r["tokens_per_param"] for r in rows]
    assert f"- **Tokens.** {min(tpp):.2g}-{max(tpp):.2g} tokens per parameter here" in report
    params = [r["params_total"] for r in rows]
    assert f"{min(params) / 1e3:.0f}k-{max(params) / 1e3:.0f}k parameters here" in report
    assert "one (0.003) for every run here" in report and "2 seeds' spread" in report


def test_a_sweep_at_the_study_s_shapes_is_not_told_it_cannot_show_anything():
    shapes = ["400m-L16", "400m-L24", "400m-L32"]
    rows = make_rows(shapes, {"pre_ln": [2.76, 2.765, 2.78], "hc": [2.73, 2.70, 2.70]}, tokens=7_969_177_600)
    report = report_of(rows)
    assert "## Beside the study" in report and "3 of 3 within the study's range" in report
    assert "cannot show" not in report and "of its size" not in report


def test_no_study_section_for_architectures_the_study_did_not_publish_at_400m():
    from depthbench.registry import _TABLE

    arch = next(a.id for a in _TABLE if a.id not in load_published()["validation_loss"]["grids"]["400m"])
    report = report_of(make_rows(DEMO_SHAPES, {arch: [1.5, 1.6, 1.7]}))
    assert "## Beside the study" not in report


# ================================================================================================ said once
def test_each_verdict_is_said_once_in_words():
    report = report_of(make_rows(DEMO_SHAPES, WORSE))
    assert len(re.findall("deeper is worse, beyond the seed spread", report, flags=re.I)) == 1
    assert "- Deeper is worse, beyond the seed spread: every architecture, on every metric" in report
    mixed = dict(WORSE, hc=[1.48, 1.48, 1.4805])  # hc's change within its seeds' spread
    text = report_of(make_rows(DEMO_SHAPES, mixed))
    assert len(re.findall("deeper is worse, beyond the seed spread", text, flags=re.I)) == 1
    assert "- Within the seed spread: **hc** on every metric" in text


# ================================================================================================ computed, not fixed
@pytest.mark.parametrize("steps", [20, None])
def test_the_demo_report_s_tokens_per_parameter_are_the_run_s(tmp_path, steps):
    spec = demo.demo_spec(str(tmp_path / "data"), steps=steps).to_dict()
    tokens = spec["base"]["train"]["max_steps"] * 16 * 128
    rows = make_rows(DEMO_SHAPES, WORSE, tokens=tokens)
    report = report_of(rows, spec)
    tpp = [r["tokens_per_param"] for r in rows]
    claims = re.findall(r"([\d.]+) tokens per parameter", report)
    assert claims and all(min(tpp) - 0.05 <= float(c) <= max(tpp) + 0.05 for c in claims), claims


def test_the_train_loss_of_one_run_is_labelled_as_one_batch():
    report = report_of(make_rows(DEMO_SHAPES, WORSE))
    assert "| final_train_loss (last batch) |" in report and "loss of the run's last training batch" in report
