"""pytest configuration for depthbench: the ``slow`` marker switch and the shared, session-scoped checkpoints.

Expensive artefacts are built once per test session and only for the architectures the session actually runs
(``-k pre_ln`` builds one, a full run builds all):

* ``checkpoints``: a lazy store of saved tiny checkpoints (model + tokenizer + reference logits) per architecture,
  used by the remote-code, lm-eval, loading and bf16 tests.
* ``selected_arch_ids``: the architecture ids of the collected tests, in registry order.
* ``hub_run``: one tiny HC training run with HF exports (2 checkpoints + ``final/``), for the model-card tests
  (tests/test_cards.py) and ``depthbench publish``'s (tests/hub/test_publish.py).

Slow tests (``@pytest.mark.slow``) are skipped unless ``--runslow`` is given or ``DEPTHBENCH_RUN_SLOW=1``.
Inductor-compile tests (``@pytest.mark.compile``: minutes each on 2 CPU cores, too many for CI's budget) are
skipped unless ``--runcompile`` is given or ``DEPTHBENCH_RUN_COMPILE=1``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

# A private Hugging Face home for the session (set before anything imports huggingface_hub, which reads it once): the
# tests' conversions, Hub listings and tokenizer checks never touch the user's cache, and none leaks between runs.
if not os.environ.get("DEPTHBENCH_TEST_KEEP_HF_HOME"):
    _HF_HOME = tempfile.mkdtemp(prefix="depthbench-tests-hf-home-")
    os.environ["HF_HOME"] = _HF_HOME
    atexit.register(shutil.rmtree, _HF_HOME, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine OpenMP spin-waiting against other
# processes made a 10-token generate() ~50x slower (10 s instead of 0.2 s). One thread, for us and subprocesses.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

# `helpers` (and through it the registry) is imported lazily, so a broken architecture file cannot stop the
# collection of unrelated test files.

_SELECTED_KEY = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")
    parser.addoption("--runcompile", action="store_true", default=False,
                     help="also run tests marked compile (inductor compilation, minutes each on CPU)")


@pytest.hookimpl(trylast=True)  # after -k / -m deselection, so only the archs that will run are counted
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = config.getoption("--runslow") or os.environ.get("DEPTHBENCH_RUN_SLOW") == "1"
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow or DEPTHBENCH_RUN_SLOW=1")
    run_compile = config.getoption("--runcompile") or os.environ.get("DEPTHBENCH_RUN_COMPILE") == "1"
    skip_compile = pytest.mark.skip(reason="compile: run with --runcompile or DEPTHBENCH_RUN_COMPILE=1")
    selected: set[str] = set()
    for item in items:
        if item.get_closest_marker("compile") is not None and not run_compile:
            item.add_marker(skip_compile)
            continue
        if item.get_closest_marker("slow") is not None and not run_slow:
            item.add_marker(skip_slow)
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "arch_id" in callspec.params:
            selected.add(callspec.params["arch_id"])
    config.stash[_SELECTED_KEY] = sorted(selected)


@pytest.fixture(scope="session")
def train_data(tmp_path_factory) -> Path:
    """A small prepared corpus (``tests.helpers.make_train_data``: train, eval and eval_synthetic splits, a 300-token
    tokenizer), built once per session for the tests of the trainer's parts; a test that alters it copies it first
    (``tests.tiny_runs.copy_data``)."""
    from tests.helpers import make_train_data

    return make_train_data(tmp_path_factory.mktemp("train_data") / "data")


@pytest.fixture(scope="session")
def selected_arch_ids(request: pytest.FixtureRequest) -> list[str]:
    """Architecture ids the collected tests are parametrized with, in registry order (all ids if none)."""
    from tests.helpers import ARCH_IDS

    selected = set(request.config.stash.get(_SELECTED_KEY, []))
    return [a for a in ARCH_IDS if a in selected] or list(ARCH_IDS)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same global torch RNG state."""
    torch.manual_seed(0)


@dataclass
class Checkpoint:
    """A saved tiny checkpoint: ``path`` (model + tokenizer), reference ``input_ids`` and fp32 ``logits``."""

    arch_id: str
    path: Path
    input_ids: torch.Tensor
    logits: torch.Tensor
    ref_path: Path


class CheckpointStore:
    """Builds and saves one tiny checkpoint per architecture on first request (session lifetime)."""

    def __init__(self, root: Path):
        self.root = root
        self._cache: dict[str, Checkpoint] = {}
        self._tokenizer = None

    @property
    def tokenizer(self):
        from tests.helpers import make_tokenizer

        if self._tokenizer is None:
            self._tokenizer = make_tokenizer(self.root / "tokenizer")
        return self._tokenizer

    def get(self, arch_id: str) -> Checkpoint:
        from tests.helpers import random_ids, save_tiny_checkpoint, tiny_model

        if arch_id not in self._cache:
            model = tiny_model(arch_id, seed=0)
            path = save_tiny_checkpoint(model, self.root / f"ckpt_{arch_id}", self.tokenizer)
            input_ids = random_ids(2, 10, seed=123)
            with torch.no_grad():
                logits = model(input_ids=input_ids, use_cache=False).logits
            ref_path = self.root / f"ref_{arch_id}.pt"
            torch.save({"input_ids": input_ids, "logits": logits}, ref_path)
            self._cache[arch_id] = Checkpoint(arch_id, path, input_ids, logits, ref_path)
        return self._cache[arch_id]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> CheckpointStore:
    """Lazily saved tiny checkpoints, one per architecture (see :class:`CheckpointStore`)."""
    return CheckpointStore(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="session")
def hub_run(tmp_path_factory) -> Path:
    """A finished tiny HC run (4 steps, held-out eval and an HF export every 2), trained once per session; tests
    that alter it copy it first."""
    from depthbench.config import load_run_config
    from depthbench.training.trainer import train
    from tests.helpers import TINY_FIELDS, make_train_data

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
