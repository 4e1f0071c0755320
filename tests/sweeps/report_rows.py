"""Sweep rows built by hand as :func:`depthbench.sweeps.results.collect_results` returns them, for the tests of a
sweep's ``report.md`` (the report renders whatever rows it is given; tests/sweeps/test_sweep.py and
tests/sweeps/test_demo.py run real sweeps)."""

from __future__ import annotations

from depthbench.shapes import get_shape
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
