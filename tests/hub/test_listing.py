"""``depthbench released sync``: the organisation's Hub listing read through huggingface_hub from the loopback Hub
(tests/hub/hub_server.py) holding the synthetic organisation of tests/hub/synthetic_org.py (161 repositories), and
merged into the catalogue by ``released list`` / ``eval``.

The listing is checked against the organisation as it was built (``build_org``'s truth per repository), not
against our own parser: every repository is found (pages of the listing followed), names that do not parse and the
repository without a checkpoint are kept, the private repository shows only with a token, root-stored checkpoints
are told from per-step ones, and a shape is matched by its config.json (the HC L16 run labelled 400M is the
300M-backbone shape). A network failure in the middle and an endpoint that is down leave the previous overlay
byte for byte, with a one-line error and a non-zero exit.

Run: ``python -m pytest tests/hub/test_listing.py -q``
"""

from __future__ import annotations

import json
import socket

import pytest

from depthbench.cli import main
from depthbench.hub.catalogue import Catalogue
from depthbench.hub.listing import ListingError, load_listing, sync
from tests.hub.hub_server import HubServer
from tests.hub.synthetic_org import ORG, PRIVATE, UNPARSABLE, WITHOUT_CHECKPOINT, build_org, publish_org

TODAY = "2026-05-01"


@pytest.fixture(scope="module")
def org():
    return build_org()


@pytest.fixture(scope="module")
def hub(org):
    with HubServer() as server:
        publish_org(server, org)
        yield server


@pytest.fixture(autouse=True)
def _no_retry_waits(monkeypatch):
    import huggingface_hub.utils._http as http

    monkeypatch.setattr(http.time, "sleep", lambda s: None)  # huggingface_hub retries 5xx answers: no waiting


@pytest.fixture
def synced(hub, tmp_path):
    path = tmp_path / "listing.json"
    listing = sync(endpoint=hub.url, token=False, path=str(path), log=lambda *_: None, today=TODAY)
    return path, listing


def test_sync_finds_every_public_repository_as_it_was_built(synced, org, hub):
    path, listing = synced
    public = {repo for repo, spec in org.items() if not spec["private"]}
    assert len(public) >= 160
    assert {r["repo"] for r in listing["repos"]} == public
    assert sum(1 for m, p in hub.requests if p == "/api/models") >= 4  # 160 repositories: 4 pages of 50, followed
    by_repo = {r["repo"]: r for r in listing["repos"]}
    for repo in public:
        truth, got = org[repo]["truth"], by_repo[repo]
        if truth is None:
            continue
        assert (got["arch"], got["lr"], got["depth"], got["variant"]) == (truth["arch"], truth["lr"], truth["depth"],
                                                                         truth["variant"]), repo
        assert got["storage"] == truth["storage"], repo
        assert got["final_step"] == truth["steps"][-1], repo
        assert got["steps"] == ([] if truth["storage"] == "root" else truth["steps"]), repo
        assert got["config"]["d"] == truth["d"] and got["config"]["heads"] == 16, repo
        files = org[repo]["files"]
        key = "root" if truth["storage"] == "root" else str(truth["steps"][-1])
        prefix = "" if key == "root" else f"step{key}/"
        assert got["bytes"][key] == sum(len(v) for p, v in files.items() if p.startswith(f"{prefix}model_and_optim/"))
    for name in UNPARSABLE:
        assert "does not follow" in by_repo[f"{ORG}/{name}"]["parse_error"] or \
            "unknown architecture" in by_repo[f"{ORG}/{name}"]["parse_error"]
    assert by_repo[f"{ORG}/{WITHOUT_CHECKPOINT}"]["storage"] is None
    assert load_listing(str(path)) == json.loads(path.read_text())


def test_a_private_repository_is_listed_only_with_a_token(hub, tmp_path):
    listing = sync(endpoint=hub.url, token="hf_read_x", path=str(tmp_path / "l.json"), log=lambda *_: None)
    private = [r for r in listing["repos"] if r["private"]]
    assert [r["repo"] for r in private] == [f"{ORG}/{PRIVATE}"]


def test_the_merged_catalogue_names_every_entry_with_sources(synced):
    _, listing = synced
    base = Catalogue.load()
    merged = base.with_listing(listing)
    assert sum(r.repo is None for r in base.releases) == 62
    assert all(r.repo is not None for r in merged.releases)  # every tier's names found on the Hub
    for r in merged.releases:
        assert r.storage in ("steps", "root")
        assert f"from the Hub listing of {ORG}" in r.sources["name"] and TODAY in r.sources["name"]
    sixteen = [r for r in merged.releases if r.tier == "1.6B" and r.arch == "pre_ln" and r.depth == 28]
    assert sorted(r.lr for r in sixteen) == [1e-3, 2e-3]  # two LRs of one shape: two entries
    hc24 = sorted(r.lr for r in merged.releases if (r.arch, r.shape) == ("hc", "400m-L24"))
    assert hc24 == [1e-3, 2e-3, 4e-3]
    lns = sorted(r.lr for r in merged.releases if (r.arch, r.shape) == ("lns", "400m-L32"))
    assert lns == [2e-3, 1e-2]
    moda = [r for r in merged.releases if r.arch == "moda" and r.variant is None]
    assert {r.repo.split("/")[1].split("-lr")[0] for r in moda} == {"prenorm-moda"}
    post = [r for r in merged.releases if r.variant == "post_norm"]
    assert [r.depth for r in post] == [16, 20, 24, 28, 32] and {r.shape for r in post} == {
        f"400m-L{d}-postnorm" for d in (16, 20, 24, 28, 32)}
    backbone16 = [r for r in merged.releases if r.tier == "300M-backbone" and r.depth == 16]
    assert {r.repo for r in backbone16} == {f"{ORG}/hc-lr3e-3-llama-400M-L16-pretrain",
                                            f"{ORG}/mhc-lr3e-3-llama-400M-L16-pretrain"}
    assert all(r.shape_info()["d"] == 1248 for r in backbone16)  # matched by its config.json, not its name
    deep = [r for r in merged.releases if r.tier == "400M-deep"]
    assert deep and all(r.storage == "root" and r.final_step == 7600 for r in deep)
    assert merged.facts["listing"]["without_checkpoint"] == [f"{ORG}/{WITHOUT_CHECKPOINT}"]
    assert {u["repo"] for u in merged.facts["listing"]["unparsed"]} == {f"{ORG}/{n}" for n in UNPARSABLE}


def test_list_shows_the_summary_and_the_listing_offline(synced, capsys):
    path, listing = synced
    # no endpoint at all from here: list reads only the overlay
    assert main(["released", "list", "--listing", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["tier", "entries", "named", "name"]
    assert lines[1].startswith("400M ") and "Fig. 2 left" in lines[1]
    assert any(line.startswith("1.6B ") and "Fig. 3" in line for line in lines[:9])
    assert f"synced {TODAY}" in out
    for repo, spec in build_org().items():
        if not spec["private"]:
            assert repo in out, repo  # every listed repository is shown, unparsable ones included
    assert "listed names that do not parse (3" in out and "without any checkpoint (1)" in out
    assert main(["released", "list", "--listing", str(path), "--arch", "postnorm-moda", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["variant"] for e in entries] == ["post_norm"] * 5


def test_a_failure_in_the_middle_leaves_the_previous_overlay(synced, hub, capsys):
    path, _ = synced
    before = path.read_bytes()
    hub.fail_read(r"/tree/", skip=40)
    try:
        with pytest.raises(ListingError, match=r"\(41 of 162\).*the previous listing .* is unchanged"):
            sync(endpoint=hub.url, token=False, path=str(path), log=lambda *_: None)
        assert path.read_bytes() == before
        assert main(["released", "sync", "--endpoint", hub.url, "--listing", str(path)]) == 1
        err = capsys.readouterr().err.strip().splitlines()  # progress and huggingface_hub's retries, then the error
        errors = [line for line in err if "error:" in line]
        assert errors == [err[-1]] and "failed" in err[-1] and "unchanged" in err[-1]
        assert path.read_bytes() == before
    finally:
        hub.heal()


def test_an_endpoint_that_is_down_is_one_line_and_writes_nothing(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    path = tmp_path / "listing.json"
    assert main(["released", "sync", "--endpoint", f"http://127.0.0.1:{port}", "--listing", str(path)]) == 1
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "error:" in line]
    assert len(err) == 1 and "could not list the repositories" in err[0] and "no listing was written" in err[0]
    assert not path.exists() and not list(tmp_path.iterdir())
