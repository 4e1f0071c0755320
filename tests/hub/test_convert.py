"""``depthbench convert`` / ``depthbench.from_released`` / ``depthbench export-llama``.

* Oracle (upstream OLMo-core, ``pip install --no-deps ai2-olmo-core`` + its import-time deps, see setup.py's
  ``oracle`` note): Pre-LN, LNS and Peri-LN models built by OLMo-core on CPU, saved as the study saves them
  (experiment ``config.json`` + ``model_and_optim/`` distributed checkpoint with optimizer state), converted, logits
  equal within 1e-5 (fp32). Skipped when olmo_core is not importable.
* Key-mapping round trips for the architectures upstream lacks (depthbench -> OLMo-core names -> convert).
* The shared functions name no architecture (each architecture's translator: test_translators.py).
* Refusals name the setting; the loopback Hub serves a release laid out like the study's (``stepN/``,
  ``tokenizer/``) for the download path, end to end offline.

Run: ``python -m pytest tests/hub/test_convert.py -q``
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from depthbench.hub import convert as conv
from depthbench.registry import build_model
from tests.hub.hub_server import HubServer

# DCP in one process warns that it assumes a single process: that is the intent here.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

SHAPE = {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 64,
         "vocab_size": 64, "rms_norm_eps": 1e-6}
IDS = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])


def logits_of(model) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(IDS).logits


def randomize(model, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def save_dcp(folder: Path, state: dict, model_config: dict, optim_state: dict | None = None) -> Path:
    """A step folder as the study writes it: config.json + model_and_optim/ (model and optimizer tensors)."""
    import torch.distributed.checkpoint as dcp

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"run_name": "test", "model": model_config,
                                                    "train_module": {"optim": {"lr": 2e-3}}}))
    payload = {"model": {k: v.contiguous() for k, v in state.items()}}
    payload["optim"] = optim_state or {f"state.{k}.exp_avg": torch.zeros_like(v) for k, v in state.items()}
    dcp.save(payload, storage_writer=dcp.FileSystemWriter(str(folder / "model_and_optim")), no_dist=True)
    return folder


def olmo_block_config(block_name: str, **block) -> dict:
    return {"d_model": 32, "vocab_size": 64, "n_layers": 3,
            "block": {"name": block_name, "sequence_mixer": {"n_heads": 4, "bias": False, "rope": {"theta": 10000}},
                      "layer_norm": {"name": "rms", "eps": 1e-6, "bias": False},
                      "feed_forward": {"hidden_size": 64, "bias": False}, **block},
            "lm_head": {"layer_norm": {"name": "rms", "eps": 1e-6, "bias": False}}}


# ================================================================================================ oracle
@pytest.mark.parametrize("block_name,arch", [("default", "pre_ln"), ("default_scaled", "lns"),
                                             ("peri_norm", "peri_ln")])
def test_upstream_olmo_core_checkpoints_convert_exactly(block_name, arch, tmp_path):
    olmo = pytest.importorskip("olmo_core.nn.transformer", reason="upstream OLMo-core (ai2-olmo-core) not installed")
    from olmo_core.distributed.checkpoint import save_model_and_optim_state
    from olmo_core.nn.feed_forward import FeedForwardConfig

    torch.manual_seed(0)
    cfg = olmo.TransformerConfig.llama_like(
        d_model=32, vocab_size=64, n_layers=3, n_heads=4, layer_norm_eps=1e-6, rope_theta=10000,
        block_name=olmo.TransformerBlockType(block_name), feed_forward=FeedForwardConfig(hidden_size=64, bias=False))
    model = cfg.build(init_device="cpu")
    model.init_weights(device=torch.device("cpu"))
    randomize(model)  # norms away from 1, so a misplaced norm shows
    for i, block in enumerate(model.blocks.values()):
        if hasattr(block, "ln_scale"):  # upstream's init leaves this buffer uninitialised (it is not recomputed)
            block.ln_scale.fill_(1.0 / (i + 1) ** 0.5)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(IDS).sum().backward()
    optim.step()
    step = tmp_path / "step10"
    step.mkdir()
    (step / "config.json").write_text(json.dumps({"model": cfg.as_config_dict(), "trainer": {}}))
    save_model_and_optim_state(str(step / "model_and_optim"), model, optim)
    with torch.no_grad():
        expected = model(IDS)
    out = conv.convert(str(step), str(tmp_path / "hf"))
    from transformers import AutoModelForCausalLM

    converted = AutoModelForCausalLM.from_pretrained(out)
    assert converted.config.model_type == f"depthbench_{arch}"
    diff = (logits_of(converted) - expected).abs().max()
    assert diff <= 1e-5, diff
    record = json.loads((Path(out) / "depthbench_conversion.json").read_text())
    assert record["arch"] == arch and record["block_name"] == block_name


# ================================================================================================ key-mapping table
ROUND_TRIP = [
    ("deepnorm", "deepnorm", {"layer_norm": {"name": "default", "eps": 1e-6}}, {"norm_type": "layernorm"}),
    ("keel", "keel", {}, {}),
    ("hc", "hc", {"hyper_connections": {"kind": "hc", "num_residual_streams": 4}}, {"hc_readout": "sum_norm",
                                                                                    "hc_norm_eps": 1e-8}),
    ("mhc", "mhc", {"hyper_connections": {"kind": "mhc", "num_residual_streams": 4, "tanh": False}},
     {"mhc_readout": "sum_norm", "mhc_norm_eps": 1e-8}),
    ("attnres", "block_attnres", {"attnres_block_size": 2}, {"attnres_block_size": 2, "attnres_mix_eps": 1e-5}),
    ("moda", "moda", {}, {}),
    ("default", "pre_ln", {}, {}),
]


@pytest.mark.parametrize("block_name,arch,block,fields", ROUND_TRIP, ids=[r[1] for r in ROUND_TRIP])
def test_key_mapping_round_trip(block_name, arch, block, fields, tmp_path):
    shape = dict(SHAPE)
    model = randomize(build_model(arch, **shape, **fields), seed=1)
    olmo_state = conv.to_olmo_state(arch, model.state_dict(), shape["num_hidden_layers"])
    assert not any(k.startswith("model.") for k in olmo_state)
    cfg = olmo_block_config(block_name, **block)
    if "layer_norm" in block:
        cfg["lm_head"]["layer_norm"] = block["layer_norm"]
    step = save_dcp(tmp_path / "step5", olmo_state, cfg)
    readout = {"readout": fields.get("hc_readout", fields.get("mhc_readout"))} if block_name in ("hc", "mhc") else {}
    out = conv.convert(str(step), str(tmp_path / "hf"), **readout)
    from transformers import AutoModelForCausalLM

    converted = AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(logits_of(converted), logits_of(model))


@pytest.mark.parametrize("block,setting", [
    ({"sequence_mixer": {"n_heads": 4, "qk_norm": {"name": "rms"}}}, "QK-norm"),
    ({"hyper_connections": {"kind": "mhc_static"}}, "mhc_static"),
    ({"attnres_block_size": 1, "attnres_topk_fraction": 0.25}, "attnres_topk_fraction"),
    ({"feed_forward": {"hidden_size": 64, "activation": "gelu"}}, "activation"),
])
def test_unrepresentable_settings_are_refused_by_name(block, setting, tmp_path):
    model = build_model("pre_ln", **SHAPE)
    state = conv.to_olmo_state("pre_ln", model.state_dict(), SHAPE["num_hidden_layers"])
    step = save_dcp(tmp_path / "step0", state, olmo_block_config("default", **block))
    with pytest.raises(conv.ConversionError, match=setting):
        conv.convert(str(step), str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists() or not any((tmp_path / "hf").iterdir())


def test_unknown_tensors_are_never_dropped(tmp_path):
    model = build_model("pre_ln", **SHAPE)
    state = conv.to_olmo_state("pre_ln", model.state_dict(), SHAPE["num_hidden_layers"])
    state["blocks.0.mystery_gate.weight"] = torch.ones(3)
    step = save_dcp(tmp_path / "step0", state, olmo_block_config("default"))
    with pytest.raises(conv.ConversionError, match="mystery_gate"):
        conv.convert(str(step), str(tmp_path / "hf"))


def test_plain_state_dict_with_repo_name_fallback(tmp_path):
    model = randomize(build_model("peri_ln", **SHAPE), seed=3)
    state = conv.to_olmo_state("peri_ln", model.state_dict(), SHAPE["num_hidden_layers"])
    torch.save({"model": state}, tmp_path / "model.pt")
    out = conv.convert(str(tmp_path / "model.pt"), str(tmp_path / "hf"),
                       repo_name="aspect-ratio-scaling/periln-lr2e-3-llama-400M-L3-pretrain", arch=None,
                       config_path=None)
    from transformers import AutoModelForCausalLM

    # no config: heads fall back to the study's 16, so the tiny model's 4 heads must come from --config instead
    converted = AutoModelForCausalLM.from_pretrained(out)
    assert converted.config.model_type == "depthbench_peri_ln" and converted.config.num_attention_heads == 16


# ================================================================================================ shared code
def test_shared_conversion_code_names_no_architecture():
    """The shared functions dispatch through the translators: no registry id appears in them as a string."""
    import ast
    import inspect

    from depthbench.hub import readout, release_files, settings
    from depthbench.registry import ARCHITECTURES

    shared = [conv.map_state, conv.to_olmo_state, conv.convert, conv.build_converted, conv.from_released,
              readout.decide_readout, release_files.locate_local, release_files.load_dcp_model_state]
    shared += [getattr(settings, name) for name in ("identify_architecture", "backbone_fields", "backbone_problems",
                                                    "norm_fields", "resolve_settings", "release_fields")]
    for fn in shared:
        tree = ast.parse(inspect.getsource(fn))
        named = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in ARCHITECTURES}
        assert not named, f"{fn.__name__} names {sorted(named)}: move that to its translator"


# ================================================================================================ Hub download
def test_release_download_converts_from_the_loopback_hub(tmp_path, monkeypatch):
    model = randomize(build_model("hc", **SHAPE, hc_readout="sum_norm", hc_norm_eps=1e-8), seed=4)
    olmo_state = conv.to_olmo_state("hc", model.state_dict(), SHAPE["num_hidden_layers"])
    cfg = olmo_block_config("hc", hyper_connections={"kind": "hc", "num_residual_streams": 4})
    release = tmp_path / "release"
    save_dcp(release / "step100", olmo_state, cfg)
    save_dcp(release / "step0", {k: torch.zeros_like(v) for k, v in olmo_state.items()}, cfg)
    (release / "tokenizer").mkdir()
    (release / "tokenizer" / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 2048}))
    files = {str(p.relative_to(release)): p.read_bytes() for p in release.rglob("*") if p.is_file()}
    repo = "aspect-ratio-scaling/hc-lr2e-3-llama-400M-L3-pretrain"
    import depthbench

    with HubServer() as hub:
        hub.add_repo(repo, files)
        monkeypatch.setenv("HF_TOKEN", "hf_read_token")
        kwargs = dict(cache_dir=str(tmp_path / "cache"), endpoint=hub.url, hub_cache_dir=str(tmp_path / "hub-cache"),
                      readout="sum_norm")
        loaded = depthbench.from_released(repo, step=100, **kwargs)
        downloaded = {p for m, p in hub.requests if m == "GET" and "/resolve/" in p}
        again = depthbench.from_released(repo, step=100, **kwargs)  # converted once: no second download
        assert {p for m, p in hub.requests if m == "GET" and "/resolve/" in p} == downloaded
    assert torch.equal(logits_of(loaded), logits_of(model)) and torch.equal(logits_of(again), logits_of(model))
    assert downloaded and not any("step0/" in p for p in downloaded)  # only the requested step was fetched
    converted = next((tmp_path / "cache").glob("*/step100-readout-sum_norm"))
    assert (converted / "tokenizer_config.json").exists() and (converted / "README.md").exists()
    assert repo in (converted / "README.md").read_text()


def test_a_root_stored_final_checkpoint_converts_from_the_hub_and_locally(tmp_path, monkeypatch):
    """Some releases hold one final checkpoint at the repository root (config.json + model_and_optim/): from the
    loopback Hub (from_released, convert) and from a local copy, equal to the model it was written from."""
    model = randomize(build_model("pre_ln", **SHAPE), seed=5)
    olmo_state = conv.to_olmo_state("pre_ln", model.state_dict(), SHAPE["num_hidden_layers"])
    release = tmp_path / "preln-lr2e-3-llama-400M-L3-pretrain"
    save_dcp(release, olmo_state, olmo_block_config("default"))
    config = json.loads((release / "config.json").read_text())
    config["trainer"] = {"max_duration": {"value": 7600, "unit": "steps"}}
    (release / "config.json").write_text(json.dumps(config))
    (release / "tokenizer").mkdir()
    (release / "tokenizer" / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 2048}))
    files = {str(p.relative_to(release)): p.read_bytes() for p in release.rglob("*") if p.is_file()}
    repo = f"aspect-ratio-scaling/{release.name}"
    import depthbench

    with HubServer() as hub:
        hub.add_repo(repo, files)
        monkeypatch.setenv("HF_TOKEN", "hf_read_token")
        kwargs = dict(endpoint=hub.url, hub_cache_dir=str(tmp_path / "hub-cache"))
        loaded = depthbench.from_released(repo, cache_dir=str(tmp_path / "cache"), **kwargs)
        with pytest.raises(conv.ConversionError, match="one final checkpoint at its root .*step 7600.*not step 3000"):
            conv.convert(repo, str(tmp_path / "bad"), step=3000, **kwargs)
        assert not (tmp_path / "bad").exists()
    assert torch.equal(logits_of(loaded), logits_of(model))
    record = json.loads(next((tmp_path / "cache").glob("*/step7600")).joinpath(conv.CONVERSION_RECORD).read_text())
    assert (record["source_repo"], record["step"]) == (repo, 7600)
    local = conv.convert(str(release), str(tmp_path / "local"))
    record = json.loads((tmp_path / "local" / conv.CONVERSION_RECORD).read_text())
    assert (record["source_repo"], record["step"]) == (release.name, 7600)
    assert (tmp_path / "local" / "tokenizer_config.json").exists()  # the release's tokenizer/, found at the root
    from transformers import AutoModelForCausalLM

    assert torch.equal(logits_of(AutoModelForCausalLM.from_pretrained(local)), logits_of(model))


# ================================================================================================ export-llama
def test_export_llama_equals_pre_ln_and_refuses_other_architectures(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM

    from depthbench.hub.export_llama import export_llama

    model = randomize(build_model("pre_ln", **SHAPE, num_key_value_heads=2), seed=5)
    model.save_pretrained(tmp_path / "preln")
    out = export_llama(str(tmp_path / "preln"), str(tmp_path / "llama"))
    assert AutoConfig.from_pretrained(out).model_type == "llama"
    assert not list(Path(out).glob("*.py"))  # no remote code
    llama = AutoModelForCausalLM.from_pretrained(out)
    assert isinstance(llama, LlamaForCausalLM)
    assert torch.allclose(logits_of(llama), logits_of(model), atol=1e-6, rtol=0)
    build_model("hc", **SHAPE).save_pretrained(tmp_path / "hc")
    with pytest.raises(ValueError, match="only exports pre_ln.*hc"):
        export_llama(str(tmp_path / "hc"), str(tmp_path / "hc-llama"))
    assert not (tmp_path / "hc-llama").exists()


def test_cli_commands_are_registered(capsys):
    from depthbench.cli import main

    for command in ("convert", "export-llama", "publish"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0 and command in capsys.readouterr().out
    assert main(["export-llama", "/nonexistent/dir", "-o", "/tmp/x-never-written"]) != 0


def test_converted_model_is_republished_as_name_hf(tmp_path):
    import io

    from huggingface_hub import HfApi

    from depthbench.hub.publish import publish

    model = randomize(build_model("keel", **SHAPE), seed=6)
    state = conv.to_olmo_state("keel", model.state_dict(), SHAPE["num_hidden_layers"])
    step = save_dcp(tmp_path / "step7600", state, olmo_block_config("keel"))
    out = conv.convert(str(step), str(tmp_path / "hf"),
                       repo_name="aspect-ratio-scaling/keel-lr2e-3-llama-400M-L3-pretrain")
    with HubServer() as hub:
        api = HfApi(endpoint=hub.url, token="hf_write_token")
        result = publish(out, api=api, out=io.StringIO())
        (repo,) = result["repos"]
        assert repo == "tester/keel-lr2e-3-llama-400M-L3-pretrain-hf"  # the token's user: the default namespace
        files = hub.files(repo)
    assert b"keel-lr2e-3-llama-400M-L3-pretrain" in files["README.md"] and "model.safetensors" in files
    assert json.loads(files["depthbench_conversion.json"])["arch"] == "keel"


def test_cli_convert_end_to_end(tmp_path, capsys):
    from depthbench.cli import main

    model = randomize(build_model("pre_ln", **SHAPE), seed=7)
    state = conv.to_olmo_state("pre_ln", model.state_dict(), SHAPE["num_hidden_layers"])
    step = save_dcp(tmp_path / "step3000", state, olmo_block_config("default"))
    assert main(["convert", str(step), "-o", str(tmp_path / "out")]) == 0
    assert "as pre_ln" in capsys.readouterr().out
    assert main(["convert", str(step), "-o", str(tmp_path / "out")]) == 2  # non-empty output folder: refused
    assert "--overwrite" in capsys.readouterr().err


# ================================================================================================ refusals by name
def _fork_release(tmp_path, block_name: str, block: dict | None = None, model: dict | None = None,
                  name: str = "release"):
    from tests.hub.fork_reference import fork_config, fork_state, write_release

    config = fork_config(block_name, 64, block=block, model=model)
    return write_release(tmp_path, name, 3, fork_state(config["model"]), config)


def test_depth_width_init_that_no_base_width_explains_is_refused_by_name(tmp_path):
    step = _fork_release(tmp_path, "depth_mup", {"residual_scaling_base_depth": 2},
                         {"init_std": 0.023, "embedding_init_std": 0.02})
    with pytest.raises(conv.ConversionError, match=r"model\.init_std=0\.023 with model\.embedding_init_std=0\.02 "
                                                   r"\(the depth-width axis would need a base width of 42\.32, not"):
        conv.convert(str(step), str(tmp_path / "hf"))
    step = _fork_release(tmp_path / "b", "completep")
    with pytest.raises(conv.ConversionError, match="residual_scaling_base_depth is missing"):
        conv.convert(str(step), str(tmp_path / "hf"))


def test_block_overrides_other_than_moda_s_last_block_are_refused(tmp_path):
    from tests.hub.fork_reference import fork_config

    block = fork_config("default", 64)["model"]["block"]
    step = _fork_release(tmp_path, "default", model={"block_overrides": {"1": {**block, "name": "peri_norm"}}})
    with pytest.raises(conv.ConversionError, match=r"model\.block_overrides \(per-block settings\)"):
        conv.convert(str(step), str(tmp_path / "hf"))
    moda = fork_config("moda", 64)["model"]["block"]
    step = _fork_release(tmp_path / "b", "moda", model={"block_overrides": {"0": {**moda, "moda_skip_ffn_kv": True}}})
    with pytest.raises(conv.ConversionError, match=r"block_overrides\[0\] \(only the last block's moda_skip_ffn_kv"):
        conv.convert(str(step), str(tmp_path / "hf"))


def test_a_block_attnres_release_without_its_block_size_names_options_that_exist(tmp_path):
    from tests.hub.fork_reference import fork_config, fork_state

    state = fork_state(fork_config("attnres", 64, block={"attnres_block_size": 2})["model"])
    torch.save({"model": state}, tmp_path / "model.pt")  # no config.json: the name says Block AttnRes
    with pytest.raises(conv.ConversionError) as exc:
        conv.convert(str(tmp_path / "model.pt"), str(tmp_path / "hf"),
                     repo_name="aspect-ratio-scaling/block-attnres-lr2e-3-llama-400M-L3-pretrain")
    assert "model.block.attnres_block_size" in str(exc.value) and "--config" in str(exc.value)
    assert "--set" not in str(exc.value)


def test_every_option_an_error_message_names_exists():
    """The messages of the conversion modules name only options ``depthbench convert`` has."""
    import argparse
    import re

    from depthbench.hub import readout, release_files, settings, translators
    from depthbench.hub.command import register_cli

    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    convert_parser = parser._subparsers._group_actions[0].choices["convert"]
    options = {s for action in convert_parser._actions for s in action.option_strings}
    import inspect

    named = set()
    for module in (conv, readout, release_files, settings, translators):
        named |= set(re.findall(r"(--[a-z][a-z-]*)", inspect.getsource(module)))
    assert named and named <= options, sorted(named - options)
