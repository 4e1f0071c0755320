"""The catalogue of the study's released checkpoints and its published figures (``depthbench.hub.catalogue``,
``depthbench released list``).

The catalogue is checked against the study's own text, copied here as test data: the checkpoint table of its
README (keyu-wang-2002/DepthBench, "Checkpoints": tier, "L<depth>-d<width>" shapes, architectures, final steps)
and its example repository name; the published losses against the numbers the study's project site states in its
prose (index.html, "Main results"), which are independent of the site's data tables the figures were taken from.
Filters, their errors (what exists is listed) and the command line (table, JSON, exit codes) are covered too.

Run: ``python -m pytest tests/hub/test_catalogue.py -q``
"""

from __future__ import annotations

import json
import re

import pytest

from depthbench.cli import main
from depthbench.hub.catalogue import Catalogue, CatalogueError, load_published, published_loss, published_nll
from depthbench.registry import ARCHITECTURES
from depthbench.repo_names import parse_repo_name
from tests.helpers import REPO_ROOT

# The study's README, "Checkpoints" (tier | shapes | architectures), and its final steps.
README_TABLE = [
    ("400M", "L16-d1216 · L20-d1120 · L24-d1024 · L28-d960 · L32-d896", "all"),
    ("400M-deep", "L36-d864 · L42-d800 · L70-d640", "HC, mHC, Full AttnRes"),
    ("1.6B", "L28-d2048 · L40-d1728 · L54-d1504", "Pre-LN, HC, Full AttnRes"),
    ("300M-backbone", "L16-d1248 · L42-d768 · L56-d672 · L70-d608", "HC, mHC"),
    ("200M", "L12-d896 · L18-d768 · L24-d672", "Pre-LN, HC, mHC, Full / Block AttnRes"),
    ("300M", "L14-d1056 · L21-d896 · L28-d800", "Pre-LN, HC, mHC, Full / Block AttnRes"),
    ("500M", "L17-d1344 · L26-d1120 · L34-d992", "Pre-LN, HC, mHC, Full / Block AttnRes"),
]
FINAL_STEPS = {"400M": 7600, "400M-deep": 7600, "200M": 3800, "300M": 5700, "500M": 9500, "1.6B": 30400}
NAMES = {"Pre-LN": ["pre_ln"], "HC": ["hc"], "mHC": ["mhc"], "Full AttnRes": ["attnres"],
         "Full / Block AttnRes": ["attnres", "block_attnres"]}
# The ten architectures of the study's comparison (its site's table), as registry ids.
PAPER_TEN = {"pre_ln", "peri_ln", "lns", "deepnorm", "keel", "hc", "mhc", "attnres", "block_attnres", "moda"}


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return Catalogue.load()


def test_every_tier_of_the_readme_table_is_catalogued_with_its_shapes(catalogue):
    assert {r.tier for r in catalogue.releases} == {tier for tier, _, _ in README_TABLE}
    for tier, shapes, archs in README_TABLE:
        expected_archs = PAPER_TEN if archs == "all" else {a for name in archs.split(", ") for a in NAMES[name]}
        depth_width = {int(L): int(d) for L, d in re.findall(r"L(\d+)-d(\d+)", shapes)}
        rs = [r for r in catalogue.releases if r.tier == tier]
        assert {r.arch for r in rs} == expected_archs, tier
        assert {(r.arch, r.depth) for r in rs} == {(a, L) for a in expected_archs for L in depth_width}, tier
        for r in rs:
            info = r.shape_info()
            assert (info["L"], info["d"]) == (r.depth, depth_width[r.depth]), (tier, r.shape)
            assert info["d_over_L"] == round(info["d"] / info["L"], 2)
            assert r.final_step == FINAL_STEPS.get(tier), tier
    main_400m = [r for r in catalogue.releases if r.tier == "400M"]
    assert all(r.steps == (0, 3000, 6000, 7600) for r in main_400m)
    assert all(r.arch in ARCHITECTURES for r in catalogue.releases)


def test_names_and_learning_rates_come_with_their_sources(catalogue):
    repos = {r.repo for r in catalogue.releases}
    assert "aspect-ratio-scaling/preln-lr2e-3-llama-400M-L24-pretrain" in repos  # the README's example
    for r in catalogue.releases:
        assert r.sources["release"].startswith("keyu-wang-2002/DepthBench README.md")
        if r.lr is None:  # never guessed: no name, and the entry says why
            assert r.repo is None and any("not stated" in n for n in r.notes), r
            continue
        assert "keyu-wang-2002" in r.sources["lr"] or "README.md" in r.sources["lr"], r.sources["lr"]
        parsed = parse_repo_name(r.repo)
        assert (parsed["arch"], parsed["lr"], parsed["budget"], parsed["depth"]) == (r.arch, r.lr, r.size, r.depth)
    ladders = [r for r in catalogue.releases if r.tier in ("200M", "300M", "500M") and r.arch == "pre_ln"]
    assert ladders and {r.name for r in ladders} == {"base"}  # "Pre-LN uses base at 200M / 300M / 500M"
    lns = next(r for r in catalogue.releases if r.arch == "lns")
    assert "1e-2" in " ".join(lns.notes)  # the launch script's other LR is stated, not hidden


def test_filters_accept_registry_ids_and_the_names_spellings(catalogue):
    by_id = catalogue.select(archs=["pre_ln"], sizes=["400m"])
    assert by_id == catalogue.select(archs=["preln"], sizes=["400M"])
    assert [r.depth for r in by_id] == [16, 20, 24, 28, 32]
    deep = catalogue.select(archs=["attnres"], sizes=["400M"], depths=[32, 70])
    assert [(r.tier, r.depth) for r in deep] == [("400M", 32), ("400M-deep", 70)]
    assert {r.arch for r in catalogue.select(tiers=["1.6B"])} == {"pre_ln", "hc", "attnres"}


@pytest.mark.parametrize("selection,message", [
    ({"archs": ["gpt2"]}, r"'gpt2' is not an architecture; catalogued architectures: pre_ln, peri_ln"),
    ({"archs": ["depth_mup"]}, "registered architecture, but the study's releases of it are not catalogued"),
    ({"sizes": ["7B"]}, r"--size 7B: not in the catalogue; --size is one of 400M, 1.6B, 200M, 300M, 500M$"),
    ({"tiers": ["big"]}, "--tier big: not in the catalogue; --tier is one of 400M, 400M-deep"),
    ({"archs": ["keel"], "depths": [70]}, r"--depth 70: .* depths: 16, 20, 24, 28, 32$"),
])
def test_bad_selections_say_what_exists(catalogue, selection, message):
    with pytest.raises(CatalogueError, match=message):
        catalogue.select(**selection)


def test_published_losses_agree_with_the_sites_own_statements():
    pub = load_published()
    grid = pub["validation_loss"]["grids"]["400m"]
    assert set(grid) == PAPER_TEN and set(pub["labels"]) == PAPER_TEN
    assert all({"16", "20", "24", "28", "32"} <= set(grid[a]) for a in grid)
    # index.html: "validation loss monotonically increases from 2.759 at L = 16 to 2.782 at L = 32" (Pre-LN),
    # "Full AttnRes steadily improves from 2.751 to 2.718, and HC from 2.729 to 2.700", "at 70 layers (d = 640),
    # HC reaches 2.682 and Full AttnRes 2.702", "+0.023 Pre-LN loss, L16 -> L32", "-0.033 Full AttnRes loss"
    assert (published_loss(pub, "pre_ln", "400m", 16), published_loss(pub, "pre_ln", "400m", 32)) == (2.759, 2.782)
    assert (published_loss(pub, "attnres", "400m", 16), published_loss(pub, "attnres", "400m", 32)) == (2.751, 2.718)
    assert (published_loss(pub, "hc", "400m", 16), published_loss(pub, "hc", "400m", 32)) == (2.729, 2.700)
    assert (published_loss(pub, "hc", "400m", 70), published_loss(pub, "attnres", "400m", 70)) == (2.682, 2.702)
    pre = [grid["pre_ln"][str(L)] for L in (16, 20, 24, 28, 32)]
    assert pre == sorted(pre) and round(pre[-1] - pre[0], 3) == 0.023
    assert round(grid["attnres"]["32"] - grid["attnres"]["16"], 3) == -0.033
    assert published_loss(pub, "pre_ln", "400m", 70) is None  # Pre-LN was trained up to L32 only
    assert published_loss(pub, "hc", "300m-backbone", 84) == 2.719


def test_published_completion_nll_names_depthbench_tasks():
    pub = load_published()
    nll = pub["completion_nll"]
    assert set(nll["grids"]["400m"]) == {"coding", "stem", "math"}
    for domain, table in nll["grids"]["400m"].items():
        assert set(table) == PAPER_TEN and all(len(row) == 5 for row in table.values()), domain
        group = nll["tasks"][domain]
        assert (REPO_ROOT / "eval_tasks" / "depthbench_nll" / f"_{group}.yaml").is_file()
    assert published_nll(pub, "hc", "400m", 32) == {"coding": 3.527, "stem": 2.362, "math": 2.858}
    assert published_nll(pub, "hc", "400m", 70) == {}


def test_list_command_table_json_and_errors(capsys):
    assert main(["released", "list", "--arch", "hc", "--size", "400M", "--depth", "24,70", "--no-listing"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["tier", "entries", "named"]  # the per-tier summary first
    assert out[1].split()[:5] == ["400M", "1", "1", "0", "1"] and "Fig. 2 left" in out[1]
    assert out[2].split()[:5] == ["400M-deep", "1", "1", "0", "1"]
    out = out[out.index("") + 1:]
    assert out[0].split()[:4] == ["repo", "arch", "tier", "shape"]
    assert out[1].split()[:4] == ["aspect-ratio-scaling/hc-lr2e-3-llama-400M-L24-pretrain", "hc", "400M", "400m-L24"]
    assert out[2].split()[:6] == ["aspect-ratio-scaling/hc-lr2e-3-llama-400M-L70-pretrain", "hc", "400M-deep",
                                  "400m-L70", "640", "70"]
    assert main(["released", "list", "--tier", "200M", "--depth", "12", "--json", "--no-listing"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert len(entries) == 5 and all(e["repo"] is None and e["lr"] is None for e in entries)
    assert {e["shape"] for e in entries} == {"200m-L12"} and entries[0]["d"] == 896 and entries[0]["final_step"] == 3800
    assert main(["released", "list", "--arch", "nope"]) == 2
    assert "catalogued architectures" in capsys.readouterr().err
    assert main(["released"]) == 2  # no subcommand: the usage


def test_a_malformed_catalogue_file_is_a_clear_error(tmp_path):
    path = tmp_path / "catalogue.json"
    path.write_text(json.dumps({"org": "x", "groups": [{"tier": "a"}]}))
    with pytest.raises(CatalogueError, match="catalogue .*catalogue.json is malformed: KeyError"):
        Catalogue.load(path)
