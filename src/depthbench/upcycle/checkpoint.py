"""Writing an upcycled model: an ordinary depthbench checkpoint folder.

The folder holds ``save_pretrained``'s safetensors, config and remote code (it loads with
``AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)`` without depthbench), the source's tokenizer
and generation config, ``upcycle.json`` (the report: source model, revision, license, architecture, start,
measured deviation and loss change, growth) and a model card naming all of it. It is written into a temporary
sibling and renamed into place, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import os

from depthbench import atomic
from depthbench.upcycle.sources import UpcycleError

RECORD = "upcycle.json"


def check_output(output_dir: str, overwrite: bool = False) -> None:
    """Refuse a non-empty ``output_dir`` that is not an earlier upcycle (always one holding another model), and an
    earlier upcycle unless ``overwrite``."""
    if not os.path.exists(output_dir):
        return
    if not os.path.isdir(output_dir):
        raise UpcycleError(f"{output_dir} exists and is not a folder; choose another output folder")
    entries = os.listdir(output_dir)
    if not entries:
        return
    if not os.path.isfile(os.path.join(output_dir, RECORD)):
        what = "another model" if os.path.isfile(os.path.join(output_dir, "config.json")) else "other files"
        raise UpcycleError(f"{output_dir} holds {what} (no {RECORD}); choose an empty or new output folder")
    if not overwrite:
        raise UpcycleError(f"{output_dir} holds an earlier upcycle; pass --overwrite (overwrite=True) to replace it")


def save(result, output_dir: str, overwrite: bool = False) -> str:
    """Write ``result`` (:class:`~depthbench.upcycle.core.UpcycleResult`) into ``output_dir``; returns it."""
    import torch

    from depthbench.cards import write_card
    from depthbench.hub.convert import write_atomically

    check_output(output_dir, overwrite)
    model = result.model

    def write(folder: str) -> None:
        if result.generation_config is not None:
            model.generation_config = result.generation_config
        with torch.no_grad():
            model.save_pretrained(folder, safe_serialization=True)
        if result.tokenizer is not None:
            result.tokenizer.save_pretrained(folder)
        atomic.write_json(os.path.join(folder, RECORD), result.report)
        name = str(result.source.name).split("/")[-1].split(" ")[0]
        write_card(folder, repo_id=f"{name}-{result.arch}-upcycled", upcycle=result.report)

    return write_atomically(output_dir, write)
