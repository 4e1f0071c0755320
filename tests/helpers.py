"""Shared test utilities: the tiny backbone shape, model/config builders, inputs, and a tiny tokenizer.

Every contract test builds its models through :func:`tiny_config` / :func:`tiny_model`, so all architectures are
exercised at the same small shape (only backbone fields are set; architecture-specific fields keep their defaults).
Architectures are never listed here: :data:`ARCH_IDS` is read from the registry.

Run the suite that uses these helpers with::

    python -m pytest tests/modeling/test_contract.py tests/modeling/test_remote_code.py tests/modeling/test_lm_eval.py \
        tests/modeling/test_hf_trainer.py \
        tests/test_registry.py -q
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from depthbench.data import make_tiny_tokenizer, prepare_data
from depthbench.registry import ARCHITECTURES

#: The repository checkout and the tests' fixture folder (test files live in sub-folders: use these, not parents[N]).
REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"


#: The start of a child-process script that must run without depthbench: every ``import depthbench...`` fails, and
#: ``depthbench_blocked`` says that the block works (remote-code and export checks prepend it to their scripts).
BLOCK_DEPTHBENCH = r'''
import importlib.abc, sys


class _BlockDepthbench(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "depthbench" or name.startswith("depthbench."):
            raise ImportError(f"{name} is blocked: this must load without depthbench")
        return None


sys.meta_path.insert(0, _BlockDepthbench())
try:
    import depthbench  # noqa: F401
    depthbench_blocked = False
except ImportError:
    depthbench_blocked = True
'''

ARCH_IDS: list[str] = list(ARCHITECTURES)
"""Every registered architecture id, in registry order (the contract is parametrized over this list)."""

TINY: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
"""Backbone fields of the tiny contract shape (GQA: 4 query heads share 2 key/value heads, head_dim 16)."""

TOKENIZER_VOCAB = 128
"""Vocabulary of the tiny test tokenizer; must not exceed ``TINY["vocab_size"]``."""

TOKENIZER_TEXTS: list[str] = [
    "the cat sat on the mat. the dog sat on the log.",
    "a bird can fly over the tree and the house.",
    "Question: what is the colour of the sky? Answer: blue.",
    "water is wet, fire is hot, ice is cold and snow is white.",
    "one two three four five six seven eight nine ten.",
    "The quick brown fox jumps over the lazy dog! 0123456789",
    "Which animal barks? A dog barks. Which animal meows? A cat meows.",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz ,.;:?!'\"-()\n",
]
"""Training text of the tiny tokenizer; its characters are the tokenizer's whole alphabet."""


def arch_config_class(arch_id: str) -> type:
    """The registered config class of ``arch_id``."""
    return ARCHITECTURES[arch_id].config_class


def tiny_config(arch_id: str, **overrides: Any):
    """The architecture's config at the tiny shape (``TINY`` plus ``overrides``); other fields keep defaults."""
    return arch_config_class(arch_id)(**{**TINY, **overrides})


def tiny_model(arch_id: str, seed: int = 0, attn_implementation: str | None = None, **overrides: Any):
    """A freshly initialised tiny causal LM of ``arch_id`` in fp32 and eval mode (deterministic in ``seed``)."""
    config = tiny_config(arch_id, **overrides)
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = ARCHITECTURES[arch_id].causal_lm_class(config)
    return model.float().eval()


def random_ids(batch: int, length: int, seed: int = 0, vocab_size: int = TINY["vocab_size"]) -> torch.Tensor:
    """Deterministic random token ids ``[batch, length]`` that avoid id 0 (kept free for padding)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab_size, (batch, length), generator=generator)


def left_pad(rows: list[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad 1-D id tensors to a batch; returns ``(input_ids, attention_mask)``."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = row
        mask[i, width - len(row):] = 1
    return ids, mask


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids as ``generate`` builds them from a (left-padded) mask: ``cumsum(mask) - 1``, pads at 1."""
    position_ids = attention_mask.long().cumsum(-1) - 1
    return position_ids.masked_fill(attention_mask == 0, 1)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` in float64 (0.0 for empty tensors)."""
    if a.numel() == 0:
        return 0.0
    return (a.double() - b.double()).abs().max().item()


# ------------------------------------------------------------------------------------------------ tiny tokenizer
def make_tokenizer(
    save_dir: str | os.PathLike | None = None,
    texts: Iterable[str] = TOKENIZER_TEXTS,
    vocab_size: int = TOKENIZER_VOCAB,
):
    """A deterministic byte-level BPE tokenizer with at most ``vocab_size`` tokens (EOS id 0, PAD id 1): the
    package's ``depthbench.data.make_tiny_tokenizer`` with the alphabet restricted to the bytes of ``texts`` (the
    full 256-byte alphabet does not fit the 128-token test model). Text outside that alphabet is not encodable; the
    tests only encode such text.
    """
    return make_tiny_tokenizer(texts, vocab_size=vocab_size, save_dir=None if save_dir is None else str(save_dir),
                               full_alphabet=False)


def save_tiny_checkpoint(model, directory: str | os.PathLike, tokenizer=None) -> Path:
    """``save_pretrained`` the model (and tokenizer) into ``directory``; returns the directory."""
    directory = Path(directory)
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return directory


# ------------------------------------------------------------------------------------------- training fixtures
# Backbone fields of the tiny models the trainer tests train (vocab comes from the data's tokenizer).
TINY_FIELDS = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "max_position_embeddings": 64}


def make_train_data(path: Path, max_topics: int = 40) -> Path:
    """A small prepared corpus (train, eval, eval_synthetic splits) with a 300-token BPE tokenizer."""
    from pydoc_data.topics import topics

    paragraphs = [" ".join(p.split()) for t in list(topics.values())[:max_topics] for p in t.split("\n\n")]
    src = path.parent / f"{path.name}_src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "train.txt").write_text("\n".join(p for p in paragraphs if p) + "\n")
    (src / "synthetic.txt").write_text("".join(f"{i} plus {i} is {2 * i}.\n" for i in range(300)))
    tok = make_tiny_tokenizer(paragraphs, vocab_size=300)
    prepare_data([str(src / "train.txt")], tok, str(path), eval_fraction=0.1,
                 extra_splits={"eval_synthetic": [str(src / "synthetic.txt")]}, progress=False)
    return path


# ------------------------------------------------------------------------------ per-architecture math tests
def build_tiny(arch_id: str, fields: dict[str, Any], seed: int = 0, **overrides: Any):
    """A fresh fp32 eval-mode model of ``arch_id`` from ``fields`` plus ``overrides`` (deterministic in ``seed``);
    the per-architecture test files pass their own small shape as ``fields``."""
    torch.manual_seed(seed)
    arch = ARCHITECTURES[arch_id]
    return arch.causal_lm_class(arch.config_class(**{**fields, **overrides})).float().eval()


def seeded_ids(vocab_size: int, batch: int, length: int, seed: int, low: int = 1) -> torch.Tensor:
    """Deterministic token ids in ``[low, vocab_size)`` of shape ``[batch, length]``."""
    return torch.randint(low, vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def eval_logits(model, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:
    """Logits of a full forward without a KV cache (``kwargs`` go to the model)."""
    return model(input_ids=input_ids, use_cache=False, **kwargs).logits


def cache_of(output):
    """The KV cache of a model or generate output (field ``cache`` in transformers 5.24, else ``past_key_values``)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def greedy(model, input_ids: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
    """Exactly ``max_new_tokens`` greedy tokens (no EOS stop)."""
    return model.generate(
        input_ids=input_ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
        pad_token_id=0, eos_token_id=None, **kwargs,
    )


# ------------------------------------------------------------------------------------------- data pipeline
def pydoc_texts() -> list[str]:
    """The topic texts of the standard library's ``pydoc_data`` (~1 MB of prose, fixed for a Python minor
    version): the corpus of the data pipeline's tests."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def pydoc_paragraphs(n: int | None = None) -> list[str]:
    """The first ``n`` (default: all) non-empty paragraphs of :func:`pydoc_texts`."""
    paras = [p.strip() for t in pydoc_texts() for p in t.split("\n\n") if p.strip()]
    return paras[:n] if n is not None else paras


def write_jsonl(path: str | os.PathLike, texts: Iterable[str], field: str = "text") -> str:
    """Write ``texts`` as JSON lines ``{field: text, "id": ...}`` to ``path``; returns the path."""
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({field: t, "id": len(t)}) + "\n")
    return str(path)


def read_split(data_dir: str | os.PathLike, split: str = "train") -> np.ndarray:
    """The whole token stream of one split of a prepared data folder."""
    from depthbench.data import TokenShards

    shards = TokenShards(data_dir, split)
    return shards.read(0, shards.num_tokens)


def split_documents(stream: np.ndarray, eos: int) -> list[list[int]]:
    """The documents of a token stream (each ending in its EOS); fails unless the stream ends with EOS."""
    ends = np.flatnonzero(stream == eos)
    docs, start = [], 0
    for e in ends:
        docs.append(stream[start : e + 1].tolist())
        start = e + 1
    assert start == len(stream), "stream must end with EOS"
    return docs


def expected_ids(tok, text: str) -> list[int]:
    """The ids ``prepare_data`` writes for one document: the tokenizer's ids, ending in exactly one EOS."""
    ids = tok(text, add_special_tokens=True)["input_ids"]
    return ids if ids and ids[-1] == tok.eos_token_id else ids + [tok.eos_token_id]


class BigVocabTokenizer:
    """Character-level fake tokenizer with a > 65536 vocabulary (ids above the uint16 range)."""

    name_or_path = "big-vocab"
    eos_token_id = 70_000
    pad_token_id = 70_001
    bos_token_id = None

    def __len__(self):
        return 70_002

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[65_000 + ord(c) for c in t] for t in texts]}

    def get_vocab(self):
        return {"<big>": 0}

    def save_pretrained(self, path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "fake.json"), "w") as f:
            f.write("{}")
