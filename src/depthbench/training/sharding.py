"""FSDP2 in the trainer: ``torch.distributed.fsdp.fully_shard`` on every decoder block and on the root, one code
path on CPU (gloo: what CI runs, ``tests/training/test_fsdp2.py``) and on GPUs (NCCL).

    accelerate launch --config_file src/depthbench/configs/fsdp2.yaml -m depthbench.training -c run.yaml ...
    torchrun --nproc_per_node 8 -m depthbench.training -c run.yaml train.parallelism=fsdp2     # the same

Why the trainer shards the model itself: accelerate turns its FSDP plugin on only on accelerator devices (with
``cpu=True`` an FSDP launch config silently becomes DDP), so an FSDP2 path through accelerate could never run in
CI; and ``fully_shard`` refuses 0-dim parameters, which HC and mHC have. accelerate still starts the processes (or
torchrun does) and runs everything else (data sharding, reductions, gradient-accumulation bookkeeping, RNG state,
trackers); the model and the optimizer are not passed to ``accelerator.prepare``.

What is sharded (:meth:`Fsdp2.shard`, in place, parameter names unchanged):

* every decoder block (``model.base_model.layers[i]``) is one FSDP unit: its parameters (attention, MLP, norms
  and the residual modules' mixing parameters) are all-gathered before its forward and backward and freed after
  (``reshard_after_forward``, the launch config's ``fsdp_reshard_after_forward``);
* the root unit holds the rest: embeddings, final norm, LM head and the wiring's model-level parameters
  (AttnRes/DenseFormer depth mixing);
* 0-dim parameters (HC/mHC gate scales) are replicated instead (``ignored_params``): every rank holds them whole
  and :meth:`Fsdp2.sync_replicated_grads` averages their gradients over ranks (what DDP does for every parameter).

State that crosses block boundaries (HC's n streams, the AttnRes/MoDA depth banks, DenseFormer's earlier outputs)
is part of each block's input and output pytree, which FSDP2's hooks see whole: a block's parameters are
all-gathered again in backward when the gradient of any of its outputs arrives, and its gradients are reduced
once every input's gradient is done. 20 steps of ``pre_ln``, ``hc``, ``mhc``, ``attnres``, ``block_attnres`` and
``moda`` under FSDP2 on 2 processes equal one process within 1e-5 (the test above).

Gradient accumulation: on every micro-batch but the step's last, :meth:`Fsdp2.set_gradient_sync` turns FSDP2's
reduce-scatter off (``set_requires_gradient_sync``, its ``no_sync``); gradients are averaged over ranks, as DDP
averages them, and the loss is divided by the accumulation steps (``accelerator.backward``). Clipping
(:meth:`Fsdp2.clip_grad_norm_`) takes the norm over all shards and the replicated parameters, so it is global.

Mixed precision (``train.mixed_precision=bf16``): FSDP2's ``MixedPrecisionPolicy`` all-gathers the blocks'
parameters in bf16 (the weights a bf16 matmul uses anyway) and reduce-scatters gradients in fp32; the sharded fp32
parameters are the master weights AdamW updates. The root unit keeps fp32 parameters, so the residual stream
leaves the embedding in fp32 as in the 1-process recipe, and the forward runs under bf16 autocast as there
(``accelerator.autocast``): the model's own fp32 upcasts (norms, softmaxes, mixing) apply unchanged.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass

import torch
from torch import nn

from depthbench.config import PARALLELISMS, RunConfigError

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass
class Fsdp2Settings:
    """What an FSDP2 run is configured with (from the launch config's environment or the defaults)."""

    reshard_after_forward: bool = True


def _flag(env: dict, key: str, default: bool) -> bool:
    value = env.get(key)
    if value is None:
        return default
    if value.lower() not in _TRUE + _FALSE:
        raise RunConfigError(f"{key}={value!r} (from the accelerate launch config) is not allowed: use true or false")
    return value.lower() in _TRUE


def _refuse_unsupported(env: dict) -> None:
    """Launch-config settings this FSDP2 path does not implement: an error naming the setting, never ignored."""
    if env.get("FSDP_VERSION", "1") != "2":
        raise RunConfigError(
            f"the accelerate launch config asks for FSDP version {env.get('FSDP_VERSION', '1')}: depthbench trains "
            "with FSDP2 only; set fsdp_version: 2 (as src/depthbench/configs/fsdp2.yaml does)")
    for key, setting, hint in (
        ("FSDP_OFFLOAD_PARAMS", "fsdp_offload_params", ""),
        ("FSDP_ACTIVATION_CHECKPOINTING", "fsdp_activation_checkpointing",
         " (set model.gradient_checkpointing=true in the run file instead)"),
    ):
        if _flag(env, key, False):
            raise RunConfigError(f"{setting}: true in the accelerate launch config is not supported by depthbench's "
                                 f"FSDP2 path; set it to false{hint}")
    state_dict_type = env.get("FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT")
    if state_dict_type != "SHARDED_STATE_DICT":
        raise RunConfigError(
            f"fsdp_state_dict_type: {state_dict_type} is not supported: FSDP2 checkpoints are sharded "
            "(torch.distributed.checkpoint; use SHARDED_STATE_DICT), and the HF exports are full state dicts anyway")


def requested(parallelism: str, env: dict | None = None) -> Fsdp2Settings | None:
    """The FSDP2 settings of a run (``None``: DDP / one plain process) from ``train.parallelism`` and the
    environment an accelerate launch config sets (``ACCELERATE_USE_FSDP``, ``FSDP_*``)."""
    env = os.environ if env is None else env
    if parallelism not in PARALLELISMS:
        raise RunConfigError(f"train.parallelism={parallelism!r} is not allowed: use one of {', '.join(PARALLELISMS)}")
    launched_fsdp = env.get("ACCELERATE_USE_FSDP", "false").lower() in _TRUE
    if parallelism == "ddp":
        if launched_fsdp:
            raise RunConfigError("train.parallelism=ddp, but the process was launched with an accelerate FSDP config "
                                 "(ACCELERATE_USE_FSDP=true): drop one of the two")
        return None
    if parallelism == "auto" and not launched_fsdp:
        return None
    if launched_fsdp:
        _refuse_unsupported(env)
    return Fsdp2Settings(reshard_after_forward=_flag(env, "FSDP_RESHARD_AFTER_FORWARD", True))


@contextlib.contextmanager
def accelerate_fsdp_off():
    """While the ``Accelerator`` is built: hide an FSDP launch config from accelerate (on GPUs it would shard the
    model its own way in ``prepare``; the trainer's FSDP2, this module, never passes the model to it)."""
    saved = os.environ.pop("ACCELERATE_USE_FSDP", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["ACCELERATE_USE_FSDP"] = saved


def _process_group(device: torch.device) -> None:
    """The default process group (one process, e.g. FSDP2 on one GPU: a 1-rank group in memory)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


class Fsdp2:
    """The FSDP2 side of one run: sharding, gradient sync, clipping, full state dicts for the HF export."""

    def __init__(self, settings: Fsdp2Settings, device: torch.device, mixed_precision: str):
        if mixed_precision not in ("no", "bf16"):
            raise RunConfigError(f"train.mixed_precision={mixed_precision!r} is not supported with FSDP2: use bf16 "
                                 "(bf16 compute over fp32 sharded master weights) or no")
        self.settings, self.device, self.mixed_precision = settings, device, mixed_precision
        self.mesh = None
        self.replicated: list[nn.Parameter] = []

    def policies(self):
        """``(blocks, root)`` mixed-precision policies (see the module docstring)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if self.mixed_precision != "bf16":
            return MixedPrecisionPolicy(), MixedPrecisionPolicy()
        blocks = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                      cast_forward_inputs=False)
        root = MixedPrecisionPolicy(param_dtype=None, reduce_dtype=torch.float32, cast_forward_inputs=False)
        return blocks, root

    def shard(self, model: nn.Module) -> nn.Module:
        """Move ``model`` to the device and shard it in place: each decoder block, then the root; 0-dim parameters
        are replicated. Build the optimizer afterwards (the parameters become ``DTensor`` shards)."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from depthbench.training.compiled import decoder_layers

        _process_group(self.device)
        self.mesh = init_device_mesh(self.device.type, (dist.get_world_size(),))
        model.to(self.device)
        self.replicated = [p for p in model.parameters() if p.ndim == 0]
        ignored = set(self.replicated)
        blocks, root = self.policies()
        for layer in decoder_layers(model):
            fully_shard(layer, mesh=self.mesh, reshard_after_forward=self.settings.reshard_after_forward,
                        mp_policy=blocks, ignored_params=ignored)
        fully_shard(model, mesh=self.mesh, mp_policy=root, ignored_params=ignored)
        # FSDP2 warns on every block whose output is a view (a multi-stream reshape, a tuple's member): an in-place
        # op on it would skip the pre-backward all-gather. Nothing modifies block outputs in place; the gradients
        # equal the unsharded model's (tests/training/test_fsdp2.py), so the warning says nothing here.
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
        return model

    # ------------------------------------------------------------------------------------------------ one step
    @staticmethod
    def set_gradient_sync(model: nn.Module, sync: bool) -> None:
        """Reduce-scatter gradients in this micro-batch's backward (the step's last) or only accumulate them."""
        model.set_requires_gradient_sync(sync)

    def sync_replicated_grads(self) -> None:
        """Average the replicated parameters' gradients over ranks (one all-reduce), after the step's last
        backward."""
        import torch.distributed as dist

        if not self.replicated or dist.get_world_size() == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.replicated]
        flat = torch.stack([g.float() for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        for p, value in zip(self.replicated, flat):
            p.grad = value.to(p.dtype)

    def clip_grad_norm_(self, parameters, max_norm: float) -> torch.Tensor:
        """Clip the gradients to a global 2-norm of ``max_norm`` over every shard of every rank (replicated
        parameters counted once); returns the norm before clipping, a plain tensor equal on every rank."""
        from torch.distributed.tensor import DTensor, Replicate

        params = [p for p in parameters if p.grad is not None]
        sharded = [p for p in params if isinstance(p.grad, DTensor)]
        plain = [p for p in params if not isinstance(p.grad, DTensor)]
        squares = torch.zeros((), dtype=torch.float32, device=self.device)
        if sharded:
            norm = torch.nn.utils.get_total_norm([p.grad for p in sharded], 2.0)
            squares = squares + (norm.full_tensor() if isinstance(norm, DTensor) else norm).float().square()
        if plain:
            squares = squares + torch.nn.utils.get_total_norm([p.grad for p in plain], 2.0).float().square()
        total = squares.sqrt()
        if sharded:
            torch.nn.utils.clip_grads_with_norm_(sharded, max_norm, DTensor.from_local(total, self.mesh, [Replicate()]))
        if plain:
            torch.nn.utils.clip_grads_with_norm_(plain, max_norm, total)
        return total

    # ------------------------------------------------------------------------------------------------ export
    @staticmethod
    def full_state_dict(model: nn.Module) -> dict:
        """The whole model's state dict, gathered on the main process in CPU memory (collective: every rank calls
        it; the other ranks get ``{}``)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    @staticmethod
    def plain_model(model: nn.Module) -> nn.Module:
        """An unsharded copy of ``model``'s class and config on the meta device (no memory), to ``save_pretrained``
        a gathered state dict with: ``fully_shard`` swaps a module's class for ``FSDP<cls>(FSDPModule, cls)``,
        whose name and module would end up in the export's remote code."""
        from torch.distributed.fsdp import FSDPModule

        cls = next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))
        with torch.device("meta"):
            return cls(model.config)
