"""``depthbench export-llama``: RoPE scaling carried into the Llama config and checked past the context length,
and the tokenizer of a Hub checkpoint (downloaded from the loopback Hub, tests/hub/hub_server.py).

The reference is transformers' own ``LlamaForCausalLM`` loaded from the exported folder, compared with the source
``pre_ln`` model on sequences longer than ``max_position_embeddings`` (where dynamic NTK and LongRoPE change the
frequencies).

Run: ``python -m pytest tests/hub/test_export_llama.py -q``
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import depthbench
from depthbench.hub import export_llama as ex
from tests.helpers import max_abs_diff, seeded_ids

CONTEXT = 32
SHAPE = dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=CONTEXT)
HEAD_HALF = SHAPE["hidden_size"] // SHAPE["num_attention_heads"] // 2
ROPE = {  # every scaled RoPE variant of transformers' Llama (rope_parameters, transformers 5.x)
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": CONTEXT},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": CONTEXT},
    "longrope": {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": CONTEXT,
                 "short_factor": [1.0] * HEAD_HALF, "long_factor": [1.5] * HEAD_HALF},
}


def _pre_ln(path: Path, seed: int = 0, **fields) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = depthbench.build_model("pre_ln", **SHAPE, **fields).eval()
    with torch.no_grad():  # random norm gains too, so that nothing is trivially 1
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(path)
    return model


@pytest.mark.parametrize("rope_type", list(ROPE))
def test_rope_scaling_is_carried_and_equal_past_the_context_length(rope_type, tmp_path):
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    rope = {**ROPE[rope_type], "rope_theta": 10000.0}
    model = _pre_ln(tmp_path / "src", rope_parameters=dict(rope))
    out = ex.export_llama(str(tmp_path / "src"), str(tmp_path / "llama"))
    config = json.loads((Path(out) / "config.json").read_text())
    assert config["model_type"] == "llama" and config["rope_parameters"]["rope_type"] == rope_type
    assert {k: config["rope_parameters"][k] for k in rope} == rope  # every setting of the variant
    llama = AutoModelForCausalLM.from_pretrained(out).eval()
    assert isinstance(llama, LlamaForCausalLM)
    for length in (12, CONTEXT + 24):  # inside the context, and past it
        ids = seeded_ids(SHAPE["vocab_size"], 1, length, seed=length)
        with torch.no_grad():
            diff = max_abs_diff(llama(ids).logits, model(ids).logits)
        assert diff < 1e-5, (rope_type, length, diff)


def test_the_pre_write_check_runs_past_the_context_length(tmp_path, monkeypatch):
    """A Llama config that drops dynamic NTK scaling matches the source inside the context length and differs
    only past it: the check must see that and refuse to write, saying where it differs."""
    from transformers import LlamaConfig

    _pre_ln(tmp_path / "src", rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    real = ex.llama_config_for

    def dropping_the_scaling(config):
        llama_config = real(config).to_dict()
        llama_config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
        return LlamaConfig(**{k: v for k, v in llama_config.items() if k not in ("model_type", "architectures")})

    monkeypatch.setattr(ex, "llama_config_for", dropping_the_scaling)
    with pytest.raises(ValueError, match=rf"differ .* on {2 * CONTEXT} tokens, past the context length "
                                         rf"\(max_position_embeddings {CONTEXT}"):
        ex.export_llama(str(tmp_path / "src"), str(tmp_path / "llama"))
    assert not (tmp_path / "llama").exists()


def test_a_hub_checkpoint_is_exported_with_its_tokenizer(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from depthbench.data import make_tiny_tokenizer
    from tests.hub.hub_server import HubServer

    model = _pre_ln(tmp_path / "src", seed=3)
    tokenizer = make_tiny_tokenizer(["a small corpus for a tiny tokenizer", "with two lines"], vocab_size=300)
    tokenizer.save_pretrained(tmp_path / "src")
    files = {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir() if p.is_file()}
    repo = "aspect-ratio-scaling/preln-lr3e-3-llama-40K-L2-pretrain"
    with HubServer() as hub:
        hub.add_repo(repo, files)
        out = ex.export_llama(repo, str(tmp_path / "llama"), endpoint=hub.url, cache_dir=str(tmp_path / "cache"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (Path(out) / name).read_bytes() == files[name], name
    exported = AutoTokenizer.from_pretrained(out)
    text = "a tiny corpus"
    assert exported(text)["input_ids"] == tokenizer(text)["input_ids"]
    ids = seeded_ids(SHAPE["vocab_size"], 2, 10, seed=1)
    with torch.no_grad():
        assert max_abs_diff(AutoModelForCausalLM.from_pretrained(out)(ids).logits, model(ids).logits) < 1e-5


def test_a_run_folder_exports_its_final_model(tmp_path):
    """``export-llama RUN`` takes the run folder, as every command does (its ``final/`` export), and refuses a run
    without one in a line that says so."""
    from transformers import AutoModelForCausalLM

    run = tmp_path / "runs" / "pre_ln__tiny-L2__lr0.002__s0"
    model = _pre_ln(run / "final")
    (run / "run_config.json").write_text("{}")
    out = ex.export_llama(str(run), str(tmp_path / "llama"))
    ids = seeded_ids(SHAPE["vocab_size"], 2, 10, seed=1)
    with torch.no_grad():
        assert max_abs_diff(AutoModelForCausalLM.from_pretrained(out)(ids).logits, model(ids).logits) < 1e-5
    running = tmp_path / "runs" / "pre_ln__tiny-L4__lr0.002__s0"
    running.mkdir()
    (running / "run_config.json").write_text("{}")
    with pytest.raises(ValueError, match="training run without a final export yet"):
        ex.export_llama(str(running), str(tmp_path / "llama2"))
    assert not (tmp_path / "llama2").exists()
