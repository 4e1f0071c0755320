"""``depthbench.evaluation.sweep``: a sweep's evaluation rows, ``eval_results.csv``, the plots against aspect ratio
and the ``evaluation`` section of ``report.md``, from hand-written ``eval/results.json`` files (no model, no lm-eval
run; the end-to-end sweep is in ``test_harness.py``).

Run it with ``python -m pytest tests/evaluation/test_sweep.py -q``.
"""

from __future__ import annotations

import json
from pathlib import Path

from depthbench import runs
from depthbench.evaluation.sweep import sweep_eval_rows, write_sweep_eval_report

FAMILIES = ("pointer", "arithmetic")


def _run(sweep: Path, arch: str, layers: int, width: int, acc: float, status: str = "finished",
         evaluated: bool = True) -> Path:
    run = sweep / "runs" / f"{arch}__tiny-L{layers}__lr0.003__s0"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text(json.dumps({"num_hidden_layers": layers, "hidden_size": width}))
    (run / "summary.json").write_text(json.dumps({"arch": arch, "status": status}))
    if evaluated:
        table = {f"depthbench_synthetic_mc_{f}": {"acc,none": acc, "acc_norm,none": acc / 2} for f in FAMILIES}
        table["depthbench_synthetic"] = {"acc,none": acc}
        results = {"results": table, "group_subtasks": {"depthbench_synthetic": list(table)[:-1]}}
        (run / "eval").mkdir()
        (run / "eval" / "results.json").write_text(json.dumps(results))
    return run


def _sweep(tmp_path: Path) -> Path:
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    _run(sweep, "hc", 2, 64, 0.5)
    _run(sweep, "hc", 8, 32, 0.75)
    _run(sweep, "pre_ln", 2, 64, 0.25)
    _run(sweep, "pre_ln", 8, 32, 1.0, status="diverged")  # has results, but did not finish: not a row
    _run(sweep, "mhc", 2, 64, 0.0, evaluated=False)  # finished, not evaluated yet
    return sweep


def test_rows_of_the_finished_evaluated_runs(tmp_path):
    rows = sweep_eval_rows(str(_sweep(tmp_path)))
    assert {r["run"] for r in rows} == {"hc__tiny-L2__lr0.003__s0", "hc__tiny-L8__lr0.003__s0",
                                        "pre_ln__tiny-L2__lr0.003__s0"}
    first = rows[0]
    assert first == {"run": "hc__tiny-L2__lr0.003__s0", "arch": "hc", "L": 2, "d": 64, "aspect_ratio": 32.0,
                     "task": "depthbench_synthetic_mc_arithmetic", "metric": "acc", "value": 0.5}
    assert len(rows) == 3 * (2 * len(FAMILIES) + 1)


def test_files_and_the_evaluation_section(tmp_path):
    sweep = _sweep(tmp_path)
    runs.write_report_section(str(sweep), "results", "# Sweep\n\nthe results section")
    logs = []
    paths = write_sweep_eval_report(str(sweep), log=logs.append)
    assert paths == {"csv": str(sweep / "eval_results.csv"),
                     "synthetic_acc_vs_aspect_ratio.png": str(sweep / "synthetic_acc_vs_aspect_ratio.png"),
                     "report": str(sweep / "report.md")}
    assert (sweep / "synthetic_acc_vs_aspect_ratio.png").stat().st_size > 1000
    assert not (sweep / "domain_nll_vs_aspect_ratio.png").exists()  # no NLL group was run
    csv_lines = (sweep / "eval_results.csv").read_text().splitlines()
    assert csv_lines[0] == "run,arch,L,d,aspect_ratio,task,metric,value" and len(csv_lines) == 1 + 15
    section = (sweep / "sections" / "evaluation.md").read_text()
    assert section.startswith("## Downstream evaluation (`depthbench eval`)\n\n"
                              "![synthetic_acc_vs_aspect_ratio.png](synthetic_acc_vs_aspect_ratio.png)")
    assert "<!--" not in section  # no marker comments: the section is a file of its own
    table = section.split("**depthbench_synthetic** `acc` (higher is better)\n\n", 1)[1].split("\n\n", 1)[0]
    assert table.splitlines() == ["| arch | L2 | L8 |", "|---|---:|---:|", "| hc | 0.5000 | 0.7500 |",
                                  "| pre_ln | 0.2500 |  |"]
    report = (sweep / "report.md").read_text()
    assert section.rstrip() in report and "the results section" in report
    assert logs and "synthetic_acc_vs_aspect_ratio.png" in logs[0]
    write_sweep_eval_report(str(sweep), log=logs.append)  # rebuilt, not appended
    assert (sweep / "sections" / "evaluation.md").read_text() == section
    assert (sweep / "report.md").read_text() == report


def test_no_evaluated_run_removes_the_section(tmp_path):
    sweep = _sweep(tmp_path)
    write_sweep_eval_report(str(sweep), log=lambda *a: None)
    runs.write_report_section(str(sweep), "results", "the results section")
    for results in sweep.glob("runs/*/eval/results.json"):
        results.unlink()
    assert write_sweep_eval_report(str(sweep), log=lambda *a: None) == {"report": str(sweep / "report.md")}
    assert not (sweep / "sections" / "evaluation.md").exists()
    assert (sweep / "report.md").read_text() == "the results section\n"


def test_accuracy_tables_say_chance_and_sampling_error_once_each(tmp_path):
    """acc_norm equal to acc is not a second table; chance (from the questions' options) and one run's sampling
    error at 100 questions are stated; a family below chance at every point is remarked."""
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    for arch, L, d in (("hc", 2, 64), ("hc", 8, 32), ("pre_ln", 2, 64), ("pre_ln", 8, 32)):
        run = _run(sweep, arch, L, d, 0.3, evaluated=False)
        table = {"depthbench_synthetic_mc_pointer": {"acc,none": 0.31, "acc_norm,none": 0.31, "sample_len": 100},
                 "depthbench_synthetic_mc_arithmetic": {"acc,none": 0.12, "acc_norm,none": 0.12, "sample_len": 100}}
        (run / "eval").mkdir()
        (run / "eval" / "results.json").write_text(json.dumps({"results": table}))
    write_sweep_eval_report(str(sweep), log=lambda *a: None)
    section = (sweep / "sections" / "evaluation.md").read_text()
    assert "`acc_norm` (higher is better)" not in section and "`acc_norm` equals `acc` on every run" in section
    rows = [json.loads(line) for line in (Path(__file__).parents[2] / "eval_tasks" / "depthbench_synthetic" /
                                          "data" / "test.jsonl").read_text().splitlines() if line.strip()]
    chance = 1 / len(rows[0]["choices"])
    assert {len(r["choices"]) for r in rows} == {4} and chance == 0.25
    se = (chance * (1 - chance) / 100) ** 0.5  # binomial standard error of one run's accuracy at chance
    assert section.count(f"Chance is {chance:.2f}; with 100 questions per run") == 2
    assert f"\u00b1{se:.3f}" in section and f"{se:.3f}" == "0.043"
    arithmetic = section.split("**depthbench_synthetic_mc_arithmetic** `acc`")[1].split("**depthbench")[0]
    assert "**Below chance at every point** (means 0.120\u20130.120)" in arithmetic
    assert "4 of 4 points are more than two sampling errors below chance" in arithmetic
    assert "Below chance" not in section.split("**depthbench_synthetic_mc_pointer** `acc`")[1]
