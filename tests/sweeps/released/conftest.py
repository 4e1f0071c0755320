"""Fixtures of ``depthbench released eval``'s tests: the loopback Hub serving the releases of
``tests/sweeps/released/releases.py``, and all three measured into one folder (built once for the folder's test
files)."""

from __future__ import annotations

import json

import pytest

from depthbench.data import make_tiny_tokenizer, prepare_data
from depthbench.hub.catalogue import Catalogue
from depthbench.sweeps.released.measure import Measurement, Tasks, evaluate_releases
from depthbench.sweeps.released.selection import select_targets
from tests.helpers import pydoc_paragraphs
from tests.hub.hub_server import HubServer
from tests.sweeps.released.releases import (
    CATALOGUE,
    NLL_FIXTURES,
    PUBLISHED,
    RELEASES,
    SEQ_LEN,
    files_of,
    hub_of,
    repo_of,
    write_release,
)


@pytest.fixture(autouse=True, scope="module")
def online_to_the_loopback_hub():
    """Other test modules set ``HF_HUB_OFFLINE=1`` when they are imported (huggingface_hub reads it once, at its own
    import, so it depends on the collection order); these tests reach only the loopback Hub on 127.0.0.1."""
    from huggingface_hub import constants

    offline, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, False
    yield
    constants.HF_HUB_OFFLINE = offline


@pytest.fixture(scope="session")
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


@pytest.fixture(scope="session")
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
