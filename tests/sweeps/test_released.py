"""``depthbench released eval``: the study's releases re-measured, end to end against the loopback Hub.

Three tiny releases laid out as the study's trainer writes them (``step0/`` and ``step10/``, each an experiment
``config.json`` + ``model_and_optim/`` distributed checkpoint with optimizer state, and ``tokenizer/``; weights moved
off their init) are served by ``tests/hub/hub_server.py`` and listed by a catalogue file of the packaged format. The
held-out folder is prepared with the releases' tokenizer. Checked: the held-out loss equals an independent
reference (the original models' logits, cross-entropy by hand over windows read from the shard files with numpy);
``results.csv``, the plot and ``report.md`` are written as for a sweep, with the published figures (here a
test table) and their differences beside the re-measured losses and completion NLL; ``final/`` links into the
conversion cache, whose card is never written; ``depthbench report``, ``eval`` and ``analyze`` work on the folder;
an interrupted run resumes without downloading a finished release again; and bad input (another tokenizer, a
repository that does not exist, a folder measured with other settings, no selection) is a clear error.

Run: ``python -m pytest tests/sweeps/test_released.py -q``
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from depthbench.cli import main
from depthbench.data import make_tiny_tokenizer, prepare_data
from depthbench.hub import convert as conv
from depthbench.hub.catalogue import Catalogue
from depthbench.registry import build_model
from depthbench.shapes import get_shape
from depthbench.sweeps.heldout import TokenizerMismatch, check_tokenizer, open_heldout
from depthbench.sweeps.released import measure
from depthbench.sweeps.released.measure import Hub, Measurement, Tasks, evaluate_releases
from depthbench.sweeps.released.selection import select_targets
from tests.helpers import FIXTURES_DIR, pydoc_paragraphs
from tests.hub.hub_server import HubServer

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

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


# ================================================================================================ fixtures
@pytest.fixture(autouse=True, scope="module")
def online_to_the_loopback_hub():
    """Other test modules set ``HF_HUB_OFFLINE=1`` when they are imported (huggingface_hub reads it once, at its own
    import, so it depends on the collection order); these tests reach only the loopback Hub on 127.0.0.1."""
    from huggingface_hub import constants

    offline, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, False
    yield
    constants.HF_HUB_OFFLINE = offline


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


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The loopback Hub serving the releases, the held-out folder, the catalogue file and the original models."""
    root = tmp_path_factory.mktemp("released")
    texts = [line for p in sorted(NLL_FIXTURES.iterdir()) if p.suffix != ".md" for line in p.read_text().splitlines()]
    tokenizer = make_tiny_tokenizer(pydoc_paragraphs(200) + texts, vocab_size=300)
    models = {}
    with HubServer() as hub:
        for k, (arch, name, depth) in enumerate(RELEASES):
            folder = root / "src" / f"{name}-L{depth}"
            models[repo_of(name, depth)] = write_release(folder, arch, depth, tokenizer, seed=k)
            hub.add_repo(repo_of(name, depth), files_of(folder))
        (root / "heldout.txt").write_text("\n".join(pydoc_paragraphs(120)[60:]) + "\n")
        (root / "train.txt").write_text("\n".join(pydoc_paragraphs(60)) + "\n")
        prepare_data([str(root / "train.txt")], tokenizer, str(root / "heldout"),
                     eval_files=[str(root / "heldout.txt")], progress=False)
        (root / "catalogue.json").write_text(json.dumps(CATALOGUE))
        yield {"root": root, "hub": hub, "models": models, "tokenizer": tokenizer,
               "catalogue": Catalogue.load(root / "catalogue.json")}


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


@pytest.fixture(scope="module")
def measured(world):
    """All three releases measured with the completion-NLL math group, into one folder."""
    out = world["root"] / "out"
    targets = select_targets(world["catalogue"], archs=["pre_ln", "attnres"])
    log: list[str] = []
    evaluate_releases(targets, str(out), Measurement(data=str(world["root"] / "heldout"), seq_len=SEQ_LEN,
                                                     device="cpu"),
                      hub_of(world, "main"), Tasks(["depthbench_nll_math"], limit=2, batch_size=4,
                                                   data_dir=str(NLL_FIXTURES)),
                      batch=CATALOGUE["batch"], published=PUBLISHED, log=log.append)
    return out, log


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ================================================================================================ end to end
def test_heldout_loss_equals_an_independent_reference(world, measured):
    out, _ = measured
    rows = {r["run_dir"].split("/")[-1]: r for r in read_csv(out / "results.csv")}
    assert sorted(rows) == ["attnres__tiny-L2__lr0.002__s42", "pre_ln__tiny-L2__lr0.002__s42",
                            "pre_ln__tiny-L4__lr0.002__s42"]
    for (arch, name, depth) in RELEASES:
        row = rows[f"{arch}__tiny-L{depth}__lr0.002__s42"]
        expected = reference_loss(world["models"][repo_of(name, depth)], world["root"] / "heldout", SEQ_LEN)
        assert math.isclose(float(row["eval_loss"]), expected, rel_tol=1e-5), (arch, depth, row["eval_loss"])
        shape = get_shape(f"tiny-L{depth}")
        assert (int(row["num_layers"]), int(row["hidden_size"])) == (depth, shape.hidden_size)
        assert row["status"] == "finished" and int(row["steps"]) == 10 and int(row["tokens"]) == 10 * 1024
    summary = json.loads((out / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "summary.json").read_text())
    assert summary["heldout"]["tokenizer"]["status"] == "match"
    assert summary["heldout"]["seq_len"] == SEQ_LEN and summary["release"]["step"] == 10


def test_report_sets_the_published_figures_beside_the_measured_ones(world, measured):
    out, log = measured
    report = (out / "report.md").read_text()
    assert (out / "loss_vs_aspect_ratio.png").stat().st_size > 0
    assert report.index("# Aspect-ratio sweep") < report.index("## The study's published figures")
    assert "3 of 3 runs finished" in report and "a test table" in report
    rows = {r["run_dir"].split("/")[-1]: float(r["eval_loss"]) for r in read_csv(out / "results.csv")}
    loss = rows["pre_ln__tiny-L4__lr0.002__s42"]
    line = next(x for x in report.splitlines() if x.startswith("| Pre-LN | tiny-L4 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "2e-3"  # one LR measured: Δ compares that repository with the study's best-LR figure
    assert cells[6:9] == [f"{loss:.4f}", "7.250", f"{loss - 7.25:+.4f}"]
    results = json.loads((out / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "eval" / "results.json").read_text())
    nll = results["results"]["depthbench_nll_math"]["nll,none"]
    nll_line = next(x for x in report.splitlines() if x.startswith("| Pre-LN | tiny-L2 |") and " / " in x)
    assert f"{nll:.4f} / 9.500 ({nll - 9.5:+.3f})" in nll_line
    other = json.loads((out / "runs" / "attnres__tiny-L2__lr0.002__s42" / "eval" / "results.json").read_text())
    attnres_line = next(x for x in report.splitlines() if x.startswith("| Full AttnRes | tiny-L2 |") and " / " in x)
    assert f"{other['results']['depthbench_nll_math']['nll,none']:.4f} / —" in attnres_line  # none published
    terminal = "\n".join(log)
    assert "re-measured vs the study's published best-LR figure" in terminal and "7.250" in terminal


def test_final_links_into_the_conversion_cache(world, measured):
    out, _ = measured
    final = out / "runs" / "attnres__tiny-L2__lr0.002__s42" / "final"
    weights = final / "model.safetensors"
    assert weights.is_symlink() and Path(os.readlink(weights)).parent.parent.parent.name == "converted-main"
    assert not (final / "README.md").is_symlink()
    record = json.loads((final.parent / "run_config.json").read_text())
    assert record["release"]["repo"] == repo_of("attnres", 2) and record["release"]["conversion"]["arch"] == "attnres"


def test_report_eval_and_analyze_work_on_the_folder(world, measured):
    out, _ = measured
    cache_card = Path(os.readlink(out / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "final" / "config.json")
                      ).parent / "README.md"
    before = cache_card.read_text()
    assert main(["report", str(out)]) == 0
    assert "## The study's published figures" in (out / "report.md").read_text()
    assert main(["eval", str(out), "--tasks", "depthbench_synthetic_mc_pointer", "--limit", "2", "--batch-size", "4",
                 "--device", "cpu"]) == 0
    for run in ("pre_ln__tiny-L2__lr0.002__s42", "attnres__tiny-L2__lr0.002__s42"):
        results = json.loads((out / "runs" / run / "eval" / "results.json").read_text())
        assert "depthbench_synthetic_mc_pointer" in results["results"] and "depthbench_nll_math" in results["results"]
    assert "depthbench_synthetic_mc_pointer" in (out / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "final" /
                                                 "README.md").read_text()
    assert cache_card.read_text() == before  # the conversion cache's card is never written
    assert main(["analyze", str(out), "--metrics", "angular", "--num-samples", "2", "--seq-len", "16", "--device",
                 "cpu", "--no-progress"]) == 0  # the held-out folder is the sweep's data by default
    assert sorted(p.name for p in (out / "analysis").iterdir() if p.is_dir()) == sorted(
        p.name for p in (out / "runs").iterdir())


# ================================================================================================ resume
def test_an_interrupted_run_resumes_without_downloading_again(world, monkeypatch, tmp_path):
    hub, real = world["hub"], measure.measure_release
    calls = []

    def interrupted(target, *args, **kwargs):
        calls.append(target.repo)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(target, *args, **kwargs)

    monkeypatch.setattr(measure, "measure_release", interrupted)
    targets = select_targets(world["catalogue"], archs=["preln"])
    m, h = Measurement(data=str(world["root"] / "heldout"), seq_len=SEQ_LEN, device="cpu"), hub_of(world, "resume")
    with pytest.raises(KeyboardInterrupt):
        evaluate_releases(targets, str(tmp_path / "out"), m, h, log=lambda *a: None)
    assert (tmp_path / "out" / "runs" / "pre_ln__tiny-L2__lr0.002__s42" / "summary.json").exists()
    assert not (tmp_path / "out" / "runs" / "pre_ln__tiny-L4__lr0.002__s42" / "summary.json").exists()
    first = repo_of("preln", 2)
    seen = len([p for _, p in hub.requests if first in p])
    log: list[str] = []
    evaluate_releases(targets, str(tmp_path / "out"), m, h, log=log.append)
    assert calls == [first, repo_of("preln", 4), repo_of("preln", 4)]
    assert len([p for _, p in hub.requests if first in p]) == seen  # nothing of the finished release fetched
    assert any("measured earlier" in line and first in line for line in log)
    assert len(read_csv(tmp_path / "out" / "results.csv")) == 2


# ================================================================================================ bad input
def test_another_tokenizer_is_refused_before_any_weights(world, tmp_path):
    other = make_tiny_tokenizer(pydoc_paragraphs(40), vocab_size=280)
    prepare_data([str(world["root"] / "train.txt")], other, str(tmp_path / "data"),
                 eval_files=[str(world["root"] / "heldout.txt")], progress=False)
    hub = world["hub"]
    before = len(hub.requests)
    targets = select_targets(world["catalogue"], archs=["attnres"])
    with pytest.raises(TokenizerMismatch, match="was not tokenized with the tokenizer of .*attnres.*prepare-data"):
        evaluate_releases(targets, str(tmp_path / "out"), Measurement(data=str(tmp_path / "data"), device="cpu"),
                          hub_of(world, "mismatch"), log=lambda *a: None)
    assert not [p for _, p in hub.requests[before:] if ".distcp" in p]


def test_command_line_errors_are_clear(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", world["hub"].url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    data, cat = str(world["root"] / "heldout"), str(world["root"] / "catalogue.json")
    base = ["released", "eval", "--catalogue", cat, "--data", data, "--seq-len", str(SEQ_LEN), "--device", "cpu",
            "--cache-dir", str(tmp_path / "conv"), "--no-listing"]
    assert main([*base, "-o", str(tmp_path / "a")]) == 2
    assert "choose the releases" in capsys.readouterr().err
    assert main([*base, "--arch", "hc", "-o", str(tmp_path / "a")]) == 2
    assert "catalogued architectures: pre_ln, attnres" in capsys.readouterr().err
    assert main([*base, "--depth", "2", "--split", "test", "-o", str(tmp_path / "a")]) == 2
    assert "its splits: eval, train" in capsys.readouterr().err
    missing = f"{ORG}/preln-lr2e-3-llama-2M-L8-pretrain"
    assert main([*base, "--repo", missing, "-o", str(tmp_path / "b")]) == 1
    assert f"{missing} is not on the Hub" in capsys.readouterr().err
    assert main([*base, "--arch", "preln", "--depth", "2", "-o", str(tmp_path / "c")]) == 0
    assert "Pre-LN" in capsys.readouterr().out
    assert list((tmp_path / "hub").glob("models--aspect-ratio-scaling--preln-*"))  # HF_HUB_CACHE is honoured
    assert main([*base, "--arch", "preln", "--depth", "2", "--max-tokens", "64", "-o", str(tmp_path / "c")]) == 2
    assert "max_tokens differ" in capsys.readouterr().err


def test_tokenizer_check_without_a_release_tokenizer_uses_the_config_ids(world):
    shards = open_heldout(str(world["root"] / "heldout"), "eval")
    tok = world["tokenizer"]
    ids = {"dataset": {"tokenizer": {"vocab_size": len(tok), "eos_token_id": tok.eos_token_id}}}
    assert check_tokenizer(shards, "r", None, ids)["status"] == "ids-match"
    assert check_tokenizer(shards, "r", None, {"model": {}})["status"] == "unchecked"
    wrong = {"dataset": {"tokenizer": {"vocab_size": 50280, "eos_token_id": 50279}}}
    with pytest.raises(TokenizerMismatch, match="vocab size 300 here, 50280 in the release; EOS id 0 here, 50279"):
        check_tokenizer(shards, "r", None, wrong)


# ================================================================================================ Hub listing
def _other_lr_releases(world) -> dict[str, float]:
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


def test_best_lr_measures_every_listed_lr_and_reports_the_best(world, tmp_path):
    from depthbench.hub.listing import sync
    from depthbench.sweeps.released.compare import comparison_rows

    lrs = _other_lr_releases(world)
    listing = sync(endpoint=world["hub"].url, token=False, path=str(tmp_path / "listing.json"), log=lambda *_: None)
    catalogue = world["catalogue"].with_listing(listing)
    one = select_targets(catalogue, archs=["pre_ln"], depths=[2])
    assert [t.repo for t in one] == [repo_of("preln", 2)]  # one LR per shape unless --best-lr: the catalogue's
    targets = select_targets(catalogue, archs=["pre_ln"], depths=[2], best_lr=True)
    assert {t.repo for t in targets} == {repo_of("preln", 2), *lrs}
    out = tmp_path / "out"
    evaluate_releases(targets, str(out), Measurement(data=str(world["root"] / "heldout"), split="eval",
                                                     seq_len=SEQ_LEN, device="cpu"),
                      hub_of(world, "best"), published=PUBLISHED, log=lambda *_: None)
    rows = comparison_rows(str(out), PUBLISHED)
    losses = {r["lr"]: r["loss"] for r in rows}
    assert len(losses) == 3 and all(r["lrs"] == 3 for r in rows)
    best = [r for r in rows if r["best"]]
    assert len(best) == 1 and best[0]["loss"] == min(losses.values())
    assert best[0]["delta"] == pytest.approx(best[0]["loss"] - 7.5)
    assert all(r["delta"] is None for r in rows if not r["best"])
    report = (out / "report.md").read_text()
    assert "(best of 3)" in report and report.count("(not best of 3)") == 2


def test_a_release_whose_config_is_not_its_entry_s_shape_is_refused_naming_both(world, tmp_path):
    folder = world["root"] / "src" / "mismatch"
    repo = f"{ORG}/preln-lr3e-3-llama-2M-L2-pretrain"
    if repo not in world["hub"].repos:
        write_release(folder, "pre_ln", 4, world["tokenizer"], seed=9)  # an L4 model under an L2 name
        world["hub"].add_repo(repo, files_of(folder))
    targets = select_targets(world["catalogue"], repos=[repo])
    assert targets[0].shape == "tiny-L2"  # matched by its name only (no listing)
    refused = r"config.json has d=\d+, L=4, heads=\d+, but the catalogue entry .*\(pre_ln tiny-L2\) has d=\d+, L=2"
    with pytest.raises(measure.ReleasesFailed, match=refused):
        evaluate_releases(targets, str(tmp_path / "out"), Measurement(data=str(world["root"] / "heldout"),
                                                                      seq_len=SEQ_LEN, device="cpu"),
                          hub_of(world, "mismatch"), published=PUBLISHED, log=lambda *_: None)
    assert not list(world["root"].glob("hub-mismatch/models--*/blobs/*.distcp"))  # refused before any weights


def test_eval_prints_the_cost_and_asks_for_yes_above_the_threshold(world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", world["hub"].url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    base = ["released", "eval", "--catalogue", str(world["root"] / "catalogue.json"), "--no-listing",
            "--data", str(world["root"] / "heldout"), "--split", "eval", "--seq-len", str(SEQ_LEN), "--device", "cpu",
            "--cache-dir", str(tmp_path / "conv"), "--arch", "preln", "-o", str(tmp_path / "out")]
    assert main([*base, "--confirm-above", "1e-9"]) == 2
    captured = capsys.readouterr()
    assert "2 release(s):" in captured.out and "estimated at 6 bytes per parameter" in captured.out
    assert "PFLOP forward per 10^9 held-out tokens" in captured.out
    assert "pass --yes" in captured.err and not (tmp_path / "out").exists() and not (tmp_path / "hub").exists()
