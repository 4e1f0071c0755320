"""Model cards and ``depthbench publish`` against the loopback Hub (tests/hub/hub_server.py), offline.

One tiny HC run (2 checkpoints + final/) is trained once for the module. The round trip publishes it with
``--revisions`` and loads ``main`` and ``step-000002`` back with
``AutoModelForCausalLM.from_pretrained("aspect-ratio-scaling/NAME", revision=..., trust_remote_code=True)`` in a
fresh process that cannot import depthbench, comparing logits with the local exports.

Run: ``python -m pytest tests/hub/test_publish.py -q``
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depthbench.config import load_run_config
from depthbench.hub import publish as pub
from depthbench.hub.cards import write_card
from depthbench.training.trainer import train
from tests.helpers import TINY_FIELDS, make_train_data
from tests.hub.hub_server import HubServer

ORG = "aspect-ratio-scaling"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("hub_run")
    data = make_train_data(work / "data", max_topics=10)
    out = work / "run"
    cfg = load_run_config({
        "model": {"arch": "hc", "fields": TINY_FIELDS},
        "data": {"data_dir": str(data), "seq_len": 32, "eval_sequences": 4, "prefetch": 1},
        "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 4, "progress": False,
                  "eval_every": 2},
        "optim": {"lr": 3e-3},
        "checkpoint": {"every": 2, "keep_last": 2, "hf_export": True, "hash_files": False},
        "output_dir": str(out),
    }, [])
    train(cfg)
    return out


@pytest.fixture()
def hub():
    with HubServer() as server:
        yield server


def api_for(hub: HubServer, token: str | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)  # None: huggingface_hub's own lookup (HF_TOKEN, stored login)


def posts(hub: HubServer) -> list[str]:
    return [p for m, p in hub.requests if m == "POST"]


# ================================================================================================ cards
def test_card_loads_with_huggingface_hub_loaders(tiny_run, tmp_path):
    from huggingface_hub import ModelCard, metadata_load

    export = tmp_path / "export"
    export.mkdir()
    for f in (tiny_run / "final").iterdir():
        (export / f.name).write_bytes(f.read_bytes())
    path = write_card(str(export), run_dir=str(tiny_run), repo_id=f"{ORG}/hc-test",
                      lm_eval={"results": {"depthbench_synthetic": {"acc,none": 0.5, "acc_stderr,none": 0.1}}})
    card = ModelCard.load(path)
    meta = metadata_load(path)
    summary = json.loads((tiny_run / "summary.json").read_text())
    results = {(r.dataset_type, r.metric_type): r.metric_value for r in card.data.eval_results}
    for split, loss in summary["eval"].items():
        assert results[(split, "loss")] == pytest.approx(loss, abs=1e-6)
    assert results[("depthbench_synthetic", "acc")] == 0.5
    assert meta["model-index"][0]["name"] == "hc-test" and meta["license"] == "apache-2.0"
    text = card.text
    assert "arxiv.org/abs/2409.19606" in text and "2609.32534" in text  # the architecture's paper and the study
    assert "| 2 | 32 | 16.00 |" in text  # L, d, d/L
    assert f"{summary['final_train_loss']:.4f}" in text and "![training and held-out loss](loss_curve.png)" in text
    assert (export / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert "[More Information Needed]" not in text
    written_by = f"This card was written by depthbench {importlib.metadata.version('depthbench')}."
    assert written_by in " ".join(text.split())  # the installed package's version (setup.py reads __version__)


def test_checkpoint_exports_carry_cards(tiny_run):
    from huggingface_hub import ModelCard

    for export in [tiny_run / "final", *sorted((tiny_run / "checkpoints").glob("ckpt-*/hf"))]:
        card = ModelCard.load(export / "README.md")
        assert card.data.model_name and "Hyper-Connections" in card.text, export


# ================================================================================================ publish
def test_dry_run_prints_the_plan_and_writes_nothing(tiny_run, hub):
    out = io.StringIO()
    result = pub.publish(str(tiny_run), revisions=True, dry_run=True, api=api_for(hub, None), out=out)
    text = out.getvalue()
    (repo,) = result["repos"]
    assert repo == f"{ORG}/hc-lr3e-3-llama-{repo.split('-llama-')[1].split('-')[0]}-L2-pretrain"
    assert "main:" in text and "step-000002:" in text and "step-000004:" in text and "model.safetensors" in text
    assert posts(hub) == [] and hub.repos == {}


@pytest.mark.parametrize("token", [None, "hf_invalid", "hf_read_only"])
def test_missing_or_read_only_token_fails_before_any_upload(tiny_run, hub, token, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(pub.PublishError, match="token"):
        pub.publish(str(tiny_run), api=api_for(hub, token), out=io.StringIO())
    assert posts(hub) == [] and hub.repos == {}


def test_bad_inputs_are_refused(tiny_run, hub, tmp_path):
    api = api_for(hub, "hf_write")
    with pytest.raises(pub.PublishError, match="NAMESPACE/NAME"):
        pub.publish(str(tiny_run), repo="no-namespace", api=api)
    with pytest.raises(pub.PublishError, match="neither a run folder"):
        pub.publish(str(tmp_path), api=api)
    assert hub.repos == {}


_CHILD = r'''
import importlib.abc, json, sys

class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "depthbench" or name.startswith("depthbench."):
            raise ImportError(name + " is blocked")

sys.meta_path.insert(0, _Block())
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
repo, ids = sys.argv[1], torch.tensor(json.loads(sys.argv[2]))
out = {}
for rev in sys.argv[3:]:
    model = AutoModelForCausalLM.from_pretrained(repo, revision=rev, trust_remote_code=True).eval()
    with torch.no_grad():
        out[rev] = model(ids).logits.tolist()
out["depthbench_loaded"] = any(m.split(".")[0] == "depthbench" for m in sys.modules)
print("RESULT" + json.dumps(out))
'''


def test_publish_with_revisions_round_trips_and_republishes_only_changes(tiny_run, hub, tmp_path):
    from transformers import AutoModelForCausalLM

    api = api_for(hub, "hf_write_token")
    result = pub.publish(str(tiny_run), revisions=True, private=True, api=api, out=io.StringIO())
    (repo,) = result["repos"]
    stored = hub.repos[repo]
    assert stored.private and set(stored.branches) == {"main", "step-000002", "step-000004"}
    main_files = hub.files(repo)
    assert {"config.json", "model.safetensors", "README.md", "loss_curve.png", "tokenizer.json"} <= set(main_files)
    assert b"step-000002" in hub.files(repo, "step-000002")["README.md"]  # the branch card names its revision

    # re-publishing unchanged files makes no commit; a changed file is the only one uploaded
    before = posts(hub)
    pub.publish(str(tiny_run), revisions=True, api=api, out=io.StringIO())
    assert not [p for p in posts(hub)[len(before):] if "/commit/" in p]
    (tiny_run / "final" / "extra_notes.txt").write_text("added after the first upload\n")
    try:
        out = io.StringIO()
        pub.publish(str(tiny_run), api=api, out=out)
        assert hub.files(repo)["extra_notes.txt"] == b"added after the first upload\n"
        assert "main: 1 of" in out.getvalue()
    finally:
        (tiny_run / "final" / "extra_notes.txt").unlink()

    # load back by name and revision in a process that cannot import depthbench
    ids = [[1, 5, 7, 9, 2, 4]]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=hub.url, HF_TOKEN="hf_read_token", HF_HUB_DISABLE_XET="1", HF_HOME=str(tmp_path / "hf"),
               HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _CHILD, repo, json.dumps(ids), "main", "step-000002"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    loaded = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert loaded["depthbench_loaded"] is False
    for rev, local in (("main", tiny_run / "final"), ("step-000002", tiny_run / "checkpoints/ckpt-000002/hf")):
        model = AutoModelForCausalLM.from_pretrained(local).eval()
        with torch.no_grad():
            expected = model(torch.tensor(ids)).logits
        assert torch.allclose(torch.tensor(loaded[rev]), expected, atol=1e-6), rev
    assert not torch.allclose(torch.tensor(loaded["main"]), torch.tensor(loaded["step-000002"]))


def test_sweep_publishes_finished_runs_into_a_collection(tiny_run, hub, tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"archs": ["hc"]}))
    (sweep / "report.md").write_text("# report\n\n![plot](loss_vs_aspect_ratio.png)\n")
    (sweep / "loss_vs_aspect_ratio.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    os.symlink(tiny_run, sweep / "runs" / "hc__tiny-L2__lr0.003__s0")
    unfinished = sweep / "runs" / "hc__tiny-L4__lr0.003__s0"
    unfinished.mkdir()
    (unfinished / "summary.json").write_text(json.dumps({"status": "stopped"}))
    result = pub.publish(str(sweep), api=api_for(hub, "hf_write_token"), out=io.StringIO())
    assert len(result["repos"]) == 1
    collection = hub.collections[result["collection"]]
    items = [i["id"] for i in collection["items"]]
    assert items == [f"{ORG}/sweep-sweep-report", result["repos"][0]]
    assert b"# report" in hub.files(f"{ORG}/sweep-sweep-report")["README.md"]
    assert "loss_vs_aspect_ratio.png" in hub.files(f"{ORG}/sweep-sweep-report")


def test_cli_publish_dry_run(tiny_run, hub, capsys, monkeypatch):
    from depthbench.cli import main

    monkeypatch.setattr(pub, "publish", lambda *a, **k: _recorded.append((a, k)) or {})
    _recorded: list = []
    assert main(["publish", str(tiny_run), "--dry-run", "--revisions", "--repo", f"{ORG}/x"]) == 0
    (args, kwargs), = _recorded
    assert args == (str(tiny_run),) and kwargs["dry_run"] and kwargs["revisions"] and kwargs["repo"] == f"{ORG}/x"


def test_dry_run_without_a_reachable_hub_still_prints_the_plan(tiny_run, hub, monkeypatch):
    from huggingface_hub.errors import OfflineModeIsEnabled

    api = api_for(hub, None)

    def offline(*args, **kwargs):
        raise OfflineModeIsEnabled("HF_HUB_OFFLINE=1")

    monkeypatch.setattr(api, "list_repo_tree", offline)
    out = io.StringIO()
    pub.publish(str(tiny_run), dry_run=True, api=api, out=out)
    assert "unknown" in out.getvalue() and "remote state unreadable" in out.getvalue()
