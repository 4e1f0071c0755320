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
    the model's maximum length, also set on ``tokenizer`` itself); a :class:`DirectTokenizer` writes the files
    recorded for it."""
    if isinstance(tokenizer, DirectTokenizer):  # the files transformers wrote for it (model_max_length included)
        tokenizer.save(str(directory))
        return
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
    h = hashlib.sha256(tokenizer_class_name(tokenizer).encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        h.update(backend.to_str().encode())
    else:
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
        h.update(f"{name}={getattr(tokenizer, name, None)}".encode())
    return h.hexdigest()


def tokenizer_class_name(tokenizer: Any) -> str:
    """The class name a tokenizer is recorded under (``meta.json``, the fingerprint): the transformers class, also for
    a :class:`DirectTokenizer` standing in for one."""
    return getattr(tokenizer, "transformers_class", None) or type(tokenizer).__name__


# ================================================================================ loading without transformers
# ``depthbench prepare-data --tokenizer DIR`` spends most of its fixed start-up importing transformers (and, through
# depthbench's Auto registration, torch) to load DIR with AutoTokenizer (issue 37). For a tokenizer folder whose
# transformers tokenizer is the generic fast class (``__call__`` is its ``tokenizers`` backend, no Python-side text
# processing), everything prepare-data needs of it is fixed by the folder's bytes and the library versions: the class
# name, ``len``, the special-token ids, the backend's serialization and what ``save_tokenizer`` writes. A run that
# loads such a folder with transformers records those facts, keyed by that, in ``$HF_HOME/depthbench/tokenizer_checks``;
# later runs on the same bytes and versions load a :class:`DirectTokenizer` from ``tokenizer.json`` instead (no
# transformers import), after checking that its own backend gives the recorded fingerprint.

DIRECT_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
"""transformers tokenizer classes whose call is exactly their ``tokenizers`` backend's (no Python text processing)."""

_CHECK_VERSION = 1  # of the record's content; part of the key
_INLINE_BYTES = 1 << 16  # a saved file that is not a copy of the source folder's is recorded inline up to this size


def _check_dir() -> str:
    """``$HF_HOME/depthbench/tokenizer_checks`` (HF_HOME as huggingface_hub resolves it, without importing it)."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return os.path.join(os.path.expanduser(home), "depthbench", "tokenizer_checks")


def _folder_files(directory: str) -> dict[str, bytes] | None:
    """The regular files of a tokenizer folder (``None`` when it is not one ``DirectTokenizer`` can stand in for:
    no ``tokenizer.json``/``tokenizer_config.json``, subfolders, or more than 64 MiB)."""
    if not (os.path.isfile(os.path.join(directory, "tokenizer.json"))
            and os.path.isfile(os.path.join(directory, TOKENIZER_CONFIG))):
        return None
    files, total = {}, 0
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            return None
        total += os.path.getsize(path)
        if total > 64 * 2**20:
            return None
        with open(path, "rb") as f:
            files[name] = f.read()
    return files


def _check_key(files: dict[str, bytes], model_max_length: int | None) -> str:
    from importlib import metadata

    h = hashlib.sha256(f"v{_CHECK_VERSION} transformers={metadata.version('transformers')} "
                       f"tokenizers={metadata.version('tokenizers')} max_len={model_max_length} "
                       f"offline={os.environ.get('HF_HUB_OFFLINE')},{os.environ.get('TRANSFORMERS_OFFLINE')}".encode())
    for name, data in files.items():
        h.update(f"\0{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def call_backend(backend: Any, split_special_tokens: bool) -> Any:
    """A copy of a ``tokenizers.Tokenizer`` configured as a transformers fast tokenizer's
    ``tokenizer(texts, add_special_tokens=True)`` configures its backend: no truncation, no padding, special tokens
    split only with ``split_special_tokens`` (the wrapper's own backend is reconfigured on every call)."""
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(backend.to_str())
    copy.no_truncation()
    copy.no_padding()
    copy.encode_special_tokens = bool(split_special_tokens)
    return copy


class DirectTokenizer:
    """A transformers tokenizer's stand-in for ``prepare_data``, loaded from ``tokenizer.json`` with ``tokenizers``
    alone: the recorded class name, ``len``, special-token ids and saved files of the transformers tokenizer of the
    same folder (see :func:`load_direct`), and its backend (``backend_tokenizer``). Calling it encodes as the
    transformers tokenizer's ``tokenizer(texts, add_special_tokens=True)`` does."""

    def __init__(self, name_or_path: str, directory: str, record: dict):
        from tokenizers import Tokenizer

        self.name_or_path = name_or_path
        self.directory = directory
        self.record = record
        self.transformers_class = record["class"]
        self.eos_token_id = record["eos_token_id"]
        self.bos_token_id = record["bos_token_id"]
        self.pad_token_id = record["pad_token_id"]
        self.split_special_tokens = record["split_special_tokens"]
        self.backend_tokenizer = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))

    def __len__(self) -> int:
        return self.record["len"]

    def __call__(self, texts: list[str], add_special_tokens: bool = True) -> dict:
        backend = call_backend(self.backend_tokenizer, self.split_special_tokens)
        return {"input_ids": [e.ids for e in backend.encode_batch(texts, add_special_tokens=add_special_tokens)]}

    def save(self, directory: str) -> None:
        """Write the files ``save_tokenizer`` wrote for the transformers tokenizer (the recorded bytes)."""
        os.makedirs(directory, exist_ok=True)
        for name, how in self.record["saved"].items():
            if "copy" in how:
                with open(os.path.join(self.directory, how["copy"]), "rb") as f:
                    data = f.read()
            else:
                data = how["text"].encode("utf-8")
            if hashlib.sha256(data).hexdigest() != how["sha256"]:
                raise ValueError(f"{self.directory}: {name} changed while preparing (sha256 differs from the check)")
            atomic.write_bytes(os.path.join(directory, name), data)


def load_direct(tokenizer: Any, model_max_length: int | None = None) -> DirectTokenizer | None:
    """A :class:`DirectTokenizer` for the tokenizer folder ``tokenizer`` when a check recorded by
    :func:`record_direct` covers its exact bytes, these library versions and ``model_max_length``, and its backend
    gives the recorded fingerprint; ``None`` otherwise (then load it with :func:`load_tokenizer`)."""
    if not isinstance(tokenizer, (str, os.PathLike)) or not os.path.isdir(str(tokenizer)):
        return None
    files = _folder_files(str(tokenizer))
    if files is None:
        return None
    path = os.path.join(_check_dir(), _check_key(files, model_max_length) + ".json")
    try:
        record = atomic.read_json(path)
        direct = DirectTokenizer(str(tokenizer), str(tokenizer), record)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if tokenizer_fingerprint(direct) != record.get("fingerprint"):
        return None
    return direct


def record_direct(tokenizer: Any, source: Any, saved_dir: str, model_max_length: int | None) -> bool:
    """Record the check :func:`load_direct` relies on, after ``tokenizer`` (loaded by transformers from the folder
    ``source``) was saved to ``saved_dir`` with :func:`save_tokenizer` and encoded a run's first texts with its backend
    (:class:`depthbench.data.encode.Encoder` kept it). Recorded only when ``tokenizer`` is one of
    :data:`DIRECT_CLASSES`, a ``tokenizers`` backend loaded from ``tokenizer.json`` serializes exactly as its own
    backend, and every saved file is a copy of a source file or small. Returns whether it was recorded; a cache that
    cannot be written is not an error."""
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(str(source)):
        return False
    if type(tokenizer).__name__ not in DIRECT_CLASSES or getattr(tokenizer, "backend_tokenizer", None) is None:
        return False
    files = _folder_files(str(source))
    if files is None:
        return False
    saved = {}
    for name in sorted(os.listdir(saved_dir)):
        with open(os.path.join(saved_dir, name), "rb") as f:
            data = f.read()
        entry: dict[str, Any] = {"sha256": hashlib.sha256(data).hexdigest()}
        if files.get(name) == data:
            entry["copy"] = name
        elif len(data) <= _INLINE_BYTES:
            try:
                entry["text"] = data.decode("utf-8")
            except UnicodeDecodeError:
                return False
        else:
            return False
        saved[name] = entry
    record = {
        "class": type(tokenizer).__name__, "len": len(tokenizer), "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.bos_token_id, "pad_token_id": tokenizer.pad_token_id,
        "split_special_tokens": bool(getattr(tokenizer, "split_special_tokens", False)),
        "fingerprint": tokenizer_fingerprint(tokenizer), "saved": saved,
    }
    try:
        direct = DirectTokenizer(str(source), str(source), record)
    except Exception:  # noqa: BLE001 - tokenizer.json that tokenizers alone cannot load: no record
        return False
    if tokenizer_fingerprint(direct) != record["fingerprint"]:
        return False
    try:
        os.makedirs(_check_dir(), exist_ok=True)
        atomic.write_json(os.path.join(_check_dir(), _check_key(files, model_max_length) + ".json"), record,
                          sort_keys=True)
    except OSError:
        return False
    return True
