"""The study's released checkpoints convert exactly, for every block type the study trains.

Each case is a fixture release in the exact layout of the study's OLMo-core fork (its parameter names and
``config.json`` keys, weights off their init, saved with ``torch.distributed.checkpoint`` with optimizer state, plus
a ``tokenizer/``: ``tests/hub/fork_reference.py``), converted by ``depthbench convert`` (the command line, from the
local ``stepN/`` folder) and by ``depthbench.from_released`` (through the loopback Hub), and its logits compared with
an independent forward of the fork's semantics in plain torch (``fork_reference.Fork``, which imports nothing of
depthbench): maximum relative difference (max |a - b| / max |b|) at most 1e-5 in fp32. The cases cover both HC /
native-mHC readouts, the Liger backend's Sinkhorn, AttnRes's eps placement, DeepNorm's LayerNorm blocks with an
RMSNorm head, and depth-muP / CompleteP on both axes (the depth-width axis's logit multiplier). Each case also
checks what every conversion carries: the release name, EOS/PAD ids in ``config.json`` and
``generation_config.json``, the context length and the dtype.

Run: ``python -m pytest tests/hub/test_released_exact.py -q`` (``-s`` prints the measured differences).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.hub.fork_reference import (
    fork_config,
    fork_logits,
    fork_state,
    keeps_fp32,
    release_files,
    write_release,
)
from tests.hub.hub_server import HubServer

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

VOCAB = 192
IDS = torch.tensor([[5, 17, 3, 99, 42, 7, 150, 8, 64, 2, 33, 120], [1, 9, 188, 4, 4, 77, 31, 6, 140, 12, 90, 11]])
HC = {"kind": "hc", "num_residual_streams": 4, "collapse": "auto", "_CLASS_":
      "olmo_core.nn.transformer.config.HyperConnectionsConfig"}
MHC = {**HC, "kind": "mhc", "tanh": None, "sinkhorn_iters": 20, "sinkhorn_tau": 1.0}
LIGER = {**MHC, "kind": "liger_mhc", "liger_rms_eps": 1e-6, "liger_pre_eps": 0.0, "liger_post_mult": 2.0}
MODA = {"backend": "v17", "cache_post_norm_k": True, "extra_ffn_kv_proj": True, "extra_attn_kv_proj": False,
        "depth_bs": 64, "depth_warps": 4, "attention_scale": None}


def _width(base: int) -> dict:
    """The depth-width axis as ``examples/pretrain_preln_mup.py`` records it: hidden init std x (d / base)^(-1/2),
    embedding init std = the base std."""
    return {"init_std": 0.02 * (32 / base) ** -0.5, "embedding_init_std": 0.02}


# id: (block name, block settings, model settings, arch, reference keywords, convert keywords)
CASES = {
    "pre_ln": ("default", {}, {}, "pre_ln", {}, {}),
    "pre_ln_gqa": ("default", {"sequence_mixer": {"n_kv_heads": 2}}, {}, "pre_ln", {}, {}),
    "post_ln": ("post_norm", {}, {}, "post_ln", {}, {}),
    "peri_ln": ("peri_norm", {}, {}, "peri_ln", {}, {}),
    "lns": ("default_scaled", {}, {}, "lns", {}, {}),
    "deepnorm": ("deepnorm", {"layer_norm": {"name": "default"}}, {"init_method": "deepnorm"}, "deepnorm", {}, {}),
    "keel": ("keel", {}, {}, "keel", {}, {}),
    "depth_mup": ("depth_mup", {"residual_scaling_base_depth": 2}, {}, "depth_mup", {}, {}),
    "completep": ("completep", {"residual_scaling_base_depth": 2}, {}, "completep", {}, {}),
    "depth_mup_width": ("depth_mup", {"residual_scaling_base_depth": 2}, _width(64), "depth_mup",
                        {"base_width": 64}, {}),
    "completep_width": ("completep", {"residual_scaling_base_depth": 6}, _width(16), "completep",
                        {"base_width": 16}, {}),
    "hc_sum": ("hc", {"hyper_connections": HC}, {}, "hc", {"readout": "sum"}, {"readout": "sum"}),
    "hc_sum_norm": ("hc", {"hyper_connections": HC}, {}, "hc", {"readout": "sum_norm"}, {"readout": "sum_norm"}),
    "mhc_sum": ("mhc", {"hyper_connections": MHC}, {}, "mhc", {"readout": "sum"}, {"readout": "sum"}),
    "mhc_sum_norm": ("mhc", {"hyper_connections": MHC}, {}, "mhc", {"readout": "sum_norm"},
                     {"readout": "sum_norm"}),
    "mhc_liger": ("mhc", {"hyper_connections": LIGER}, {}, "mhc", {}, {}),
    "attnres": ("attnres", {"attnres_block_size": 1}, {}, "attnres", {}, {}),
    "block_attnres": ("attnres", {"attnres_block_size": 2}, {}, "block_attnres", {}, {}),
    "moda": ("moda", {"moda": MODA, "moda_skip_ffn_kv": False}, {"last_block_skip": True}, "moda", {}, {}),
    "post_norm_moda": ("post_norm_moda", {"moda": MODA}, {}, "moda", {}, {}),
}
#: The conversion each fix replaced, as config overrides of the converted model: each must miss the fork by far more
#: than the tolerance, so the fixtures exercise what they test.
WRONG = {
    "deepnorm": {"deepnorm_final_norm_type": None},  # one norm type for every norm
    "depth_mup_width": {"depth_scaling_axis": "depth-only"}, "completep_width": {"depth_scaling_axis": "depth-only"},
    "hc_sum": {"hc_readout": "sum_norm"}, "hc_sum_norm": {"hc_readout": "sum"},
    "mhc_sum": {"mhc_readout": "sum_norm"}, "mhc_sum_norm": {"mhc_readout": "sum"},
    "mhc_liger": {"mhc_sinkhorn_ends_on": "rows"},
    "attnres": {"attnres_mix_eps": None, "rms_norm_eps": 1e-5},  # one eps (1e-5) for every norm
    "block_attnres": {"attnres_mix_eps": None, "rms_norm_eps": 1e-5},
}
MEASURED: dict[str, dict[str, float]] = {}


def case_release(case: str, root: Path, tokenizer, dtype: torch.dtype | None = None, step: int = 400):
    """``(step folder, state, model config, reference keywords, convert keywords)`` of a fixture release."""
    block_name, block, model, arch, ref_kwargs, conv_kwargs = CASES[case]
    model = dict(model)
    skip_last = model.pop("last_block_skip", False)
    config = fork_config(block_name, VOCAB, block=block, model=model)
    if skip_last:  # examples/moda_common.py: the last block overridden with moda_skip_ffn_kv=True
        last = {**config["model"]["block"], "moda_skip_ffn_kv": True}
        config["model"]["block_overrides"] = {str(config["model"]["n_layers"] - 1): last}
    state = fork_state(config["model"], seed=sum(map(ord, case)))
    name = f"{case.replace('_', '-')}-lr2e-3-llama-1M-L3-pretrain"
    step_dir = write_release(root, name, step, state, config, tokenizer, dtype=dtype)
    return step_dir, state, config["model"], ref_kwargs, conv_kwargs


def relative_difference(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected.double()).abs().max() / expected.double().abs().max())


def converted_logits(folder, **overrides) -> tuple[torch.Tensor, object]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, **overrides).eval()
    with torch.no_grad():
        return model(IDS).logits.float(), model


@pytest.fixture(scope="module")
def tokenizer():
    from depthbench.hub.readout import sample_text
    from tests.helpers import make_tokenizer

    return make_tokenizer(texts=[sample_text()], vocab_size=160)


@pytest.mark.parametrize("case", list(CASES))
def test_cli_conversion_of_a_local_step_folder_equals_the_fork(case, tmp_path, tokenizer, capsys):
    from depthbench.cli import main

    step_dir, state, model_cfg, ref_kwargs, conv_kwargs = case_release(case, tmp_path, tokenizer)
    expected = fork_logits(state, model_cfg, IDS, **ref_kwargs)
    args = [f"--{k}={v}" for k, v in conv_kwargs.items()]
    assert main(["convert", str(step_dir), "-o", str(tmp_path / "hf"), *args]) == 0
    assert "converted" in capsys.readouterr().out
    actual, model = converted_logits(tmp_path / "hf")
    diff = relative_difference(actual, expected)
    with torch.no_grad():  # beyond fp32 rounding: both in float64 (the converted weights are the fixture's)
        diff64 = relative_difference(model.double()(IDS).logits,
                                     fork_logits(state, model_cfg, IDS, dtype=torch.float64, **ref_kwargs))
    MEASURED.setdefault(case, {}).update(cli=diff, float64=diff64)
    with capsys.disabled():
        print(f"\n{case}: max relative difference {diff:.2e} (fp32), {diff64:.2e} (fp64)")
    assert model.config.model_type == f"depthbench_{CASES[case][3]}"
    assert diff <= 1e-5 and diff64 <= 1e-6, (diff, diff64)
    if case in WRONG:
        assert relative_difference(converted_logits(tmp_path / "hf", **WRONG[case])[0], expected) > 1e-4
    record = json.loads((tmp_path / "hf" / "depthbench_conversion.json").read_text())
    assert record["source_repo"] == step_dir.parent.name and record["step"] == 400  # the name from the folder above
    assert (tmp_path / "hf" / "tokenizer_config.json").exists()  # the sibling tokenizer/ came along
    assert (model.config.eos_token_id, model.config.pad_token_id) == (0, 1) and record["dtype"] == "float32"
    assert model.generation_config.eos_token_id == 0 and model.generation_config.pad_token_id == 1
    assert model.config.max_position_embeddings == 96


def test_from_released_through_the_loopback_hub_equals_the_fork(tmp_path, tokenizer, monkeypatch):
    """Every case, downloaded from a loopback Hub by name and converted into the cache by ``from_released``."""
    import depthbench

    monkeypatch.setenv("HF_TOKEN", "hf_read_token")
    with HubServer() as hub:
        for case in CASES:
            step_dir, state, model_cfg, ref_kwargs, conv_kwargs = case_release(case, tmp_path / case, tokenizer)
            repo = f"aspect-ratio-scaling/{step_dir.parent.name}"
            hub.add_repo(repo, release_files(step_dir.parent))
            model = depthbench.from_released(repo, step=400, cache_dir=str(tmp_path / "cache"), endpoint=hub.url,
                                             hub_cache_dir=str(tmp_path / "hub-cache"), **conv_kwargs)
            with torch.no_grad():
                diff = relative_difference(model(IDS).logits.float(), fork_logits(state, model_cfg, IDS, **ref_kwargs))
            MEASURED.setdefault(case, {})["from_released"] = diff
            assert diff <= 1e-5, (case, diff)
            assert model.config.eos_token_id == 0 and model.config.max_position_embeddings == 96
    print("\nmax relative difference against the fork reference:")
    for case, diffs in MEASURED.items():
        print(f"  {case:18s} " + "  ".join(f"{k} {v:.2e}" for k, v in diffs.items()))


@pytest.mark.parametrize("case", ["pre_ln", "hc_sum", "moda"])
def test_generate_stops_at_the_release_eos(case, tmp_path, tokenizer):
    """The EOS id of ``dataset.tokenizer`` reaches ``generation_config.json``: greedy decoding stops when the model
    emits it. The fixture's EOS is set to the token the fork's model predicts after the prompt."""
    probe, state, model_cfg, ref_kwargs, conv_kwargs = case_release(case, tmp_path / "probe", tokenizer)
    prompt = IDS[:1, :6]
    eos = int(fork_logits(state, model_cfg, prompt, **ref_kwargs)[0, -1].argmax())
    config = json.loads((probe / "config.json").read_text())
    config["dataset"]["tokenizer"]["eos_token_id"] = eos
    step = write_release(tmp_path, "release", 7, state, config, tokenizer)
    from depthbench.hub import convert as conv

    out = conv.convert(str(step), str(tmp_path / "hf"), **conv_kwargs)
    generation = json.loads((Path(out) / "generation_config.json").read_text())
    assert generation["eos_token_id"] == eos and generation["pad_token_id"] == 1
    _, model = converted_logits(out)
    generated = model.generate(prompt, max_new_tokens=8, do_sample=False)
    assert generated.shape[1] == prompt.shape[1] + 1 and int(generated[0, -1]) == eos


def test_the_checkpoint_dtype_is_kept_unless_dtype_says_otherwise(tmp_path, tokenizer):
    """A bf16 release converts to bf16 (the study's runs store bf16 parameters); ``--dtype float32`` converts to
    float32. A Liger mHC release stores its gains and bias in fp32: bf16 rounds them, which the card says."""
    from safetensors import safe_open

    from depthbench.cli import main

    step, state, model_cfg, _, _ = case_release("mhc_liger", tmp_path, tokenizer, dtype=torch.bfloat16)
    assert main(["convert", str(step), "-o", str(tmp_path / "bf16")]) == 0
    assert main(["convert", str(step), "-o", str(tmp_path / "fp32"), "--dtype", "float32"]) == 0
    for folder, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        config = json.loads((tmp_path / folder / "config.json").read_text())
        assert config["dtype"] == str(dtype).replace("torch.", "")
        with safe_open(str(tmp_path / folder / "model.safetensors"), "pt") as f:
            assert f.get_tensor("model.embed_tokens.weight").dtype == dtype
    card = (tmp_path / "bf16" / "README.md").read_text()
    assert "stored rounded to bfloat16; --dtype float32 keeps them exactly" in card
    assert "rounded" not in (tmp_path / "fp32" / "README.md").read_text()
    bf16_state = {k: v.to(torch.bfloat16) if v.dtype == torch.float32 and not keeps_fp32(k) else v
                  for k, v in state.items()}
    actual, _ = converted_logits(tmp_path / "fp32")
    assert relative_difference(actual, fork_logits(bf16_state, model_cfg, IDS)) <= 1e-5  # exact from bf16 weights
