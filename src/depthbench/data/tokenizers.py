"""Tokenizers of the data pipeline: loading one (object, folder or Hub id), saving it self-describing
(``tokenizer_config.json`` names its class and the model's maximum length), the fingerprint that identifies its
behaviour in a preparation's configuration, and :func:`make_tiny_tokenizer`, the tiny deterministic BPE of the tests
and the offline demo. transformers and tokenizers are imported only by the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from typing import Any

from depthbench import atomic

EOS_TOKEN = "<|endoftext|>"
"""EOS token of :func:`make_tiny_tokenizer`."""

PAD_TOKEN = "<|pad|>"
"""PAD token of :func:`make_tiny_tokenizer` (distinct from EOS so label masking never hides EOS)."""

TOKENIZER_CONFIG = "tokenizer_config.json"


def finalize_tokenizer_config(directory: str, tokenizer_class: str | None = None,
                              model_max_length: int | None = None) -> dict:
    """Make a saved tokenizer self-describing: ``tokenizer_config.json`` in ``directory`` names its class (so
    ``AutoTokenizer`` picks it from the file, with no model config or package needed) and, when given, the
    maximum length of the model it belongs to (instead of transformers' "unset" 1e30, which lets users encode
    past the model's context without a warning). Returns the updated config; other fields are kept.

    Raises:
        ValueError: ``directory`` holds no tokenizer_config.json (or an invalid one), or ``model_max_length`` is not
            a positive int.
    """
    path = os.path.join(directory, TOKENIZER_CONFIG)
    if not os.path.isfile(path):
        raise ValueError(f"{directory} holds no {TOKENIZER_CONFIG}: save the tokenizer there first")
    if model_max_length is not None and (isinstance(model_max_length, bool) or not isinstance(model_max_length, int)
                                         or model_max_length < 1):
        raise ValueError(f"model_max_length={model_max_length!r} is not allowed: it must be a positive integer (the "
                         "model's context length, e.g. its config.max_position_embeddings)")
    config = atomic.read_json(path)
    if tokenizer_class is not None:
        config["tokenizer_class"] = tokenizer_class
    config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    if model_max_length is not None:
        config["model_max_length"] = model_max_length
    atomic.write_json(path, config, sort_keys=True)
    return config


def save_tokenizer(tokenizer: Any, directory: str, model_max_length: int | None = None) -> None:
    """``tokenizer.save_pretrained(directory)`` plus :func:`finalize_tokenizer_config` (its class and, when given,
    the model's maximum length, also set on ``tokenizer`` itself)."""
    if model_max_length is not None:
        tokenizer.model_max_length = model_max_length
    tokenizer.save_pretrained(str(directory))
    if os.path.isfile(os.path.join(str(directory), TOKENIZER_CONFIG)):  # a transformers tokenizer (not a stand-in)
        finalize_tokenizer_config(str(directory), type(tokenizer).__name__, model_max_length)


def make_tiny_tokenizer(texts: Iterable[str], vocab_size: int = 512, save_dir: str | None = None, *,
                        full_alphabet: bool = True, model_max_length: int | None = None) -> Any:
    """Train a small deterministic byte-level BPE tokenizer.

    The tokenizer has two special tokens, ``<|endoftext|>`` (EOS, id 0) and ``<|pad|>`` (PAD, id 1). With
    ``full_alphabet`` (the default) it holds the full 256-symbol byte alphabet, so it can encode any text;
    without, its alphabet is only the bytes occurring in ``texts`` (for vocabularies below 258, e.g. the
    128-token models of the tests; text with other bytes is then not encodable). Training on ~1 MB of text
    takes well under a second and is deterministic (same texts and vocab size give the same tokenizer).

    Args:
        texts: Training texts.
        vocab_size: Target vocabulary size including the two special tokens; at least 258 with
            ``full_alphabet``, else at least the number of distinct bytes of ``texts`` plus 2.
        save_dir: If given, the tokenizer is saved there with ``save_pretrained`` and that path becomes
            its ``name_or_path``.
        full_alphabet: Keep all 256 bytes in the alphabet (``False``: only the bytes of ``texts``).
        model_max_length: The context length of the model the tokenizer is for (saved with it); ``None`` leaves
            transformers' "unset" value.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``eos_token`` and ``pad_token`` set.

    Raises:
        ValueError: If ``vocab_size`` is smaller than the alphabet plus the two special tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    texts, alphabet, limit = _bpe_alphabet(texts, vocab_size, full_alphabet)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=alphabet,
        **limit,
    )
    tok.train_from_iterator(iter(texts), trainer)
    kwargs: dict[str, Any] = {}
    if save_dir is not None:
        kwargs["name_or_path"] = str(save_dir)
    if model_max_length is not None:
        kwargs["model_max_length"] = model_max_length
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, **kwargs)
    if save_dir is not None:
        save_tokenizer(fast, str(save_dir), model_max_length)
    return fast


def _bpe_alphabet(texts: Iterable[str], vocab_size: int, full_alphabet: bool) -> tuple[Iterable[str], list, dict]:
    """``(texts, initial alphabet, extra BpeTrainer arguments)`` of :func:`make_tiny_tokenizer` (``texts`` is
    returned as a list when it had to be read to find its bytes)."""
    from tokenizers import pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if full_alphabet:
        alphabet, limit = sorted(pre_tokenizers.ByteLevel.alphabet()), {}
        if vocab_size < len(alphabet) + 2:
            raise ValueError(f"vocab_size must be >= {len(alphabet) + 2} (256 bytes + 2 special tokens), got "
                             f"{vocab_size}")
    else:
        texts = list(texts)
        alphabet = sorted({ch for text in texts for piece, _ in byte_level.pre_tokenize_str(text) for ch in piece})
        limit = {"limit_alphabet": len(alphabet)}
        if vocab_size < len(alphabet) + 2:
            raise ValueError(f"vocab_size={vocab_size} is smaller than the {len(alphabet)} bytes used + 2 special "
                             "tokens")
    return texts, alphabet, limit


def load_tokenizer(tokenizer: Any) -> Any:
    """Return a tokenizer object from a path / hub id, or the object itself."""
    if isinstance(tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(tokenizer))
        except Exception as exc:  # noqa: BLE001 - re-raised with context
            raise ValueError(
                f"could not load tokenizer {str(tokenizer)!r} (not a local tokenizer directory, and the hub is "
                f"unreachable or has no such repo): {exc}"
            ) from exc
    return tokenizer


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A sha256 identifying the tokenizer's behaviour (backend json when available, else vocab)."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        h.update(backend.to_str().encode())
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        h.update(f"{name}={getattr(tokenizer, name, None)}".encode())
    return h.hexdigest()
