"""The model and optimizer state inside a checkpoint's ``state/`` folder, in either of two formats, each loadable by
either kind of run:

* **full** (1 process and DDP): accelerate's ``save_state`` files, ``model.safetensors`` and ``optimizer.bin``
  (written by the main process), next to the scheduler (``custom_checkpoint_0.pkl``) and every rank's RNG state
  (``random_states_<rank>.pkl``);
* **sharded** (FSDP2): ``state/dcp/``, a ``torch.distributed.checkpoint`` of ``{"model", "optim"}`` keyed by
  parameter name (every rank writes its own shards, the coordinator the ``.metadata``), next to the same
  scheduler and RNG files (accelerate's ``save_state`` with no model or optimizer registered).

A sharded checkpoint loads into any number of processes, sharded or not (``torch.distributed.checkpoint``
reshards; one process reads it without a process group); a full one loads into an FSDP2 run by sharding the
full tensors (``set_model_state_dict`` / ``set_optimizer_state_dict`` with ``full_state_dict=True``). So a run can
resume FSDP2 -> 1 process, 1 process -> FSDP2 and FSDP2 <-> DDP (``tests/training/test_fsdp2.py``).

The rest of a checkpoint (the atomic protocol, the manifest, the HF export) is the same for both formats:
``depthbench.training.checkpoint``.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import torch
from torch import nn

SHARDED_DIR = "dcp"
"""The ``torch.distributed.checkpoint`` folder of a sharded checkpoint, inside its ``state/`` folder."""
MODEL_FILE, OPTIMIZER_FILE = "model.safetensors", "optimizer.bin"
"""accelerate's files of a full checkpoint (``accelerate.utils.SAFE_WEIGHTS_NAME``, ``OPTIMIZER_NAME``)."""


def is_sharded(state_dir: str) -> bool:
    return os.path.isdir(os.path.join(state_dir, SHARDED_DIR))


@contextlib.contextmanager
def _accelerate_sees_no_model(accelerator):
    """accelerate's ``save_state``/``load_state`` without the model and optimizer (RNG, scheduler only): for a
    sharded checkpoint loaded into a run whose model and optimizer accelerate prepared."""
    models, optimizers = accelerator._models, accelerator._optimizers
    accelerator._models, accelerator._optimizers = [], []
    try:
        yield
    finally:
        accelerator._models, accelerator._optimizers = models, optimizers


def _templates(model: nn.Module, optimizer) -> dict:
    """This run's model and optimizer state dicts keyed by parameter name (``DTensor`` shards under FSDP2): the
    targets ``torch.distributed.checkpoint`` saves from and loads into."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optimizer)}


def _load_sharded(path: str, model: nn.Module, optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    state = _templates(model, optimizer)
    with warnings.catch_warnings():  # one process without a process group is a supported way to read it
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        dcp.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optim"])


def _strip_wrapper(name: str) -> str:
    return name[len("module."):] if name.startswith("module.") else name


def _load_full_into_sharded(state_dir: str, model: nn.Module, optimizer) -> None:
    """accelerate's full ``model.safetensors`` / ``optimizer.bin`` into an FSDP2 model and optimizer (every rank
    reads the files and keeps its shards). The optimizer file is keyed by parameter index; each group's
    ``param_names`` (``depthbench.training.optim.param_groups``) name them."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True)
    weights = {_strip_wrapper(k): v for k, v in load_file(os.path.join(state_dir, MODEL_FILE)).items()}
    set_model_state_dict(model, weights, options=options)
    saved = torch.load(os.path.join(state_dir, OPTIMIZER_FILE), map_location="cpu", weights_only=False)
    names = {}
    for group in saved["param_groups"]:
        names.update(zip(group["params"], (_strip_wrapper(n) for n in group["param_names"])))
    full = {"state": {names[index]: value for index, value in saved["state"].items()},
            "param_groups": [{**group, "params": [names[i] for i in group["params"]]}
                             for group in saved["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, full, options=options)


def state_keys(state_dict: dict) -> dict[str, list[int]]:
    """``{tensor name: shape}`` of a model state dict (a ``DTensor``'s global shape), wrapper prefixes removed."""
    return {_strip_wrapper(name): list(tensor.shape) for name, tensor in state_dict.items()}


def saved_keys(state_dir: str) -> dict[str, list[int]] | None:
    """``{tensor name: shape}`` of the model tensors a ``state/`` folder holds, read from the files' headers
    (``torch.distributed.checkpoint`` metadata / the safetensors header; no tensor is read); ``None`` when neither
    format is there."""
    if is_sharded(state_dir):
        from torch.distributed.checkpoint import FileSystemReader

        metadata = FileSystemReader(os.path.join(state_dir, SHARDED_DIR)).read_metadata().state_dict_metadata
        return {name[len("model."):]: list(getattr(entry, "size", ()))
                for name, entry in metadata.items() if name.startswith("model.")}
    path = os.path.join(state_dir, MODEL_FILE)
    if not os.path.isfile(path):
        return None
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        return {_strip_wrapper(name): list(f.get_slice(name).get_shape()) for name in f.keys()}


class ModelState:
    """How one run's model and optimizer go into ``state/`` and come back (``sharded``: the run is FSDP2; the
    model and optimizer are then the sharded ones, else the ones accelerate prepared)."""

    def __init__(self, accelerator, model: nn.Module, optimizer, sharded: bool):
        self.acc, self.model, self.optimizer, self.sharded = accelerator, model, optimizer, sharded

    def _plain(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        """The model and optimizer under accelerate's wrappers (DDP, ``AcceleratedOptimizer``)."""
        return self.acc.unwrap_model(self.model), getattr(self.optimizer, "optimizer", self.optimizer)

    def keys(self) -> dict[str, list[int]]:
        """``{tensor name: shape}`` of this run's model: what a checkpoint of it holds (:func:`saved_keys`)."""
        model = self.model if self.sharded else self._plain()[0]
        return state_keys(model.state_dict())

    def save(self, state_dir: str) -> None:
        """Write the state into ``state_dir`` (collective: every rank calls it)."""
        self.acc.save_state(state_dir)  # FSDP2: no model or optimizer registered, only the scheduler and RNG
        if self.sharded:
            import torch.distributed.checkpoint as dcp

            dcp.save(_templates(self.model, self.optimizer), checkpoint_id=os.path.join(state_dir, SHARDED_DIR))

    def load(self, state_dir: str) -> None:
        """Load ``state_dir`` (either format) into this run (collective)."""
        sharded_checkpoint = is_sharded(state_dir)
        if self.sharded:
            if sharded_checkpoint:
                _load_sharded(os.path.join(state_dir, SHARDED_DIR), self.model, self.optimizer)
            else:
                _load_full_into_sharded(state_dir, self.model, self.optimizer)
            self.acc.load_state(state_dir)
        elif sharded_checkpoint:
            _load_sharded(os.path.join(state_dir, SHARDED_DIR), *self._plain())
            with _accelerate_sees_no_model(self.acc):
                self.acc.load_state(state_dir)
        else:
            self.acc.load_state(state_dir)

    def full_state_dict(self) -> dict:
        """The whole model's state dict on the main process, for the HF export (collective; FSDP2 gathers it)."""
        if self.sharded:
            from depthbench.training.sharding import Fsdp2

            return Fsdp2.full_state_dict(self.model)
        return self.acc.get_state_dict(self.model)

    def export_model(self) -> nn.Module:
        """The model whose ``save_pretrained`` writes the export (config, remote code) with :meth:`full_state_dict`:
        the unwrapped model, or an unsharded meta-device copy of an FSDP2 one."""
        if self.sharded:
            from depthbench.training.sharding import Fsdp2

            return Fsdp2.plain_model(self.model)
        return self.acc.unwrap_model(self.model)
