"""Continued pretraining: a run that starts from the weights of a checkpoint folder (``model.init_from``,
``depthbench train --init-from DIR``) instead of the architecture's random init.

The folder is any depthbench checkpoint folder: one written by ``depthbench upcycle``, a run's ``final/``, a
checkpoint's ``hf/`` export (a ``checkpoints/ckpt-XXXXXX`` folder is read through its ``hf/``). Its ``config.json``
gives the architecture and every model field (``depthbench.model_config.resolve_model_config``), so the run config
names at most what must agree with it: ``model.arch`` and ``model.shape``, when given, are checked against the
folder and a disagreement is refused naming both; ``model.fields`` may add fields, and any of them that changes a
tensor's shape is refused when the weights are loaded, naming the tensor and both shapes.

What the run records (``run_config.json`` ``resolved.init_from``): the folder's absolute path, a content hash
(sha256 over its ``config.json`` and weight files, each file's own hash listed too) and, for an upcycled folder,
its ``upcycle.json`` summary (source model, architecture, start, growth).

Only a fresh start reads the weights. A resumed run takes its weights from its own checkpoint and its model config
from its own ``run_config.json``: it never reads the init folder again (the folder may since have been changed or
removed), and ``model.init_from`` is an identity key (``depthbench.training.run_folder.IDENTITY_KEYS``).
"""

from __future__ import annotations

import hashlib
import os

from depthbench import atomic
from depthbench.config import RunConfigError
from depthbench.model_config import weight_files

#: The files whose content the recorded hash covers (with every ``*.safetensors`` file of the folder).
HASHED_FILES = ("config.json", "model.safetensors.index.json")


def provenance(folder: str) -> dict:
    """``{"path", "sha256", "files": {name: sha256}, "upcycle": {...} | None}`` of an init folder."""
    from depthbench.training.checkpoint import sha256_file

    names = [n for n in HASHED_FILES if os.path.isfile(os.path.join(folder, n))] + weight_files(folder)
    files = {n: sha256_file(os.path.join(folder, n)) for n in names}
    combined = hashlib.sha256("".join(f"{n}:{h}\n" for n, h in files.items()).encode()).hexdigest()
    record = {"path": os.path.abspath(folder), "sha256": combined, "files": files, "upcycle": None}
    upcycle_path = os.path.join(folder, "upcycle.json")
    if os.path.isfile(upcycle_path):
        up = atomic.read_json(upcycle_path) or {}
        record["upcycle"] = {"source": (up.get("source") or {}).get("name"), "arch": up.get("arch"),
                             "start": up.get("start"), "growth": up.get("growth")}
    return record


def load_weights(model, folder: str) -> int:
    """Copy the folder's weights into ``model`` (before sharding / the optimizer); returns the tensors loaded.

    Every tensor of the folder must be a parameter or buffer of ``model`` with the same shape, and every tensor of
    ``model`` must be in the folder (an output head tied to the embeddings excepted); anything else is refused
    naming the tensor (and both shapes), before the model is changed.
    """
    import torch
    from safetensors.torch import load_file

    weights = {}
    for name in weight_files(folder):
        weights.update(load_file(os.path.join(folder, name)))
    own = model.state_dict()
    unknown = sorted(set(weights) - set(own))
    if unknown:
        raise RunConfigError(f"model.init_from {folder}: tensor {unknown[0]!r} (and {len(unknown) - 1} more) is not "
                             f"in the {type(model).__name__} the run config builds: the folder holds another "
                             "architecture or depth")
    for key, tensor in sorted(weights.items()):
        if tuple(tensor.shape) != tuple(own[key].shape):
            raise RunConfigError(f"model.init_from {folder}: tensor {key!r} has shape {tuple(tensor.shape)} in the "
                                 f"folder and {tuple(own[key].shape)} in the run's model: a model.fields entry "
                                 "changes the folder's sizes (drop it)")
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = sorted(set(own) - set(weights) - tied)
    if missing:
        raise RunConfigError(f"model.init_from {folder}: the run's model has tensor {missing[0]!r} (and "
                             f"{len(missing) - 1} more) that the folder lacks: the folder holds another architecture "
                             "or configuration")
    with torch.no_grad():
        model.load_state_dict(weights, strict=False)
    if tied:
        model.tie_weights()
    return len(weights)


def check_tokenizer(folder: str, data_tokenizer_dir: str) -> None:
    """Refuse data tokenized with another tokenizer than the init folder's (when both have one): its ids would
    mean other tokens to the pretrained embeddings."""
    if not os.path.isfile(os.path.join(folder, "tokenizer_config.json")) or not os.path.isdir(data_tokenizer_dir):
        return
    from transformers import AutoTokenizer

    try:
        theirs = AutoTokenizer.from_pretrained(folder)
        ours = AutoTokenizer.from_pretrained(data_tokenizer_dir)
    except (OSError, ValueError, TypeError):
        return
    a, b = theirs.get_vocab(), ours.get_vocab()
    differ = sum(b.get(t) != i for t, i in a.items())
    if differ or len(a) != len(b):
        raise RunConfigError(f"the data was not tokenized with the tokenizer of model.init_from {folder} ({len(a)} "
                             f"tokens there, {len(b)} in {data_tokenizer_dir}; {differ} ids differ): prepare the data "
                             f"with it: depthbench prepare-data FILES --tokenizer {folder} -o DIR")
