"""Reading a release safely (``depthbench.hub.release_files``): a crafted ``.metadata`` runs nothing, a missing or
truncated shard is named, nothing half-written stays in the output folder or the conversion cache, and where a
local release's name, step and tokenizer come from.

Run: ``python -m pytest tests/hub/test_release_files.py -q``
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from depthbench.hub import convert as conv
from depthbench.hub.release_files import read_dcp_metadata
from tests.hub.fork_reference import fork_config, fork_state, release_files, write_release
from tests.hub.hub_server import HubServer

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
VOCAB = 128
NAME = "preln-lr2e-3-llama-1M-L3-pretrain"


class _RunsACommand:
    """Unpickling this calls ``os.system`` (what a crafted checkpoint would do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _release(tmp_path: Path, step: int = 10) -> Path:
    config = fork_config("default", VOCAB)
    return write_release(tmp_path, NAME, step, fork_state(config["model"]), config)


def _model_shard(step_dir: Path) -> tuple[Path, int]:
    """The ``.distcp`` file holding the embedding (a model tensor), and a length that cuts the embedding."""
    metadata = read_dcp_metadata(str(step_dir / "model_and_optim"))
    (info,) = [v for k, v in metadata.storage_data.items() if k.fqn == "model.embeddings.weight"]
    return step_dir / "model_and_optim" / info.relative_path, info.offset + info.length // 2


def test_the_unpickler_reads_real_metadata_of_torch_and_olmo_core_writers(tmp_path):
    step = _release(tmp_path)
    metadata = read_dcp_metadata(str(step / "model_and_optim" / ".metadata"))
    assert "model.embeddings.weight" in metadata.state_dict_metadata
    olmo = pytest.importorskip("olmo_core.distributed.checkpoint", reason="upstream OLMo-core not installed")
    import torch
    from olmo_core.nn.transformer import TransformerConfig

    model = TransformerConfig.llama_like(d_model=16, vocab_size=32, n_layers=1, n_heads=2).build(init_device="cpu")
    olmo.save_model_and_optim_state(str(tmp_path / "olmo"), model, torch.optim.AdamW(model.parameters()))
    assert "model.embeddings.weight" in read_dcp_metadata(str(tmp_path / "olmo")).state_dict_metadata


def test_a_crafted_metadata_runs_nothing_locally_or_from_the_hub(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    step = _release(tmp_path)
    (step / "model_and_optim" / ".metadata").write_bytes(pickle.dumps(_RunsACommand(marker)))
    with pytest.raises(conv.ConversionError, match=r"posix\.system is not part of a checkpoint's metadata|"
                                                   r"os\.system is not part of"):
        conv.convert(str(step), str(tmp_path / "hf"))
    assert not marker.exists() and not (tmp_path / "hf").exists()
    monkeypatch.setenv("HF_TOKEN", "hf_read_token")
    import depthbench

    with HubServer() as hub:
        hub.add_repo(f"aspect-ratio-scaling/{NAME}", release_files(step.parent))
        with pytest.raises(conv.ConversionError, match="refused without running it"):
            depthbench.from_released(f"aspect-ratio-scaling/{NAME}", step=10, cache_dir=str(tmp_path / "cache"),
                                     endpoint=hub.url, hub_cache_dir=str(tmp_path / "hub-cache"))
    assert not marker.exists()
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("config.json"))


def test_a_truncated_or_missing_shard_is_named_and_nothing_is_left(tmp_path, monkeypatch):
    step = _release(tmp_path)
    shard, cut = _model_shard(step)
    shard.write_bytes(shard.read_bytes()[:cut])
    with pytest.raises(conv.ConversionError, match=rf"{shard.name} is truncated \({cut} bytes"):
        conv.convert(str(step), str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf.partial-*"))
    monkeypatch.setenv("HF_TOKEN", "hf_read_token")
    import depthbench

    with HubServer() as hub:  # served truncated: from_released names it, and the cache holds no entry
        hub.add_repo(f"aspect-ratio-scaling/{NAME}", release_files(step.parent))
        with pytest.raises(conv.ConversionError, match="is truncated"):
            depthbench.from_released(f"aspect-ratio-scaling/{NAME}", step=10, cache_dir=str(tmp_path / "cache"),
                                     endpoint=hub.url, hub_cache_dir=str(tmp_path / "hub-cache"))
    cache = tmp_path / "cache"
    assert not any(p.is_file() for p in cache.rglob("*")) if cache.exists() else True
    shard.unlink()
    with pytest.raises(conv.ConversionError, match=rf"{shard.name} is missing"):
        conv.convert(str(step), str(tmp_path / "hf"))


def test_a_truncated_metadata_is_named(tmp_path):
    step = _release(tmp_path)
    metadata = step / "model_and_optim" / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:100])
    with pytest.raises(conv.ConversionError, match=r"\.metadata is truncated or corrupt"):
        conv.convert(str(step), str(tmp_path / "hf"))
    metadata.unlink()
    with pytest.raises(conv.ConversionError, match="holds neither model_and_optim/.metadata"):
        conv.convert(str(step), str(tmp_path / "hf"))


def test_a_failure_while_writing_leaves_the_old_output_and_no_partial_folder(tmp_path, monkeypatch):
    step = _release(tmp_path)
    out = tmp_path / "hf"
    conv.convert(str(step), str(out))
    before = sorted(p.name for p in out.iterdir())

    def broken(*args, **kwargs):
        raise KeyboardInterrupt  # an interrupt mid-write, not only an Exception

    monkeypatch.setattr(conv, "_save", broken)
    with pytest.raises(KeyboardInterrupt):
        conv.convert(str(step), str(out), overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == before and not list(tmp_path.glob(".hf.partial-*"))


def test_local_release_folders_name_step_and_tokenizer(tmp_path):
    from tests.helpers import make_tokenizer

    config = fork_config("default", VOCAB)
    state = fork_state(config["model"])
    write_release(tmp_path, NAME, 10, state, config, make_tokenizer(vocab_size=VOCAB))
    write_release(tmp_path, NAME, 30, state, config)
    release = tmp_path / NAME
    out = conv.convert(str(release), str(tmp_path / "a"))  # a release folder: the last step
    record = json.loads((Path(out) / "depthbench_conversion.json").read_text())
    assert (record["source_repo"], record["step"]) == (NAME, 30)
    assert (Path(out) / "tokenizer_config.json").exists()
    with pytest.raises(conv.ConversionError, match="no step20/; available steps: 10, 30"):
        conv.convert(str(release), str(tmp_path / "b"), step=20)
    with pytest.raises(conv.ConversionError, match="is step 10, not --step 30"):
        conv.convert(str(release / "step10"), str(tmp_path / "c"), step=30)
    from depthbench.hub.publish import default_repo_for

    assert default_repo_for(out, None, "aspect-ratio-scaling") == f"aspect-ratio-scaling/{NAME}-hf"
