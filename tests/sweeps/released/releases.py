"""The world of ``depthbench released eval``'s tests (``tests/sweeps/released/``): three tiny releases laid out as
the study's trainer writes them (``step0/`` and ``step10/``, each an experiment ``config.json`` +
``model_and_optim/`` distributed checkpoint with optimizer state, and ``tokenizer/``; weights moved off their init),
served by ``tests/hub/hub_server.py`` and listed by a catalogue file of the packaged format (the fixtures are in
``conftest.py``), and the independent reference of the held-out loss: the original models' logits, cross-entropy
by hand over windows read from the shard files with numpy.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import torch

from depthbench.hub import convert as conv
from depthbench.registry import build_model
from depthbench.shapes import get_shape
from depthbench.sweeps.released.measure import Hub
from tests.helpers import FIXTURES_DIR

NLL_FIXTURES = FIXTURES_DIR / "depthbench_nll"
SEQ_LEN = 32
ORG = "aspect-ratio-scaling"
RELEASES = [("pre_ln", "preln", 2), ("pre_ln", "preln", 4), ("attnres", "attnres", 2)]
EPS = 1e-5  # AttnRes's depth-mix norms use 1e-5 in the study: with the model's eps equal, every placement agrees


def repo_of(name: str, depth: int) -> str:
    return f"{ORG}/{name}-lr2e-3-llama-2M-L{depth}-pretrain"


CATALOGUE = {
    "format_version": 1, "org": ORG, "name_pattern": "{org}/{name}-lr{lr}-llama-{size}-L{depth}-pretrain",
    "batch": {"sequences": 4, "seq_len": 256}, "seed": 42,
    "groups": [{"tier": "2M", "size": "2M", "grid": "tiny", "depths": [2, 4], "source": "test", "steps": [0, 10],
                "final_step": 10, "steps_source": "test",
                "archs": {"pre_ln": {"name": "preln", "lr": 2e-3, "lr_source": "test", "name_source": "test"}}},
               {"tier": "2M-attnres", "size": "2M", "grid": "tiny", "depths": [2], "source": "test", "steps": [10],
                "final_step": 10, "archs": {"attnres": {"name": "attnres", "lr": 2e-3, "lr_source": "test",
                                                        "name_source": "test"}}}],
}

PUBLISHED = {
    "labels": {"pre_ln": "Pre-LN", "attnres": "Full AttnRes"},
    "validation_loss": {"metric": "test loss", "source": "a test table",
                        "grids": {"tiny": {"pre_ln": {"2": 7.5, "4": 7.25}, "attnres": {"2": 7.0}}}},
    "completion_nll": {"metric": "test nll", "source": "a test table", "tasks": {"math": "depthbench_nll_math"},
                       "grids": {"tiny": {"math": {"pre_ln": {"2": 9.5}}}}},
}


def olmo_config(arch: str, fields: dict, tokenizer) -> dict:
    """An experiment config.json as the study's trainer saves it (model section + dataset.tokenizer)."""
    block = {"name": {"pre_ln": "default", "attnres": "attnres"}[arch],
             "sequence_mixer": {"n_heads": fields["num_attention_heads"], "bias": False, "rope": {"theta": 10000}},
             "layer_norm": {"name": "rms", "eps": EPS, "bias": False},
             "feed_forward": {"hidden_size": fields["intermediate_size"], "bias": False}}
    if arch == "attnres":
        block["attnres_block_size"] = 1
    return {"run_name": "test", "model": {"d_model": fields["hidden_size"], "vocab_size": fields["vocab_size"],
                                          "n_layers": fields["num_hidden_layers"], "block": block,
                                          "lm_head": {"layer_norm": {"name": "rms", "eps": EPS, "bias": False}}},
            "dataset": {"tokenizer": {"vocab_size": len(tokenizer), "eos_token_id": tokenizer.eos_token_id,
                                      "pad_token_id": tokenizer.pad_token_id}},
            "train_module": {"optim": {"lr": 2e-3}}}


def write_release(folder: Path, arch: str, depth: int, tokenizer, seed: int):
    """A release of the study's layout in ``folder``; returns the depthbench model it holds at step10."""
    import torch.distributed.checkpoint as dcp


    fields = {**get_shape(f"tiny-L{depth}").config_fields(), "rms_norm_eps": EPS}
    torch.manual_seed(seed)
    model = build_model(arch, **fields).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    state = conv.to_olmo_state(arch, model.state_dict(), depth)
    for step, tensors in (("step0", {k: torch.zeros_like(v) for k, v in state.items()}), ("step10", state)):
        (folder / step).mkdir(parents=True)
        (folder / step / "config.json").write_text(json.dumps(olmo_config(arch, fields, tokenizer)))
        payload = {"model": {k: v.contiguous() for k, v in tensors.items()},
                   "optim": {f"state.{k}.exp_avg": torch.zeros_like(v) for k, v in tensors.items()}}
        dcp.save(payload, storage_writer=dcp.FileSystemWriter(str(folder / step / "model_and_optim")), no_dist=True)
    tokenizer.save_pretrained(str(folder / "tokenizer"))
    return model


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def hub_of(world, tag: str) -> Hub:
    return Hub(endpoint=world["hub"].url, hub_cache_dir=str(world["root"] / f"hub-{tag}"),
               cache_dir=str(world["root"] / f"converted-{tag}"))


def reference_loss(model, data_dir: Path, seq_len: int) -> float:
    """Mean next-token cross-entropy over every ``seq_len`` window of the eval split, by hand (float64)."""
    meta = json.loads((data_dir / "meta.json").read_text())
    stream = np.concatenate([np.fromfile(data_dir / s["file"], dtype=np.dtype(meta["dtype"]).newbyteorder("<"))
                             for s in meta["splits"]["eval"]["shards"]]).astype(np.int64)
    windows = torch.from_numpy(stream[: len(stream) // seq_len * seq_len].reshape(-1, seq_len))
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=windows).logits.double(), dim=-1)
    picked = logp[:, :-1].gather(-1, windows[:, 1:, None]).squeeze(-1)
    return float(-picked.mean())


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def other_lr_releases(world) -> dict[str, float]:
    """Pre-LN L2 at two more LRs (other weights: other losses) and a repository named 2M-L2 whose config.json has
    another width; returns the new repositories' LRs."""
    hub, root = world["hub"], world["root"]
    out = {}
    for seed, lr in ((7, "1e-3"), (8, "4e-3")):
        repo = f"{ORG}/preln-lr{lr}-llama-2M-L2-pretrain"
        if repo not in hub.repos:
            folder = root / "src" / f"preln-L2-lr{lr}"
            write_release(folder, "pre_ln", 2, world["tokenizer"], seed=seed)
            hub.add_repo(repo, files_of(folder))
        out[repo] = float(lr)
    return out
