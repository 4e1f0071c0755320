"""``depthbench analyze`` of a released model sets the study's published layer figures beside ours.

The packaged figures (``published_figures.json`` ``layer_analyses``) are checked against the study's numbers as its
project site prints them (keyu-wang-2002/DepthBench-Website index.html: the late-layer table at L = 32, the HC /
mHC transport ranks, the prefill FLOPs end points), with their sources, and "not published" elsewhere. End to end:
tiny releases in the study's exact layout (``tests/hub/fork_reference.py``), converted with ``depthbench convert``,
are analysed; a test catalogue names them at the ``tiny-L4`` shape and the packaged figures are moved to that shape
(their values and sources unchanged), so the metric JSONs and ``published.json`` must show the study's value beside
ours with its source. A copy of the same model that names no release gets none.

Run: ``python -m pytest tests/analysis/test_published.py -q``
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from depthbench.hub.catalogue import Catalogue, load_published, published_layer_figure
from depthbench.shapes import get_shape

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

ORG = "aspect-ratio-scaling"
HC = {"kind": "hc", "num_residual_streams": 4, "collapse": "auto", "_CLASS_":
      "olmo_core.nn.transformer.config.HyperConnectionsConfig"}
SHAPE = get_shape("tiny-L4")


# ================================================================================================ the packaged data
def test_the_study_s_late_layer_table_transport_ranks_and_prefill_flops_with_their_sources():
    pub = load_published()
    expected = {"causal": {"pre_ln": 0.01, "hc": 0.07, "attnres": 0.16},
                "permutation": {"pre_ln": 0.08, "hc": 0.35, "attnres": 0.46}}
    for metric, values in expected.items():
        for arch, value in values.items():
            fig = published_layer_figure(pub, metric, arch, "400m", 32)
            assert fig["published"] == value and fig["approximate"]
            assert fig["threshold"] == {"causal": 0.45, "permutation": 0.15}[metric]
            assert fig["source"].startswith("arXiv 2609.32534, Figure 6")
        none = published_layer_figure(pub, metric, "mhc", "400m", 32)  # plotted, no number
        assert none["published"] is None and "Pre-LN, HC, Full AttnRes at 400m-L32 only" in none["why"]
        assert published_layer_figure(pub, metric, "hc", "400m", 24)["published"] is None
    assert published_layer_figure(pub, "hc_transport", "mhc", "400m", 24)["published"] == [1.44, 1.65]
    hc = published_layer_figure(pub, "hc_transport", "hc", "400m", 32)
    assert hc["published"] == [2.53, 2.81] and hc["source"].startswith("arXiv 2609.32534, Figure 10")
    assert published_layer_figure(pub, "hc_transport", "pre_ln", "400m", 32)["published"] is None
    flops = published_layer_figure(pub, "efficiency", "attnres", "400m", 70)
    assert flops["published"] == 4.4e12 and flops["seq_len"] == 4096 and "Figure 11" in flops["source"]
    assert published_layer_figure(pub, "efficiency", "pre_ln", "400m", 16)["published"] == 3.0e12
    missing = published_layer_figure(pub, "efficiency", "pre_ln", "400m", 24)
    assert missing["published"] is None and "400m-L16, 400m-L70 only" in missing["why"]


# ================================================================================================ end to end
def _fig_at_tiny(pub: dict) -> dict:
    """The packaged figures with their grid moved to ``tiny`` (depth 4): values and sources unchanged."""
    pub = copy.deepcopy(pub)
    layer = pub["layer_analyses"]
    layer["late_layer_fractions"].update(grid="tiny", depth=4)
    layer["hc_transport_erank"]["grid"] = "tiny"
    layer["prefill_flops"].update(grid="tiny", values={"4": layer["prefill_flops"]["values"]["16"]})
    return pub


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from depthbench.hub import convert as conv
    from tests.helpers import make_tokenizer, pydoc_paragraphs
    from tests.hub.fork_reference import fork_config, fork_state, write_release

    root = tmp_path_factory.mktemp("published")
    texts = pydoc_paragraphs(60)
    tokenizer = make_tokenizer(texts=texts, vocab_size=160)
    block = {"sequence_mixer": {"n_heads": SHAPE.num_attention_heads}}  # the catalogue matches d, L and heads
    models = {}
    for arch, name, extra, kwargs in (("pre_ln", "preln", {}, {}), ("hc", "hc", {"hyper_connections": HC},
                                                                     {"readout": "sum"})):
        config = fork_config("default", 192, block={**block, **extra}, model={"d_model": SHAPE.hidden_size},
                             n_layers=SHAPE.num_layers)
        repo = f"{name}-lr2e-3-llama-1M-L{SHAPE.num_layers}-pretrain"
        step = write_release(root / "src", repo, 10, fork_state(config["model"], seed=len(name)), config, tokenizer)
        models[arch] = Path(conv.convert(str(step), str(root / "hf" / arch), **kwargs))
    group = {"tier": "1M", "size": "1M", "grid": "tiny", "depths": [SHAPE.num_layers], "source": "test",
             "steps": [10], "final_step": 10,
             "archs": {a: {"name": n, "lr": 2e-3, "lr_source": "test", "name_source": "test"}
                       for a, n in (("pre_ln", "preln"), ("hc", "hc"))}}
    (root / "catalogue.json").write_text(json.dumps(
        {"format_version": 1, "org": ORG, "name_pattern": "{org}/{name}-lr{lr}-llama-{size}-L{depth}-pretrain",
         "groups": [group]}))
    (root / "text.txt").write_text("\n".join(pydoc_paragraphs(120)[60:]) + "\n")
    return {"root": root, "models": models, "catalogue": Catalogue.load(root / "catalogue.json"),
            "published": _fig_at_tiny(load_published()), "data": str(root / "text.txt")}


def _analyze(world, target: Path, metrics: list[str], out: Path, catalogue=None) -> list[str]:
    from depthbench.analysis.runner import analyze_target
    from depthbench.analysis.sampling import WindowSpec

    log: list[str] = []
    analyze_target(str(target), metrics, str(out), world["data"], WindowSpec(num_samples=4, seq_len=24, seed=0),
                   options={"efficiency": {"seq_len": 32}}, device="cpu", progress=False,
                   catalogue=world["catalogue"] if catalogue is None else catalogue,
                   published=world["published"], log=log.append)
    return log


def test_a_converted_hc_release_shows_the_study_s_figures_beside_ours(world, tmp_path):
    out = tmp_path / "hc"
    log = _analyze(world, world["models"]["hc"], ["causal", "permutation", "hc_transport", "efficiency"], out)
    summary = json.loads((out / "published.json").read_text())
    assert summary["release"]["repo"] == "hc-lr2e-3-llama-1M-L4-pretrain"
    assert summary["release"]["shape"] == "tiny-L4"
    for metric, value in (("causal", 0.07), ("permutation", 0.35)):
        payload = json.loads((out / f"{metric}.json").read_text())
        entry = payload["published"]
        assert entry["published"] == value and entry["ours"] == payload["values"]["late_fraction_above"]
        assert entry["comparable"] and entry["source"].startswith("arXiv 2609.32534, Figure 6")
        assert summary["metrics"][metric] == entry
        line = next(x for x in log if x.startswith(f"{metric}: late pairs"))
        assert f"the study ≈{value * 100:.0f} %" in line and "Figure 6" in line
    transport = json.loads((out / "hc_transport.json").read_text())
    entry = transport["published"]
    assert entry["published"] == [2.53, 2.81] and entry["ours"] == transport["values"]["product_erank"]
    assert entry["within_range"] == (2.53 <= entry["ours"] <= 2.81) and "Figure 10" in entry["source"]
    eff = json.loads((out / "efficiency.json").read_text())["published"]
    assert eff["published"] == 3.0e12 and eff["ours"] > 0 and not eff["comparable"]
    assert eff["not_comparable"] == ["T = 32 here, 4096 in the study"]


def test_a_release_the_study_published_no_figure_for_says_so(world, tmp_path):
    """Pre-LN has the late-layer figures but no transport rank (the metric does not apply: not written); at the
    packaged shapes (400m), the tiny model's config matches no shape of the study: every entry says why."""
    out = tmp_path / "preln"
    _analyze(world, world["models"]["pre_ln"], ["causal"], out)
    assert json.loads((out / "causal.json").read_text())["published"]["published"] == 0.01
    other = tmp_path / "packaged"
    log = _analyze(world, world["models"]["pre_ln"], ["causal"], other, catalogue=Catalogue.load())
    entry = json.loads((other / "causal.json").read_text())["published"]
    assert entry["published"] is None and "none of the study's shapes of pre_ln" in entry["why"]
    assert any("the study's figure: none" in x for x in log)


def test_a_model_that_is_not_a_release_gets_no_published_figure(world, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(world["models"]["hc"], plain)
    (plain / "depthbench_conversion.json").unlink()
    (plain / "README.md").unlink()
    out = tmp_path / "out"
    log = _analyze(world, plain, ["causal"], out)
    assert "published" not in json.loads((out / "causal.json").read_text())
    assert not (out / "published.json").exists() and not any("the study" in x for x in log)


def test_a_card_naming_the_release_as_base_model_identifies_it(world, tmp_path):
    """A re-published conversion (``depthbench publish``) names its release in the card's ``base_model``."""
    from huggingface_hub import ModelCard, ModelCardData

    from depthbench.analysis.published import release_of
    from depthbench.analysis.runner import load_model

    card_only = tmp_path / "card"
    shutil.copytree(world["models"]["hc"], card_only)
    (card_only / "depthbench_conversion.json").unlink()
    ModelCard.from_template(ModelCardData(base_model=f"{ORG}/hc-lr2e-3-llama-1M-L4-pretrain")).save(
        card_only / "README.md")
    model, _ = load_model(str(card_only), device="cpu")
    release = release_of(str(card_only), model, catalogue=world["catalogue"])
    assert release["repo"] == f"{ORG}/hc-lr2e-3-llama-1M-L4-pretrain" and release["shape"] == "tiny-L4"
    assert release["found_in"] == "model card (base_model)"
