"""Held-out loss of a model on a prepared token-shard folder (``depthbench prepare-data``), and the check that the
folder was tokenized with the model's own tokenizer (a loss over another tokenizer's ids means nothing).

The loss is the study's validation metric (arXiv 2609.32534, Figure 2): mean next-token cross-entropy in nats per
token over consecutive, non-overlapping ``seq_len``-token windows of the split's concatenated token stream
(documents EOS-separated, no masking across documents), as the trainer's own evaluation computes it
(``depthbench.training.run.Run.evaluate``); windows are taken in order, so the figure is deterministic.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

from depthbench import runs
from depthbench.data.loader import TokenShards, TokenWindows
from depthbench.errors import Failed


class HeldOutDataError(ValueError):
    """The held-out folder cannot be used (not prepared, no such split, too short; the message says what to do)."""


class NonFiniteLoss(Failed):
    """The model's loss on the held-out data is not finite (a failure of the measurement, not bad input)."""


class TokenizerMismatch(ValueError):
    """The held-out folder was tokenized with another tokenizer than the release's (the message names both)."""


def open_heldout(data_dir: str, split: str) -> TokenShards:
    """The ``split`` of the prepared folder ``data_dir``, with errors that say what to pass instead."""
    if not os.path.isfile(os.path.join(data_dir, runs.DATA_META)):
        raise HeldOutDataError(f"--data {data_dir} is not a prepared token-shard folder (no meta.json): prepare the "
                               "held-out text with `depthbench prepare-data FILES --tokenizer <the release's "
                               "tokenizer> -o DIR` (docs/hub.md)")
    try:
        return TokenShards(data_dir, split)
    except KeyError:
        from depthbench.data.loader import load_meta

        splits = sorted(load_meta(data_dir)["splits"])
        raise HeldOutDataError(f"--data {data_dir} has no split {split!r}; its splits: {', '.join(splits)}. Prepare "
                               "the held-out file with --eval-files, or pass --split NAME when a split holds "
                               "only held-out text") from None


# ================================================================================================ tokenizer check
def _tokenizer_facts(path: str | None) -> dict[str, Any] | None:
    """``{"vocab", "eos"}`` of the tokenizer saved in ``path`` (``None`` when there is none or it cannot load)."""
    if not path or not os.path.isdir(path) or not os.listdir(path):
        return None
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError):
        return None
    return {"vocab": tokenizer.get_vocab(), "eos": tokenizer.eos_token_id}


def check_tokenizer(shards: TokenShards, release: str, release_tokenizer_dir: str | None,
                    release_config: dict[str, Any] | None) -> dict[str, Any]:
    """Whether ``shards`` was tokenized with the release's tokenizer: ``{"status", "detail"}``.

    ``status`` is ``"match"`` (both tokenizers load and have the same vocabulary and EOS id), ``"ids-match"`` (the
    release has no loadable tokenizer, but its ``config.json`` ``dataset.tokenizer`` vocabulary size and EOS id
    equal the folder's) or ``"unchecked"`` (neither is available). Raises :class:`TokenizerMismatch` otherwise.
    """
    meta = shards.meta
    ours = _tokenizer_facts(shards.tokenizer_dir)
    theirs = _tokenizer_facts(release_tokenizer_dir)
    fix = (f"prepare the held-out text with the release's tokenizer: depthbench prepare-data FILES --tokenizer "
           f"{release_tokenizer_dir or '<its tokenizer>'} --eval-files HELD_OUT -o DIR")
    data_name = f"{shards.data_dir} (tokenizer {meta.get('tokenizer')}, {meta.get('vocab_size')} tokens, EOS " \
                f"{meta.get('eos_token_id')})"
    if ours is not None and theirs is not None:
        differ = sum(ours["vocab"].get(t) != i for t, i in theirs["vocab"].items())
        if differ or len(ours["vocab"]) != len(theirs["vocab"]) or ours["eos"] != theirs["eos"]:
            raise TokenizerMismatch(f"{data_name} was not tokenized with the tokenizer of {release} "
                                    f"({len(theirs['vocab'])} tokens, EOS {theirs['eos']}; {differ} token ids "
                                    f"differ): its held-out loss on this folder would mean nothing; {fix}")
        return {"status": "match", "detail": f"same vocabulary ({len(ours['vocab'])} tokens) and EOS id "
                                             f"{ours['eos']} as the release's tokenizer/"}
    tok = ((release_config or {}).get("dataset") or {}).get("tokenizer") or {}
    if "vocab_size" in tok or "eos_token_id" in tok:
        pairs = [("vocab size", meta.get("vocab_size"), tok.get("vocab_size")),
                 ("EOS id", meta.get("eos_token_id"), tok.get("eos_token_id"))]
        bad = [f"{what} {a} here, {b} in the release" for what, a, b in pairs if b is not None and a != b]
        if bad:
            raise TokenizerMismatch(f"{data_name} does not match the tokenizer of {release} ({'; '.join(bad)}; "
                                    f"from its config.json dataset.tokenizer): {fix}")
        return {"status": "ids-match", "detail": "the release has no loadable tokenizer/; its config.json "
                                                 "dataset.tokenizer vocab size and EOS id match (the vocabularies "
                                                 "themselves were not compared)"}
    return {"status": "unchecked", "detail": "neither a loadable tokenizer/ in the release nor dataset.tokenizer in "
                                             "its config.json: the tokenizer could not be checked"}


# ================================================================================================ loss
def heldout_loss(model, shards: TokenShards, seq_len: int, *, max_tokens: int | None = None, batch_size: int = 8,
                 progress: Callable[[int, int], Any] | None = None) -> dict[str, Any]:
    """Mean next-token loss of ``model`` over the first windows of ``shards`` (all, or those within
    ``max_tokens``): ``{"loss", "windows", "tokens" (scored), "seq_len", "seconds"}``. ``progress`` is called
    with ``(windows done, windows in all)`` after each batch."""
    import torch

    windows = TokenWindows(shards, seq_len)
    n = len(windows) if max_tokens is None else min(len(windows), max_tokens // seq_len)
    if n < 1:
        raise HeldOutDataError(f"split {shards.split!r} of {shards.data_dir} holds {shards.num_tokens} tokens, "
                               f"{'--max-tokens ' + str(max_tokens) if max_tokens is not None else 'fewer'} than "
                               f"one {seq_len}-token window: pass a smaller --seq-len or more data")
    shards.vocab_limit = int(model.config.vocab_size)  # an id the model cannot embed is an error naming the shard
    device = next(model.parameters()).device
    total, t0 = 0.0, time.perf_counter()
    model.eval()
    with torch.no_grad():
        for start in range(0, n, batch_size):
            ids = windows.get_batch(range(start, min(n, start + batch_size))).to(device)
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            total += float(loss.double()) * ids.shape[0] * (seq_len - 1)
            if progress is not None:
                progress(min(n, start + batch_size), n)
    tokens = n * (seq_len - 1)
    loss = total / tokens
    if not math.isfinite(loss):
        raise NonFiniteLoss(f"the held-out loss is {loss} (non-finite logits): try --dtype float32")
    return {"loss": loss, "windows": n, "tokens": tokens, "seq_len": seq_len,
            "seconds": round(time.perf_counter() - t0, 2)}
